#!/usr/bin/env bash
# run_kmeans.sh — the whole k-means benchmark on the GPU machine, from the repository root:
#   bench/run_kmeans.sh [OUTDIR]      (default: $OUT, else bench/results)
# Builds bench_kmeans into $BUILD (default /tmp/b) when it is missing, makes the published image —
# scikit-image's data.astronaut() (512 × 512 RGB, bundled with scikit-image) resized to 256 × 256
# with anti-aliasing, rounded to uint8, saved as .npy — then runs bench_kmeans, which runs
# bench/kmeans_peers.py (torch on the GPU, scikit-learn on the CPU) from the same starting
# centroids, and writes OUTDIR/kmeans.json.
set -euo pipefail
OUTDIR=${1:-${OUT:-bench/results}}
BUILD=${BUILD:-/tmp/b}
mkdir -p "$OUTDIR"
if [ ! -x "$BUILD/bench/bench_kmeans" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target bench_kmeans
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 - "$WORK" <<'EOF'
import sys, numpy as np
from skimage import data, transform
img = data.astronaut()
small = transform.resize(img, (256, 256), anti_aliasing=True, preserve_range=True)
small = np.clip(np.rint(small), 0, 255).astype(np.uint8)
np.save(f"{sys.argv[1]}/astronaut256.npy", small)
open(f"{sys.argv[1]}/image.txt", "w").write(
    "skimage.data.astronaut() 512x512x3 resized to 256x256x3 (skimage.transform.resize, anti_aliasing, "
    "rounded to uint8; pixel values 0..255)")
EOF
"$BUILD/bench/bench_kmeans" --image "$WORK/astronaut256.npy" --workdir "$WORK" \
  --peers "python3 bench/kmeans_peers.py" -o "$OUTDIR/kmeans.json"
