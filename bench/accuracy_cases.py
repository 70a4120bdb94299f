"""accuracy_cases.py — the driver of bench/run_accuracy.sh: for each case and seed, generate a
third-party ground-truth recording (the peer harness's gen.py, or gen_drift.py beside this file), sort
it with spikestream and with Kilosort4 (the harness's sort_ss.py / sort_ks4.py), score both with
`spikestream compare` and with the harness's score.py (SpikeInterface), and write one row per case,
seed and sorter to OUTDIR/rows.jsonl (as soon as it exists) and the document OUTDIR/accuracy.json.

usage: python3 accuracy_cases.py OUTDIR --ss SPIKESTREAM [--cases a,b,c,d] [--seeds 101,102,103]
                                 [--duration-scale X] [--no-ks4] [--ss-args "--device cuda"]
                                 [--timeout 1200] [--gen-timeout 1800] [--resume] [--retry-errors] [--budget-s S]
                                 [--work DIR] [--keep-data] [--workers N] [--peers .peers]
Run with the harness's environment (source .peers/env.sh): SpikeInterface and Kilosort4 on PYTHONPATH.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RATE_HZ = 30000.0
SNR_MIN = 5.0                 # "SNR > 5" units: the ones a sorter is expected to find
WELL_DETECTED = 0.8           # compare's default; stated here for the document
WINDOW_MS = 0.4
SORTERS = ("spikestream", "kilosort4")
CASES = {
    "a": dict(desc="32 ch (2 columns x 16 rows, 20 um), 25 units, 600 s, generator defaults",
              generator="gen.py", channels=32, columns=2, xpitch=20.0, ypitch=20.0, units=25, duration=600.0),
    "b": dict(desc="(a) with sub-sample template jitter (upsample_factor 10), lognormal per-unit template "
                   "amplitudes and lognormal firing rates",
              generator="gen.py", channels=32, columns=2, xpitch=20.0, ypitch=20.0, units=25, duration=600.0),
    "c": dict(desc="generate_drifting_recording, 32 ch (2 x 16, 20 um), 25 units, 600 s, rigid zigzag drift "
                   "between +20 and -20 um; Kilosort4 with nblocks 1",
              generator="gen_drift.py", channels=32, columns=2, xpitch=20.0, ypitch=20.0, units=25, duration=600.0,
              drift_um=20.0, ks4_settings={"nblocks": 1}),
    "d": dict(desc="384 ch in 4 columns (xpitch 16 um, ypitch 20 um), 150 units, 300 s, generator defaults",
              generator="gen.py", channels=384, columns=4, xpitch=16.0, ypitch=20.0, units=150, duration=300.0),
}
# case (b): medians and spreads of the lognormal draws (per unit, from the seed)
B_RATE_MEDIAN_HZ, B_RATE_SIGMA, B_RATE_CLIP = 8.0, 0.8, (0.5, 60.0)
B_ALPHA_MEDIAN, B_ALPHA_SIGMA, B_ALPHA_CLIP = 250.0, 0.5, (60.0, 1000.0)
B_UPSAMPLE = 10


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--ss", required=True, help="the spikestream executable")
    ap.add_argument("--cases", default="a,b,c,d")
    ap.add_argument("--seeds", default="101,102,103")
    ap.add_argument("--duration-scale", type=float, default=1.0, help="multiplies every case's duration")
    ap.add_argument("--no-ks4", action="store_true", help="spikestream only")
    ap.add_argument("--ss-args", default="--device cuda", help="extra `spikestream sort` options")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per sort (and per scoring)")
    ap.add_argument("--gen-timeout", type=float, default=1800.0, help="seconds per generated recording")
    ap.add_argument("--resume", action="store_true", help="skip case/seed/sorter rows already in rows.jsonl")
    ap.add_argument("--retry-errors", action="store_true", help="with --resume, run rows that failed again")
    ap.add_argument("--budget-s", type=float, default=0.0, help="start no new step after this many seconds")
    ap.add_argument("--work", default=None, help="recordings and sorts (default OUTDIR/data)")
    ap.add_argument("--keep-data", action="store_true", help="keep the raw recordings and sorter scratch files")
    ap.add_argument("--workers", type=int, default=os.cpu_count(), help="generator processes")
    ap.add_argument("--peers", default=".peers", help="the installed peer harness")
    ap.add_argument("--command", default=None, help="the command line to record")
    a = ap.parse_args()
    a.cases = [c for c in a.cases.split(",") if c]
    a.seeds = [int(s) for s in a.seeds.split(",") if s]
    for c in a.cases:
        if c not in CASES:
            ap.error("unknown case %r (known: %s)" % (c, ",".join(CASES)))
    a.work = a.work or os.path.join(a.outdir, "data")
    return a


# --- processes -----------------------------------------------------------------------------------

def run(cmd, log, timeout):
    """Run cmd in its own process group with stdout+stderr to `log`; on timeout the whole group is
    killed (sort_ss.py's spikestream child too). Returns (exit code or 'timeout', seconds)."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            f.write("\ntimed out after %.0f s\n" % timeout)
            rc = "timeout"
    return rc, time.perf_counter() - t0


def tail(path, n=4, limit=600):
    """The last lines of a log, on one line, for a row's error."""
    try:
        with open(path, errors="replace") as f:
            text = " | ".join(l.strip() for l in f.read().splitlines()[-n:] if l.strip())
    except OSError:
        return ""
    return text if len(text) <= limit else "..." + text[-limit:]


def load_json(path):
    with open(path) as f:
        return json.load(f)


# --- recordings ----------------------------------------------------------------------------------

def case_b_extra(seed, units):
    """generate_ground_truth_recording options of case (b), drawn per unit from the seed."""
    rng = np.random.default_rng([seed, 0xB])
    rates = np.clip(rng.lognormal(np.log(B_RATE_MEDIAN_HZ), B_RATE_SIGMA, units), *B_RATE_CLIP)
    alpha = np.clip(rng.lognormal(np.log(B_ALPHA_MEDIAN), B_ALPHA_SIGMA, units), *B_ALPHA_CLIP)
    return {"upsample_factor": B_UPSAMPLE,
            "generate_sorting_kwargs": {"firing_rates": [round(float(r), 4) for r in rates],
                                        "refractory_period_ms": 4.0},
            "generate_templates_kwargs": {"unit_params": {"alpha": [round(float(x), 3) for x in alpha]}}}


def gen_command(a, case, seed, datadir):
    c = CASES[case]
    dur = round(c["duration"] * a.duration_scale, 3)
    common = ["--seed", str(seed), "--duration", str(dur), "--units", str(c["units"]), "--channels",
              str(c["channels"]), "--columns", str(c["columns"]), "--xpitch", str(c["xpitch"]), "--ypitch",
              str(c["ypitch"]), "--workers", str(max(1, a.workers))]
    if c["generator"] == "gen_drift.py":
        return [sys.executable, os.path.join(HERE, "gen_drift.py"), datadir] + common + ["--drift-um", str(c["drift_um"])]
    cmd = [sys.executable, os.path.join(a.peers, "gen.py"), datadir] + common
    if case == "b":
        cmd += ["--extra", json.dumps(case_b_extra(seed, c["units"]), separators=(",", ":"))]
    return cmd


def generate(a, case, seed, datadir):
    """The recording of (case, seed) in datadir, reused when an identical one is already there.
    Returns (gen.json dict, seconds, error)."""
    cmd = gen_command(a, case, seed, datadir)
    stamp = os.path.join(datadir, "generated_by.json")
    want = {"cmd": cmd[1:]}
    if os.path.exists(stamp) and os.path.exists(os.path.join(datadir, "rec.bin")):
        try:
            if load_json(stamp)["cmd"] == want["cmd"]:
                return load_json(os.path.join(datadir, "gen.json")), 0.0, None
        except (OSError, KeyError, ValueError):
            pass
    shutil.rmtree(datadir, ignore_errors=True)
    os.makedirs(datadir)
    rc, secs = run(cmd, datadir + ".gen.log", a.gen_timeout)
    if rc != 0:
        return None, secs, "generation failed (%s): %s" % (rc, tail(datadir + ".gen.log"))
    with open(stamp, "w") as f:
        json.dump(want, f)
    return load_json(os.path.join(datadir, "gen.json")), secs, None


def write_gt_nwb(datadir, gen):
    """Ground truth as an NWB-style units table that `compare` reads, with each unit's SNR and the
    time base in /acquisition (times in seconds; sample = round(t * rate) restores them exactly)."""
    import h5py
    z = np.load(os.path.join(datadir, "gt.npz"))
    times = np.asarray(z["times"], dtype=np.int64)
    labels = np.asarray(z["labels"]).astype(np.int64)
    ids = np.unique(np.asarray(z["unit_ids"]).astype(np.int64)) if "unit_ids" in z else np.unique(labels)
    snr = gen.get("snr_peak_over_noise", {})
    rate = float(gen.get("fs", RATE_HZ))
    order = np.lexsort((times, labels))              # by unit, then time: one run of spikes per unit
    times, labels = times[order], labels[order]
    ends = np.searchsorted(labels, ids, side="right")  # units without spikes keep an empty run
    path = os.path.join(datadir, "gt_units.nwb")
    with h5py.File(path, "w") as f:
        u = f.create_group("units")
        u["id"] = ids
        u["spike_times"] = times.astype(np.float64) / rate
        u["spike_times_index"] = ends.astype(np.int64)
        u["snr"] = np.array([float(snr.get(str(i), np.nan)) for i in ids])
        st = f.create_group("acquisition/ground_truth").create_dataset("starting_time", data=0.0)
        st.attrs["rate"] = rate
    return path


def write_trains_folder(npz, folder, rate):
    """A sorter's spike train (times, labels .npz) as the two vectors and params.py that `compare`
    reads from a phy-style folder."""
    z = np.load(npz)
    os.makedirs(folder, exist_ok=True)
    np.save(os.path.join(folder, "spike_times.npy"), np.asarray(z["times"], dtype=np.int64))
    np.save(os.path.join(folder, "spike_clusters.npy"), np.asarray(z["labels"], dtype=np.int64))
    with open(os.path.join(folder, "params.py"), "w") as f:
        f.write("sample_rate = %r\n" % float(rate))
    return folder


def drop_scratch(datadir):
    """The large files: the raw recording, sorter scratch copies and KlustaKwik feature text; spike
    trains, labels, logs and JSON stay."""
    for root, _, files in os.walk(datadir):
        for name in files:
            if name.endswith((".bin", ".dat")) or ".fet." in name or ".fmask." in name:
                os.remove(os.path.join(root, name))
    try:
        os.remove(os.path.join(datadir, "generated_by.json"))
    except OSError:
        pass


# --- sorting and scoring -------------------------------------------------------------------------

def sort(a, sorter, case, datadir):
    """Run one sorter through the harness. Returns (name of its spike train, sort seconds, process
    seconds, sorter info dict, error)."""
    if sorter == "spikestream":
        name = "ss_run"
        cmd = [sys.executable, os.path.join(a.peers, "sort_ss.py"), datadir, "run", a.ss] + a.ss_args.split()
    else:
        name = "ks4_default"
        cmd = [sys.executable, os.path.join(a.peers, "sort_ks4.py"), datadir, "default"]
        if CASES[case].get("ks4_settings"):
            cmd.append(json.dumps(CASES[case]["ks4_settings"]))
    for stale in (name + ".json", name + ".npz"):
        if os.path.exists(os.path.join(datadir, stale)):
            os.remove(os.path.join(datadir, stale))
    rc, secs = run(cmd, os.path.join(datadir, name + ".log.txt"), a.timeout)
    info_path = os.path.join(datadir, name + ".json")
    info = load_json(info_path) if os.path.exists(info_path) else {}
    if rc == "timeout":
        return name, None, secs, info, "timed out after %.0f s" % a.timeout
    if rc != 0 or info.get("rc", 0) != 0 or not os.path.exists(os.path.join(datadir, name + ".npz")):
        log = os.path.join(datadir, "ss_run.log") if sorter == "spikestream" else os.path.join(datadir, name + ".log.txt")
        return name, None, secs, info, "sort failed (exit %s): %s" % (info.get("rc", rc), tail(log))
    sort_s = info.get("wall_s") if sorter == "spikestream" else info.get("t_sort_s")
    return name, sort_s, secs, info, None


def spikestream_good_units(out_dir):
    """Ids of the sort's units labelled "good", or None when the output carries no such labels
    (every unit "unsorted"): from results.h5 /clusters when it has a label dataset, else phy's
    cluster_group.tsv."""
    import h5py
    labels = {}
    try:
        with h5py.File(os.path.join(out_dir, "results.h5"), "r") as f:
            g = f.get("clusters")
            for key in ("label", "group", "quality"):
                if g is not None and key in g and "id" in g:
                    vals = [v.decode() if isinstance(v, bytes) else str(v) for v in g[key][()]]
                    labels = dict(zip((int(i) for i in g["id"][()]), vals))
                    break
    except OSError:
        pass
    if not labels:
        tsv = os.path.join(out_dir, "phy", "cluster_group.tsv")
        if os.path.exists(tsv):
            with open(tsv) as f:
                for line in f.read().splitlines()[1:]:
                    parts = line.split("\t")
                    if len(parts) == 2 and parts[0].strip().lstrip("-").isdigit():
                        labels[int(parts[0])] = parts[1].strip()
    if not any(v in ("good", "mua") for v in labels.values()):
        return None
    return sorted(i for i, v in labels.items() if v == "good" and i != 0)


def compare(a, sorted_input, gt_nwb, json_out, exclude=None):
    cmd = [a.ss, "compare", sorted_input, gt_nwb, "--json", json_out, "--window-ms", str(WINDOW_MS)]
    if exclude:
        cmd += ["--exclude", exclude]
    if os.path.exists(json_out):
        os.remove(json_out)
    rc, _ = run(cmd, json_out + ".log", a.timeout)
    if rc != 0 or not os.path.exists(json_out):
        return None, "compare failed (%s): %s" % (rc, tail(json_out + ".log"))
    return load_json(json_out), None


def si_numbers(datadir, name, a):
    """score.py's SpikeInterface figures (0.4 ms), kept beside ours as a cross-check."""
    rc, _ = run([sys.executable, os.path.join(a.peers, "score.py"), datadir, name],
                os.path.join(datadir, name + "_score.log"), a.timeout)
    path = os.path.join(datadir, name + "_score.json")
    if rc != 0 or not os.path.exists(path):
        return {"error": "score.py failed (%s): %s" % (rc, tail(os.path.join(datadir, name + "_score.log")))}
    p = load_json(path)["delta_0.4ms"]
    s5 = p.get("snr_gt5", {})
    return dict(scorer=p.get("scorer", "own implementation (%s)" % p.get("scorer_error")),
                well_detected=p.get("n_well_detected"), well_detected_snr5=s5.get("n_well_detected"),
                n_gt_units_snr5=s5.get("n_units"), mean_accuracy_snr5=s5.get("mean_accuracy"),
                mean_accuracy=p.get("mean_accuracy"), false_positive_units=p.get("n_false_positive_units"),
                n_units=load_json(path).get("n_sorted_units"))


def score_row(cmp, good):
    """Our figures from compare's JSON: all units, and units with SNR > 5."""
    units, s = cmp["units"], cmp["summary"]
    hi = [u for u in units if u.get("snr") is not None and u["snr"] > SNR_MIN]
    wd5 = sum(1 for u in hi if u["sorted_unit"] is not None and u["accuracy"] >= WELL_DETECTED)
    row = dict(well_detected=s["well_detected"], n_gt_units_snr5=len(hi), well_detected_snr5=wd5,
               frac_well_detected_snr5=(wd5 / len(hi) if hi else None),
               mean_accuracy_snr5=(float(np.mean([u["accuracy"] for u in hi])) if hi else None),
               mean_accuracy=s["mean_accuracy"], false_positive_units=s["false_positive"],
               redundant_units=s["redundant"], overmerged_units=s["overmerged"], n_units=s["n_sorted_units"])
    if good is not None:
        fp = set(s.get("false_positive_units", []))
        row["false_positive_good_units"] = sum(1 for g in good if g in fp)
    return row


# --- rows and the document ----------------------------------------------------------------------

def row_key(r):
    return (r["case"], r["seed"], r["sorter"], r.get("duration_scale"))


def read_rows(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass   # a line cut off by a killed run
    return rows


def latest_rows(rows):
    last = {}
    for r in rows:
        last[row_key(r)] = r
    return list(last.values())


def device_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.strip().splitlines()
        if out and out[0].strip():
            return out[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.get_device_name()
    except Exception:
        pass
    return "cpu"


def commit_id(ss):
    if os.environ.get("SS_COMMIT"):
        return os.environ["SS_COMMIT"]
    try:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=20)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:   # "spikestream 0.1.0 (abc1234)"
        v = subprocess.run([ss, "--version"], capture_output=True, text=True, timeout=20).stdout
        return v.split("(")[1].split(")")[0].strip() if "(" in v else "unknown"
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def sorter_failed(r):
    """A sort that failed or timed out scores zero; a failed generation or scoring is left out."""
    return r.get("error") and r.get("error_stage") == "sort"


def frac5(r):
    return 0.0 if sorter_failed(r) else r.get("frac_well_detected_snr5")


def acc5(r):
    return 0.0 if sorter_failed(r) else r.get("mean_accuracy_snr5")


def summary(rows):
    def pick(case, sorter):
        return [r for r in rows if r["case"] == case and r["sorter"] == sorter
                and (not r.get("error") or sorter_failed(r))]

    def minimum(vals):
        vals = [v for v in vals if v is not None]
        return min(vals) if vals else None

    ss_a, ks_a = pick("a", "spikestream"), pick("a", "kilosort4")
    at_least = total = 0
    for case in ("b", "c", "d"):
        ks = {r["seed"]: r for r in pick(case, "kilosort4")}
        for r in pick(case, "spikestream"):
            k = ks.get(r["seed"])
            if k is None:
                continue
            total += 1
            if not sorter_failed(r):
                at_least += r["well_detected"] >= (0 if sorter_failed(k) else k["well_detected"])
    fp_good = [r["false_positive_good_units"] / r["n_good_units"] for r in ss_a
               if r.get("n_good_units") and r.get("false_positive_good_units") is not None]
    return {"min_frac_well_detected_snr5_a": minimum(frac5(r) for r in ss_a),
            "min_mean_accuracy_snr5_a": minimum(acc5(r) for r in ss_a),
            "ks4_min_frac_well_detected_snr5_a": minimum(frac5(r) for r in ks_a),
            "cases_seeds_at_least_ks4": at_least if total else None,
            "cases_seeds_total": total,
            "max_false_positive_frac_good_a": max(fp_good) if fp_good else None}


DEFINITIONS = {
    "scoring": "spikestream compare: 0.4 ms window, Hungarian assignment at agreement >= 0.5, well detected = "
               "accuracy >= 0.8, false-positive units as SpikeInterface's GroundTruthComparison; ground truth "
               "from the generator (gt_units.nwb with per-unit SNR); `si` holds the harness's score.py "
               "(SpikeInterface compare_sorter_to_ground_truth) on the same spike trains",
    "snr": "template peak x gain / median MAD noise of the written int16 data (the generator scripts' "
           "snr_peak_over_noise); SNR>5 figures are over ground-truth units with SNR > 5",
    "wall_s": "spikestream: the `sort` process from start to exit (sort_ss.py); Kilosort4: run_kilosort "
              "alone, without Python imports and CUDA start (sort_ks4.py); process_s: the harness script's "
              "whole process for both",
    "spikestream_units": "cluster 0 (noise) left out; n_good_units null while the output labels no unit good",
    "summary": "min_* over the seeds of case a (spikestream, or Kilosort4 for ks4_*); a sort that failed or "
               "timed out counts as 0; cases_seeds_at_least_ks4 counts the (case, seed) pairs of b-d where "
               "spikestream's well-detected count (all units) is >= Kilosort4's on the same recording (a failed "
               "spikestream sort never counts, a failed Kilosort4 sort counts as 0); cases_seeds_total: the pairs "
               "with both rows; "
               "max_false_positive_frac_good_a: the largest fraction, over seeds of case a, of spikestream's "
               "good units that are false-positive units (null until units carry labels)",
}


def write_document(a, rows, path):
    rows = sorted(latest_rows(rows), key=lambda r: (r["case"], r["seed"], SORTERS.index(r["sorter"])))
    doc = {"bench": "accuracy", "command": a.command or " ".join(sys.argv), "device": device_name(),
           "commit": commit_id(a.ss), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": dict(cpus=os.cpu_count(), python=sys.version.split()[0], numpy=np.__version__),
           "settings": dict(cases=a.cases, seeds=a.seeds, duration_scale=a.duration_scale, ss_args=a.ss_args,
                            kilosort4=not a.no_ks4, timeout_s=a.timeout, gen_timeout_s=a.gen_timeout),
           "cases": {k: CASES[k]["desc"] for k in CASES}, "definitions": DEFINITIONS,
           "rows": rows, "summary": summary(rows)}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)
    return doc


# --- the run -------------------------------------------------------------------------------------

def one_row(a, case, seed, sorter, datadir, gen, gen_s, gt_nwb):
    row = dict(case=case, seed=seed, sorter=sorter, duration_scale=a.duration_scale,
               duration_s=gen.get("duration_s"), n_channels=CASES[case]["channels"],
               n_gt_units=gen.get("n_gt_units"), n_gt_spikes=gen.get("n_gt_spikes"),
               n_gt_units_snr5_generator=sum(1 for v in gen.get("snr_peak_over_noise", {}).values() if v > SNR_MIN),
               generate_s=round(gen_s, 2),
               sorter_settings=(a.ss_args if sorter == "spikestream" else CASES[case].get("ks4_settings", {})))
    name, sort_s, proc_s, info, err = sort(a, sorter, case, datadir)
    row.update(wall_s=sort_s, process_s=round(proc_s, 2), n_good_units=None)
    if sorter == "kilosort4":
        row["ks4_good_units"] = info.get("n_good_units")
    if err:
        row.update(error=err, error_stage="sort")
        return row
    good = spikestream_good_units(os.path.join(datadir, name)) if sorter == "spikestream" else None
    if sorter == "spikestream":
        sorted_input, exclude = os.path.join(datadir, name, "results.h5"), "0"
    else:
        sorted_input, exclude = write_trains_folder(os.path.join(datadir, name + ".npz"),
                                                    os.path.join(datadir, name + "_trains"), gen.get("fs", RATE_HZ)), None
    cmp, err = compare(a, sorted_input, gt_nwb, os.path.join(datadir, name + "_compare.json"), exclude)
    if err:
        row.update(error=err, error_stage="score")
    else:
        row.update(score_row(cmp, good))
        if good is not None:
            row["n_good_units"] = len(good)
    row["si"] = si_numbers(datadir, name, a)
    return row


def main():
    a = parse_args()
    t_start = time.perf_counter()
    os.makedirs(a.outdir, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    rows_path, doc_path = os.path.join(a.outdir, "rows.jsonl"), os.path.join(a.outdir, "accuracy.json")
    if not os.access(a.ss, os.X_OK):
        sys.exit("accuracy: %s is not an executable spikestream" % a.ss)
    for script in ("gen.py", "sort_ss.py", "sort_ks4.py", "score.py"):
        if not os.path.exists(os.path.join(a.peers, script)):
            sys.exit("accuracy: %s/%s missing (install the peer harness in .peers first)" % (a.peers, script))
    sorters = ["spikestream"] + ([] if a.no_ks4 else ["kilosort4"])
    if "kilosort4" in sorters:
        import importlib.util
        for mod in ("torch", "kilosort"):
            if importlib.util.find_spec(mod) is None:
                sys.exit("accuracy: Kilosort4 needs the Python module %r, which is not importable here "
                         "(torch is on the GPU machine; source .peers/env.sh), or pass --no-ks4" % mod)
    rows = read_rows(rows_path)
    if not a.resume and rows:
        os.replace(rows_path, rows_path + ".old")
        rows = []
    done = {row_key(r) for r in rows if not (a.retry_errors and r.get("error"))}

    def out_of_budget():
        return a.budget_s > 0 and time.perf_counter() - t_start > a.budget_s

    stopped = False
    for case in a.cases:
        for seed in a.seeds:
            todo = [s for s in sorters if (case, seed, s, a.duration_scale) not in done]
            if not todo:
                continue
            if out_of_budget():
                stopped = True
                break
            datadir = os.path.join(a.work, "%s_s%d" % (case, seed))
            gen, gen_s, err = generate(a, case, seed, datadir)
            gt_nwb = write_gt_nwb(datadir, gen) if gen else None
            for sorter in todo:
                if out_of_budget():
                    stopped = True
                    break
                if err:
                    row = dict(case=case, seed=seed, sorter=sorter, duration_scale=a.duration_scale,
                               error=err, error_stage="generate")
                else:
                    row = one_row(a, case, seed, sorter, datadir, gen, gen_s, gt_nwb)
                rows.append(row)
                with open(rows_path, "a") as f:
                    f.write(json.dumps(row) + "\n")
                write_document(a, rows, doc_path)
                brief = {k: row.get(k) for k in ("wall_s", "well_detected", "n_gt_units", "well_detected_snr5",
                                                 "n_gt_units_snr5", "mean_accuracy_snr5", "false_positive_units",
                                                 "n_units", "error")}
                print("[%s seed %d %s] %s" % (case, seed, sorter, json.dumps(brief)), flush=True)
            if not a.keep_data and not stopped and gen:
                drop_scratch(datadir)
            if stopped:
                break
        if stopped:
            break
    doc = write_document(a, rows, doc_path)
    if stopped:
        print("accuracy: time budget of %.0f s reached; run again with --resume for the rest" % a.budget_s)
    print("summary:", json.dumps(doc["summary"]))
    print("wrote", doc_path)


if __name__ == "__main__":
    main()
