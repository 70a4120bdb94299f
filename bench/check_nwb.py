#!/usr/bin/env python3
"""check_nwb.py — validate NWB files written by spikestream with pynwb's own validator (against the
schema cached in each file, and against pynwb's bundled schema) and read each file's units back
through pynwb. Given a sort output folder, the units of DIR/units.nwb are compared with
DIR/results.h5: per unit the same spike count, and spike_times equal to /spikes/time_s (plus the
recording's start time, taken from the linked ElectricalSeries when there is one) to 1e-9 s.

usage: PYTHONPATH=<pynwb>/src python3 bench/check_nwb.py (FILE.nwb | SORT_DIR) ...
Prints the validator's verdict per file, a table line per unit for sort folders, and exit status 1
on any problem. Needs pynwb (2.3.x), hdmf, h5py and numpy; not part of CI."""
import os
import sys
import warnings

import h5py
import numpy as np
from pynwb import NWBHDF5IO, validate


def validate_file(path):
    problems = []
    with h5py.File(path, "r") as f:
        if "specifications" not in f:
            problems.append(f"{path}: no cached namespaces (/specifications): pynwb falls back to its own schema")
    for cached in (True, False):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            errors, status = validate(paths=[path], use_cached_namespaces=cached, verbose=False)
        what = "cached schema" if cached else "pynwb's schema"
        print(f"{path}: pynwb validate ({what}): {'ok' if status == 0 and not errors else 'FAILED'}")
        problems += [f"{path}: {what}: {e}" for e in errors]
        if status != 0 and not errors:
            problems.append(f"{path}: {what}: validator status {status}")
    return problems


def read_units(path):
    """(start time of the linked series or 0, {unit id: spike times}, table columns) through pynwb."""
    with NWBHDF5IO(path, "r", load_namespaces=True) as io:
        f = io.read()
        start = 0.0
        for series in f.acquisition.values():
            start = float(series.starting_time or 0.0) if series.timestamps is None else float(series.timestamps[0])
        units = f.units
        ids = list(units.id[:])
        times = {int(ids[k]): np.asarray(units["spike_times"][k]) for k in range(len(ids))}
        cols = list(units.colnames)
        shapes = {}
        if "waveform_mean" in cols:
            shapes["waveform_mean"] = np.asarray(units["waveform_mean"][0]).shape if ids else None
        if "electrodes" in cols and ids:
            shapes["electrodes"] = len(units["electrodes"][0])
        return start, times, cols, shapes


def compare_sort(folder):
    problems = []
    nwb, res = os.path.join(folder, "units.nwb"), os.path.join(folder, "results.h5")
    start, times, cols, shapes = read_units(nwb)
    print(f"{nwb}: {len(times)} units, columns {', '.join(cols)}; first unit: {shapes}")
    with h5py.File(res, "r") as r:
        t = r["spikes/time_s"][()]
        c = r["spikes/cluster"][()]
        clusters = sorted(int(i) for i in r["clusters/id"][()])
    if sorted(times) != clusters:
        problems.append(f"{nwb}: unit ids {sorted(times)}, expected the clusters of {res}: {clusters}")
    print(f"{'unit':>5} {'results.h5':>10} {'units.nwb':>10} {'max |dt| s':>12}")
    for k in sorted(times):
        want = np.sort(t[c == k]) + start
        got = times[k]
        dt = float(np.max(np.abs(want - got))) if len(want) == len(got) and len(got) else 0.0
        print(f"{k:>5} {len(want):>10} {len(got):>10} {dt:>12.3g}")
        if len(want) != len(got):
            problems.append(f"{nwb}: unit {k}: {len(got)} spikes, results.h5 has {len(want)}")
        elif dt > 1e-9:
            problems.append(f"{nwb}: unit {k}: spike times differ from results.h5 by up to {dt} s")
    return problems


def main(args):
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    problems = []
    for arg in args:
        folder = arg if os.path.isdir(arg) else None
        path = os.path.join(arg, "units.nwb") if folder else arg
        problems += validate_file(path)
        if folder:
            problems += compare_sort(folder)
        else:
            with h5py.File(path, "r") as f:
                has_units = "units" in f
            times = read_units(path)[1] if has_units else {}
            print(f"{path}: read back {len(times)} units ({sum(len(v) for v in times.values())} spikes)")
    for p in problems:
        print("problem:", p)
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
