#!/usr/bin/env bash
# Build the libFuzzer targets (fuzz/) with clang in ${build}-fuzz and run each for SECONDS (default
# 60) from its seed corpus (fuzz/corpus/<target>/), printing the executions and exec/s per target.
# A crash, leak, timeout or out-of-memory fails the script (exit 1) and leaves the reproducer in
# ${build}-fuzz/findings/<target>/ (replay it: ${build}-fuzz/fuzz/fuzz_<target> FILE).
# FUZZ_TARGETS="npy stream" picks targets; FUZZ_JOBS=N runs N targets at once (default 1);
# FUZZ_RUNS=N stops each target after N executions instead of SECONDS.
# fuzz_nwb reads through the system HDF5 library, which allocates what a corrupt header declares
# (4 to 32 GiB seen) before it reads it: for that target a request over 2 GiB fails (NULL, as it
# may outside the fuzzer) instead of counting as out-of-memory (docs/testing.md); and since it forks
# a child per input (the HDF5 watchdog), where the kernel copies the page tables of the whole
# address space, ASan's quarantine is kept small (8 MiB): 2.7x the executions per second.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
build=${SPIKESTREAM_BUILD_DIR:-build}
fz="${build}-fuzz"
targets=${FUZZ_TARGETS:-"params probe knn_csv matrix_text npy klustakwik stream token nwb"}
limit="-max_total_time=$secs" what="${secs} s"
if [ -n "${FUZZ_RUNS:-}" ]; then limit="-runs=$FUZZ_RUNS" what="$FUZZ_RUNS executions"; fi
jobs=${FUZZ_JOBS:-1}
CC=clang cmake -S . -B "$fz" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPIKESTREAM_CUDA=OFF -DSPIKESTREAM_FUZZ=ON \
  -DSPIKESTREAM_TESTS=OFF -DSPIKESTREAM_OPENMP=OFF >/dev/null
cmake --build "$fz" -j"$(nproc)" --target fuzz_all >/dev/null
fz=$(cd "$fz" && pwd)
# The targets write each input to a scratch file: in memory (/dev/shm) when there is one, since a
# disk file system's truncate and write cost more than the parse.
mkdir -p "$fz/logs"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  scratch=$(mktemp -d /dev/shm/ss-fuzz.XXXXXX)
else
  scratch=$(mktemp -d "$fz/scratch.XXXXXX")
fi
trap 'rm -rf "$scratch"' EXIT

# One target: a working corpus seeded from the checked-in one (new inputs stay in the build folder),
# reproducers under findings/<target>/, the log in logs/<target>.log.
run_one() {
  local t=$1 work="$fz/corpus/$1" found="$fz/findings/$1" log="$fz/logs/$1.log"
  mkdir -p "$work" "$found" "$fz/logs"
  cp -n fuzz/corpus/"$t"/* "$work"/ 2>/dev/null || true
  local rc=0 asan="detect_leaks=1:suppressions=$PWD/fuzz/asan.supp"
  if [ "$t" = nwb ]; then asan="$asan:allocator_may_return_null=1:max_allocation_size_mb=2048:quarantine_size_mb=8"; fi
  TMPDIR="$scratch" ASAN_OPTIONS="$asan" LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$fz/fuzz/fuzz_$t" "$limit" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$found/" "$work" >"$log" 2>&1 || rc=$?
  local execs rate
  execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  rate=$(grep -m1 'stat::average_exec_per_sec' "$log" | awk '{print $2}')
  if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$found")" ]; then
    echo "fuzz_$t: FAILED (exit $rc): $(grep -m1 -E 'ERROR|SUMMARY|==[0-9]+==' "$log" || true)"
    echo "  reproducer(s): $(ls "$found" | sed "s|^|$found/|" | tr '\n' ' ')"
    echo "  log: $log"
    tail -n 40 "$log" | sed 's/^/  | /'
    return 1
  fi
  printf 'fuzz_%-12s %10s executions  %8s exec/s  corpus %s\n' "$t" "${execs:-?}" "${rate:-?}" "$(ls "$work" | wc -l)"
}

echo "== fuzzing: $what per target in $fz"
rc=0
if [ "$jobs" -le 1 ]; then
  for t in $targets; do run_one "$t" || rc=1; done
else
  pids=()
  for t in $targets; do
    run_one "$t" >"$fz/logs/$t.summary" 2>&1 &
    pids+=($!)
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  for t in $targets; do cat "$fz/logs/$t.summary"; done
fi
exit $rc
