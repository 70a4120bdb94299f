#!/usr/bin/env bash
# run_live.sh — the live-mode benchmark: build bench_live and run it; writes OUT/live.json.
# Each case replays a simulated 30 kHz recording of RECORDING_S seconds (32 channels, or a generated
# two-column probe) over a UNIX socket in B-ms blocks (latency p50/p99/max, overruns), after an
# unpaced pass (× real time, which also warms the device); each model comes from a `sort` of its
# recording. A case's paced replay may be longer than the recording (it loops) and may be sent faster
# than real time (its fifth field, or SPEED): the overrun threshold stays one block, so a speed above 1
# is strictly harder than real time and lets the 10-minute acceptance replay fit a 10-minute device call.
# usage: bench/run_live.sh [OUT_DIR] (default $OUT, else bench/results)
#   CASES (default: the issue's acceptance set, see below: channels:block_ms:cpu|cuda[:paced seconds[:speed]]),
#   RECORDING_S (default 15), SORT_DEVICE (default cpu), SPEED (default 1), UNPACED_S (seconds of the
#   unpaced pass, default 5; 0 = the whole recording), GPU_WAIT (spin|sync, default spin),
#   REALTIME (a SCHED_FIFO priority for the pushing thread, 0 = lowest; unset = normal scheduling),
#   READER (block|spin: how the pushing thread waits for the next block, default block), SENDER
#   (sleep|spin: how the sender waits until a block is due, default sleep), PIN (a CPU for the pushing
#   thread during the paced loop, or a list, one per worker; unset = not pinned), SENDER_PIN (a CPU for the sender thread; unset = not pinned),
#   WORKERS (with READER=spin: pushing threads taking turns, drivers/live_workers.h; default 1; PIN may list
#   one CPU per worker, e.g. 3,7), SENDER_WORKERS (with SENDER=spin: sending threads taking turns; default 1;
#   SENDER_PIN may list one CPU per sending thread), REPLICAS (engines pushing every block, drivers/live_replicas.h;
#   PIN lists one CPU per replica),
#   BUILD_DIR (default /tmp/b), BUILD_TYPE (default Release)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-bench/results}}
build=${BUILD_DIR:-/tmp/b}
mkdir -p "$out"
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" >/dev/null
cmake --build "$build" -j"$(nproc)" --target bench_live
# the acceptance case first (32 ch, 1 ms, GPU, a 10-minute replay sent at 1.25x: 480 s of wall time),
# then the other GPU block sizes, the CPU 5 ms case and the wider probes at 1 ms
cases=${CASES:-32:1:cuda:600:1.25,32:2:cuda:8,32:5:cuda:8,32:10:cuda:8,32:5:cpu:10,128:1:cuda:10,384:1:cuda:8,1024:1:cuda:8}
"$build/bench/bench_live" --seconds "${RECORDING_S:-15}" --cases "$cases" --sort-device "${SORT_DEVICE:-cpu}" \
  --speed "${SPEED:-1}" --unpaced-seconds "${UNPACED_S:-5}" --gpu-wait "${GPU_WAIT:-spin}" \
  ${REALTIME:+--realtime "$REALTIME"} --reader "${READER:-block}" --sender "${SENDER:-sleep}" ${PIN:+--pin "$PIN"} ${SENDER_PIN:+--sender-pin "$SENDER_PIN"} \
  ${WORKERS:+--workers "$WORKERS"} ${SENDER_WORKERS:+--sender-workers "$SENDER_WORKERS"} ${REPLICAS:+--replicas "$REPLICAS"} \
  --out "$out/live.json" | tee "$out/bench_live.log"
