"""Where the time goes in the three kernel cases that miss their targets.

Run: ``.venv/bin/python scripts/profile_kernels.py [--data ../shared/data]`` (about a minute).
Prints, for each case, the cost split into its parts, each part timed on its own:

* ``cosine 10k``: the scoring loop alone, the fused top-k, numpy's matvec alone and with
  argpartition, with numba's two threads and with one;
* ``propagate musique``: the whole public call, the compiled kernel called from Python, the
  same kernel in a compiled loop (no Python boundary), and the boundary with an empty seed;
* ``retrieve_core musique``: one question through Algorithm 1 (the bench's setting) and the
  part of it spent in exact search.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numba
import numpy as np
from numba import njit

from evireform import bench
from evireform.bench import cases
from evireform import kernels as K
from evireform.kernels import _cpu


def _us(fn, n=200) -> float:
    """Median microseconds per call (the bench's timing: pause, warm-up, at least n calls)."""
    return bench.times([fn], n, min_s=0.0)[0] * 1e6


def cosine_10k():
    from evireform.bench.synthetic import clustered_embeddings
    H = clustered_embeddings(np.random.default_rng(10_000), 10_000)
    q = H[3] * 0.9 + H[7] * 0.1
    q = (q / np.linalg.norm(q)).astype(np.float32)
    S = np.empty(len(H), np.float32)
    threads = numba.get_num_threads()
    for nt in (threads, 1):
        numba.set_num_threads(nt)
        print(f"cosine 10k x 384, numba threads {nt}: "
              f"scoring loop {_us(lambda: _cpu.dot_one(H, q, S)):.0f} us, "
              f"fused top-100 {_us(lambda: K.cosine_topk(H, q, 100)):.0f} us | "
              f"numpy matvec {_us(lambda: H @ q):.0f} us, "
              f"+ argpartition {_us(lambda: np.argpartition(-(H @ q), 100)[:100]):.0f} us")
    numba.set_num_threads(threads)


@njit
def _walk_loop(a, b, c, d, e, f, h, sp, si, sv, wf, wb, wi, reps):
    n = 0
    for _ in range(reps):
        for s in range(len(sp) - 1):
            n += _cpu.propagate_one(a, b, c, d, e, f, h, si[sp[s]:sp[s + 1]], sv[sp[s]:sp[s + 1]],
                                    0.5, wf, wb, wi)
    return n


def propagate_musique(inp):
    r = inp.real("musique")
    if r is None:
        print("propagate musique: no data")
        return
    g, seeds = r[0].graph, r[1][:50]
    wf, wb, wi = K._WS.get("prop", g.n_props, g.n_entities)[:3]
    args = (g.a_indptr, g.a_indices, g.at_indptr, g.at_indices, g.inv_deg, g.diag, g.inv_w)
    public = _us(lambda: [K.propagate(g, i, v, 0.5) for i, v in seeds], 50) / len(seeds)
    direct = _us(lambda: [_cpu.propagate_one(*args, i, v, 0.5, wf, wb, wi)
                          for i, v in seeds], 50) / len(seeds)
    e_i, e_v = np.zeros(0, np.int64), np.zeros(0, np.float32)
    empty = _us(lambda: K.propagate(g, e_i, e_v, 0.5), 2000)
    sp = np.zeros(len(seeds) + 1, np.int64)
    sp[1:] = np.cumsum([len(i) for i, _ in seeds])
    si = np.concatenate([i for i, _ in seeds])
    sv = np.concatenate([v for _, v in seeds])
    _walk_loop(*args, sp, si, sv, wf, wb, wi, 1)
    t = time.perf_counter()
    _walk_loop(*args, sp, si, sv, wf, wb, wi, 200)
    walk = (time.perf_counter() - t) / 200 / len(seeds) * 1e6
    print(f"propagate musique, per seed (mean of {len(seeds)} real seeds): public call "
          f"{public:.1f} us = compiled walk {walk:.1f} us + kernel call from Python "
          f"{direct - walk:.1f} us + wrapper {public - direct:.1f} us; "
          f"public call with an empty seed {empty:.1f} us")


def retrieve_core_musique(inp):
    import cProfile
    import pstats
    real = cases.musique_core_inputs(inp)
    if real is None:
        print("retrieve_core musique: no data")
        return
    idx, qs = real[0], real[1]
    run = cases.core_questions(*real)
    per_q = _us(run, 10) / len(qs) / 1e3
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        run()
    prof.disable()
    st = pstats.Stats(prof).stats
    total = sum(v[2] for v in st.values())
    scan = sum(v[2] for k, v in st.items() if k[2] == "topk_one")
    calls = sum(v[1] for k, v in st.items() if k[2] == "topk_one") / (5 * len(qs))
    print(f"retrieve_core musique ({idx.n_props:,} x {idx.dim} index), per question: "
          f"{per_q:.2f} ms; exact scans {calls:.1f} per question, "
          f"{scan / total * 100:.0f}% of the profiled time "
          f"({scan / (5 * len(qs) * calls) * 1e3:.3f} ms each under the profiler)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data")
    args = ap.parse_args()
    data = Path(args.data)
    inp = cases.Inputs(False, data if data.is_dir() else None, lambda m: None)
    cosine_10k()
    propagate_musique(inp)
    retrieve_core_musique(inp)


if __name__ == "__main__":
    main()
