#!/usr/bin/env python3
"""check_phy.py — load every .npy of a phy folder written by `spikestream sort` with numpy and check
that dtypes and shapes agree with each other and with params.py (the layout of docs/formats.md);
with --phylib, also open the folder with phylib's TemplateModel as phy does and read from it.

usage: python3 bench/check_phy.py [--phylib DIR] DIR/phy [DIR/phy ...]
Prints one line per file (name, dtype, shape) and "ok" or the problems; exit status 1 on a problem.
Needs numpy only; --phylib DIR (a phylib source tree, the folder holding the phylib package) also
needs h5py and scipy. Modules phylib imports but does not use for template folders (mtscomp, tqdm)
are replaced by empty stand-ins when they are not installed. The phylib pass then checks: the model
loads; spike and per-cluster counts match results.h5 and channel positions model.h5 (next to the
folder); the traces hold the input's samples at a few spikes (compared for NWB and Kwik inputs, read
from the recording.dat copy; flat inputs are mapped in place); get_waveforms returns them; get_amplitudes_true gives
|/spikes/amplitude| in µV; phylib wrote nothing into the folder."""
import os
import sys
import tempfile

import numpy as np

NAMES = ["spike_times", "spike_clusters", "spike_templates", "amplitudes", "templates", "channel_map",
         "channel_positions", "channel_shanks", "whitening_mat", "whitening_mat_inv", "pc_features",
         "pc_feature_ind", "similar_templates"]
PHYLIB_EXTENSIONS = (".dat", ".bin", ".raw", ".mda")


def read_params(path):
    params = {}
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), {}, params)  # params.py is Python, as phy reads it
    return params


def dat_paths(folder, params):
    paths = params.get("dat_path") or []
    paths = [paths] if isinstance(paths, str) else list(paths)
    return [p if os.path.isabs(p) else os.path.join(folder, p) for p in paths]


def check_dat(folder, params, last_spike):
    """dat_path files: present, mappable by phylib, whole frames after the offset, long enough."""
    problems = []
    frame = int(params["n_channels_dat"]) * np.dtype(params["dtype"]).itemsize
    frames = 0
    for path in dat_paths(folder, params):
        if not os.path.isfile(path):
            problems.append("dat_path %s: missing" % path)
            continue
        if os.path.splitext(path)[1] not in PHYLIB_EXTENSIONS:
            problems.append("dat_path %s: phylib maps only %s" % (path, ", ".join(PHYLIB_EXTENSIONS)))
        body = os.path.getsize(path) - int(params["offset"])
        if body < 0 or body % frame:
            problems.append("dat_path %s: %d bytes after the offset, not whole %d-byte frames" % (path, body, frame))
        frames += max(body, 0) // frame
    if params.get("dat_path") and last_spike >= frames:
        problems.append("dat_path: %d frames, the last spike at sample %d" % (frames, last_spike))
    return problems


def check(folder):
    problems = []
    arrays = {}
    for name in NAMES:
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
    if len(arrays) == len(NAMES):
        st, sc, sp = arrays["spike_times"], arrays["spike_clusters"], arrays["spike_templates"]
        tp, cm, cp = arrays["templates"], arrays["channel_map"], arrays["channel_positions"]
        pf, pi, si, am = arrays["pc_features"], arrays["pc_feature_ind"], arrays["similar_templates"], arrays["amplitudes"]
        sh, wm, wmi = arrays["channel_shanks"], arrays["whitening_mat"], arrays["whitening_mat_inv"]
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
            (sh.shape == (c,) and sh.dtype == np.int32, "channel_shanks: int32 [n_channels]"),
            (wm.shape == (c, c) and wmi.shape == (c, c), "whitening_mat(_inv): [n_channels, n_channels]"),
            (bool(np.allclose(wm @ wmi, np.eye(c))), "whitening_mat_inv: the inverse of whitening_mat"),
            (pf.ndim == 3 and pf.shape[0] == n and pf.dtype == np.float32, "pc_features: float32 [n_spikes, P, F]"),
            (pi.ndim == 2 and pi.shape[0] == t and pf.ndim == 3 and pi.shape[1] == pf.shape[2],
             "pc_feature_ind: [n_templates, F]"),
            (pi.size == 0 or (pi.min() >= 0 and pi.max() < c), "pc_feature_ind: channels within [0, n_channels)"),
            (si.shape == (t, t), "similar_templates: [n_templates, n_templates]"),
            (bool(np.all(np.isfinite(tp))) and bool(np.all(np.isfinite(pf))), "templates, pc_features: finite"),
        ]
        problems += ["%s: expected %s" % (folder, what) for ok, what in expect if not ok]
        if params:
            problems += check_dat(folder, params, int(st[-1]) if n else -1)
    try:
        with open(os.path.join(folder, "cluster_group.tsv")) as f:
            lines = f.read().splitlines()
        if not lines or lines[0] != "cluster_id\tgroup":
            problems.append("cluster_group.tsv: header")
    except OSError as e:
        problems.append("cluster_group.tsv: %s" % e)
    return problems


