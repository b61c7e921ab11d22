"""Where the time goes in the three kernel cases that miss their targets.

Run: ``.venv/bin/python scripts/profile_kernels.py [--data ../shared/data]`` (about a minute).
Prints, for each case, the cost split into its parts, each part timed on its own:

* ``cosine 10k``: the scoring loop alone, the fused top-k, numpy's matvec alone and with
  argpartition, with numba's two threads and with one;
* ``propagate musique``: the whole public call, the compiled kernel called from Python, the
  same kernel in a compiled loop (no Python boundary), and the boundary with an empty seed;
* ``retrieve_core musique``: one question through Algorithm 1 (the bench's setting), the
  part of it spent in exact search, and its other work timed in the run and again with the
  searches replayed from their results (warm caches): what the scans' flushing costs.

``--tiles`` times the dot-product tile shapes instead (about two minutes).
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
    wf, wb, wi = K._WS.get(K.PropWorkspace, g.n_props, g.n_entities)[:3]
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
    cold, warm = rest_cold_and_warm(run, len(qs))
    print(f"retrieve_core musique, a question's work outside its scans: {cold:.3f} ms in the "
          f"run, {warm:.3f} ms with the scans' results replayed (caches warm: the same Python "
          f"and kernels without a {idx.embeddings.nbytes / 2**20:.1f} MiB scan before them); "
          f"the difference, "
          f"{cold - warm:.3f} ms, is refilling the caches the scans flushed")


def rest_cold_and_warm(run, n_questions: int, rounds: int = 7) -> tuple[float, float]:
    """A question's time outside its searches (ms, median of ``rounds``): as it runs, and
    with each search answered from a replay of its own earlier result, so what follows it
    finds the caches as the previous question's work left them (no scan in between)."""
    engine = run.retriever.engine  # every search of the run goes through its search_batch
    real = engine.search_batch
    seen: dict = {}

    def replay(H, k, *, restriction=None):
        key = (np.asarray(H).tobytes(), k)
        if key not in seen:
            seen[key] = real(H, k, restriction=restriction)
        ids, sc = seen[key]
        return ids.copy(), sc.copy()

    def rest() -> float:
        parts = cases.core_parts(run, n_questions, 3)
        return sum(parts.values()) - parts.get("search", 0.0)
    before = [r.ids for r in run()]
    cold = float(np.median([rest() for _ in range(rounds)]))
    engine.search_batch = replay  # an attribute of this engine only, taken off below
    try:
        if [r.ids for r in run()] != before:
            raise AssertionError("the replayed searches changed a ranking")
        warm = float(np.median([rest() for _ in range(rounds)]))
    finally:
        del engine.search_batch
    return cold, warm


def _scan_one(R, split):
    """A whole-index single-query scan by the ``R`` x 1 tile (rows beyond a multiple of R
    left out)."""
    from numba import prange
    T = _cpu.make_tile(R, 1, split)

    @njit(parallel=True, fastmath={"reassoc", "contract"})
    def scan(H, q, S):
        for c in prange(H.shape[0] // R):
            T(H, R * c, q, 0, S, R * c)
    return scan


def _scan_batch(R, NQ, split, block=240):
    """A whole-index batch scan by the ``R`` x ``NQ`` tile, ``block`` rows a step per thread
    (as ``_dot_block``; rows beyond a multiple of ``block`` left out)."""
    from numba import prange
    T = _cpu.make_tile(R, NQ, split)

    @njit(parallel=True, fastmath={"reassoc", "contract"})
    def scan(H, Q, S):
        for c in prange(H.shape[0] // block):
            lo = c * block
            for p in range(block // R):
                for b in range(0, Q.shape[0], NQ):
                    T(H, lo + R * p, Q, b, S, lo + R * p)
    return scan


def tiles(rounds=7):
    """Each tile shape's whole-index scan (one query; 48 queries) beside numpy's matvec and
    matmul, at 10k and 100k rows: the functions in turn, ``rounds`` times, median of each
    round's best.  Every shape's scores are checked bitwise against the first's."""
    from evireform.bench.synthetic import clustered_embeddings
    print(f"tiles on this machine (16-lane registers: {_cpu.WIDE}; the library uses "
          f"{'8 x 1' if _cpu.WIDE else '1 x 1'} and {_cpu.BATCH_TILE[0]} x "
          f"{_cpu.BATCH_TILE[1]}{'' if _cpu.WIDE else ' split'})")
    for M in (10_080, 100_080):
        H = clustered_embeddings(np.random.default_rng(M), M)[:M]
        q = H[3] * 0.9 + H[7] * 0.1
        q = (q / np.linalg.norm(q)).astype(np.float32)
        Q = np.ascontiguousarray(H[:48] * 0.5 + H[64:112] * 0.5)
        S1 = np.empty(M, np.float32)
        SB = np.empty((48, M), np.float32)
        fns = {"numpy matvec": lambda: H @ q}
        first = None
        for R, split in ((8, False), (1, False), (8, True), (4, True)):
            f = _scan_one(R, split)
            f(H, q, S1)
            first = S1.copy() if first is None else first
            assert np.array_equal(S1, first), (R, split)
            fns[f"1 query, {R} x 1{' split' if split else ''}"] = lambda f=f: f(H, q, S1)
        fns["numpy matmul, 48 queries"] = lambda: Q @ H.T
        first = None
        for R, NQ, split in ((6, 4, False), (3, 2, False), (6, 2, True), (4, 2, True),
                             (2, 4, True), (3, 4, True), (4, 4, True)):
            f = _scan_batch(R, NQ, split)
            f(H, Q, SB)
            first = SB.copy() if first is None else first
            assert np.array_equal(SB, first), (R, NQ, split)
            fns[f"48 queries, {R} x {NQ}{' split' if split else ''}"] = lambda f=f: f(H, Q, SB)
        best = {name: [] for name in fns}
        for _ in range(rounds):
            for name, f in fns.items():
                ts = []
                for _ in range(10 if "48" not in name else 2):
                    t = time.perf_counter()
                    f()
                    ts.append(time.perf_counter() - t)
                best[name].append(min(ts))
        for name, v in best.items():
            print(f"  {M:,} x 384, {name}: {np.median(v) * 1e6:,.0f} us")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--tiles", action="store_true",
                    help="only time the dot-product tile shapes (why kernels._cpu picks its "
                         "tiles for this machine's vector width)")
    args = ap.parse_args()
    if args.tiles:
        tiles()
        return
    data = Path(args.data)
    inp = cases.Inputs(False, data if data.is_dir() else None, lambda m: None)
    cosine_10k()
    propagate_musique(inp)
    retrieve_core_musique(inp)


if __name__ == "__main__":
    main()
