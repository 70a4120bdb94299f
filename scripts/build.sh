#!/usr/bin/env bash
# Configure and build spikestream into build/ (or $SPIKESTREAM_BUILD_DIR). CUDA is used when nvcc
# is found (SPIKESTREAM_CUDA=AUTO); pass extra CMake arguments through.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${SPIKESTREAM_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
