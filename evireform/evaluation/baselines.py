"""Baseline retrievers on the same corpus, embedder and evaluation code.

* :func:`bm25_rankings` - BM25 (``bm25s``, English stopwords) over ``title + newline + text``;
* :func:`dense_rankings` - dense passage retrieval, same embedder, ``title + newline + text``;
* ``hybrid`` - :func:`rrf_rankings` of the two above (reciprocal-rank fusion, k = 60, each
  ranked to 100 passages): the hybrid search users pick (txtai, LlamaIndex, LightRAG);
* :func:`dense_prop_rankings` - dense proposition retrieval read out to passages: passages in
  the order of their best proposition among the question's top 200 (then the dense passage
  order fills the tail);
* :func:`ppr_rankings` - a HippoRAG-style graph retriever: personalised PageRank over the
  passage-entity graph.  Seeding: the entities of the question's top 5 propositions get reset
  mass proportional to those propositions' similarities (split evenly over each
  proposition's entities), and every passage node gets 0.05 x its dense passage similarity
  (HippoRAG 2's passage-node weight); damping 0.5 (HippoRAG's setting); power iteration
  until the L1 change is below 1e-8 or 100 steps.  Passages rank by their PPR mass.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Sequence, TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from ..engine import search_index
from ..index import PropositionIndex
from ..types import Passage

if TYPE_CHECKING:  # annotations only
    from ..embed import Embedder
    from ..types import StrPath


def passage_texts(passages: Sequence[Passage]) -> list[str]:
    """Dense and BM25 passage text: title + newline + text."""
    return [f"{p.title}\n{p.text}" for p in passages]


def dense_rankings(P: np.ndarray, Q: np.ndarray, k: int) -> list[list[int]]:
    """Exact dense passage ranking (cosine, ties by lower id)."""
    from ..kernels import cosine_topk_batch
    ids, _ = cosine_topk_batch(P, Q, k)
    return [[int(j) for j in row if j >= 0] for row in ids]


def dense_passage_embeddings(corpus_path: StrPath, passages: Sequence[Any], embedder: Embedder, cache_dir: StrPath | None=None,
                             show_progress: bool=False) -> np.ndarray:
    """Passage embeddings for the dense baseline, cached by corpus checksum and embedder."""
    import os
    import tempfile
    from ..cache import default_cache_dir
    from ..store import file_sha256
    d = Path(cache_dir or default_cache_dir()) / "dense"
    f = d / f"{Path(corpus_path).stem}-{file_sha256(corpus_path)[:12]}-{embedder.name}.npy"
    if f.exists():
        try:
            P = np.load(f, allow_pickle=False)
            if P.shape == (len(passages), embedder.dim):
                return P
        except (ValueError, OSError):
            pass
    P = embedder.encode(passage_texts(passages), show_progress=show_progress)
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".npy.tmp")
    with os.fdopen(fd, "wb") as fh:
        np.save(fh, P, allow_pickle=False)
    os.replace(tmp, f)
    return P


def bm25_rankings(passage_texts: Sequence[str], questions: Sequence[str], k: int) -> list[list[int]]:
    try:
        import bm25s
    except ImportError as exc:
        raise ImportError("the BM25 baseline needs bm25s: pip install 'evireform[eval]'") from exc
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(list(passage_texts), stopwords="en", show_progress=False),
                    show_progress=False)
    k = min(k, len(passage_texts))
    docs, _ = retriever.retrieve(bm25s.tokenize(list(questions), stopwords="en",
                                                show_progress=False), k=k, show_progress=False,
                                 n_threads=1)
    return [[int(j) for j in row] for row in docs]


def engine_bm25_rankings(idx: Any, questions: Sequence[str], k: int) -> list[list[int]]:
    """BM25 over passages (title, newline, text) with the index's own lexical index and
    tokenizer (:func:`evireform.extract.tokens.lexical_tokens`: identifiers whole and in
    parts, CJK bigrams, plurals folded): the lexical signal EviReform fuses, as a ranking
    of its own.  Ties by the lower passage position, as the kernel breaks them."""
    from ..engine.lexical import lexical_search
    from ..engine.structures import lexical_of
    ids, _ = lexical_search(lexical_of(idx), list(questions), min(k, idx.n_passages),
                            "passages")
    return [[int(j) for j in row if j >= 0] for row in ids.tolist()]


def rrf_rankings(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]], k: int,
                 c: int = 60) -> list[list[int]]:
    """Reciprocal-rank fusion of two rankings per question (Cormack et al., 2009): a
    passage's score is ``sum 1 / (c + rank)`` over the rankings that hold it (ranks from 1);
    ties by the lower passage position."""
    out = []
    for ra, rb in zip(a, b):
        score: dict[int, float] = {}
        for ranking in (ra, rb):
            for r, j in enumerate(ranking):
                score[int(j)] = score.get(int(j), 0.0) + 1.0 / (c + r + 1)
        out.append(sorted(score, key=lambda j: (-score[j], j))[:k])
    return out


def _fill(order: list[int], tail: Sequence[int], k: int) -> list[int]:
    seen = set(order)
    for j in tail:
        if len(order) >= k:
            break
        if j not in seen:
            seen.add(j)
            order.append(int(j))
    return order[:k]


def dense_prop_rankings(idx: PropositionIndex, Q: np.ndarray, dense_tail: Sequence[Sequence[int]],
                        k: int, n_props: int = 200) -> list[list[int]]:
    ids, _ = search_index(idx, Q, n_props)
    out = []
    for row, tail in zip(ids, dense_tail):
        order: list[int] = []
        for i in row[row >= 0]:
            j = int(idx.owner[i])
            if j not in order:
                order.append(j)
                if len(order) >= k:
                    break
        out.append(_fill(order, tail, k))
    return out


class PPRRetriever:
    """Personalised PageRank over the passage-entity graph (see the module docstring)."""

    damping: float
    idx: PropositionIndex
    max_iter: int
    n_seed_props: int
    passage_weight: float
    tol: float

    def __init__(self, idx: PropositionIndex, damping: float = 0.5, n_seed_props: int = 5,
                 passage_weight: float = 0.05, tol: float = 1e-8, max_iter: int = 100) -> None:
        self.idx, self.damping = idx, damping
        self.n_seed_props, self.passage_weight = n_seed_props, passage_weight
        self.tol, self.max_iter = tol, max_iter
        g = idx.graph
        M, N, Ne = idx.n_props, idx.n_passages, idx.n_entities
        rows = np.repeat(np.arange(M), np.diff(g.a_indptr))
        C = sp.csr_matrix((np.ones(len(rows)), (idx.owner[rows], g.a_indices)), shape=(N, Ne))
        C.data[:] = 1.0  # passage-entity edges, unweighted
        adj = sp.bmat([[None, C], [C.T, None]], format="csr")
        deg = np.asarray(adj.sum(axis=1)).ravel()
        inv = np.zeros_like(deg)
        inv[deg > 0] = 1.0 / deg[deg > 0]
        self.PT = (sp.diags(inv) @ adj).T.tocsr()  # column-stochastic transpose
        self.N = N

    def scores(self, prop_ids, prop_scores, passage_sims) -> np.ndarray:
        g, N = self.idx.graph, self.N
        reset = np.zeros(self.PT.shape[0])
        for i, s in zip(prop_ids[: self.n_seed_props], prop_scores[: self.n_seed_props]):
            ents = g.a_indices[g.a_indptr[i]:g.a_indptr[i + 1]]
            if len(ents):
                reset[N + ents] += s / len(ents)
        reset[:N] += self.passage_weight * np.maximum(passage_sims, 0)
        if reset.sum() <= 0:
            return np.zeros(N)
        reset /= reset.sum()
        p = reset.copy()
        for _ in range(self.max_iter):
            nxt = (1 - self.damping) * reset + self.damping * (self.PT @ p)
            done = np.abs(nxt - p).sum() < self.tol
            p = nxt
            if done:
                break
        return p[:N]


def ppr_rankings(idx: PropositionIndex, Q: np.ndarray, P: np.ndarray, k: int) -> list[list[int]]:
    ppr = PPRRetriever(idx)
    ids, sc = search_index(idx, Q, ppr.n_seed_props)
    out = []
    for b in range(len(Q)):
        keep = ids[b] >= 0
        s = ppr.scores(ids[b][keep], sc[b][keep], P @ Q[b])
        order = np.lexsort((np.arange(len(s)), -s))[:k]
        out.append([int(j) for j in order])
    return out


# --------------------------------------------------------------------------- registry
@dataclass
class BaselineInputs:
    """What a baseline may read; question and passage embeddings are made on first use."""

    idx: PropositionIndex
    questions: list[str]
    embedder: object
    corpus_path: object
    k: int
    cache_dir: object = None
    show_progress: bool = False
    #: the HippoRAG OpenIE file the index was built from (``eval --openie``), or None
    openie_path: object = None
    #: the LLM client of ``eval --llm`` (hipporag2's recognition-memory filter), or None
    llm: object = None

    @cached_property
    def Q(self) -> np.ndarray:
        from ..embed import encode_queries
        return encode_queries(self.embedder, self.questions)

    @cached_property
    def P(self) -> np.ndarray:
        return dense_passage_embeddings(self.corpus_path, self.idx.passages, self.embedder,
                                        self.cache_dir, self.show_progress)


@dataclass(frozen=True)
class Baseline:
    description: str
    rank: Callable[[BaselineInputs], list[Any]]


#: name -> baseline; ``evireform eval --methods`` accepts these beside EviReform's variants
BASELINES: dict[str, Baseline] = {
    "dense": Baseline("dense passage retrieval, same embedder (title + newline + text)",
                      lambda b: dense_rankings(b.P, b.Q, b.k)),
    "bm25": Baseline("BM25 (bm25s) over title + newline + text",
                     lambda b: bm25_rankings(passage_texts(b.idx.passages), b.questions, b.k)),
    "bm25_engine": Baseline("BM25 over title + newline + text with the engine's lexical "
                            "index and tokenizer (identifiers, CJK bigrams, plurals folded)",
                            lambda b: engine_bm25_rankings(b.idx, b.questions, b.k)),
    "hybrid": Baseline("reciprocal-rank fusion (k = 60) of bm25 and dense, each ranked to "
                       "100 passages: the hybrid search users pick",
                       lambda b: rrf_rankings(
                           bm25_rankings(passage_texts(b.idx.passages), b.questions,
                                         max(b.k, 100)),
                           dense_rankings(b.P, b.Q, max(b.k, 100)), b.k)),
    "dense_prop": Baseline("dense proposition retrieval read out to passages",
                           lambda b: dense_prop_rankings(b.idx, b.Q,
                                                         dense_rankings(b.P, b.Q, b.k), b.k)),
    "hipporag_ppr": Baseline("HippoRAG-style personalised PageRank over the passage-entity "
                             "graph (a simplified, LLM-free variant: see hipporag2)",
                             lambda b: ppr_rankings(b.idx, b.Q, b.P, b.k)),
    "hipporag2": Baseline("HippoRAG 2's retrieval as its code does it, without the LLM "
                          "filter (evireform.evaluation.hipporag2)",
                          lambda b: _hipporag2(b)),
}


def _hipporag2(b: "BaselineInputs") -> list[Any]:
    from .hipporag2 import hipporag2_rankings
    return hipporag2_rankings(b, b.k)
