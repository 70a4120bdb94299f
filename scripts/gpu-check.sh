#!/usr/bin/env bash
# On a machine with a CUDA device: build everything and run the whole suite, GPU group included,
# logging to ${OUT:-out/gpu-check}. Used on the GPU machine (with SPIKESTREAM_NO_APT=1 where
# packages come from elsewhere); prints the GPU group's results last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu-check}
mkdir -p "$out"
build=${SPIKESTREAM_BUILD_DIR:-/tmp/ss-gpu-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=${CUDAARCHS:-90} \
  > "$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" > "$out/build.log" 2>&1 || { grep -B2 -A6 -E "error" "$out/build.log" | head -60; exit 1; }
"$build/spikestream" info | tee "$out/info.txt"
(cd "$build" && ctest --output-on-failure -j4 > "$out/ctest.log" 2>&1); rc=$?
(cd "$build" && ctest -L gpu -V > "$out/ctest-gpu.log" 2>&1)
grep -E "tests passed|Failed|Skipped|Not Run" "$out/ctest.log" | tail -20
grep -E "^[0-9]+: \[ +(OK|FAILED|PASSED) +\]|Test +#" "$out/ctest-gpu.log" | tail -40
exit $rc
