#!/usr/bin/env bash
# run_knn.sh — the KNN benchmark on the GPU machine: build, bench_knn, the peers (torch, scikit-learn,
# digits), merged into OUT/knn.json. usage: bench/run_knn.sh [OUT_DIR] (default $OUT, else bench/results)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-bench/results}}
build=${BUILD_DIR:-/tmp/b}
mkdir -p "$out"
# RelWithDebInfo (-O2) by default: Release (-O3) currently trips a maybe-uninitialized warning in params/probe.c
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$build" -j16 --target spikestream bench_knn
# KNN_BENCH_ARGS: extra bench_knn options (--no-cpu, --no-chunks, --grid-only); KNN_PEERS=0 skips the peers
# (torch, scikit-learn, digits) and writes our numbers alone to OUT/knn.json.
"$build/bench/bench_knn" "$out/knn_ours.json" ${KNN_BENCH_ARGS:-} | tee "$out/bench_knn.log"
if [ "${KNN_PEERS:-1}" = 1 ]; then
  python3 bench/knn_peers.py "$out/knn_ours.json" "$out/knn.json" "$build/spikestream" | tee "$out/knn_peers.log"
else
  cp "$out/knn_ours.json" "$out/knn.json"
fi
