#!/usr/bin/env python3
"""check_simulation.py — open a `spikestream simulate` NWB file with h5py (an independent HDF5 reader)
and check it against the flat-binary output of the same seed (`--format binary`):

    spikestream simulate -o sim.nwb --seed 1
    spikestream simulate -o sim --format binary --seed 1
    python3 tools/check_simulation.py sim.nwb sim

Checks: NWB root attributes; ElectricalSeries data shape, dtype, conversion, rate; every sample equal
to BASE.bin; the units table (spike_times, snr, peak_channel) equal to the sidecar's ground truth;
electrode positions. Prints a summary and exits 1 on any mismatch. Needs numpy and h5py."""
import json
import sys

import h5py
import numpy as np

ROWS_PER_BLOCK = 1 << 20


def main(nwb_path, base):
    side = json.load(open(base + ".json"))
    n_ch, rate = side["n_channels"], side["sample_rate"]
    raw = np.memmap(base + ".bin", dtype="<i2", mode="r").reshape(-1, n_ch)
    problems = []
    with h5py.File(nwb_path, "r") as f:
        root = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        print("root:", {k: str(root.get(k)) for k in ("neurodata_type", "namespace", "nwb_version")})
        if root.get("neurodata_type") != "NWBFile":
            problems.append("root neurodata_type is not NWBFile")
        es = f["/acquisition/ElectricalSeries"]
        data = es["data"]
        conv = data.attrs["conversion"]
        es_rate = es["starting_time"].attrs["rate"]
        print(f"data: shape {data.shape}, dtype {data.dtype}, conversion {conv} V, rate {es_rate} Hz")
        if data.shape != raw.shape or data.dtype != np.int16:
            problems.append(f"data shape/dtype {data.shape} {data.dtype} vs binary {raw.shape} int16")
        if abs(conv - side["conversion"]) > 1e-18 or es_rate != rate:
            problems.append("conversion or rate differ from the sidecar")
        n_diff = 0
        for r in range(0, min(data.shape[0], raw.shape[0]), ROWS_PER_BLOCK):
            n_diff += int(np.count_nonzero(data[r:r + ROWS_PER_BLOCK] != raw[r:r + ROWS_PER_BLOCK]))
        print(f"samples compared: {raw.size}, differing: {n_diff}")
        print("first samples (h5py, rows 1000..1002, channels 0..3):", data[1000:1003, :4].tolist())
        print("same from the binary file:                          ", raw[1000:1003, :4].tolist())
        if n_diff:
            problems.append(f"{n_diff} samples differ between NWB and binary")

        u = f["/units"]
        times, index = u["spike_times"][:], u["spike_times_index"][:]
        snr, peak = u["snr"][:], u["peak_channel"][:]
        starts = np.concatenate([[0], index[:-1]])
        for k, unit in enumerate(side["units"]):
            samples = np.rint(times[starts[k]:index[k]] * rate).astype(np.int64)
            if not np.array_equal(samples, np.asarray(unit["spike_samples"], dtype=np.int64)):
                problems.append(f"unit {k}: spike times differ from the sidecar")
            if abs(snr[k] - unit["snr"]) > 1e-9 * max(1.0, abs(unit["snr"])) or peak[k] != unit["peak_channel"]:
                problems.append(f"unit {k}: snr/peak_channel differ from the sidecar")
        print(f"units: {len(index)}, spikes: {len(times)}, snr range {snr.min():.2f}..{snr.max():.2f}, "
              f"median {np.median(snr):.2f}")

        el = f["/general/extracellular_ephys/electrodes"]
        if not (np.allclose(el["x"][:], side["channel_x_um"]) and np.allclose(el["y"][:], side["channel_y_um"])):
            problems.append("electrode positions differ from the sidecar")
    for p in problems:
        print("MISMATCH:", p)
    print("RESULT:", "OK" if not problems else "FAILED")
    return 0 if not problems else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: check_simulation.py FILE.nwb BASE")
    sys.exit(main(sys.argv[1], sys.argv[2]))
