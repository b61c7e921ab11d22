"""HippoRAG 2's retrieval, as its code (OSU-NLP-Group/HippoRAG 2.0) does it, without an LLM:
the ``hipporag2`` baseline of ``evireform eval`` (``hipporag_ppr`` is a simplified variant).

The graph (``HippoRAG.index``): one node per entity and per passage; triples are lower-cased
with every character outside ``[A-Za-z0-9 ]`` replaced by a space (``text_processing``) and
deduplicated per passage; a triple ``(s, r, o)`` adds the fact edges ``s-o`` and ``o-s``
(weight: how many triples join them), each entity of a passage's triples an edge to the
passage (weight 1), and each entity with more than two alphanumeric characters a synonymy edge
to every other entity whose embedding has cosine >= 0.8 with it (at most 101, best first;
weight: the cosine, replacing a fact edge's weight in that direction).  Every directed pair is
an edge of the undirected igraph graph, so a pair joined both ways is two parallel edges.

Retrieval (``HippoRAG.retrieve``): the facts (``str`` of the processed triple tuple) scored by
the question's embedding and min-max normalised; the top 5 facts (the recognition-memory
filter, an LLM call, is the identity without an LLM: the paper's "w/o filter" setting; with
``eval --llm`` it is the role ``hipporag2-filter``, :class:`evireform.llm.LLMFactFilter`,
and when it keeps no fact the dense ranking answers); each of
their subject and object entities weighted by the mean over its occurrences in those facts of
(fact score / number of passages whose triples contain it), the top 5 entities kept; every
passage weighted 0.05 x its min-max-normalised dense score; personalised PageRank (igraph,
prpack, damping 0.5, undirected, weighted) from those weights; passages ranked by their
PageRank mass.  With no fact at all, the dense ranking (HippoRAG's DPR fallback).

The triples come from the HippoRAG OpenIE file when the evaluation has one (``eval --openie``),
else from the index's propositions: a proposition with entities ``e1 .. en`` stands for the
triple ``(e1, text, en)`` (an adaptation: the heuristic extractor gives no subject/object).
"""
from __future__ import annotations

import re
from typing import Any, Sequence, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only
    from ..embed import Embedder
    from ..index import PropositionIndex

__all__ = ["text_processing", "HippoRAG2", "hipporag2_rankings"]

SYNONYM_THRESHOLD = 0.8  # synonymy_edge_sim_threshold
SYNONYM_TOPK = 2047      # synonymy_edge_topk
SYNONYM_MAX = 100        # the loop stops once more than this many were added
LINK_TOP_K = 5           # linking_top_k: facts kept, then entities kept
PASSAGE_NODE_WEIGHT = 0.05
DAMPING = 0.5


def text_processing(text) -> str:
    """HippoRAG's normalisation of a triple's parts."""
    return re.sub("[^A-Za-z0-9 ]", " ", str(text).lower()).strip()


def min_max_normalize(x: np.ndarray) -> np.ndarray:
    lo, hi = np.min(x), np.max(x)
    return np.ones_like(x) if hi - lo == 0 else (x - lo) / (hi - lo)


def _unique_valid(triples) -> list[tuple]:
    """``filter_invalid_triples``: three parts, duplicates dropped, order kept."""
    seen, out = set(), []
    for t in triples:
        if len(t) != 3:
            continue
        t = tuple(str(x) for x in t)
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


