"""Where each ground-truth unit's spikes go in a spikestream sort of a peer recording (gen.py layout).

Usage: python3 bench/diagnose_gt.py DATADIR SORTDIR [--delta-ms 0.4] [--json OUT]
Reads DATADIR/gt.npz (times, labels), DATADIR/gen.json (SNR) and SORTDIR/results.h5. For every
ground-truth unit: the fraction of its spikes with no detected spike within the window (missed by the
front end), with a detection that another unit's spike of the same window claimed first (merged into
one detection), and, of the detected ones, the fraction in the noise cluster 0, in the unit's main
cluster (the one holding most of its spikes), in catch-all clusters (clusters whose largest ground-
truth unit holds under half of their spikes) and in other pieces. Needs numpy and h5py.
"""
import argparse, json, os
import numpy as np
import h5py


def match(gt_t, s_t, d):
    """Index of the nearest detection within d samples of each ground-truth spike, or -1."""
    i = np.searchsorted(s_t, gt_t)
    lo = np.clip(i - 1, 0, len(s_t) - 1)
    hi = np.clip(i, 0, len(s_t) - 1)
    dl, dh = np.abs(s_t[lo] - gt_t), np.abs(s_t[hi] - gt_t)
    j = np.where(dl <= dh, lo, hi)
    j[np.minimum(dl, dh) > d] = -1
    return j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("datadir")
    ap.add_argument("sortdir")
    ap.add_argument("--delta-ms", type=float, default=0.4)
    ap.add_argument("--json")
    a = ap.parse_args()
    gz = np.load(os.path.join(a.datadir, "gt.npz"))
    gen = json.load(open(os.path.join(a.datadir, "gen.json")))
    fs = float(gen.get("fs", 30000.0))
    snr = {int(k): v for k, v in gen.get("snr_peak_over_noise", {}).items()}
    gt_t = gz["times"].astype(np.int64)
    gt_l = gz["labels"].astype(np.int64)
    o = np.argsort(gt_t, kind="stable")
    gt_t, gt_l = gt_t[o], gt_l[o]
    f = h5py.File(os.path.join(a.sortdir, "results.h5"), "r")
    s_t = f["spikes/time_samples"][:].astype(np.int64)
    s_c = f["spikes/cluster"][:].astype(np.int64)
    s_r = f["spikes/cluster_raw"][:].astype(np.int64)
    d = int(round(a.delta_ms * fs / 1000))
    j = match(gt_t, s_t, d)
    # a detection matched by several ground-truth spikes: the spike of the unit of highest SNR keeps it (then the
    # nearest), the others count as merged into it
    owner = {}
    dist = np.abs(np.where(j >= 0, s_t[np.maximum(j, 0)] - gt_t, 10**9))
    usnr = np.array([snr.get(int(u), 0.0) for u in gt_l])
    for g in np.lexsort((dist, -usnr)):
        if j[g] >= 0 and j[g] not in owner:
            owner[j[g]] = g
    shared = np.array([j[g] >= 0 and owner[j[g]] != g for g in range(len(gt_t))])
    units = np.unique(gt_l)
    # each cluster's composition among detected, owned spikes
    own = np.array([j[g] >= 0 and not shared[g] for g in range(len(gt_t))])
    K = int(s_c.max()) + 1
    comp = np.zeros((K, units.max() + 1), np.int64)
    np.add.at(comp, (s_c[j[own]], gt_l[own]), 1)
    size = np.bincount(s_c, minlength=K)
    purity = np.where(size > 0, comp.max(1) / np.maximum(size, 1), 0)
    catchall = (purity < 0.5) & (np.arange(K) > 0)
    rows = []
    print(f"{len(gt_t)} ground-truth spikes, {len(s_t)} detections, window {d} samples; "
          f"{int((size[1:] > 0).sum())} clusters, {int(catchall.sum())} catch-all (purity < 0.5)")
    print(" gt   snr    n  missed merged | noise   main  catch  other  pieces  main_cl  main_purity")
    for u in units:
        m = gt_l == u
        n = int(m.sum())
        det = m & own
        c = s_c[j[det]]
        nd = max(len(c), 1)
        cnt = np.bincount(c, minlength=K)
        cnt0 = cnt.copy()
        cnt0[0] = 0
        main = int(np.argmax(cnt0))
        noise = cnt[0] / nd
        mainf = cnt[main] / nd
        catch = cnt[catchall].sum() / nd if not catchall[main] else (cnt[catchall].sum() - cnt[main]) / nd
        other = 1 - noise - mainf - catch
        pieces = int(((cnt0 >= 0.05 * nd) & ~catchall).sum())
        r = dict(gt_unit=int(u), snr=snr.get(int(u)), n=n, missed=float((m & (j < 0)).sum() / n),
                 merged=float((m & shared).sum() / n), noise=float(noise), main=float(mainf), catch_all=float(catch),
                 other=float(other), pieces=pieces, main_cluster=main, main_purity=float(purity[main]),
                 raw_noise=float((s_r[j[det]] == 0).sum() / nd))
        rows.append(r)
        print(f"{u:3d} {r['snr'] or 0:5.1f} {n:4d}  {r['missed']:.3f}  {r['merged']:.3f} | {noise:.3f}  {mainf:.3f}  "
              f"{catch:.3f}  {other:.3f}  {pieces:5d}  {main:6d}  {purity[main]:.3f}")
    hi = [r for r in rows if (r["snr"] or 0) > 5]
    if hi:
        keys = ("missed", "merged", "noise", "raw_noise", "main", "catch_all", "other")
        print("mean over SNR > 5 units: " + ", ".join(f"{k} {np.mean([r[k] for r in hi]):.3f}" for k in keys))
    if a.json:
        json.dump(dict(delta_samples=d, n_gt=int(len(gt_t)), n_det=int(len(s_t)), units=rows), open(a.json, "w"),
                  indent=1)


if __name__ == "__main__":
    main()
