#!/usr/bin/env bash
# End-to-end `spikestream sort` speed as a multiple of real time on a simulated recording (default
# 600 s, 32 channels, 30 kHz, simulate's easy preset otherwise: the recorded results' workload), on
# this machine's CPU. Adds the case
# "sort_end_to_end" and the summary key sort_realtime_factor_10min_cpu (or _5min_ with DURATION=300)
# to bench/results/mask_em_cpu.json, keeping everything else in it.
# usage: bench/run_sort.sh [BUILD_DIR]   (env: DURATION=600 SEED=1 THREADS=all WORK=/tmp/ss_sort_bench)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
ss=$build/spikestream
duration=${DURATION:-600}
seed=${SEED:-1}
work=${WORK:-/tmp/ss_sort_bench}
threads=${THREADS:-}
mkdir -p "$work"
"$ss" simulate -o "$work/sim.nwb" --preset easy --duration "$duration" --seed "$seed" --quiet | head -n 1
"$ss" sort "$work/sim.nwb" -o "$work/sorted" --overwrite ${threads:+--threads "$threads"} -q | tee "$work/summary.txt"
"$ss" compare "$work/sorted/results.h5" "$work/sim.nwb" --exclude 0 | tail -n 4 | tee "$work/compare.txt"
python3 - "$work/summary.txt" "$work/compare.txt" "$duration" bench/results/mask_em_cpu.json <<'PY'
import json, os, re, sys, datetime
summary, compare, duration, out = open(sys.argv[1]).read(), open(sys.argv[2]).read(), float(sys.argv[3]), sys.argv[4]
num = lambda pat, text: float(re.search(pat, text).group(1))
total = num(r"total:\s+([0-9.]+) s", summary)
case = {
    "case": "sort_end_to_end",
    "recording_s": duration,
    "channels": 32,
    "rate_hz": 30000,
    "threads": int(num(r"on (\d+) CPU threads", summary)),
    "spikes": int(num(r"spikes:\s+(\d+)", summary)),
    "clusters_raw": int(num(r"clusters:\s+(\d+) from masked EM", summary)),
    "clusters": int(num(r", (\d+) after", summary)),
    "em_iterations": int(num(r"masked EM \((\d+) iterations\)", summary)),
    "frontend_s": num(r"front end ([0-9.]+) s", summary),
    "mask_em_s": num(r"masked EM ([0-9.]+) s,", summary),
    "merge_s": num(r"merge ([0-9.]+) s", summary),
    "outputs_s": num(r"outputs ([0-9.]+) s", summary),
    "total_s": total,
    "realtime_factor": duration / total,
    "well_detected": compare.strip().splitlines()[0],
    "date": datetime.date.today().isoformat(),
    "note": "one run (not a median: a 10-minute sort is long on 2 cores); simulate --preset easy, seed %s" % os.environ.get("SEED", "1"),
}
doc = json.load(open(out)) if os.path.exists(out) else {"bench": "mask_em_cpu", "cases": [], "summary": {}}
doc["cases"] = [c for c in doc.get("cases", []) if c.get("case") != "sort_end_to_end"] + [case]
key = "sort_realtime_factor_%dmin_cpu" % round(duration / 60)
doc.setdefault("summary", {})[key] = case["realtime_factor"]
tmp = out + ".tmp"
with open(tmp, "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
os.replace(tmp, out)
print("%s = %.2f (%s)" % (key, case["realtime_factor"], out))
PY
