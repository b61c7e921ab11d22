"""Where batched propagation's time goes: the bench's 1M-proposition synthetic graph, its
first 1,000 seeds (31M entries of z), propagated seed by seed through the one-seed kernel
and by ``kernels.propagate_batch`` (rows written into their own slots from the expansion
bounds, ranges side by side on threads), each with one numba thread and with all of them,
beside the scipy sparse-matrix peer of ``evireform bench``; every row must equal the one-seed
kernel's bitwise.  Prints a Markdown table (median seconds of ``--repeat``).

    python scripts/propagate_batch_cost.py [--repeat 3] [--seeds 1000]
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=1000)
    args = ap.parse_args(argv)
    import numba
    from evireform import kernels as K
    from evireform.bench import cases
    from evireform.kernels import config
    g, _, seeds = cases.Inputs(False, None, lambda m: None).synth()
    sel = seeds[:args.seeds]
    indptr = np.r_[0, np.cumsum([len(i) for i, _ in sel])].astype(np.int64)
    ids = np.concatenate([i for i, _ in sel]).astype(np.int64)
    vals = np.concatenate([v for _, v in sel])

    def med(fn):
        fn()
        ts = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts))

    def one_by_one():
        return [K.propagate(g, i, v, 0.5) for i, v in sel]
    threads = numba.get_num_threads()
    rows = []
    singles = one_by_one()
    zp, zi, zv = K.propagate_batch(g, indptr, ids, vals, 0.5)
    same = all(np.array_equal(zi[zp[b]:zp[b + 1]], si)
               and np.array_equal(zv[zp[b]:zp[b + 1]].view(np.int64), sv.view(np.int64))
               for b, (si, sv) in enumerate(singles))
    for nt in sorted({1, threads}):
        numba.set_num_threads(nt)
        rows.append(("one-seed kernel, seed by seed", nt, med(one_by_one), True))
        rows.append(("propagate_batch (rows in their own slots)", nt,
                     med(lambda: K.propagate_batch(g, indptr, ids, vals, 0.5)), same))
    numba.set_num_threads(threads)
    A, AT = cases._scipy_ops(g)
    import scipy.sparse as sp
    cols = np.repeat(np.arange(len(sel)), np.diff(indptr))
    S = sp.csr_matrix((vals, (ids, cols)), shape=(g.n_props, len(sel)))

    def peer():
        X = sp.diags(g.inv_w) @ S
        return 0.5 * S + 0.5 * (A @ (sp.diags(g.inv_deg) @ (AT @ X)) - sp.diags(g.diag) @ X)
    rows.append(("scipy sparse-matrix products (the bench's peer)", 1, med(peer), True))
    print(f"{g.n_props:,} propositions, {len(sel)} seeds, {int(indptr[-1]):,} seed entries, "
          f"{len(zi):,} entries of z\n")
    print("| kernel | threads | seconds | bitwise equal |")
    print("|---|---:|---:|---|")
    for name, nt, t, same in rows:
        print(f"| {name} | {nt} | {t:.3f} | {'yes' if same else 'NO'} |")
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
