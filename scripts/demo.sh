#!/usr/bin/env bash
# The main job on built-in demo data: build, simulate a 60 s 32-channel recording with ground truth
# on the shipped probe, sort it (front end, masked EM, automatic merge; results.h5, phy folder,
# KlustaKwik files, model.h5) and score the sorting against the ground truth with `compare`.
# With `--device auto`, sort runs the front end's chunk pass, masked EM and the KNN vote on the GPU
# when this build has CUDA and a device answers, else on CPU threads — `sort` logs which; the noise
# excerpts, the merge and the outputs run on CPU threads either way.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
ss=${SPIKESTREAM_BUILD_DIR:-build}/spikestream
demo=${SPIKESTREAM_DEMO_DIR:-out/demo}
mkdir -p "$demo"
"$ss" info
"$ss" simulate -o "$demo/sim.nwb" --duration 60 --seed 1 --quiet | head -n 1
"$ss" inspect --check-nwb "$demo/sim.nwb" | tail -n 1
# --device auto: CUDA when available, else the CPU; the log lines name the choice. The summary ends
# with the per-unit table of quality metrics and good / mua / noise labels (docs/quality.md).
"$ss" sort "$demo/sim.nwb" -o "$demo/sorted" --overwrite --device auto --check 2>&1 | grep -v '^spikestream: detect:'
# cluster 0 is masked EM's noise cluster: left out of the scoring
"$ss" compare "$demo/sorted/results.h5" "$demo/sim.nwb" --exclude 0 --json "$demo/compare.json" | tail -n 4
echo "demo: done (outputs in $demo; the report: $demo/sorted/report.html; open the phy folder with:"
echo "      phy template-gui $demo/sorted/phy/params.py)"
