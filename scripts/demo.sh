#!/usr/bin/env bash
# The main job on built-in demo data: build, simulate a 60 s 32-channel recording with ground truth
# on the shipped probe, describe and check it, and score its ground truth against itself. (The
# sorting issue replaces the last step with `sort` + `compare`.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
ss=${SPIKESTREAM_BUILD_DIR:-build}/spikestream
demo=${SPIKESTREAM_DEMO_DIR:-out/demo}
mkdir -p "$demo"
"$ss" info
"$ss" simulate -o "$demo/sim.nwb" --duration 60 --seed 1 --quiet | head -n 1
"$ss" inspect --check-nwb "$demo/sim.nwb"
"$ss" compare "$demo/sim.nwb" "$demo/sim.nwb" --json "$demo/compare.json" | tail -n 4
echo "demo: done (outputs in $demo)"
