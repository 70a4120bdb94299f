#!/usr/bin/env bash
# The whole test suite: install dependencies, build, run every CTest test. The GPU group (label
# "gpu") runs on a machine with a CUDA device and is reported as skipped, with the reason, elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
build=${SPIKESTREAM_BUILD_DIR:-build}
cd "$build"
rc=0
ctest --output-on-failure -j"$(nproc)" || rc=$?
if grep -q "skipped: no CUDA device" Testing/Temporary/LastTest.log 2>/dev/null; then
  echo "GPU group: $(grep -c '^skipped: no CUDA device' Testing/Temporary/LastTest.log) test program(s)" \
       "skipped: $(grep -m1 -h '^skipped: no CUDA device' Testing/Temporary/LastTest.log)"
fi
exit $rc