class HippoRAG2:
    """The graph and the stores of one corpus (see the module docstring).  ``triples``: per
    passage position, its raw ``(s, r, o)`` triples."""

    facts: list[tuple[str, ...]]
    graph: Any

    def __init__(self, triples: Sequence[Sequence[tuple]], embedder: Embedder, *,
                 show_progress: bool = False) -> None:
        try:
            import igraph
        except ImportError as exc:
            raise ImportError("the hipporag2 baseline needs igraph: "
                              "pip install 'evireform[eval]'") from exc
        self.N = N = len(triples)
        chunk_triples = [[tuple(text_processing(x) for x in t) for t in _unique_valid(ts)]
                         for ts in triples]
        chunk_entities = []
        for ts in chunk_triples:
            ents: set[Any] = set()
            for t in ts:
                ents.update((t[0], t[2]))
            chunk_entities.append(ents)
        self.entities = sorted({e for ents in chunk_entities for e in ents})
        self._ent_id = ent_id = {e: i for i, e in enumerate(self.entities)}
        self.facts = sorted({t for ts in chunk_triples for t in ts})
        E = len(self.entities)
        #: how many passages' triples contain each entity
        self.ent_passages = np.zeros(E)
        stats: dict[tuple[int, int], float] = {}
        for ts, ents in zip(chunk_triples, chunk_entities):
            for t in ts:  # fact edges, both directions, one per triple
                a, b = ent_id[t[0]], ent_id[t[2]]
                stats[(a, b)] = stats.get((a, b), 0.0) + 1
                stats[(b, a)] = stats.get((b, a), 0.0) + 1
            for e in ents:
                self.ent_passages[ent_id[e]] += 1
        for j, ents in enumerate(chunk_entities):  # passage edges (passage nodes after E)
            for e in ents:
                stats[(E + j, ent_id[e])] = 1.0
        self.fact_emb = np.asarray(embedder.encode([str(f) for f in self.facts],
                                                   show_progress=show_progress)) \
            if self.facts else np.zeros((0, int(embedder.dim)), np.float32)
        if E:
            ent_emb = np.asarray(embedder.encode(self.entities, show_progress=show_progress),
                                 dtype=np.float32)
            ent_emb /= np.maximum(np.linalg.norm(ent_emb, axis=1, keepdims=True), 1e-12)
            self._synonymy(ent_emb, stats)
        edges = [(a, b) for (a, b) in stats if a != b]
        self.graph = igraph.Graph(n=E + N, edges=edges, directed=False)
        self.graph.es["weight"] = [stats[e] for e in edges]
        self.E = E

    def _synonymy(self, ent_emb: np.ndarray, stats: dict[str, Any]) -> None:
        alnum = [len(re.sub("[^A-Za-z0-9]", "", e)) > 2 for e in self.entities]
        E = len(self.entities)
        for lo in range(0, E, 1024):
            S = ent_emb[lo:lo + 1024] @ ent_emb.T
            for r in range(S.shape[0]):
                i = lo + r
                if not alnum[i]:
                    continue
                row = S[r]
                cand = np.flatnonzero(row >= SYNONYM_THRESHOLD)
                cand = cand[np.argsort(-row[cand], kind="stable")][:SYNONYM_TOPK]
                added = 0
                for nn in cand:
                    if added > SYNONYM_MAX:
                        break
                    if nn != i and self.entities[nn] != "":
                        stats[(i, int(nn))] = float(row[nn])
                        added += 1

    def candidates(self, q_fact: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the question's min-max-normalised score of every fact, its top 5 facts best
        first): what the recognition-memory filter is shown."""
        fs = min_max_normalize(self.fact_emb @ q_fact)
        top = np.argsort(fs)[-LINK_TOP_K:][::-1] if len(fs) > LINK_TOP_K else np.argsort(fs)[::-1]
        return fs, top

    def reset(self, q_fact: np.ndarray, q_passage_sims: np.ndarray,
              chosen: tuple[Any, ...] | None = None) -> np.ndarray:
        """The PageRank reset weights of one question, entities then passages (``q_fact``:
        its embedding, as the facts were embedded; ``q_passage_sims``: its dense similarity
        to every passage; ``chosen``: ``(fact scores, facts kept)`` when a filter chose,
        default :meth:`candidates` unfiltered); the facts must not be empty."""
        fs, top = chosen if chosen is not None else self.candidates(q_fact)
        ent_id = self._ent_id
        weights = np.zeros(self.E + self.N)
        occurs = np.zeros(self.E + self.N)
        seen = {}
        for f in top:
            s_, _, o = self.facts[int(f)]
            for phrase in (s_, o):
                i = ent_id.get(phrase.lower())
                if i is None:
                    continue
                w = fs[f]
                if self.ent_passages[i] > 0:
                    w = w / self.ent_passages[i]
                weights[i] += w
                occurs[i] += 1
                seen[phrase] = i
        weights = np.divide(weights, occurs, out=np.zeros_like(weights), where=occurs != 0)
        keep = sorted(seen.items(), key=lambda kv: weights[kv[1]], reverse=True)[:LINK_TOP_K]
        kept = np.zeros_like(weights)
        for _, i in keep:
            kept[i] = weights[i]
        kept[self.E:] = min_max_normalize(q_passage_sims) * PASSAGE_NODE_WEIGHT
        return np.where(np.isnan(kept) | (kept < 0), 0, kept)

    def pagerank(self, reset: np.ndarray) -> np.ndarray:
        """igraph's personalised PageRank (prpack, damping 0.5, undirected, weighted), as
        ``HippoRAG.run_ppr`` calls it; every node's mass."""
        return np.asarray(self.graph.personalized_pagerank(
            vertices=range(self.E + self.N), damping=DAMPING, directed=False, weights="weight",
            reset=reset, implementation="prpack"))

    def scores(self, q_fact: np.ndarray, q_passage_sims: np.ndarray, *, question: str | None=None,
               fact_filter=None) -> np.ndarray | None:
        """PageRank mass per passage for one question, or None when no fact is left (then
        the dense ranking answers).  ``fact_filter`` (an
        :class:`~evireform.llm.LLMFactFilter`, with the ``question`` text): the
        recognition memory that keeps the relevant ones of the top 5 facts."""
        if not len(self.facts):
            return None
        chosen = None
        if fact_filter is not None:
            fs, top5 = self.candidates(q_fact)
            kept = fact_filter.filter(question, [self.facts[int(f)] for f in top5])
            if not len(kept):
                return None
            chosen = (fs, top5[list(kept)])
        return self.pagerank(self.reset(q_fact, q_passage_sims, chosen))[self.E:]


