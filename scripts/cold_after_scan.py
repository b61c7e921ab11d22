"""What a step costs right after an exact scan, beside what it costs in a loop.

The MuSiQue index is the bench's (256-dimension hashing embeddings, as in its
``retrieve_core`` case).  A scan streams the whole embedding matrix through each core's L2 cache, so the step that
follows finds the interpreter, numpy's call machinery and the graph arrays in L3 only.  For
each step this prints its median time called in a tight loop ("warm") and called right
after one single-query scan of the MuSiQue index ("after a scan": the scan's own time
subtracted, both measured in the same pass).

Run: ``.venv/bin/python scripts/cold_after_scan.py [--data ../shared/data] [--passes 300]``
(about a minute; builds or loads the cached MuSiQue index).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent
                                          / "shared" / "data"))
    ap.add_argument("--passes", type=int, default=300)
    args = ap.parse_args(argv)
    from evireform import kernels as K
    from evireform.bench import cases
    from evireform.engine import pack_seeds
    inp = cases.Inputs(False, Path(args.data), lambda m: None)
    real = cases.musique_core_inputs(inp)
    if real is None:
        print("no MuSiQue data under", args.data)
        return 1
    idx, H_q = real[0], real[2]
    run = cases.core_questions(*real)
    seed = _first_seed(run)
    packed = pack_seeds([(seed.s.ids, seed.s.vals)])
    H, q, g, pm = idx.embeddings, H_q[0], idx.graph, idx.pmap
    ranked = K.rank_topk_batch(g, pm, *packed, 0.5, 20)[0]
    steps = {
        f"np.isfinite(q).all(), q of {len(q)} floats": lambda: np.isfinite(q).all(),
        "the ranking kernel, one question": lambda: K.rank_topk_batch(g, pm, *packed, 0.5, 20),
        "score_parts, one question": lambda: K.score_parts(pm, *packed, [seed.split], 0.5,
                                                           ranked),
        "twenty passages looked up": lambda: idx.passages_at(list(range(20))),
    }
    scan = lambda: K.cosine_topk(H, q, 100)  # noqa: E731
    print(f"MuSiQue index {H.shape[0]:,} x {H.shape[1]} ({H.nbytes / 2**20:.1f} MiB); "
          f"median of {args.passes} passes")
    print(f"{'step':44s} {'warm':>9s} {'after a scan':>13s}")
    for name, step in steps.items():
        for _ in range(20):
            step()
        warm, cold = [], []
        for _ in range(args.passes):
            step()
            t1 = time.perf_counter()
            step()
            warm.append(time.perf_counter() - t1)  # the second call in a row: as in a loop
            scan()
            t3 = time.perf_counter()
            step()
            cold.append(time.perf_counter() - t3)
        print(f"{name:44s} {np.median(warm) * 1e6:7.1f} us {np.median(cold) * 1e6:10.1f} us")
    return 0


def _first_seed(run):
    """The first question's seed (Eq. 11) in the bench's own retriever (the MuSiQue case)."""
    cls = type(run.retriever)
    seen = []
    orig = cls._rank_many

    def spy(self, states, scope, sw=None):
        seen.extend(st.seed for st in states)
        return orig(self, states, scope, sw)
    cls._rank_many = spy
    try:
        run()
    finally:
        cls._rank_many = orig
    return seen[0]


if __name__ == "__main__":
    raise SystemExit(main())
