#!/usr/bin/env python3
"""kmeans_peers.py — the peers of bench/bench_kmeans.c, from the same data and starting centroids
(WORKDIR/<case>_x.npy, WORKDIR/<case>_init.npy written by bench_kmeans):

  torch    a straightforward implementation on the same GPU: cdist + argmin for the assignment,
           index_add_ + bincount for the means (float32, TF32 off: torch's default for matmul)
  sklearn  sklearn.cluster.KMeans(algorithm="lloyd", n_init=1, init=<the same centroids>, tol=0,
           max_iter=ITERATIONS) on all CPU cores

Both run exactly ITERATIONS centroid updates followed by a final assignment, like bench_kmeans, and
report the inertia against the final centroids. Times are medians (torch: after a warm-up, timed
with torch.cuda.synchronize; data already on the device). Writes one JSON object to -o.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

CASES = ("published", "large")
TORCH_REPEATS = {"published": 21, "large": 7}
SKLEARN_REPEATS = {"published": 3, "large": 1}


def torch_kmeans(torch, x, c, iterations):
    k = c.shape[0]
    for _ in range(iterations):
        lab = torch.cdist(x, c).argmin(dim=1)
        sums = torch.zeros_like(c).index_add_(0, lab, x)
        counts = torch.bincount(lab, minlength=k).to(x.dtype)
        c = torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None], c)
    lab = torch.cdist(x, c).argmin(dim=1)
    inertia = ((x - c[lab]) ** 2).sum(dtype=torch.float64)
    return lab, c, inertia


def run_torch(x_np, c_np, iterations, repeats):
    import torch
    dev = torch.device("cuda")
    x = torch.from_numpy(x_np).to(dev)
    c0 = torch.from_numpy(c_np).to(dev)
    for _ in range(2):
        torch_kmeans(torch, x, c0, iterations)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _, _, inertia = torch_kmeans(torch, x, c0, iterations)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, float(inertia.item())


def run_sklearn(x_np, c_np, iterations, repeats):
    from sklearn.cluster import KMeans
    times, km = [], None
    for _ in range(repeats):
        km = KMeans(n_clusters=c_np.shape[0], init=c_np, n_init=1, max_iter=iterations, tol=0.0,
                    algorithm="lloyd")
        t0 = time.perf_counter()
        km.fit(x_np)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, float(km.inertia_), int(km.n_iter_)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--iterations", type=int, default=14)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    result = {"versions": {"python": sys.version.split()[0], "numpy": np.__version__}}
    try:
        import torch
        result["versions"]["torch"] = torch.__version__
        result["torch_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
    except ImportError:
        torch = None
    import sklearn
    result["versions"]["sklearn"] = sklearn.__version__
    result["cpu_threads"] = os.cpu_count()
    info = os.path.join(args.workdir, "image.txt")
    if os.path.exists(info):
        result["image"] = open(info).read().strip()
    for case in CASES:
        xp = os.path.join(args.workdir, f"{case}_x.npy")
        if not os.path.exists(xp):
            continue
        x = np.load(xp)
        c = np.load(os.path.join(args.workdir, f"{case}_init.npy"))
        r = {}
        if torch is not None and torch.cuda.is_available():
            r["torch_ms"], r["torch_inertia"] = run_torch(x, c, args.iterations, TORCH_REPEATS[case])
        r["sklearn_ms"], r["sklearn_inertia"], r["sklearn_n_iter"] = run_sklearn(
            x, c, args.iterations, SKLEARN_REPEATS[case])
        result[case] = r
        print(f"peers {case}: {r}", file=sys.stderr)
    with open(args.output, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
