#!/usr/bin/env bash
# run_mask_em.sh — masked EM CPU vs CUDA on the GPU machine, in one call, from the
# repository root: builds (RelWithDebInfo, sm_90) in $BUILD (default /tmp/b), runs the GPU test
# group for masked EM and the CPU test (ctest -V, logs in $OUT), then the benchmark pieces in order
# of importance, each within what is left of $DEADLINE seconds (so a short lease still returns the
# important numbers):
#   1. one full iteration at N = BIG (10⁶), K = 100: CPU 1 thread, CPU all threads, GPU phases;
#   2. complete runs at N = 10⁴ and 10⁵ on the three backends (ARI GPU vs CPU);
#   3. the complete GPU run at N = BIG;
#   4. the published study's cases: `simulate` 10/30/60/120 s (32 channels, defaults), `detect`,
#      then `cluster BASE 1 --device cuda` timed against the recording length.
# Everything is merged into $OUT/mask_em.json (default OUT: bench/results); the parts and minor logs
# stay in $WORK, so that $OUT holds at most eight files (what the GPU machine returns).
#   usage: bench/run_mask_em.sh [BIG_N]
set -uo pipefail
BUILD=${BUILD:-/tmp/b}
OUT=${OUT:-bench/results}
BIG=${1:-1000000}
DEADLINE=${DEADLINE:-340}   # seconds for the whole script; each step gets at most what is left
T_TEST=${T_TEST:-110}       # per-step limits (s)
T_ITER=${T_ITER:-120}
T_SIZES=${T_SIZES:-90}
T_FULL=${T_FULL:-60}
T_PUB=${T_PUB:-60}
LENGTHS=${LENGTHS:-"10 30 60 120"}
WORK=${WORK:-/tmp/mask_em_published}
mkdir -p "$OUT" "$WORK"
OUT=$(cd "$OUT" && pwd)

