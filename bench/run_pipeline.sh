#!/usr/bin/env bash
# End-to-end `spikestream sort` on simulated recordings, GPU and CPU (all threads) in the same run:
# wall time (process start to exit), the sort's own stage times, the GPU front end's per-stage busy
# times, × real time, peak host memory (the process's maximum RSS) and peak device memory (nvidia-smi
# sampled every 50 ms, device-wide, above the idle level), and the accuracy table of each sort
# (`compare` against the simulation's ground truth). Writes bench/results/pipeline.json with summary
# keys realtime_factor_60min_32ch and wall_s_60min_32ch (GPU).
# usage: bench/run_pipeline.sh BUILD_DIR
#   env: WORK=/tmp/ss_pipeline  SEED=1
#        GPU_CASES="32:600 32:3600 128:600 384:600"   channels:seconds sorted on the GPU
#        CPU_CASES="32:600 128:60 384:60"             the same on the CPU (all threads)
#        OUT_JSON=bench/results/pipeline.json
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: bench/run_pipeline.sh BUILD_DIR}
ss=$(realpath "$build/spikestream")
work=${WORK:-/tmp/ss_pipeline}
seed=${SEED:-1}
gpu_cases=${GPU_CASES:-"32:600 32:3600 128:600 384:600"}
cpu_cases=${CPU_CASES:-"32:600 128:60 384:60"}
out_json=${OUT_JSON:-bench/results/pipeline.json}
mkdir -p "$work"
python3 bench/pipeline_cases.py "$ss" "$work" "$seed" "$gpu_cases" "$cpu_cases" "$out_json"
