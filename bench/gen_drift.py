"""gen_drift.py — a drifting ground-truth recording from SpikeInterface's
`generate_drifting_recording`, written in the peer harness's on-disk layout so that its sorting and
scoring scripts read it unchanged.

usage: python3 gen_drift.py OUTDIR --seed S [--duration 600] [--units 25] [--channels 32] [--columns 2]
                            [--xpitch 20] [--ypitch 20] [--drift-um 20] [--static] [--workers N]
Writes OUTDIR/rec.bin (int16, time-major, 30 kHz, 3 counts per generator unit), OUTDIR/gt.npz (times,
labels, unit_ids), OUTDIR/probe.npz (xc, yc, chanMap), OUTDIR/probe.json (probeinterface, channel i =
contact i) and OUTDIR/gen.json (parameters, drift, noise, per-unit SNR = template peak x gain / median
MAD noise of the written data). The drift is the generator's rigid vertical zigzag between +drift-um and
-drift-um; its start (60 s) and period (200 s) are the generator's defaults for 600 s, scaled with
--duration so that shortened recordings drift the same way. --static writes the drift-free twin (same
units, spike trains and noise).
"""
import argparse
import json
import multiprocessing as mp
import os
import time

import numpy as np

RATE_HZ = 30000.0
GAIN = 3.0            # generator units (about uV) -> int16 counts
BLOCK_S = 1.0         # the noise generator's block length: chunks on its boundaries
SNR_WINDOW_S = 10.0   # noise is measured on the first seconds of the written file
REFERENCE_DURATION_S = 600.0


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--duration", type=float, default=600.0, help="seconds")
    ap.add_argument("--units", type=int, default=25)
    ap.add_argument("--channels", type=int, default=32)
    ap.add_argument("--columns", type=int, default=2)
    ap.add_argument("--xpitch", type=float, default=20.0)
    ap.add_argument("--ypitch", type=float, default=20.0)
    ap.add_argument("--drift-um", type=float, default=20.0, help="zigzag between +X and -X um (vertical)")
    ap.add_argument("--static", action="store_true", help="write the drift-free twin instead")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    return ap.parse_args()


def build(a):
    """The generator's recordings, sorting and extra outputs (templates, displacement)."""
    from spikeinterface.generation import generate_drifting_recording
    if a.channels % a.columns:
        raise SystemExit("--channels must be a multiple of --columns")
    scale = a.duration / REFERENCE_DURATION_S
    probe_kwargs = dict(num_columns=a.columns, num_contact_per_column=a.channels // a.columns, xpitch=a.xpitch,
                        ypitch=a.ypitch, contact_shapes="circle", contact_shape_params={"radius": 6})
    drift_kwargs = dict(displacement_sampling_frequency=5.0, drift_start_um=[0.0, a.drift_um],
                        drift_stop_um=[0.0, -a.drift_um], drift_step_um=1,
                        motion_list=[dict(drift_mode="zigzag", non_rigid_gradient=None, t_start_drift=60.0 * scale,
                                          t_end_drift=None, period_s=200.0 * scale)])
    static, drifting, sorting, extra = generate_drifting_recording(
        num_units=a.units, duration=a.duration, sampling_frequency=RATE_HZ, generate_probe_kwargs=probe_kwargs,
        generate_displacement_vector_kwargs=drift_kwargs, extra_outputs=True, seed=a.seed)
    params = dict(num_units=a.units, duration=a.duration, sampling_frequency=RATE_HZ, seed=a.seed,
                  generate_probe_kwargs=probe_kwargs, generate_displacement_vector_kwargs=drift_kwargs,
                  twin="static" if a.static else "drifting")
    return (static if a.static else drifting), sorting, extra, params


_JOB = {}   # what the forked writers need; set before the pool forks


def _write_blocks(k):
    """Worker k of `workers`: every workers-th 1 s block, as int16; returns its clipped samples."""
    rec, path, workers = _JOB["rec"], _JOB["path"], _JOB["workers"]
    n, c = rec.get_num_samples(), rec.get_num_channels()
    block = int(BLOCK_S * RATE_HZ)
    out = np.memmap(path, dtype=np.int16, mode="r+", shape=(n, c))
    clipped = 0
    for s in range(k * block, n, workers * block):
        e = min(n, s + block)
        x = np.rint(rec.get_traces(start_frame=s, end_frame=e).astype(np.float32) * GAIN)
        clipped += int(np.count_nonzero(np.abs(x) > 32767))
        out[s:e] = np.clip(x, -32768, 32767).astype(np.int16)
    out.flush()
    return clipped