# --- phylib -----------------------------------------------------------------------------------------

def import_phylib(tree):
    """phylib from the source tree `tree`, with stand-ins for modules template folders do not use."""
    stubs = tempfile.mkdtemp(prefix="phylib-stubs-")
    for module, text in (("mtscomp", "class Reader:\n    pass\n"), ("tqdm", "def tqdm(x=None, *a, **k):\n    return x\n")):
        try:
            __import__(module)
        except ImportError:
            with open(os.path.join(stubs, module + ".py"), "w") as f:
                f.write(text)
    sys.path[:0] = [tree, stubs]
    from phylib.io.model import load_model  # noqa: E402 - after the path is set
    return load_model


def input_samples(path):
    """The input's samples as an array-like [samples, channels] (HDF5: its time-major int16 data)."""
    import h5py
    if os.path.isfile(path) and h5py.is_hdf5(path):
        f = h5py.File(path, "r")
        if "acquisition" in f:
            for obj in f["acquisition"].values():
                if isinstance(obj, h5py.Group) and "data" in obj and obj["data"].ndim == 2:
                    return obj["data"]
        return f["recordings/0/data"] if "recordings/0/data" in f else None
    return None


def phylib_check(load_model, folder):
    import h5py
    problems = []
    before = sorted(os.listdir(folder))
    model = load_model(os.path.join(folder, "params.py"))
    out = os.path.dirname(os.path.abspath(folder))
    with h5py.File(os.path.join(out, "results.h5"), "r") as r:
        n_res = r["spikes/time_samples"].shape[0]
        counts = r["clusters/n_spikes"][:]
        amp_uv = np.abs(r["spikes/amplitude"][:])
        input_path = r.attrs["input_path"]
        input_path = input_path.decode() if isinstance(input_path, bytes) else str(input_path)
    with h5py.File(os.path.join(out, "model.h5"), "r") as m:
        pos = np.stack([m["probe/x_um"][:], m["probe/y_um"][:]], axis=1)
    print("  phylib: %d spikes, %d clusters, traces %s, dat_path %s" % (
        model.n_spikes, len(model.cluster_ids), None if model.traces is None else model.traces.shape,
        ", ".join(map(str, model.dat_path))))
    if model.n_spikes != n_res:
        problems.append("phylib: %d spikes, results.h5 %d" % (model.n_spikes, n_res))
    got = np.bincount(model.spike_clusters, minlength=len(counts))
    if not np.array_equal(got, counts):
        problems.append("phylib: spikes per cluster %s, results.h5 %s" % (got.tolist(), counts.tolist()))
    if not np.allclose(model.channel_positions, pos, atol=1e-3):
        problems.append("phylib: channel positions differ from model.h5 /probe")
    if model.traces is None:
        return problems + ["phylib: no traces (dat_path %s)" % model.dat_path]
    src = input_samples(input_path)
    ids = np.unique(np.linspace(0, model.n_spikes - 1, 5).astype(int))
    wave = model.get_waveforms(ids, np.arange(model.n_channels))
    half = model.n_samples_waveforms // 2
    for j, i in enumerate(ids):
        t = int(model.spike_samples[i])
        a, b = max(0, t - half), min(model.traces.shape[0], t - half + model.n_samples_waveforms)
        tr = np.asarray(model.traces[a:b])
        if src is not None and not np.array_equal(tr, src[a:b, :][:, model.channel_mapping]):
            problems.append("phylib: traces at spike %d (sample %d) differ from %s" % (i, t, input_path))
        if a == t - half and not np.array_equal(wave[j][: b - a], tr):
            problems.append("phylib: get_waveforms of spike %d differs from the traces" % i)
    print("  phylib: traces and waveforms of spikes %s read%s" % (
        ids.tolist(), "" if src is None else ", compared with " + input_path))
    true_uv = model.get_amplitudes_true()[0]
    err = np.max(np.abs(true_uv - amp_uv) / np.maximum(amp_uv, 1e-6)) if len(amp_uv) else 0.0
    print("  phylib: get_amplitudes_true vs |/spikes/amplitude|: max relative difference %.2g" % err)
    if err > 1e-4:
        problems.append("phylib: get_amplitudes_true differs from |/spikes/amplitude| by %.3g" % err)
    if sorted(os.listdir(folder)) != before:
        problems.append("phylib wrote into the folder: %s" % sorted(set(os.listdir(folder)) - set(before)))
    return problems


def main():
    args = sys.argv[1:]
    load_model = None
    if len(args) >= 2 and args[0] == "--phylib":
        load_model = import_phylib(args[1])
        args = args[2:]
    if not args:
        print(__doc__)
        return 2
    bad = 0
    for folder in args:
        print(folder)
        problems = check(folder)
        if load_model and not problems:
            problems = phylib_check(load_model, folder)
        for p in problems:
            print("  problem: " + p)
        print("  " + ("ok" if not problems else "%d problem(s)" % len(problems)))
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