# limit STEP_MAX: seconds for a step, within what is left of the deadline (0: skip)
limit() {
  local left=$((DEADLINE - SECONDS)) t=$1
  ((t > left)) && t=$left
  ((t < 5)) && t=0
  echo "$t"
}
step() { # step NAME MAX cmd...: run cmd under the time left; logs to $OUT/NAME.log
  local name=$1 max=$2 t
  shift 2
  t=$(limit "$max")
  if ((t == 0)); then
    echo "== $name: skipped (deadline)" | tee -a "$OUT/steps.txt"
    return 0
  fi
  local t0=$SECONDS
  timeout "$t" "$@" > "${LOGS:-$OUT}/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc $rc, $((SECONDS - t0)) s (limit $t s)" | tee -a "$OUT/steps.txt"
  return 0
}

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 > "$WORK/configure.log" 2>&1 ||
  { tail -20 "$WORK/configure.log"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" --target gpu_test_mask_em test_mask_em spikestream bench_mask_em \
  > "$OUT/build.log" 2>&1 || { grep -B2 -A8 -E "error" "$OUT/build.log" | head -80; exit 1; }
echo "== build: done at $SECONDS s" | tee -a "$OUT/steps.txt"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$OUT/steps.txt"
SS=$BUILD/spikestream

# the published cases' recordings and features (CPU only) while the GPU tests run
(
  for L in $LENGTHS; do
    "$SS" simulate -o "$WORK/rec$L.nwb" --preset easy --duration "$L" -q > /dev/null 2>&1 &&
      "$SS" detect "$WORK/rec$L.nwb" -o "$WORK/det$L" --overwrite -q > /dev/null 2>&1 || echo "prepare $L s failed"
  done
) > "$WORK/published_prepare.log" 2>&1 &
PREP=$!

step gpu_test_mask_em "$T_TEST" bash -c "cd '$BUILD' && ctest -V -R '^gpu_test_mask_em\$'"
step test_mask_em 60 bash -c "cd '$BUILD' && ctest -V -R '^test_mask_em\$'"
grep -E "\[ +(OK|FAILED|PASSED|SKIPPED) +\]|tests passed|trace:|ARI|iteration [0-9]+: k" "$OUT/gpu_test_mask_em.log" | tail -40
grep -E "tests passed|Failed" "$OUT/test_mask_em.log" | tail -3
wait "$PREP"
echo "== published prepare: done at $SECONDS s" | tee -a "$OUT/steps.txt"

B=$BUILD/bench/bench_mask_em
step bench_iteration "$T_ITER" "$B" -s 0 -b "$BIG" -o "$WORK/mask_em_iter.json"
grep "bench:" "$OUT/bench_iteration.log"
step bench_sizes "$T_SIZES" "$B" -s 10000,100000 -b 0 -o "$WORK/mask_em_sizes.json"
grep "bench:" "$OUT/bench_sizes.log" | grep -v "masked EM"
step bench_full "$T_FULL" "$B" -F -b "$BIG" -o "$WORK/mask_em_full.json"
grep -E "bench:|block part" "$OUT/bench_full.log"

# published cases: time the cluster stage (the whole `cluster` command, CUDA context included)
LOGS=$WORK step published "$T_PUB" python3 - "$SS" "$WORK" "$WORK/mask_em_published.json" $LENGTHS <<'PY'
import json, subprocess, sys, time
ss, work, out, lengths = sys.argv[1], sys.argv[2], sys.argv[3], [int(x) for x in sys.argv[4:]]
cases = []
for L in lengths:
    base = f"{work}/det{L}/rec{L}"
    try:
        n = sum(1 for _ in open(base + ".fet.1")) - 1
    except OSError:
        print(f"{L} s: no features"); continue
    runs = []
    for _ in range(2):
        t0 = time.perf_counter()
        r = subprocess.run([ss, "cluster", base, "1", "--device", "cuda", "-q"], capture_output=True, text=True)
        runs.append(time.perf_counter() - t0)
        if r.returncode != 0:
            print(f"{L} s: cluster failed: {r.stderr}"); break
    if r.returncode != 0: continue
    k = int(open(base + ".clu.1").readline())
    t = max(runs)  # the slower of two runs
    c = {"case": f"published_32ch_{L}s", "backend": "cuda", "duration_s": L, "spikes": n, "features": 96,
         "cluster_stage_s": t, "cluster_stage_runs_s": runs, "clusters_clu_header": k, "realtime_factor": L / t}
    print(f"{L} s recording: {n} spikes, cluster --device cuda {t:.3f} s (runs {runs}), {k} clusters, "
          f"{L / t:.1f}x real time")
    cases.append(c)
doc = {"cases": cases, "summary": {}}
if cases:
    doc["summary"]["cluster_stage_realtime_factor_min"] = min(c["realtime_factor"] for c in cases)
json.dump(doc, open(out, "w"), indent=2)
PY
cat "$WORK/published.log"

# merge: the iteration document first (its device string), then the others' cases and summaries
python3 - "$WORK" "$OUT" <<'PY'
import json, os, sys
work, out = sys.argv[1], sys.argv[2]
docs = []
for name in ["mask_em_iter", "mask_em_sizes", "mask_em_full", "mask_em_published"]:
    p = os.path.join(work, name + ".json")
    if os.path.exists(p):
        docs.append(json.load(open(p)))
if not docs:
    sys.exit("no benchmark document")
main = next((d for d in docs if "device" in d), docs[0])
merged = {k: v for k, v in main.items() if k not in ("cases", "summary")}
merged["cases"], merged["summary"] = [], {}
for d in docs:
    merged["cases"] += d.get("cases", [])
    merged["summary"].update(d.get("summary", {}))
json.dump(merged, open(os.path.join(out, "mask_em.json"), "w"), indent=2)
print("summary:", json.dumps(merged["summary"], indent=1))
PY
echo "== all: $SECONDS s" | tee -a "$OUT/steps.txt"
