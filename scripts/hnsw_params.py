"""Build time and recall@100 of HNSW construction parameters, the evidence behind
``evireform.kernels.config.HNSW_M`` / ``HNSW_EF_CONSTRUCTION``.

Run: ``.venv/bin/python scripts/hnsw_params.py [--n 100000]`` (about 5 minutes at 100k on 2
cores).  Uses the bench's synthetic embeddings and queries (``evireform bench``, case hnsw);
recall is measured against exact search on 50 queries, latency is one query at a time.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from evireform.bench import cases
from evireform import kernels as K

GRID = ((16, 100), (32, 100), (24, 100), (32, 200))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=50)
    args = ap.parse_args()
    import hnswlib
    inp = cases.Inputs(False, None, lambda m: None)
    M, nq, k = args.n, args.queries, 100
    H = cases.embeddings(inp, M)
    Q = cases.embeddings(inp, 10_000)[:nq] * 0.5 + H[:nq] * 0.5
    Q = np.ascontiguousarray(Q / np.linalg.norm(Q, axis=1, keepdims=True), dtype=np.float32)
    exact = [K.cosine_topk(H, Q[i], k)[0] for i in range(nq)]
    for m, efc in GRID:
        h = hnswlib.Index(space="ip", dim=H.shape[1])
        h.init_index(max_elements=M, M=m, ef_construction=efc, random_seed=K.config.HNSW_SEED)
        t = time.perf_counter()
        h.add_items(H, np.arange(M), num_threads=-1)
        build = time.perf_counter() - t
        cells = []
        for ef in (256, 512, 1024):
            h.set_ef(ef)
            t = time.perf_counter()
            lab = [h.knn_query(Q[i:i + 1], k=k, num_threads=1)[0][0] for i in range(nq)]
            dt = (time.perf_counter() - t) / nq
            rec = np.mean([len(set(e) & set(a)) / k for e, a in zip(exact, lab)])
            cells.append(f"ef {ef}: recall {rec:.4f}, {dt * 1e3:.2f} ms")
        print(f"M={m:2d} ef_construction={efc:3d}: build {build:6.1f} s | " + " | ".join(cells),
              flush=True)


if __name__ == "__main__":
    main()