def write_int16(rec, path, workers):
    """All of `rec` as int16 (x GAIN, rounded, clipped) into `path`, in 1 s blocks spread over forked
    workers. Returns the number of clipped samples."""
    np.memmap(path, dtype=np.int16, mode="w+", shape=(rec.get_num_samples(), rec.get_num_channels())).flush()
    _JOB.update(rec=rec, path=path, workers=workers)
    with mp.get_context("fork").Pool(workers) as pool:
        return sum(pool.map(_write_blocks, range(workers)))


def write_probe(probe, outdir):
    pos = np.asarray(probe.contact_positions, dtype=float)[:, :2]
    chan = np.arange(len(pos))
    np.savez(os.path.join(outdir, "probe.npz"), xc=pos[:, 0], yc=pos[:, 1], chanMap=chan)
    doc = {"specification": "probeinterface", "version": "0.2.21", "probes": [{
        "ndim": 2, "si_units": "um", "annotations": {"name": "SpikeInterface drifting generator probe"},
        "contact_positions": pos.tolist(), "contact_plane_axes": [[[1, 0], [0, 1]]] * len(pos),
        "contact_shapes": ["circle"] * len(pos), "contact_shape_params": [{"radius": 6}] * len(pos),
        "device_channel_indices": chan.tolist(), "contact_ids": [str(i) for i in chan],
        "shank_ids": [""] * len(pos)}]}
    with open(os.path.join(outdir, "probe.json"), "w") as f:
        json.dump(doc, f)
    return pos


def main():
    a = parse_args()
    t0 = time.perf_counter()
    rec, sorting, extra, params = build(a)
    t_build = time.perf_counter() - t0
    os.makedirs(a.outdir, exist_ok=True)
    path = os.path.join(a.outdir, "rec.bin")
    t1 = time.perf_counter()
    clipped = write_int16(rec, path, max(1, a.workers))
    t_write = time.perf_counter() - t1

    spikes = sorting.to_spike_vector()
    unit_ids = np.asarray(sorting.unit_ids).astype(np.int64)
    times = spikes["sample_index"].astype(np.int64)
    labels = unit_ids[spikes["unit_index"]]
    np.savez(os.path.join(a.outdir, "gt.npz"), times=times, labels=labels, unit_ids=unit_ids)
    pos = write_probe(rec.get_probe(), a.outdir)

    n, c = rec.get_num_samples(), rec.get_num_channels()
    head = np.memmap(path, dtype=np.int16, mode="r", shape=(n, c))[: int(SNR_WINDOW_S * RATE_HZ)].astype(np.float32)
    noise_sd = np.median(np.abs(head - np.median(head, 0)), 0) / 0.6745
    # SNR at the unit's resting position (the template before displacement)
    peak = np.abs(np.asarray(extra["templates"].templates_array)).max(axis=1)   # (units, channels)
    snr = {str(u): float(peak[i].max() * GAIN / np.median(noise_sd)) for i, u in enumerate(unit_ids)}
    disp = np.asarray(extra["displacement_vectors"])[:, 1, 0]
    info = dict(fs=RATE_HZ, params=params, gain_int16_per_unit=GAIN, num_samples=int(n), duration_s=n / RATE_HZ,
                n_gt_units=int(unit_ids.size), n_gt_spikes=int(times.size),
                spikes_per_unit={str(u): int(np.count_nonzero(labels == u)) for u in unit_ids},
                clipped_samples=int(clipped), noise_sd_int16_mad_median=float(np.median(noise_sd)),
                noise_sd_int16_mad_range=[float(noise_sd.min()), float(noise_sd.max())],
                snr_peak_over_noise=snr, probe_x_unique=sorted(set(map(float, pos[:, 0]))),
                probe_y_range=[float(pos[:, 1].min()), float(pos[:, 1].max())],
                drift=dict(twin=params["twin"], mode="zigzag", amplitude_um=a.drift_um,
                           displacement_um_range=[float(disp.min()), float(disp.max())],
                           displacement_sampling_hz=5.0),
                t_build_s=t_build, t_write_s=t_write, n_workers=a.workers, file_bytes=os.path.getsize(path))
    with open(os.path.join(a.outdir, "gen.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps({k: v for k, v in info.items() if k not in ("spikes_per_unit", "snr_peak_over_noise", "params")}))


if __name__ == "__main__":
    main()