def index_triples(idx: PropositionIndex) -> list[list[tuple]]:
    """The triples a non-OpenIE index stands for: ``(e1, text, en)`` per proposition with
    entities ``e1 .. en`` (see the module docstring)."""
    g, names = idx.graph, idx.entity_names
    out: list[list[tuple]] = [[] for _ in range(idx.n_passages)]
    owner = np.asarray(idx.owner)
    for i in range(idx.n_props):
        ents = g.a_indices[g.a_indptr[i]:g.a_indptr[i + 1]]
        if len(ents):
            out[int(owner[i])].append((names[int(ents[0])], idx.prop_texts[i],
                                       names[int(ents[-1])]))
    return out


def hipporag2_rankings(inputs, k: int) -> list[list[int]]:
    """``hipporag2`` over a :class:`~evireform.evaluation.baselines.BaselineInputs`: the
    OpenIE file's triples when it has one, else the index's propositions."""
    idx = inputs.idx
    if getattr(inputs, "openie_path", None):
        from ..extract import openie_triples
        by_id, _ = openie_triples(inputs.openie_path, idx.passages)
        triples = [by_id.get(p.id, []) for p in idx.passages]
    else:
        triples = index_triples(idx)
    h = HippoRAG2(triples, inputs.embedder, show_progress=inputs.show_progress)
    llm = getattr(inputs, "llm", None)
    fact_filter = None
    if llm is not None:
        from ..llm import LLMFactFilter
        fact_filter = LLMFactFilter(llm)
    out = []
    for b in range(len(inputs.questions)):
        sims = inputs.P @ inputs.Q[b]
        s = h.scores(inputs.Q[b], sims, question=inputs.questions[b], fact_filter=fact_filter)
        if s is None:
            s = min_max_normalize(sims)
        out.append([int(j) for j in np.argsort(s)[::-1][:k]])
    return out
