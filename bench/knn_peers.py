#!/usr/bin/env python3
"""knn_peers.py — the peers of bench_knn on the same machine, merged into bench/results/knn.json.

usage: knn_peers.py OURS.json OUT.json SPIKESTREAM_BINARY [--quick]
  * torch.cdist + torch.topk on the same GPU for every grid and large case of OURS.json (queries in
    chunks so that a chunk's distance matrix fits), speedup = torch / ours;
  * scikit-learn brute-force KNeighborsClassifier (all CPU cores) on the grid cases;
  * scikit-learn's digits: our `spikestream knn` (GPU) against KNeighborsClassifier(algorithm="brute")
    with the same k; disagreements are split into those explained by ties (a tie in either vote, or
    equal distances at ranks k and k+1) and the rest.
Summary keys added: min_speedup_vs_torch_large, digits_agree, digits_disagree, digits_disagree_ties,
digits_disagree_unexplained (bench_knn writes the ratio keys).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

TORCH_CHUNK_BYTES = 8 << 30  # distance matrix per torch chunk
REPEATS = 3
DIGITS_K = 5


def median_time(fn, repeats=REPEATS, sync=None):
    fn()
    if sync:
        sync()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def torch_case(torch, m, n, d, k, repeats):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(n, d, device="cuda", generator=g) * 200 - 100
    q = torch.rand(m, d, device="cuda", generator=g) * 200 - 100
    chunk = max(1, min(m, TORCH_CHUNK_BYTES // (4 * n)))

    def run():
        for s in range(0, m, chunk):
            dd = torch.cdist(q[s:s + chunk], x)
            torch.topk(dd, k, dim=1, largest=False)

    t = median_time(run, repeats, torch.cuda.synchronize)
    del x, q
    torch.cuda.empty_cache()
    return t


def sklearn_case(m, n, d, k):
    from sklearn.neighbors import KNeighborsClassifier
    rng = np.random.default_rng(0)
    x = (rng.random((n, d), dtype=np.float32) * 200 - 100)
    q = (rng.random((m, d), dtype=np.float32) * 200 - 100)
    y = np.arange(n) % 5
    clf = KNeighborsClassifier(n_neighbors=k, algorithm="brute", n_jobs=-1).fit(x, y)
    return median_time(lambda: clf.kneighbors(q), 1)


def digits(binary):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neighbors import KNeighborsClassifier
    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float32)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.5, random_state=0)
    clf = KNeighborsClassifier(n_neighbors=DIGITS_K, algorithm="brute").fit(Xtr, ytr)
    theirs = clf.predict(Xte)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {n: os.path.join(tmp, n + ".npy") for n in ("train", "labels", "queries", "pred")}
        np.save(paths["train"], Xtr)
        np.save(paths["labels"], ytr.astype(np.int32))
        np.save(paths["queries"], Xte)
        subprocess.run([binary, "knn", "--train", paths["train"], "--labels", paths["labels"], "--queries",
                        paths["queries"], "--k", str(DIGITS_K), "--device", "cuda", "-q", "-o", paths["pred"]],
                       check=True)
        ours = np.load(paths["pred"])
        our_idx = np.load(paths["pred"][:-4] + ".indices.npy")
    # exact float64 distances, to find ties at the k boundary
    d2 = ((Xte[:, None, :].astype(np.float64) - Xtr[None, :, :].astype(np.float64)) ** 2).sum(-1)
    srt = np.sort(d2, axis=1)
    boundary_tie = srt[:, DIGITS_K - 1] == srt[:, DIGITS_K]
    vote_tie = np.zeros(len(Xte), bool)
    for i in range(len(Xte)):
        counts = np.bincount(ytr[our_idx[i]], minlength=10)
        vote_tie[i] = (counts == counts.max()).sum() > 1
    agree = ours == theirs
    tie = boundary_tie | vote_tie
    return {
        "k": DIGITS_K, "train": int(len(Xtr)), "test": int(len(Xte)),
        "agree": int(agree.sum()), "disagree": int((~agree).sum()),
        "disagree_ties": int((~agree & tie).sum()), "disagree_unexplained": int((~agree & ~tie).sum()),
        "queries_with_ties": int(tie.sum()),
        "accuracy_ours": float((ours == yte).mean()), "accuracy_sklearn": float((theirs == yte).mean()),
    }


def main():
    ours_path, out_path, binary = sys.argv[1:4]
    quick = "--quick" in sys.argv
    doc = json.load(open(ours_path))
    import torch
    have_gpu = torch.cuda.is_available()
    speedups = []
    for c in doc["cases"]:
        if c.get("group") not in ("grid", "large"):
            continue
        m, n, d, k = (int(c[key]) for key in ("queries", "refs", "dim", "k"))
        if have_gpu and "gpu_s" in c:
            t = torch_case(torch, m, n, d, k, 2 if c["group"] == "large" else REPEATS)
            c["torch_cdist_topk_s"] = t
            c["speedup_vs_torch"] = t / c["gpu_s"]
            if c["group"] == "large":
                speedups.append(c["speedup_vs_torch"])
        if c["group"] == "grid":
            try:
                c["sklearn_brute_cpu_s"] = sklearn_case(m, n, d, k)
            except Exception as e:  # a missing peer must not lose the rest
                c["sklearn_error"] = str(e)
        print(c["case"], {key: c[key] for key in c if key.endswith("_s") or key.startswith("speedup")}, flush=True)
    if speedups:
        doc["summary"]["min_speedup_vs_torch_large"] = min(speedups)
    if have_gpu and not quick:
        try:
            dg = digits(binary)
            doc["digits"] = dg
            for key in ("agree", "disagree", "disagree_ties", "disagree_unexplained"):
                doc["summary"]["digits_" + key] = dg[key]
            print("digits", dg, flush=True)
        except Exception as e:
            doc["digits"] = {"error": str(e)}
            print("digits failed:", e, flush=True)
    doc["peers"] = {"torch": torch.__version__, "numpy": np.__version__}
    try:
        import sklearn
        doc["peers"]["sklearn"] = sklearn.__version__
    except ImportError:
        pass
    with open(out_path + ".tmp", "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(out_path + ".tmp", out_path)
    print("wrote", out_path, json.dumps(doc["summary"]))


if __name__ == "__main__":
    main()
