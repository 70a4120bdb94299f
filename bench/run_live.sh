#!/usr/bin/env bash
# run_live.sh — the live-mode benchmark (issue #10): build bench_live and run it; writes OUT/live.json.
# Each case replays SECONDS of a simulated 30 kHz recording (32 channels, and 128 on a generated
# two-column probe) in real time over a UNIX socket in blocks of 1, 2, 5 and 10 ms (latency
# p50/p99/max, overruns), then unpaced (× real time); each model comes from a `sort` of its recording.
# usage: bench/run_live.sh [OUT_DIR] (default $OUT, else bench/results)
#   SECONDS_PER_CASE (default 30), BLOCKS (default 1,2,5,10), CHANNELS (default 32,128), DEVICE (default cpu; cuda once the GPU path exists),
#   BUILD_DIR (default /tmp/b), BUILD_TYPE (default RelWithDebInfo)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-bench/results}}
build=${BUILD_DIR:-/tmp/b}
mkdir -p "$out"
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build "$build" -j"$(nproc)" --target bench_live
"$build/bench/bench_live" --seconds "${SECONDS_PER_CASE:-30}" --blocks "${BLOCKS:-1,2,5,10}" --channels "${CHANNELS:-32,128}" \
  --device "${DEVICE:-cpu}" --out "$out/live.json" | tee "$out/bench_live.log"
