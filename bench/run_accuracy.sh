#!/usr/bin/env bash
# Sort accuracy on third-party ground truth beside Kilosort4, on the same machine: SpikeInterface's
# generators make the recordings (cases a-d, several seeds), the peer harness in .peers/ runs both
# sorters, `spikestream compare` scores them (SpikeInterface's own scores kept beside). Writes
# OUTDIR/rows.jsonl (a row as soon as it exists) and OUTDIR/accuracy.json (bench/results/accuracy.json).
# usage (checkout root, .peers/ installed):
#   SS=build/spikestream bash bench/run_accuracy.sh OUTDIR [--cases a,b,c,d] [--seeds 101,102,103]
#       [--duration-scale X] [--no-ks4] [--timeout S] [--gen-timeout S] [--resume] [--budget-s S] [--work DIR] [--keep-data]
#   env: SS (the spikestream executable), SS_ARGS (extra `sort` options, default "--device cuda"),
#        PYTHON (interpreter, default python3), SS_COMMIT (commit to record; default git, else --version)
# The cases, the row fields and the summary keys are in bench/accuracy_cases.py.
set -uo pipefail
[ $# -ge 1 ] || { sed -n 2,11p "$0"; exit 2; }
out=$(realpath -m "$1"); shift
ss=${SS:-build/spikestream}
[ -x "$ss" ] || { echo "run_accuracy: $ss is not executable (set SS)" >&2; exit 2; }
ss_abs=$(realpath "$ss")
cd "$(dirname "$0")/.."
[ -f .peers/env.sh ] || { echo "run_accuracy: .peers/ is not installed in $(pwd)" >&2; exit 2; }
if [ -n "${PYTHON:-}" ]; then
  # the harness's env.sh and scripts call `python3`: make that the chosen interpreter
  shim=$(mktemp -d); ln -s "$(command -v "$PYTHON")" "$shim/python3"; export PATH="$shim:$PATH"
fi
source .peers/env.sh
mkdir -p "$out"
exec python3 bench/accuracy_cases.py "$out" --ss "$ss_abs" --peers "$(pwd)/.peers" \
  "--ss-args=${SS_ARGS---device cuda}" --command "SS=$ss bash bench/run_accuracy.sh $out $*" "$@"
