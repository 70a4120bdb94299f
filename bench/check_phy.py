#!/usr/bin/env python3
"""check_phy.py — load every .npy of a phy folder written by `spikestream sort` with numpy and check
that dtypes and shapes agree with each other and with params.py (the layout of docs/formats.md).

usage: python3 bench/check_phy.py DIR/phy [DIR/phy ...]
Prints one line per file (name, dtype, shape) and "ok" or the problems; exit status 1 on a problem.
Needs numpy only (phylib is not required)."""
import os
import sys

import numpy as np


def read_params(path):
    params = {}
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), {}, params)  # params.py is Python, as phy reads it
    return params


def check(folder):
    problems = []
    arrays = {}
    names = ["spike_times", "spike_clusters", "spike_templates", "amplitudes", "templates", "channel_map",
             "channel_positions", "pc_features", "pc_feature_ind", "similar_templates"]
    for name in names:
        path = os.path.join(folder, name + ".npy")
        try:
            arrays[name] = np.load(path)
            a = arrays[name]
            print("  %-22s %-8s %s" % (name + ".npy", a.dtype, a.shape))
        except Exception as e:  # noqa: BLE001 - report any load failure
            problems.append("%s: cannot load: %s" % (path, e))
    try:
        params = read_params(os.path.join(folder, "params.py"))
        for key in ("dat_path", "n_channels_dat", "dtype", "offset", "sample_rate", "hp_filtered"):
            if key not in params:
                problems.append("params.py: %s missing" % key)
    except Exception as e:  # noqa: BLE001
        problems.append("params.py: %s" % e)
        params = {}
    if len(arrays) == len(names):
        st, sc, sp = arrays["spike_times"], arrays["spike_clusters"], arrays["spike_templates"]
        tp, cm, cp = arrays["templates"], arrays["channel_map"], arrays["channel_positions"]
        pf, pi, si, am = arrays["pc_features"], arrays["pc_feature_ind"], arrays["similar_templates"], arrays["amplitudes"]
        n, t, c = st.shape[0], tp.shape[0], cm.shape[0]
        expect = [
            (st.ndim == 1 and st.dtype in (np.int64, np.uint64), "spike_times: 1-D int64/uint64"),
            (bool(np.all(np.diff(st.astype(np.int64)) >= 0)), "spike_times: non-decreasing"),
            (sc.shape == (n,) and sc.dtype == np.int32, "spike_clusters: int32 [n_spikes]"),
            (sp.shape == (n,) and sp.dtype in (np.int32, np.int64, np.uint32), "spike_templates: int [n_spikes]"),
            (sp.size == 0 or (sp.min() >= 0 and sp.max() < t), "spike_templates: within [0, n_templates)"),
            (am.shape == (n,) and am.dtype in (np.float32, np.float64), "amplitudes: float [n_spikes]"),
            (tp.ndim == 3 and tp.shape[2] == c and tp.dtype == np.float32, "templates: float32 [T, W, n_channels]"),
            (cm.ndim == 1 and cm.dtype in (np.int32, np.int64, np.uint32), "channel_map: int [n_channels]"),
            ("n_channels_dat" not in params or (cm.size == 0 or cm.max() < params["n_channels_dat"]),
             "channel_map: below n_channels_dat"),
            (cp.shape == (c, 2), "channel_positions: [n_channels, 2]"),
            (len({tuple(r) for r in cp.tolist()}) == c, "channel_positions: distinct"),
            (pf.ndim == 3 and pf.shape[0] == n and pf.dtype == np.float32, "pc_features: float32 [n_spikes, P, F]"),
            (pi.ndim == 2 and pi.shape[0] == t and pf.ndim == 3 and pi.shape[1] == pf.shape[2],
             "pc_feature_ind: [n_templates, F]"),
            (pi.size == 0 or (pi.min() >= 0 and pi.max() < c), "pc_feature_ind: channels within [0, n_channels)"),
            (si.shape == (t, t), "similar_templates: [n_templates, n_templates]"),
            (bool(np.all(np.isfinite(tp))) and bool(np.all(np.isfinite(pf))), "templates, pc_features: finite"),
        ]
        problems += ["%s: expected %s" % (folder, what) for ok, what in expect if not ok]
    try:
        with open(os.path.join(folder, "cluster_group.tsv")) as f:
            lines = f.read().splitlines()
        if not lines or lines[0] != "cluster_id\tgroup":
            problems.append("cluster_group.tsv: header")
    except OSError as e:
        problems.append("cluster_group.tsv: %s" % e)
    return problems


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    bad = 0
    for folder in sys.argv[1:]:
        print(folder)
        problems = check(folder)
        for p in problems:
            print("  problem: " + p)
        print("  " + ("ok" if not problems else "%d problem(s)" % len(problems)))
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
