#!/usr/bin/env python3
"""check_probes.py — a dev check of the probe files against probeinterface itself: every shipped
params/probes/*.json must be read by probeinterface with the channel → position mapping spikestream
reads (and match probeinterface's JSON schema when jsonschema is installed); probes that probeinterface writes (a multi-shank group with permuted wiring and an unwired
contact, as JSON and as .prb) must be read by `spikestream probe` with the same mapping; and what
`spikestream probe --write-probeinterface` writes must be read back by probeinterface.

usage: PYTHONPATH=PROBEINTERFACE/src python3 bench/check_probes.py BUILD/spikestream
(probeinterface from a source checkout needs numpy and packaging; when it is not installed as a
package, a stand-in version record is made so that its __init__ imports.)
"""
import glob
import importlib.metadata
import os
import subprocess
import sys
import tempfile

import numpy as np


def import_probeinterface(tmp):
    try:
        importlib.metadata.version("probeinterface")
    except importlib.metadata.PackageNotFoundError:
        info = os.path.join(tmp, "probeinterface-0.0.0.dist-info")
        os.makedirs(info, exist_ok=True)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: probeinterface\nVersion: 0.0.0\n")
        sys.path.insert(0, tmp)
    import probeinterface

    return probeinterface


def ours(binary, path, write=None):
    """channel -> (x, y) of the wired contacts, as `spikestream probe` prints them"""
    cmd = [binary, "probe", path] + (["--write-probeinterface", write] if write else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()
    table = {}
    for line in out[2:]:
        f = line.split()
        if int(f[1]) >= 0:
            table[int(f[1])] = (float(f[2]), float(f[3]))
    return table


def theirs(group):
    table = {}
    for probe in group.probes:
        scale = {"um": 1.0, "mm": 1e3, "m": 1e6}[probe.si_units]
        for c, pos in zip(probe.device_channel_indices, probe.contact_positions):
            if c >= 0:
                table[int(c)] = (float(pos[0]) * scale, float(pos[1]) * scale)
    return table


def schema_check(pi, path):
    """validate against probeinterface's JSON schema when jsonschema is installed"""
    try:
        import jsonschema
    except ImportError:
        return True
    import json

    with open(os.path.join(os.path.dirname(pi.__file__), "schema", "probe.json.schema")) as f:
        schema = json.load(f)
    with open(path) as f:
        doc = json.load(f)
    try:
        jsonschema.validate(doc, schema)
    except jsonschema.ValidationError as e:
        print(f"FAIL {os.path.basename(path)}: schema: {e.message}")
        return False
    print(f"ok   {os.path.basename(path)}: matches probeinterface's schema")
    return True


def same(name, a, b):
    ok = a.keys() == b.keys() and all(np.allclose(a[k], b[k], atol=0.005) for k in a)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {len(a)} channels")
    return ok


def written_group(pi):
    a = pi.generate_multi_shank(num_shank=2, num_columns=1, num_contact_per_column=4)
    a.set_device_channel_indices([5, 3, 1, 7, 0, -1, 2, 6])
    b = pi.generate_tetrode()
    b.move([500, 0])
    b.set_device_channel_indices([4, 9, 8, 10])
    group = pi.ProbeGroup()
    group.add_probe(a)
    group.add_probe(b)
    return group


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        pi = import_probeinterface(tmp)
        for path in sorted(glob.glob(os.path.join(root, "params", "probes", "*.json"))):
            name = os.path.basename(path)
            ok &= schema_check(pi, path)
            ok &= same("shipped " + name, theirs(pi.read_probeinterface(path)), ours(binary, path))
            back = os.path.join(tmp, "back_" + name)
            ours(binary, path, write=back)
            ok &= same("written back " + name, theirs(pi.read_probeinterface(back)), ours(binary, path))
        group = written_group(pi)
        js, prb = os.path.join(tmp, "group.json"), os.path.join(tmp, "group.prb")
        pi.write_probeinterface(js, group)
        pi.write_prb(prb, group, total_nb_channels=11)
        ok &= same("probeinterface-written group.json", theirs(group), ours(binary, js))
        ok &= same("probeinterface-written group.prb", theirs(group), ours(binary, prb))
        back = os.path.join(tmp, "group_back.json")
        ours(binary, js, write=back)
        ok &= schema_check(pi, back)
        ok &= same("group.json written back", theirs(group), theirs(pi.read_probeinterface(back)))
    print("all ok" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
