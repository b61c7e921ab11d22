"""Where a kernel should leave the calling thread for numba's thread pool
(``kernels.config.SERIAL_SCAN_BYTES`` and ``SERIAL_READOUT_ENTRIES``): the parallel kernels
and their serial twins (the same source compiled without threads, ``_cpu._serial_twin``) on
clustered synthetic embeddings of several sizes, and numpy's matrix-vector product +
argpartition beside them; the twins must agree bitwise.  Each OpenMP wait policy runs in its
own process (the pool reads it once): the library's default (unset) and ``passive`` (what
``evireform bench`` sets).  Prints a Markdown table of medians in microseconds.

    python scripts/serial_crossover.py [--repeat 200]
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = (2_000, 6_500, 10_000, 30_000, 100_000)


def measure(repeat: int) -> list[tuple]:
    import time
    import numpy as np
    from evireform import kernels as K
    from evireform.bench.synthetic import clustered_embeddings
    kern = K._kernels()

    def med(f):
        f()
        ts = []
        for _ in range(repeat):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts)) * 1e6
    rows = []
    for M in SIZES:
        H = clustered_embeddings(np.random.default_rng(M), M)
        rng = np.random.default_rng(1)
        Q = H[rng.integers(0, M, 16)] + 0.1 * rng.standard_normal((16, H.shape[1]),
                                                                  dtype=np.float32)
        Q /= np.linalg.norm(Q, axis=1, keepdims=True)
        q = Q[0]
        nch = max(1, min(K._n_threads(), M // K.config.TOPK_MIN_CHUNK))
        a, b = kern.topk_one(H, q, 100, nch), kern.topk_one_serial(H, q, 100, nch)
        same = all(np.array_equal(x, y) for x, y in zip(a, b))

        def peer(Qb):
            s = Qb @ H.T
            top = np.argpartition(-s, 100, axis=1)[:, :100]
            return np.take_along_axis(top, np.argsort(-np.take_along_axis(s, top, 1), 1,
                                                      kind="stable"), 1)
        rows.append((f"{M:,} rows, 1 query", med(lambda: kern.topk_one(H, q, 100, nch)),
                     med(lambda: kern.topk_one_serial(H, q, 100, nch)),
                     med(lambda: peer(Q[:1])), same))
        block = K._block_rows()
        nb = max(1, min(K._n_threads(), M // (2 * block)))
        for B in (3, 16):
            Qp = K._pad4(Q[:B])
            a = kern.topk_batch(H, Qp, B, 100, nb, block)
            b = kern.topk_batch_serial(H, Qp, B, 100, nb, block)
            same = all(np.array_equal(x, y) for x, y in zip(a, b))
            rows.append((f"{M:,} rows, {B} queries",
                         med(lambda: kern.topk_batch(H, Qp, B, 100, nb, block)),
                         med(lambda: kern.topk_batch_serial(H, Qp, B, 100, nb, block)),
                         med(lambda: peer(Q[:B])), same))
    from evireform.bench.synthetic import synthetic_passages
    pm = synthetic_passages(np.random.default_rng(3), 100_000)
    for B in (1, 4, 16, 64, 256):
        rng = np.random.default_rng(B)
        indptr = np.arange(B + 1, dtype=np.int64) * 800
        ids = rng.integers(0, 100_000, 800 * B).astype(np.int64)
        vals = rng.random(800 * B)
        n = max(1, min(B, K._n_threads()))
        a = kern.readout_many(pm.owner, pm.inv_sqrt, indptr, ids, vals, 20, n)
        b = kern.readout_many_serial(pm.owner, pm.inv_sqrt, indptr, ids, vals, 20, n)
        same = all(np.array_equal(x, y) for x, y in zip(a, b))
        rows.append((f"readout, {B} rows of 800 entries",
                     med(lambda: kern.readout_many(pm.owner, pm.inv_sqrt, indptr, ids, vals,
                                                   20, n)),
                     med(lambda: kern.readout_many_serial(pm.owner, pm.inv_sqrt, indptr,
                                                          ids, vals, 20, n)), None, same))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        import json
        print(json.dumps(measure(args.repeat)))
        return 0
    import json
    ok = True
    print("| case | OpenMP wait policy | pool (us) | calling thread (us) | numpy (us) | "
          "bitwise equal |")
    print("|---|---|---:|---:|---:|---|")
    for policy in ("unset", "passive"):
        env = dict(os.environ)
        env.pop("OMP_WAIT_POLICY", None)
        if policy == "passive":
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        out = subprocess.run([sys.executable, __file__, "--child", policy, "--repeat",
                              str(args.repeat)], env=env, capture_output=True, text=True,
                             check=True).stdout
        for name, par, ser, peer, same in json.loads(out.strip().splitlines()[-1]):
            ok &= same
            p = "-" if peer is None else f"{peer:.0f}"
            print(f"| {name} | {policy} | {par:.0f} | {ser:.0f} | {p} | "
                  f"{'yes' if same else 'NO'} |", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
