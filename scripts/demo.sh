#!/usr/bin/env bash
# The main job on built-in demo data: build, then show the machine, check the example parameters
# and the shipped 32-channel probe. (Later issues make this simulate, sort and score a recording.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
ss=${SPIKESTREAM_BUILD_DIR:-build}/spikestream
demo=${SPIKESTREAM_DEMO_DIR:-out/demo}
mkdir -p "$demo"
"$ss" info
"$ss" params --check params/examples/klusta.json
"$ss" probe params/probes/two_column_32.json --channels 32 | head -n 6
echo "demo: done (outputs in $demo)"
