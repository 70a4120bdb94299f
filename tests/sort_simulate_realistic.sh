#!/usr/bin/env bash
# sort_simulate_realistic.sh — the accuracy acceptance test: sort a recording made with the
# simulator's default (realistic) settings on the CPU and score it with `compare`; passes when at
# least 90% of the ground-truth units with SNR > 5 are well detected (accuracy >= 0.8).
# Usage: bash tests/sort_simulate_realistic.sh SPIKESTREAM WORKDIR [SEED [DURATION_S [DEVICE]]]
# Prints one line: seed, duration, units with SNR > 5 well detected, their mean accuracy, and the
# same over all units. Exit 0 when the bar is met, 1 when not, 2 on a failed command.
set -u
ss=${1:?usage: sort_simulate_realistic.sh SPIKESTREAM WORKDIR [SEED [DURATION_S [DEVICE]]]}
work=${2:?usage: sort_simulate_realistic.sh SPIKESTREAM WORKDIR [SEED [DURATION_S [DEVICE]]]}
seed=${3:-1}
duration=${4:-60}
device=${5:-cpu}
bar=0.9
rm -rf "$work"
mkdir -p "$work" || exit 2
run() {
  "$@" > "$work/last.out" 2> "$work/last.err" && return 0
  echo "sort_simulate_realistic: failed: $*" >&2
  cat "$work/last.err" >&2
  exit 2
}
run "$ss" simulate -o "$work/sim.nwb" --duration "$duration" --seed "$seed" -q
start=$(date +%s)
run "$ss" sort "$work/sim.nwb" -o "$work/sorted" --device "$device" -q
took=$(($(date +%s) - start))
run "$ss" compare "$work/sorted/results.h5" "$work/sim.nwb" --exclude 0
cp "$work/last.out" "$work/compare.txt"
# compare's table: gt_unit sorted accuracy precision recall snr n_gt n_sorted
awk -v seed="$seed" -v dur="$duration" -v took="$took" -v bar="$bar" '
  NF == 8 && $1 ~ /^[0-9]+$/ {
    n++; acc += $3; if ($3 >= 0.8) good++
    if ($6 > 5) { m++; macc += $3; if ($3 >= 0.8) mgood++ }
  }
  END {
    frac = m ? mgood / m : 0
    printf "sort_simulate_realistic: seed %s, %s s (sort %s s): %d of %d units with SNR > 5 well detected " \
           "(%.3f, bar %.2f), mean accuracy %.3f; all units: %d of %d, mean accuracy %.3f\n",
           seed, dur, took, mgood, m, frac, bar, m ? macc / m : 0, good, n, n ? acc / n : 0
    exit (m > 0 && frac >= bar) ? 0 : 1
  }' "$work/compare.txt"
