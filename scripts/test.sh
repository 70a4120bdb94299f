#!/usr/bin/env bash
# The whole test suite: install dependencies, build, run every CTest test but the accuracy
# acceptance test (label "accuracy", docs/testing.md: `ctest -L accuracy` runs it). The GPU group
# (label "gpu") runs on a machine with a CUDA device and is reported as skipped, with the reason,
# elsewhere.
# Then the format check (scripts/format.sh --check) and a CPU-only build with AddressSanitizer and
# UndefinedBehaviorSanitizer in ${build}-asan, whose CPU tests must run without a single report.
# Last, every libFuzzer target for SPIKESTREAM_FUZZ_SECONDS (default 60) each (scripts/fuzz.sh;
# 0 skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
build=${SPIKESTREAM_BUILD_DIR:-build}
rc=0
(cd "$build" && ctest --output-on-failure -j"$(nproc)" -LE accuracy) || rc=$?
log="$build/Testing/Temporary/LastTest.log"
if grep -q "skipped: no CUDA device" "$log" 2>/dev/null; then
  echo "GPU group: $(grep -c '^skipped: no CUDA device' "$log") test program(s)" \
       "skipped: $(grep -m1 -h '^skipped: no CUDA device' "$log")"
fi

echo "== format check"
bash scripts/format.sh --check || rc=1

# Sanitizers: every report ends the program that made it with exit code 86, which no test expects
# of the CLI either, so a report from a CLI run inside a test fails that test; ASan's and LSan's
# reports also go to files under $reports (printed below: a test's own output may not show them).
echo "== sanitizer build (ASan + UBSan, CPU only) in ${build}-asan"
san="${build}-asan"
cmake -S . -B "$san" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPIKESTREAM_CUDA=OFF -DSPIKESTREAM_SANITIZE=ON >/dev/null
cmake --build "$san" -j"$(nproc)"
reports="$(cd "$san" && pwd)/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
(cd "$san" &&
 ASAN_OPTIONS="detect_leaks=1:exitcode=86:log_path=$reports/asan" \
 UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=86" \
 ctest --output-on-failure -j"$(nproc)" -LE 'gpu|accuracy') || rc=$?
if [ -n "$(ls -A "$reports")" ]; then
  echo "sanitizer reports:"
  for f in "$reports"/*; do
    echo "--- $f"
    cat "$f"
  done
  rc=1
fi

fuzz_secs=${SPIKESTREAM_FUZZ_SECONDS:-60}
if [ "$fuzz_secs" != 0 ]; then
  SPIKESTREAM_BUILD_DIR="$build" bash scripts/fuzz.sh "$fuzz_secs" || rc=1
fi
exit $rc
