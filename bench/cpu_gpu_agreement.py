#!/usr/bin/env python3
"""Agreement of two sorts of one recording (a CPU and a CUDA sort): spikes paired by time, then the
adjusted Rand index of their labels over the paired spikes.

Usage: /usr/bin/python3 bench/cpu_gpu_agreement.py SORT_A SORT_B [--tolerance 3] [--json OUT]
SORT_A, SORT_B: output folders of `spikestream sort` (their results.h5 is read: /spikes/time_samples,
/spikes/cluster). A spike of A is paired with the nearest unpaired spike of B within --tolerance
samples (greedy in time order). Needs numpy and h5py. The ARI is computed here (no scikit-learn):
ARI = (index − expected) / (max − expected) over the contingency table of the paired labels.
"""
import argparse, json, sys

import h5py
import numpy as np


def load(folder):
    with h5py.File(folder + "/results.h5", "r") as f:
        return f["spikes/time_samples"][:].astype(np.int64), f["spikes/cluster"][:].astype(np.int64)


def pair(ta, tb, tol):
    """Greedy pairing in time order: index pairs (i, j) with |ta[i] - tb[j]| <= tol, each used once."""
    i = j = 0
    out_a, out_b = [], []
    while i < len(ta) and j < len(tb):
        d = ta[i] - tb[j]
        if abs(d) <= tol:
            out_a.append(i)
            out_b.append(j)
            i += 1
            j += 1
        elif d < 0:
            i += 1
        else:
            j += 1
    return np.array(out_a, dtype=np.int64), np.array(out_b, dtype=np.int64)


def comb2(x):
    x = np.asarray(x, dtype=np.float64)
    return float(np.sum(x * (x - 1) / 2))


def ari(a, b):
    if len(a) < 2:
        return 1.0
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    table = np.zeros((ia.max() + 1, ib.max() + 1), dtype=np.int64)
    np.add.at(table, (ia, ib), 1)
    index = comb2(table.ravel())
    sa, sb = comb2(table.sum(1)), comb2(table.sum(0))
    expected = sa * sb / comb2([len(a)])
    top = (sa + sb) / 2
    return 1.0 if top == expected else (index - expected) / (top - expected)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tolerance", type=int, default=3, help="samples")
    ap.add_argument("--json", default=None)
    o = ap.parse_args()
    ta, la = load(o.a)
    tb, lb = load(o.b)
    ia, ib = pair(ta, tb, o.tolerance)
    r = dict(a=o.a, b=o.b, tolerance_samples=o.tolerance, n_a=int(len(ta)), n_b=int(len(tb)),
             n_paired=int(len(ia)), frac_paired_a=len(ia) / max(len(ta), 1), frac_paired_b=len(ib) / max(len(tb), 1),
             units_a=int(len(np.unique(la))), units_b=int(len(np.unique(lb))),
             ari_paired=ari(la[ia], lb[ib]))
    print(json.dumps(r, indent=1))
    if o.json:
        json.dump(r, open(o.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
