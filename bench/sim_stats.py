"""How hard a ground-truth recording is, measured the same way for `spikestream simulate --format
binary` output and for a SpikeInterface-generated folder (rec.bin, gt.npz, probe.npz).

Usage: python3 bench/sim_stats.py RECORDING [RECORDING ...] [--json OUT]
  RECORDING: BASE (BASE.bin + BASE.json from simulate) or a folder with rec.bin, gt.npz, probe.npz.
Prints one line per recording: units, spikes per minute, noise, SNR quartiles and counts above 5 under
two definitions, collisions and noise correlations (numpy only).

Definitions (the same for both inputs, all from the int16 data):
  noise        per channel MAD / 0.6745 over the first 10 s;
  template     mean of the data over up to 1000 spikes of the unit, -1 .. +2 ms around its ground-truth
               sample; peak channel = the largest peak-to-trough;
  snr_trough   |template minimum on the peak channel| / median noise over channels (SpikeInterface's
               convention in the peer generator script);
  snr_ptp      template peak-to-trough on the peak channel / that channel's noise (the `snr` of
               simulate's ground truth and of `compare`);
  collisions   share of spikes with a spike of another unit within 1 ms whose peak channel lies
               within 50 um (a spatio-temporal overlap the sorter must resolve);
  neighbour r  mean correlation of the data between channels 15-25 um apart (first 10 s; spikes
               correlate neighbours too: run it on a recording without units for the noise alone);
  lag-1 r      mean correlation of each channel with itself one sample later (band-limited noise is
               high, white noise is ~0; the same caveat).
"""
import json
import os
import sys

import numpy as np

FS_DEFAULT = 30000.0


def load(path):
    if os.path.isdir(path):
        gt = np.load(os.path.join(path, "gt.npz"))
        probe = np.load(os.path.join(path, "probe.npz"))
        xy = np.stack([probe["xc"], probe["yc"]], 1).astype(float)
        data = np.memmap(os.path.join(path, "rec.bin"), dtype=np.int16, mode="r").reshape(-1, len(xy))
        times, labels = gt["times"].astype(np.int64), np.asarray(gt["labels"])
        ids = list(np.unique(labels))
        trains = [np.sort(times[labels == u]) for u in ids]
        return dict(name=path, kind="spikeinterface", fs=FS_DEFAULT, data=data, xy=xy, trains=trains)
    base = path[:-4] if path.endswith(".bin") else path
    side = json.load(open(base + ".json"))
    xy = np.stack([side["channel_x_um"], side["channel_y_um"]], 1).astype(float)
    data = np.memmap(base + ".bin", dtype=np.int16, mode="r").reshape(-1, side["n_channels"])
    trains = [np.asarray(u["spike_samples"], dtype=np.int64) for u in side["units"]]
    return dict(name=path, kind="spikestream", fs=float(side["sample_rate"]), data=data, xy=xy, trains=trains)


def measure(rec):
    fs, data, xy, trains = rec["fs"], rec["data"], rec["xy"], rec["trains"]
    n, C = data.shape
    seg = np.asarray(data[: int(10 * fs)], dtype=np.float32)
    noise = np.median(np.abs(seg - np.median(seg, 0)), 0) / 0.6745
    pre, post = int(1e-3 * fs), int(2e-3 * fs)
    snr_trough, snr_ptp, peak = [], [], []
    for tr in trains:
        tr = tr[(tr >= pre) & (tr < n - post)]
        if tr.size > 1000:
            tr = tr[np.linspace(0, tr.size - 1, 1000).astype(int)]
        acc = np.zeros((pre + post, C))
        for t in tr:
            acc += data[t - pre : t + post]
        tm = acc / max(tr.size, 1)
        ptp = tm.max(0) - tm.min(0)
        ch = int(np.argmax(ptp))
        peak.append(ch)
        snr_ptp.append(float(ptp[ch] / noise[ch]))
        snr_trough.append(float(abs(tm[:, ch].min()) / np.median(noise)))
    # collisions: other units' spikes within 1 ms whose peak channels are within 50 um
    win = int(1e-3 * fs)
    alltimes = np.concatenate(trains + [np.zeros(0, np.int64)])
    owner = np.concatenate([np.full(t.size, i) for i, t in enumerate(trains)] + [np.zeros(0, int)])
    order = np.argsort(alltimes, kind="stable")
    alltimes, owner = alltimes[order], owner[order]
    pk = np.asarray(peak, dtype=int)
    near = np.linalg.norm(xy[pk][:, None] - xy[pk][None], axis=2) <= 50.0
    collided = np.zeros(alltimes.size, bool)
    lo = 0
    for i in range(alltimes.size):
        while alltimes[lo] < alltimes[i] - win:
            lo += 1
        j = lo
        while j < alltimes.size and alltimes[j] <= alltimes[i] + win:
            if j != i and owner[j] != owner[i] and near[owner[i], owner[j]]:
                collided[i] = True
                break
            j += 1
    d = np.linalg.norm(xy[:, None] - xy[None], axis=2)
    cc = np.corrcoef(seg.T)
    pairs = (d >= 15) & (d <= 25)
    lag1 = np.mean([np.corrcoef(seg[:-1, c], seg[1:, c])[0, 1] for c in range(C)])
    st, sp = np.asarray(snr_trough + [np.nan]), np.asarray(snr_ptp + [np.nan])
    minutes = n / fs / 60.0
    return dict(
        name=rec["name"], kind=rec["kind"], channels=C, duration_s=n / fs, units=len(trains),
        spikes_per_minute=float(alltimes.size / minutes),
        noise_counts_median=float(np.median(noise)),
        snr_trough_quartiles=[float(q) for q in np.nanpercentile(st, [0, 25, 50, 75, 100])],
        snr_trough_gt5=int(np.sum(st > 5)),
        snr_ptp_quartiles=[float(q) for q in np.nanpercentile(sp, [0, 25, 50, 75, 100])],
        snr_ptp_gt5=int(np.sum(sp > 5)),
        collision_share=float(collided.mean()) if collided.size else 0.0, neighbour_r=float(cc[pairs].mean()), lag1_r=float(lag1),
        snr_trough=snr_trough, snr_ptp=snr_ptp)


def main(argv):
    out = None
    if "--json" in argv:
        i = argv.index("--json")
        out = argv[i + 1]
        argv = argv[:i] + argv[i + 2 :]
    if not argv:
        sys.exit(__doc__)
    rows = [measure(load(p)) for p in argv]
    for r in rows:
        q = lambda v: "/".join("%.1f" % x for x in v)
        print("%s (%s): %d units on %d channels, %.0f spikes/min, noise %.1f counts; SNR trough min/q1/med/q3/max %s "
              "(%d > 5); SNR ptp %s (%d > 5); collisions %.1f%%; neighbour r %.2f; lag-1 r %.2f"
              % (r["name"], r["kind"], r["units"], r["channels"], r["spikes_per_minute"], r["noise_counts_median"],
                 q(r["snr_trough_quartiles"]), r["snr_trough_gt5"], q(r["snr_ptp_quartiles"]), r["snr_ptp_gt5"],
                 100 * r["collision_share"], r["neighbour_r"], r["lag1_r"]))
    if out:
        json.dump(rows, open(out, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
