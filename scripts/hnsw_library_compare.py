"""hnswlib 0.8.0 (source only: needs a compiler) beside chroma-hnswlib (binary wheels, the
``hnswlib`` import this package installs): build time, recall@10 and query time on the same
synthetic unit vectors, with evireform's HNSW parameters (M 32, ef_construction 100, ef 512,
seed 100).  The evidence behind the dependency choice (docs/scaling.md).

Each library lives in its own environment, so the script runs itself under each interpreter
given and prints the rows side by side; with one thread the two builds are also compared
label for label (the fork keeps hnswlib's algorithm, so the graphs should be the same)::

    python scripts/hnsw_library_compare.py --python /tmp/hv/bin/python --python .venv/bin/python \
        --n 100000 --dim 384 --threads 1

Only numpy and the ``hnswlib`` module are imported, so any environment with them will do.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np


def data(n: int, dim: int, nq: int, seed: int = 7):
    """Clustered unit vectors (1,000 centres) and queries near data points."""
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((1000, dim)).astype(np.float32)
    X = C[rng.integers(0, 1000, n)] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Q = X[rng.integers(0, n, nq)] + 0.3 * rng.standard_normal((nq, dim)).astype(np.float32)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    return np.ascontiguousarray(X, np.float32), np.ascontiguousarray(Q, np.float32)


def measure(n: int, dim: int, nq: int, threads: int) -> dict:
    import hnswlib
    X, Q = data(n, dim, nq)
    exact = np.argsort(-(Q @ X.T), axis=1, kind="stable")[:, :10]
    h = hnswlib.Index(space="ip", dim=dim)
    h.init_index(max_elements=n, M=32, ef_construction=100, random_seed=100)
    t = time.perf_counter()
    h.add_items(X, np.arange(n), num_threads=threads)
    build = time.perf_counter() - t
    h.set_ef(512)
    t = time.perf_counter()
    lab = np.vstack([h.knn_query(Q[i:i + 1], k=10, num_threads=1)[0] for i in range(nq)])
    per_q = (time.perf_counter() - t) / nq
    recall = float(np.mean([len(set(e) & set(a)) / 10 for e, a in zip(exact, lab)]))
    fork = hasattr(hnswlib.Index, "persist_dirty")
    return {"library": "chroma-hnswlib" if fork else "hnswlib", "n": n, "dim": dim,
            "threads": threads, "build_s": round(build, 2), "recall@10": round(recall, 4),
            "query_ms": round(per_q * 1e3, 3), "labels": lab.tolist()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append", default=[],
                    help="an interpreter whose environment has one of the libraries "
                         "(repeat); none: this one")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker or not a.python:
        print(json.dumps(measure(a.n, a.dim, a.queries, a.threads)))
        return
    rows = []
    for py in a.python:
        out = subprocess.run([py, __file__, "--worker", "--n", str(a.n), "--dim", str(a.dim),
                              "--queries", str(a.queries), "--threads", str(a.threads)],
                             check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print(f"n {a.n:,}, dim {a.dim}, {a.threads} build thread(s), {a.queries} queries")
    print(f"{'library':<16} {'build s':>8} {'recall@10':>10} {'query ms':>9}")
    for r in rows:
        print(f"{r['library']:<16} {r['build_s']:>8.1f} {r['recall@10']:>10.4f} "
              f"{r['query_ms']:>9.3f}")
    if len(rows) == 2:
        same = rows[0]["labels"] == rows[1]["labels"]
        print(f"same neighbours for every query: {same}; build time ratio "
              f"{rows[1]['build_s'] / rows[0]['build_s']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
