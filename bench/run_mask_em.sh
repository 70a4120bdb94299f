#!/usr/bin/env bash
# run_mask_em.sh — masked EM CPU vs CUDA benchmark on the GPU machine (issue 6). From the repository
# root: builds bench_mask_em and gpu_test_mask_em in $BUILD (default /tmp/b), runs the GPU test
# group for masked EM, then the benchmark; logs and the JSON go to $OUT (default bench/results).
#   usage: bench/run_mask_em.sh [BIG_N]      (BIG_N: the per-iteration / complete-run size, 10^6)
set -euo pipefail
BUILD=${BUILD:-/tmp/b}
OUT=${OUT:-bench/results}
BIG=${1:-1000000}
T_TEST=${T_TEST:-300}   # time limits (s) of the test, the benchmark and the complete large run
T_BENCH=${T_BENCH:-400}
T_FULL=${T_FULL:-300}
mkdir -p "$OUT"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$BUILD" -j16 --target bench_mask_em gpu_test_mask_em spikestream 2>&1 | tail -3
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
(cd "$BUILD" && timeout "$T_TEST" ctest -V -R 'gpu_test_mask_em') 2>&1 | grep -v "masked EM (cuda): iteration" | tee "$OUT/gpu_test.log" || true
timeout "$T_BENCH" "$BUILD/bench/bench_mask_em" -b "$BIG" -o "$OUT/mask_em.json" 2>&1 | grep -v "masked EM.*: iteration" | tee "$OUT/bench.log" || true
timeout "$T_FULL" "$BUILD/bench/bench_mask_em" -F -b "$BIG" -o "$OUT/mask_em_full.json" 2>&1 | tee "$OUT/bench_full.log" | grep -v "masked EM (cuda): iteration" || true
# the complete large run goes into the main document (summary key gpu_total_s_n1e6)
python3 - "$OUT/mask_em.json" "$OUT/mask_em_full.json" <<'PY' || true
import json, sys
main, full = sys.argv[1], sys.argv[2]
a = json.load(open(main)); b = json.load(open(full))
a["cases"] += b["cases"]; a["summary"].update(b["summary"])
json.dump(a, open(main, "w"), indent=2)
PY
