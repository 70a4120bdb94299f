#!/usr/bin/env bash
# run_live.sh — the live-mode benchmark (issue #10): build bench_live and run it; writes OUT/live.json.
# Each case replays a simulated 30 kHz recording of RECORDING_S seconds (32 channels, or a generated
# two-column probe) in real time over a UNIX socket in B-ms blocks (latency p50/p99/max, overruns),
# after an unpaced pass (× real time, which also warms the device); each model comes from a `sort` of
# its recording. A case's paced replay may be longer than the recording (it loops).
# usage: bench/run_live.sh [OUT_DIR] (default $OUT, else bench/results)
#   CASES (default: the issue's acceptance set, see below: channels:block_ms:cpu|cuda[:paced seconds]),
#   RECORDING_S (default 30), SORT_DEVICE (default cpu), BUILD_DIR (default /tmp/b),
#   BUILD_TYPE (default RelWithDebInfo)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-bench/results}}
build=${BUILD_DIR:-/tmp/b}
mkdir -p "$out"
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build "$build" -j"$(nproc)" --target bench_live
# the acceptance case (32 ch, 1 ms, GPU) over a 10-minute replay, the other GPU block sizes, the CPU
# 5 ms case, then the wider probes at 1 ms
cases=${CASES:-32:1:cuda:600,32:2:cuda,32:5:cuda,32:10:cuda,32:5:cpu,128:1:cuda,384:1:cuda,1024:1:cuda}
"$build/bench/bench_live" --seconds "${RECORDING_S:-30}" --cases "$cases" --sort-device "${SORT_DEVICE:-cpu}" \
  --out "$out/live.json" | tee "$out/bench_live.log"
