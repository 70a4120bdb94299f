"""pipeline_cases.py — the cases of bench/run_pipeline.sh (see there): simulate, sort on each device,
compare, and write the JSON (bench/README.md layout: bench, date, machine, cases, summary)."""
import datetime
import json
import os
import platform
import re
import resource
import subprocess
import sys
import threading
import time

UNITS_PER_32_CHANNELS = 20   # the easy preset's density, kept on the larger probes
ROW_PITCH_UM = 20.0          # vertical pitch of the generated probes (Neuropixels-like)


def probe_json(n_channels, path):
    """A probe of n channels (adjacency from spikestream's radius rule)."""
    if n_channels <= 128:  # as params/probes/two_column_32.json, longer
        pos = [[20.0 * (c % 2), ROW_PITCH_UM / 2 * c] for c in range(n_channels)]
    else:  # Neuropixels 1.0: pairs of contacts per row, alternate rows shifted
        xs = [[43.0, 11.0], [59.0, 27.0]]
        pos = [[xs[(c // 2) % 2][c % 2], ROW_PITCH_UM * (c // 2)] for c in range(n_channels)]
    doc = {"specification": "probeinterface", "version": "0.2.21",
           "probes": [{"ndim": 2, "si_units": "um",
                       "annotations": {"name": "bench %d-channel staggered" % n_channels, "manufacturer": "spikestream"},
                       "contact_positions": pos, "device_channel_indices": list(range(n_channels)),
                       "contact_ids": [str(c) for c in range(n_channels)]}]}
    with open(path, "w") as f:
        json.dump(doc, f)


SORT_TIMEOUT_S = float(os.environ.get("SORT_TIMEOUT", "300"))  # a case that takes longer is recorded as such


def run(cmd, log, timeout=None):
    with open(log, "w") as f:
        try:
            return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            f.write("\ntimed out after %.0f s\n" % timeout)
            return 124


class GpuMemSampler:
    """Device-wide used memory from nvidia-smi every 50 ms; peak above the level before the run."""

    def __init__(self):
        self.peak = None
        self.base = self.read()
        self.stop = False
        self.thread = threading.Thread(target=self.loop, daemon=True)

    @staticmethod
    def read():
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                                 capture_output=True, text=True, timeout=5).stdout
            return float(out.strip().splitlines()[0])
        except Exception:
            return None

    def loop(self):
        while not self.stop:
            v = self.read()
            if v is not None and self.base is not None:
                self.peak = max(self.peak or 0.0, v - self.base)
            time.sleep(0.05)

    def __enter__(self):
        if self.base is not None:
            self.thread.start()
        return self

    def __exit__(self, *a):
        self.stop = True
        if self.thread.is_alive():
            self.thread.join()


def num(pat, text, cast=float):
    m = re.search(pat, text)
    return cast(m.group(1)) if m else None


def sort_case(ss, work, name, rec, probe, device):
    out = os.path.join(work, "sorted_%s_%s" % (name, device))
    log = out + ".log"
    cmd = [ss, "sort", rec, "-o", out, "--device", device, "--probe", probe]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.monotonic()
    with GpuMemSampler() as mem:
        rc = run(cmd, log, SORT_TIMEOUT_S)
    wall = time.monotonic() - t0
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    text = open(log).read()
    case = {"device": device, "command": " ".join(cmd[1:]), "exit_code": rc, "wall_s": wall,
            "peak_host_mib": rss_kib / 1024.0 if rss_kib > before else None,
            "peak_host_note": "max RSS of the largest child so far: exact when this run is the largest",
            "peak_device_mib": mem.peak if device == "cuda" else None,
            "spikes": num(r"spikes:\s+(\d+)", text, int),
            "clusters": num(r", (\d+) after", text, int),
            "em_iterations": num(r"masked EM \((\d+) iterations\)", text, int),
            "stages_s": {"frontend": num(r"front end ([0-9.]+) s", text), "mask_em": num(r"masked EM ([0-9.]+) s,", text),
                         "merge": num(r"merge ([0-9.]+) s", text), "outputs": num(r"outputs ([0-9.]+) s", text),
                         "sort_total": num(r"total:\s+([0-9.]+) s", text)}}
    m = re.search(r"front end \(GPU\): (.*)", text)
    if m:
        case["gpu_frontend_busy_s"] = {k: float(v) for v, k in re.findall(r"([0-9.]+) s (\w+)", m.group(1))}
    if rc == 0:
        cmp_log = out + ".compare"
        run([ss, "compare", os.path.join(out, "results.h5"), rec, "--exclude", "0"], cmp_log)
        ctext = open(cmp_log).read()
        case["compare"] = {"well_detected": num(r"well detected[^:]*:\s+(\d+)", ctext, int),
                           "of": num(r"well detected[^:]*:\s+\d+ of (\d+)", ctext, int),
                           "table": ctext.strip().splitlines()}
    else:
        case["log_tail"] = text.strip().splitlines()[-5:]
    return case


def main():
    ss, work, seed, gpu_cases, cpu_cases, out_json = sys.argv[1:7]
    want = {}
    for dev, spec in (("cuda", gpu_cases), ("cpu", cpu_cases)):
        for item in spec.split():
            ch, dur = (int(v) for v in item.split(":"))
            want.setdefault((ch, dur), []).append(dev)
    cases = []
    for (ch, dur), devices in sorted(want.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        name = "%dch_%ds" % (ch, dur)
        probe = os.path.join(work, "probe_%d.json" % ch)
        probe_json(ch, probe)
        rec = os.path.join(work, "sim_%s.nwb" % name)
        units = UNITS_PER_32_CHANNELS * ch // 32
        t0 = time.monotonic()
        rc = run([ss, "simulate", "-o", rec, "--preset", "easy", "--duration", str(dur), "--seed", seed, "--probe", probe,
                  "--units", str(units), "-q"], rec + ".log")
        sim_s = time.monotonic() - t0
        if rc != 0:
            cases.append({"case": name, "error": open(rec + ".log").read()[-400:]})
            continue
        for dev in devices:
            c = sort_case(ss, work, name, rec, probe, dev)
            c.update({"case": name + "_" + dev, "channels": ch, "recording_s": dur, "rate_hz": 30000, "units": units,
                      "simulate_s": sim_s, "bytes": 2 * ch * 30000 * dur})
            if c["exit_code"] == 0:
                c["realtime_factor"] = dur / c["wall_s"]
            cases.append(c)
            print(json.dumps({k: c.get(k) for k in ("case", "wall_s", "realtime_factor", "spikes", "clusters")}),
                  flush=True)
        os.remove(rec)  # disk: the 60-minute 32-channel file alone is 6.9 GB
    summary = {}
    for c in cases:
        if c.get("case") == "32ch_3600s_cuda" and c.get("exit_code") == 0:
            summary["realtime_factor_60min_32ch"] = c["realtime_factor"]
            summary["wall_s_60min_32ch"] = c["wall_s"]
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.strip() if os.path.exists("/usr/bin/nvidia-smi") else ""
    doc = {"bench": "pipeline", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"host": platform.node(), "cpus": os.cpu_count(), "gpu": gpu},
           "seed": int(seed), "cases": cases, "summary": summary}
    tmp = out_json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, out_json)
    print("wrote", out_json, json.dumps(summary))


if __name__ == "__main__":
    main()
