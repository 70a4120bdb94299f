#!/usr/bin/env python3
"""nwb_schema_extract.py — refresh io/nwb_schema/ from pynwb: write a tiny NWB file with pynwb
(which caches its namespaces as JSON under /specifications) and store every cached document as
io/nwb_schema/<namespace>/<version>/<name>.json. The build embeds those files into the NWB writer
(io/nwb_spec.c), so that the files spikestream writes carry the same cached schema pynwb writes.

Usage: PYTHONPATH=<pynwb>/src python3 scripts/nwb_schema_extract.py [OUT_DIR]
(a pynwb checkout whose src/pynwb/nwb-schema holds the schema, and hdmf, h5py installed)."""
import datetime
import os
import sys
import tempfile

import h5py
from pynwb import NWBHDF5IO, NWBFile


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "io", "nwb_schema")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "spec.nwb")
        start = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
        with NWBHDF5IO(path, "w") as io:
            io.write(NWBFile(session_description="schema", identifier="schema", session_start_time=start))
        with h5py.File(path, "r") as f:
            for ns in f["specifications"]:
                for version in f["specifications"][ns]:
                    folder = os.path.join(out, ns, version)
                    os.makedirs(folder, exist_ok=True)
                    for name, dset in f["specifications"][ns][version].items():
                        text = dset[()]
                        text = text.decode("utf-8") if isinstance(text, bytes) else text
                        with open(os.path.join(folder, name + ".json"), "w", encoding="utf-8") as fd:
                            fd.write(text)
                        print(f"{ns}/{version}/{name}.json: {len(text)} bytes")


if __name__ == "__main__":
    main()
