#!/usr/bin/env python3
"""unit_report.py — where each ground-truth unit's spikes went in a sort, and where each suspicious
cluster's spikes came from (the diagnosis in docs/accuracy.md). Needs numpy and h5py (Debian: python3-numpy,
python3-h5py).

usage: unit_report.py RESULTS_H5 GROUND_TRUTH_NWB [--units 3,8] [--clusters 5,7] [--all]

For every ground-truth unit that `compare` would not call well detected (or those named), prints its
detected fraction and the final and raw (masked-EM) clusters its spikes landed in. For every sorted
cluster that holds a missed unit's spikes (or those named), prints its composition by ground-truth
unit, with per-source mean |amplitude|, peak-channel distance to the unit's own peak channel, mean
mask width (channels with mask >= 0.5), and the fraction of those spikes that collide (another
unit's ground-truth spike within COLLIDE_MS). Spikes match ground truth within 0.4 ms like compare.
"""
import argparse
import collections

import h5py
import numpy as np

WINDOW_MS = 0.4
COLLIDE_MS = 1.0
WELL = 0.8
MIN_SNR = 5.0


def load_gt(path):
    with h5py.File(path, "r") as f:
        times = f["/units/spike_times"][()]
        index = f["/units/spike_times_index"][()]
        snr = f["/units/snr"][()]
        peak = f["/units/peak_channel"][()]
        es = f["/acquisition/ElectricalSeries/starting_time"]
        rate = float(es.attrs["rate"])
        t0 = float(es[()])
    starts = np.concatenate([[0], index[:-1]])
    trains = [np.round((times[a:b] - t0) * rate).astype(np.int64) for a, b in zip(starts, index)]
    return trains, snr, peak, rate


def load_sort(path):
    with h5py.File(path, "r") as f:
        s = {k: f["/spikes/" + k][()] for k in ("time_samples", "cluster", "cluster_raw", "peak_channel", "amplitude")}
        s["masks"] = f["/masks"][()]
    return s


def nearest(sorted_t, query_t, window):
    """For each query time, the index of the nearest sorted time within the window, else -1."""
    pos = np.searchsorted(sorted_t, query_t)
    best = np.full(len(query_t), -1, np.int64)
    bestd = np.full(len(query_t), window + 1, np.int64)
    for off in (-1, 0):
        j = np.clip(pos + off, 0, len(sorted_t) - 1)
        d = np.abs(sorted_t[j] - query_t)
        take = d < bestd
        best[take], bestd[take] = j[take], d[take]
    best[bestd > window] = -1
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("gt")
    ap.add_argument("--units", default="")
    ap.add_argument("--clusters", default="")
    ap.add_argument("--all", action="store_true", help="report every SNR > 5 unit")
    a = ap.parse_args()
    trains, snr, gt_peak, rate = load_gt(a.gt)
    s = load_sort(a.results)
    st = s["time_samples"]
    win = int(WINDOW_MS / 1000 * rate)
    collide = int(COLLIDE_MS / 1000 * rate)
    # every ground-truth spike, with its unit, in time order
    all_t = np.concatenate(trains)
    all_u = np.concatenate([np.full(len(t), u) for u, t in enumerate(trains)])
    o = np.argsort(all_t, kind="stable")
    all_t, all_u = all_t[o], all_u[o]
    # the ground-truth source of each sorted spike (-1: none within the window)
    src = nearest(all_t, st, win)
    src_u = np.where(src >= 0, all_u[np.maximum(src, 0)], -1)
    # does another unit's ground-truth spike fall within COLLIDE_MS of this sorted spike?
    lo = np.searchsorted(all_t, st - collide)
    hi = np.searchsorted(all_t, st + collide, side="right")
    coll = np.array([np.any(all_u[l:h] != u) if u >= 0 else h > l for l, h, u in zip(lo, hi, src_u)])
    width = (s["masks"] >= 0.5).sum(1)
    lab = s["cluster"]
    units = [int(x) for x in a.units.split(",") if x]
    clusters = [int(x) for x in a.clusters.split(",") if x]
    # per unit: final clusters of its detected spikes
    acc = {}
    for u, t in enumerate(trains):
        hit = nearest(st, t, win)
        c = collections.Counter(lab[hit[hit >= 0]].tolist())
        best_c, best_n = c.most_common(1)[0] if c else (-1, 0)
        n_sorted = int((lab == best_c).sum()) if best_c >= 0 else 0
        acc[u] = (best_n / (len(t) + n_sorted - best_n) if best_c >= 0 else 0.0, best_c)
        show = (u in units) or (snr[u] > MIN_SNR and (a.all or acc[u][0] < WELL))
        if not show:
            continue
        raw = collections.Counter(s["cluster_raw"][hit[hit >= 0]].tolist())
        print(f"unit {u}: snr {snr[u]:.1f} peak ch {gt_peak[u]} n {len(t)} detected {np.mean(hit >= 0):.3f} "
              f"best-cluster acc {acc[u][0]:.3f}; final {c.most_common(4)}; raw {raw.most_common(5)}")
        if acc[u][0] < WELL and best_c > 0 and best_c not in clusters:
            clusters.append(best_c)
    for c in clusters:
        sel = lab == c
        comp = collections.Counter(src_u[sel].tolist())
        main_u = max((u for u in comp if u >= 0), key=lambda u: comp[u], default=-1)
        print(f"  cluster {c}: {sel.sum()} spikes, main unit {main_u}; raw pieces "
              f"{collections.Counter(s['cluster_raw'][sel].tolist()).most_common(6)}")
        for u, n in comp.most_common():
            m = sel & (src_u == u)
            pd = np.abs(s["peak_channel"][m] - (gt_peak[main_u] if main_u >= 0 else 0))
            print(f"    from {'none' if u < 0 else 'unit %d' % u:>8} (snr {snr[u] if u >= 0 else 0:5.1f}, peak "
                  f"{gt_peak[u] if u >= 0 else -1:2d}): {n:4d}  |amp| {np.abs(s['amplitude'][m]).mean():6.1f}  "
                  f"peak-ch dist to main {pd.mean():5.1f}  width {width[m].mean():4.1f}  collide {coll[m].mean():.2f}")


if __name__ == "__main__":
    main()
