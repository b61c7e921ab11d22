"""Two related multi-hop strategies on the same index and kernels, BGR and Hi-Q, and the
one-search methods a user may pick instead (:class:`Search`: BM25, dense, hybrid).

Both return :class:`~evireform.retriever.RetrievalResult` objects whose
:meth:`~evireform.retriever.RetrievalResult.evidence_graph` states how the evidence
connects, and both run LLM-free by default with optional LLM roles through
:class:`~evireform.llm.LLMClient`.  Their passage searches are EviReform's first steps
(proposition search over the index, ``u = max(0, h . h_q)`` over the top ``n_candidates``,
normalised, read out per passage with ``1/sqrt(|P_j|)``: the same kernels), so the three
methods differ only in how they move from evidence to evidence.

**BGR** (Graph-hop's bidirectional graph retrieval, :class:`BGR`).  A forward chain starts
at the question's best passage and steps to the best new passage for a query made from the
current passage's bridge entity (the residual query of :class:`~evireform.roles.BridgeReformulator`,
or the LLM reformulator).  A backward chain starts at the passage that best answers the
question's last hop (the question's words without its named constraints, among passages
that do not name those constraints) and steps back to the passage that shares an entity
with the current one (one propagation step through shared entities, the kernel of
EviReform's step 7) and best matches the question, until it reaches a passage that names a
constraint.  As the paper describes, the two subgraphs' edges are intersected and the
nodes and edges outside the intersection removed: the result's edges.  The ranking puts the
intersection's nodes first, then the forward chain, the backward chain and the question's
own passage ranking.

**Hi-Q** (hierarchical evidence-guided query refinement, :class:`HiQ`).  Every node of the
query tree first tries to resolve its query from its own top passages; a resolved node stops,
an unresolved node at the depth budget (or with no split) fails, and any other node is split
into an independent sub-query and a dependent one that refers to its answer as ``#1``; the
split must cover the node's query (coverage verification), the independent side is solved
first and its answer rewritten into the dependent side before it retrieves.  Resolution is
the LLM reader when an LLM client is given (resolved = an answer other than ``noanswer``);
LLM-free, a node is resolved when every named constraint of its query appears in its top
``k_check`` passages, at least ``coverage`` of its other content words do too, and a bridge
span (a name the passages add; :meth:`BridgeReformulator.bridges`) is there to be the answer.
The LLM-free split cuts the query at its last relative clause or ``of`` phrase that holds a
named constraint (``"Who was the first president of the association which published X?"``
-> ``"association which published X"`` and ``"Who was the first president of #1"``);
coverage holds when the two sides keep every content word and constraint of the query.  The
final ranking interleaves the leaves' rankings in dependency order, then the root's; the
evidence graph links the passage that answered a sub-query to the first passage retrieved
with that answer (``dependency`` edges).
"""
from __future__ import annotations

import copy
from itertools import islice
from dataclasses import dataclass, field
from typing import Any, Sequence, TYPE_CHECKING

import numpy as np

from .embed import encode_queries
from .engine import Scope, make_engine, pack_seeds
from .entities import canonical_entity
from .explain import EvidenceEdge
from .records import SCORE_MEANING
from .timing import Stopwatch, stage
from .retriever import RankedPassage, RetrievalResult, check_embedder, fold_repeats
from ._checks import as_list, int_at_least, positive_int
from .entities import words as _words
from .roles import (MAX_QUERY_CHARS, QUESTION_STOPWORDS as _QSTOP, BridgeReformulator,
                    HeuristicSplitter, RoleResult, SubstitutionRewriter, clean_queries,
                    constraints as _constraints, covers, split_query)

#: how Hi-Q reads its ranking off the query tree (:class:`HiQ`'s ``ranking``)
HIQ_RANKINGS = ("interleave", "resolved_first")

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from .embed import Embedder
    from .roles import Reformulator
    from .index import PropositionIndex
    from .types import FilterSpec
    from .records import BGRTraceRecord, HiQNodeRecord, HiQTraceRecord

__all__ = ["BGR", "HiQ", "HiQNode", "Search", "StrategyTrace", "STRATEGIES",
           "STRATEGY_SETTINGS", "SEARCHES", "HIQ_RANKINGS", "make_strategy",
           "split_query", "covers"]


# --------------------------------------------------------------------------- shared search
class _PassageSearch:
    """Question -> passage ranking with EviReform's first steps (search, u, readout)."""

    def __init__(self, index: PropositionIndex, embedder: Embedder, n_candidates: int = 100, backend: Any="auto", engine: Any=None) -> None:
        if embedder is not None:
            check_embedder(index, embedder)
        if engine is not None and backend != "auto":
            raise ValueError("give engine= or backend=, not both")
        self.index, self.embedder = index, embedder
        self.n_candidates: int = n_candidates
        self.engine = make_engine(index, engine if engine is not None else backend)
        #: where every search and ranking runs (:class:`~evireform.engine.Scope`): the
        #: whole index here, a filter's restriction in :meth:`restricted`'s copies
        self.scope = Scope(self.engine, index)

    def restricted(self, filter: FilterSpec, k: int) -> "_PassageSearch":
        """A copy of this search in the scope of ``filter`` (:mod:`evireform.filters`) and
        ``k`` (checked and clipped by the scope): its searches and rankings pass the
        filter's restriction to the same engine."""
        out = copy.copy(self)
        out.scope = Scope.of(self.engine, self.index, filter, k)
        return out

    @property
    def n_passages(self) -> int:
        return self.scope.n_passages

    @property
    def graph(self) -> Any:
        """The graph whose degree terms the search propagates with (the scope's)."""
        return self.scope.graph

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.embedder is None:
            raise ValueError("this strategy has no embedder: pass embedder=...")
        with stage("encode"):
            return encode_queries(self.embedder, list(texts))

    def rank(self, texts: Sequence[str], k: int, H: ArrayLike | None=None):
        """Per text: (passage positions, scores), best first, positive scores only."""
        if not texts:
            return []
        H = self.embed(texts) if H is None else H
        with stage("search"):
            ids, sc = self.scope.search(H, self.n_candidates)
        seeds = []
        for i, s in zip(ids, sc):
            keep = (i >= 0) & (s > 0)
            i, s = i[keep], s[keep]
            seeds.append((i, s / s.sum() if len(s) else s))
        return self._readout(seeds, k)

    def _readout(self, seeds, k, alpha: float = 1.0, propagation: bool = False):
        with stage("rank"):
            P, S = self.scope.rank(*pack_seeds(seeds), alpha, k, propagation=propagation)
            return [(p[s > 0].astype(np.int64), s[s > 0]) for p, s in zip(P, S)]

    def neighbours(self, passages: Sequence[int], k: int):
        """Per passage: the passages its propositions reach in one step through shared
        entities (propagation of a uniform seed over its propositions, alpha = 0)."""
        idx = self.index
        seeds = []
        for j in passages:
            props = idx.propositions_of(int(j))
            seeds.append((props, np.full(len(props), 1.0 / max(1, len(props)))))
        return self._readout(seeds, k, alpha=0.0, propagation=True)


@dataclass
class StrategyTrace:
    """What a BGR or Hi-Q run did: ``forward``/``backward`` chains, their ``intersection``,
    the forward step's ``queries`` and the ``merge`` (BGR); the query ``tree`` and the
    ``ranking`` read off it (Hi-Q); role events.  Passages are positions; :meth:`to_dict`
    names them by id (``names``, filled when the result is made)."""

    forward: list[int] = field(default_factory=list)
    backward: list[int] = field(default_factory=list)
    intersection: list[tuple[int, int]] = field(default_factory=list)
    tree: "HiQNode | None" = None
    role_events: list[str] = field(default_factory=list)
    #: "bgr" or "hiq"
    method: str = "bgr"
    queries: list[str] = field(default_factory=list)
    merge: str = "intersection"
    ranking: str = "interleave"
    #: passage position -> id, of every passage the trace names
    names: dict[int, str] = field(default_factory=dict, repr=False)
    #: wall time per stage in ms (:mod:`evireform.timing`)
    timings_ms: dict[str, float] = field(default_factory=dict)

    def positions(self) -> set[int]:
        """Every passage position the trace names."""
        out = set(self.forward) | set(self.backward) | {j for e in self.intersection
                                                         for j in e}
        stack = [self.tree] if self.tree is not None else []
        while stack:
            node = stack.pop()
            out.update(node.passages)
            stack.extend(node.children)
        return out

    def to_dict(self) -> "BGRTraceRecord | HiQTraceRecord":
        """The trace's record (:mod:`evireform.records`): what the method did, passages by
        id, and what its scores mean."""
        name = lambda j: self.names.get(int(j), str(j))  # noqa: E731
        events = list(self.role_events)
        if self.method in SEARCHES:
            return {"method": self.method, "score": SCORE_MEANING[self.method],
                    "timings_ms": dict(self.timings_ms)}  # type: ignore[typeddict-item]
        if self.method == "hiq":
            def node(n: HiQNode) -> HiQNodeRecord:
                return {"query": n.query, "depth": n.depth, "status": n.status,
                        "answer": n.answer, "passages": [name(j) for j in n.passages],
                        "children": [node(c) for c in n.children]}
            tree = node(self.tree) if self.tree is not None else \
                {"query": "", "depth": 0, "status": "", "answer": None, "passages": [],
                 "children": []}
            return {"method": "hiq", "score": SCORE_MEANING["hiq"], "tree": tree,
                    "ranking": self.ranking, "role_events": events,
                    "timings_ms": dict(self.timings_ms)}  # type: ignore[typeddict-item]
        return {"method": "bgr", "score": SCORE_MEANING["bgr"],
                "forward": [name(j) for j in self.forward],
                "backward": [name(j) for j in self.backward],
                "intersection": [[name(a), name(b)] for a, b in self.intersection],
                "queries": list(self.queries), "merge": self.merge,  # type: ignore[typeddict-item]
                "role_events": events, "timings_ms": dict(self.timings_ms)}

    def format(self, passages: Sequence[Any] | None=None) -> str:
        name = (lambda j: passages[j].title or passages[j].id) if passages else str
        if self.method in SEARCHES:
            return ""  # one search: no chain, no tree
        if self.tree is not None:
            return self.tree.format(name)
        return "\n".join([
            "forward:  " + " -> ".join(name(j) for j in self.forward),
            "backward: " + " <- ".join(name(j) for j in self.backward),
            "intersection: " + (", ".join(f"{name(a)} -> {name(b)}"
                                          for a, b in self.intersection) or "(empty)")])


def _result(index: PropositionIndex, question: str, order: list[int], k: int, edges, trace,
            scope: Scope, fold: bool = True, scores: Sequence[float] | None = None
            ) -> RetrievalResult:
    """A result from a merged passage order (score = 1/(1 + rank): a merge has no common
    scale; ``scores``: the order's own, for a single search), filled to ``k`` with the other
    passages of ``scope`` (those a filter allows) in stored order at score 0 (as EviReform's
    ranking is); with ``fold``, a passage whose text a better-ranked one holds is left out
    and named on it, as EviReform's result does (:func:`~evireform.retriever.fold_repeats`)."""
    with stage("readout"):
        return _assemble(index, question, order, k, edges, trace, scope, fold, scores)


def _assemble(index, question, order, k, edges, trace, scope: Scope,
              fold=True, scores=None) -> RetrievalResult:
    def rows():
        taken = set()
        for r, j in enumerate(order):
            taken.add(j)
            yield row(j, 1.0 / (1 + r) if scores is None else float(scores[r]))
        allowed = scope.allowed
        universe = range(index.n_passages) if allowed is None else map(int, allowed)
        for j in universe:  # lazily: read only as far as the result needs
            if j not in taken:
                yield row(j, 0.0)

    def row(j, score):
        p = index.passages[j]
        return (j, p.id, p.title, score, 0.0, 0.0, 0.0, p.text, p.metadata)
    if fold and index.n_same_text:
        ranked = fold_repeats(index, rows(), k, scope.pmask)
    else:
        ranked = [RankedPassage(*e) for e in islice(rows(), k)]
    trace.names = {j: index.passages[j].id for j in sorted(trace.positions())}
    return RetrievalResult(question, ranked, trace, edges=list(edges))


def _rrf(lists, c: float = 60.0) -> tuple[dict[int, float], dict[int, int]]:
    """Reciprocal-rank fusion's scores of passage lists (sum of 1/(c + rank), ranks from 1)
    and each passage's first appearance."""
    score: dict[int, float] = {}
    seen: dict[int, int] = {}
    for lst in lists:
        for r, j in enumerate(lst):
            j = int(j)
            score[j] = score.get(j, 0.0) + 1.0 / (c + r + 1)
            seen.setdefault(j, len(seen))
    return score, seen


def _fuse(lists, first=(), c: float = 60.0) -> list[int]:
    """Reciprocal-rank fusion of passage lists (:func:`_rrf`), ties by first appearance;
    the ``first`` passages lead in their own order."""
    score, seen = _rrf(lists, c)
    lead = list(dict.fromkeys(int(j) for j in first))
    led = set(lead)
    rest = sorted((j for j in score if j not in led), key=lambda j: (-score[j], seen[j]))
    return lead + rest


def _fill(order: list[int], *lists) -> list[int]:
    seen = set(order)
    for lst in lists:
        for j in lst:
            j = int(j)
            if j not in seen:
                seen.add(j)
                order.append(j)
    return order


def _mentions(passage, constraints) -> bool:
    text = canonical_entity(passage.title + " " + passage.text)
    return any(c in text for c in constraints)


# --------------------------------------------------------------------------- BGR
class _Strategy:
    """What BGR and Hi-Q share: ``retrieve`` / ``retrieve_many`` over their ``_one(question,
    k)`` and their ``search`` (a :class:`_PassageSearch`), with filters."""

    def retrieve(self, question: str, k: int = 10, *, filter: FilterSpec=None) -> RetrievalResult:
        return self.retrieve_many([question], k, filter=filter)[0]

    def retrieve_many(self, questions: Sequence[str], k: int = 10, *,
                      filter: FilterSpec=None) -> list[RetrievalResult]:
        """Rank passages for each question; ``filter`` (:mod:`evireform.filters`) restricts
        every search and ranking to the matching passages, as an index of them alone would."""
        questions = as_list(questions, "questions")
        run = self._scoped(filter, k)
        k = run.search.scope.k
        if run.search.n_passages == 0:
            return [RetrievalResult(q, [], self._trace(), edges=[]) for q in questions]
        out = []
        for q in questions:  # each question timed by stage (evireform.timing)
            with Stopwatch("hops") as sw:
                res = run._one(q, k)
            res.trace.timings_ms = sw.rounded()
            out.append(res)
        return out

    def _trace(self, **kw: Any) -> StrategyTrace:
        """A trace of this strategy (its method and settings)."""
        return StrategyTrace(method=self.name, merge=getattr(self, "merge", "intersection"),
                             ranking=getattr(self, "ranking", "interleave"), **kw)

    def _scoped(self, filter: FilterSpec, k: int):
        """A shallow copy of this strategy whose search runs in the scope of ``filter`` and
        ``k`` (the original is untouched, so threads may share it)."""
        out = copy.copy(self)
        out.search = self.search.restricted(filter, k)
        return out


class BGR(_Strategy):
    """Bidirectional graph retrieval (see the module docstring).

    ``depth``: the most passages per chain; ``reformulator``: the forward step's query maker
    (default :class:`BridgeReformulator`; an :class:`~evireform.llm.LLMReformulator` for the
    LLM path); ``merge``: ``"intersection"`` (the paper) or ``"union"`` of the chains' edges;
    ``path``: what each forward step is conditioned on, ``"full"`` (the question and every
    passage of the chain so far, as Graph-hop's path code does) or ``"last"`` (the question and
    the chain's last passage only, this library's earlier behaviour).
    """

    depth: int
    embedder: Embedder | None
    index: PropositionIndex
    reformulator: Reformulator | BridgeReformulator
    search: _PassageSearch

    name = "bgr"

    def __init__(self, index: PropositionIndex, embedder: Embedder | None=None, *, depth: int = 3, n_candidates: int = 100,
                 reformulator: Reformulator | None=None, merge: str = "intersection", path: str = "full",
                 backend: Any="auto", engine: Any=None, fold_duplicates: bool = True) -> None:
        positive_int(depth, "depth")
        #: show a text several passages hold once, naming the others (as EviReform does)
        self.fold_duplicates: bool = bool(fold_duplicates)
        if path not in ("full", "last"):
            raise ValueError(f"path must be 'full' or 'last'; got {path!r}")
        self.path: str = path
        if merge not in ("intersection", "union"):
            raise ValueError(f"merge must be 'intersection' (the paper) or 'union'; got "
                             f"{merge!r}")
        #: how the two chains' edges combine: "intersection" (the paper: edges in both
        #: chains) or "union" (every edge of either chain; an option, measured as bgr_union)
        self.merge: str = merge
        self.search = _PassageSearch(index, embedder, n_candidates, backend, engine)
        self.index, self.embedder, self.depth = index, embedder, depth
        self.reformulator = reformulator or BridgeReformulator()


    def _forward(self, question: str, base, events) -> tuple[list[int], list[EvidenceEdge]]:
        idx = self.index
        chain = [int(base[0])] if len(base) else []
        edges = []
        while chain and len(chain) < self.depth:
            try:
                seen = chain if self.path == "full" else chain[-1:]
                with stage("reformulate"):
                    raw = self.reformulator.reformulate(question,
                                                        [idx.passages[j] for j in seen], 2)
                if isinstance(raw, RoleResult):  # an LLM reformulator's repairs/fallbacks
                    events.extend(raw.events())
                queries = list(raw or [])
            except Exception:
                events.append("reformulate:raised")
                queries = []
            queries, dropped = clean_queries(queries, 2)  # as EviReform cleans its queries
            if dropped:
                events.append(f"reformulate:dropped:{dropped}")
            if not queries:
                break
            best = None
            for q, (P, S) in zip(queries, self.search.rank(queries, len(chain) + 5)):
                for j, s in zip(P, S):
                    if int(j) not in chain:
                        if best is None or s > best[0]:
                            best = (float(s), int(j), q)
                        break
            if best is None:
                break
            edges.append(EvidenceEdge(chain[-1], best[1], "chain", best[2]))
            chain.append(best[1])
        return chain, edges

    @staticmethod
    def _last_hop(question: str) -> str:
        """The question's words without its named constraints: what its last hop asks."""
        cons = _constraints(question)
        words = [w for w in _words(question) if w not in _QSTOP
                 and not any(w in c.split() for c in cons)]
        return " ".join(words) or question

    def _backward(self, question: str, last_P, base_scores) -> tuple[list[int], list[EvidenceEdge]]:
        idx = self.index
        cons = _constraints(question)
        P = last_P[:50]
        start = next((int(j) for j in P if not _mentions(idx.passages[int(j)], cons)),
                     int(P[0]) if len(P) else None)
        if start is None:
            return [], []
        chain, edges = [start], []
        while len(chain) < self.depth and not _mentions(idx.passages[chain[-1]], cons):
            NP, NS = self.search.neighbours([chain[-1]], 200)[0]
            best = None
            for j, s in zip(NP, NS):
                j = int(j)
                if j in chain:
                    continue
                v = float(s) * base_scores.get(j, 0.0)
                if v > 0 and (best is None or v > best[0]):
                    best = (v, j)
            if best is None:
                break
            shared = self._shared_entity(best[1], chain[-1])
            edges.append(EvidenceEdge(best[1], chain[-1], "chain", shared))
            chain.append(best[1])
        return chain, edges

    def _shared_entity(self, a: int, b: int) -> str:
        g = self.index.graph

        def ents(j):
            out = set()
            for i in self.index.propositions_of(j):
                out.update(int(e) for e in g.a_indices[g.a_indptr[i]:g.a_indptr[i + 1]])
            return out
        common = ents(a) & ents(b)
        if not common:
            return ""
        inv_deg = self.search.graph.inv_deg  # the rarest shared entity (in the search's scope)
        e = min(common, key=lambda e: (-inv_deg[e], e))
        return self.index.entity_names[e]

    def _one(self, question: str, k: int) -> RetrievalResult:
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"question must be a non-empty string; got {question!r}")
        # the question and its last hop in one embedding and search batch
        (base_P, base_S), (last_P, _) = self.search.rank(
            [question, self._last_hop(question)], max(k, 200))
        base_scores = {int(j): float(s) for j, s in zip(base_P, base_S)}
        events: list[str] = []
        fwd, f_edges = self._forward(question, base_P, events)
        bwd, b_edges = self._backward(question, last_P, base_scores)
        both = {(e.src, e.dst) for e in f_edges} & {(e.src, e.dst) for e in b_edges}
        edges = [e for e in f_edges if (e.src, e.dst) in both]
        if self.merge == "union":
            edges += [e for e in f_edges + b_edges if (e.src, e.dst) not in both]
            edges = list({(e.src, e.dst): e for e in edges}.values())
        trace = self._trace(forward=fwd, backward=bwd, intersection=sorted(both),
                            queries=[e.via for e in f_edges], role_events=events)
        inter_nodes = [j for j in fwd if any(j in pair for pair in both)]
        order = _fuse([base_P, fwd, bwd], first=inter_nodes)
        return _result(self.index, question, order, k, edges, trace, self.search.scope,
                       self.fold_duplicates)


# --------------------------------------------------------------------------- Hi-Q
#: a reader answer longer than this is not an answer (it would be rewritten into a query)
MAX_ANSWER_CHARS = 200
@dataclass
class HiQNode:
    """One node of the query tree."""

    query: str                 # the node's query as retrieved (after rewriting)
    depth: int
    status: str = ""           # resolved | failed | expanded | blocked
    answer: str | None = None  # only a resolved node's (or an expanded node's resolved) answer
    passages: list[int] = field(default_factory=list)   # its own top passages
    children: list["HiQNode"] = field(default_factory=list)

    def leaves(self) -> list["HiQNode"]:
        if not self.children:
            return [self]
        return [x for c in self.children for x in c.leaves()]

    def format(self, name=str, indent: str = "") -> str:
        top = ", ".join(name(j) for j in self.passages[:2])
        ans = f" -> {self.answer!r}" if self.answer else ""
        lines = [f"{indent}[{self.status}] {self.query!r}{ans}  (top: {top})"]
        for c in self.children:
            lines.append(c.format(name, indent + "    "))
        return "\n".join(lines)


class HiQ(_Strategy):
    """Hierarchical evidence-guided query refinement (see the module docstring).

    ``max_depth``: the depth budget (the root has depth 0); ``k_node``: passages each node
    retrieves; ``k_read``: the passages the reader reads from ("from those passages
    alone"); ``k_check`` and ``coverage``: the LLM-free resolution test.

    The control rule as the paper states it: a node that resolves stops; at the depth budget,
    or when its query cannot be split, it fails; otherwise it is split and its two parts are
    solved in dependency order.  The dependent part is rewritten with the prerequisite's
    answer only when the prerequisite resolved; when it did not, the dependent keeps the
    prerequisite's question in place of ``#1`` and is tried once, without further splitting
    (status ``blocked`` unless it resolves; traced as ``hiq:prerequisite-unresolved``).  An
    unresolved node has no answer (an LLM-free bridge guess is never passed on as one); an
    expanded node's answer is its dependent's.  ``ranking``: how the passage ranking is read
    off the tree: ``"interleave"`` (the default: rank by rank, every leaf's passages in
    dependency order, so a dependent node's evidence reaches the top ranks beside its
    prerequisite's) or ``"resolved_first"`` (the earlier behaviour, measured as
    ``hiq_resolved_first``: resolved leaves' passages round-robin, then the unresolved
    leaves'); the question's own ranking fills after either.  ``splitter``
    splits and verifies (default :class:`~evireform.roles.HeuristicSplitter`), ``reader``
    resolves nodes (default: the LLM-free test).  ``llm`` (an
    :class:`~evireform.llm.LLMClient`) is a shortcut for the LLM reader and splitter
    (LLM-free fallbacks on any failure, recorded in the trace's role events).
    """

    bridges: BridgeReformulator
    coverage: float
    embedder: Embedder | None
    index: PropositionIndex
    k_check: int
    k_node: int
    k_read: int
    max_depth: int
    search: _PassageSearch

    name = "hiq"

    def __init__(self, index: PropositionIndex, embedder: Embedder | None=None, *, max_depth: int = 3, k_node: int = 10,
                 k_check: int = 2, coverage: float = 0.6, n_candidates: int = 100,
                 k_read: int = 5, llm: Any=None, splitter=None, reader=None, rewriter=None,
                 backend: Any="auto", engine: Any=None, ranking: str = "interleave",
                 fold_duplicates: bool = True) -> None:
        int_at_least(max_depth, 0, "max_depth")
        #: show a text several passages hold once, naming the others (as EviReform does)
        self.fold_duplicates: bool = bool(fold_duplicates)
        if ranking not in HIQ_RANKINGS:
            raise ValueError(f"ranking must be one of {HIQ_RANKINGS}; got {ranking!r}")
        #: how the passage ranking is read off the tree (see the class docstring)
        self.ranking: str = ranking
        if not 0.0 <= float(coverage) <= 1.0:
            raise ValueError(f"coverage must be in [0, 1]; got {coverage!r}")
        self.search = _PassageSearch(index, embedder, n_candidates, backend, engine)
        self.index, self.embedder, self.max_depth = index, embedder, max_depth
        self.k_node, self.k_check, self.coverage = k_node, k_check, float(coverage)
        self.k_read = positive_int(k_read, "k_read")
        self.bridges = BridgeReformulator()
        if llm is not None:
            from .llm import LLMReader, LLMRewriter, LLMSplitter
            reader, splitter = reader or LLMReader(llm), splitter or LLMSplitter(llm)
            rewriter = rewriter or LLMRewriter(llm)
        self.reader = reader
        self.splitter = splitter or HeuristicSplitter()
        #: rewrites a dependent query from the resolved prerequisite before it is retrieved
        self.rewriter = rewriter or SubstitutionRewriter()


    # -- the operators
    def _resolve(self, node: HiQNode, events: list[Any]) -> bool:
        P, _ = self.search.rank([node.query], self.k_node)[0]
        node.passages = [int(j) for j in P]
        if not node.passages:
            return False
        if self.reader is not None:
            read = [self.index.passages[j] for j in node.passages[:self.k_read]]
            with stage("read"):
                ans, ev = self.reader.answer(node.query, read)
            events.extend(ev)
            if ans and ans.strip().lower() not in ("noanswer", "no answer", "unknown") \
                    and len(ans.strip()) <= MAX_ANSWER_CHARS:
                node.answer = ans.strip()
                return True
            return False
        top = [self.index.passages[j] for j in node.passages[:self.k_check]]
        with stage("read"):
            guess = self._guess(node.query, top)
        text = canonical_entity(" ".join(p.title + " " + p.text for p in top))
        cons = _constraints(node.query.replace("#1", " "))
        if not all(c in text for c in cons) or guess is None:
            return False
        words = {w for w in _words(node.query) if w not in _QSTOP
                 and not any(w in c.split() for c in cons)}
        covered = set(_words(" ".join(p.title + " " + p.text for p in top)))
        if words and len(words & covered) / len(words) < self.coverage:
            return False
        node.answer = guess
        return True

    def _guess(self, query, passages: Sequence[Any]) -> str | None:
        b = self.bridges.bridges(query, passages)
        return b[0][1] if b else None

    def _split(self, query: str, events: list[Any]) -> tuple[str, str] | None:
        with stage("split"):
            parts = self.splitter.split(query)
            events.extend(parts.events() if isinstance(parts, RoleResult) else [])
            if parts and self.splitter.verify(query, *parts[0]):
                return parts[0]
        if isinstance(self.splitter, HeuristicSplitter):
            return None
        if parts:
            events.append("hiq:verify:rejected")
        parts = split_query(query)  # the LLM's split failed or was rejected
        if parts and covers(query, *parts):
            return parts
        return None

    def _solve(self, query: str, depth: int, events: list[Any], split: bool = True) -> HiQNode:
        node = HiQNode(query, depth)
        if self._resolve(node, events):
            node.status = "resolved"
            return node
        parts = None if depth >= self.max_depth or not split else self._split(query, events)
        if parts is None:
            node.status = "failed" if split else "blocked"
            return node
        first, second = parts
        c1 = self._solve(first, depth + 1, events)
        if c1.answer:  # the prerequisite resolved: the dependent rewritten from it
            with stage("rewrite"):
                got = self.rewriter.rewrite(second, first, c1.answer)
            if isinstance(got, RoleResult):
                events.extend(got.events())
                got = got[0]
            dependent = got
            c2 = self._solve(" ".join(dependent.split())[:MAX_QUERY_CHARS], depth + 1, events)
        else:  # unresolved: the dependent keeps the prerequisite's question, tried once
            events.append("hiq:prerequisite-unresolved")
            dependent = second.replace("#1", f"({first.strip().rstrip('?')})")
            c2 = self._solve(" ".join(dependent.split())[:MAX_QUERY_CHARS], depth + 1, events,
                             split=False)
        node.status, node.answer = "expanded", c2.answer
        node.children = [c1, c2]
        return node

    def _edges(self, node: HiQNode) -> list[EvidenceEdge]:
        if not node.children:
            return []
        c1, c2 = node.children
        out = self._edges(c1) + self._edges(c2)
        src = c1.leaves()[-1].passages[:1]
        dst = c2.leaves()[0].passages[:1]
        if src and dst and src[0] != dst[0]:
            out.append(EvidenceEdge(src[0], dst[0], "dependency", c2.leaves()[0].query))
        return out

    def _one(self, question: str, k: int) -> RetrievalResult:
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"question must be a non-empty string; got {question!r}")
        events: list[str] = []
        root = self._solve(question, 0, events)
        leaves = root.leaves()
        order: list[int] = []
        groups = [leaves] if self.ranking == "interleave" else \
            [[x for x in leaves if x.status == "resolved"],
             [x for x in leaves if x.status != "resolved"]]
        for group in groups:
            for r in range(max((len(x.passages) for x in group), default=0)):
                _fill(order, [x.passages[r] for x in group if r < len(x.passages)])
        base = root.passages
        if len(order) + len(base) < k:
            base = list(base) + [int(j) for j in self.search.rank([question], k)[0][0]]
        order = _fill(order, base)
        return _result(self.index, question, order, k, self._edges(root),
                       self._trace(tree=root, role_events=events), self.search.scope,
                       self.fold_duplicates)


# --------------------------------------------------------------------------- one search
#: the one-search methods (:class:`Search`'s kinds)
SEARCHES = ("bm25", "dense", "hybrid")


class Search(_Strategy):
    """One search, no hops: what a user may pick when a question needs no bridge, or to
    compare (``--method bm25|dense|hybrid``).

    ``kind``: ``"bm25"`` ranks passages by BM25 over their title and text with the index's
    own lexical index and tokenizer (``evireform eval``'s ``bm25_engine``); ``"dense"`` is
    the question's proposition search read out per passage (the top ``n_candidates``
    propositions by cosine, ``u = max(0, h . h_q)`` normalised, ``1/sqrt(|P_j|)`` per
    passage: the first search BGR and Hi-Q make; no selection, no residual query, no
    propagation, no lexical signal); ``"hybrid"``
    fuses the two by reciprocal rank (c = 60), each ranked to ``pool`` passages (at least
    ``k``), the hybrid search users pick.  Scores: BM25's, the dense readout's, or the
    fused reciprocal ranks; passages filling up to ``k`` score 0.  Filters restrict both
    searches as an index of the matching passages alone would."""

    def __init__(self, index: PropositionIndex, embedder: Embedder | None = None, *,
                 kind: str = "hybrid", n_candidates: int = 100, pool: int = 100,
                 backend: Any = "auto", engine: Any = None, fold_duplicates: bool = True
                 ) -> None:
        if kind not in SEARCHES:
            raise ValueError(f"kind must be one of {', '.join(SEARCHES)}; got {kind!r}")
        self.kind: str = kind
        self.name: str = kind
        self.index = index
        self.pool: int = positive_int(pool, "pool")
        self.fold_duplicates: bool = bool(fold_duplicates)
        self.search = _PassageSearch(index, embedder, positive_int(n_candidates,
                                                                  "n_candidates"),
                                     backend, engine)

    def _lexical(self, question: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        with stage("lexical"):
            ids, sc = self.search.scope.lexical([question], k, "passages")
        keep = (ids[0] >= 0) & (sc[0] > 0)
        return ids[0][keep].astype(np.int64), sc[0][keep]

    def _one(self, question: str, k: int) -> RetrievalResult:
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"question must be a non-empty string; got {question!r}")
        if self.kind == "bm25":
            order, scores = self._lexical(question, k)
        elif self.kind == "dense":
            order, scores = self.search.rank([question], k)[0]
        else:
            n = max(k, self.pool)
            lex = self._lexical(question, n)[0]
            dense = self.search.rank([question], n)[0][0]
            score, seen = _rrf([lex, dense])
            order = sorted(score, key=lambda j: (-score[j], seen[j]))[:k]
            scores = [score[j] for j in order]
        return _result(self.index, question, [int(j) for j in order], k, [],
                       self._trace(), self.search.scope, self.fold_duplicates,
                       scores=list(scores))


#: every strategy by name, the one registry the CLI, the service, the eval and the docs
#: read: (its class, the settings that make the variant, a sentence on it)
STRATEGY_SETTINGS: dict[str, tuple[type, dict[str, Any], str]] = {
    "bgr": (BGR, {}, "Graph-hop BGR: forward and backward chains, edges intersected"),
    "bgr_union": (BGR, {"merge": "union"}, "BGR with the union of the two chains' edges (an "
                  "option; the paper intersects)"),
    "bgr_last": (BGR, {"path": "last"}, "BGR with each forward step conditioned on the last "
                 "passage only (the earlier behaviour; the paper conditions on the path)"),
    "hiq": (HiQ, {}, "Hi-Q: query tree, resolve-or-split, resolved answers rewritten into "
            "dependents; the ranking interleaves the leaves' passages rank by rank"),
    "hiq_k2": (HiQ, {"k_read": 2}, "Hi-Q whose reader reads 2 passages a node (the setting "
               "the recorded Hi-Q replies were made with; the default reads 5)"),
    "hiq_resolved_first": (HiQ, {"ranking": "resolved_first"}, "Hi-Q ranking its resolved "
                           "leaves' passages first (the earlier behaviour)"),
    "bm25": (Search, {"kind": "bm25"}, "one BM25 search over the passages' title and text "
             "(the index's lexical index): no hops"),
    "dense": (Search, {"kind": "dense"}, "one dense search: the question's top 100 "
              "propositions read out per passage (BGR's and Hi-Q's first search): no hops"),
    "hybrid": (Search, {"kind": "hybrid"}, "reciprocal-rank fusion (c = 60) of the bm25 and "
               "dense searches, each to 100 passages: no hops"),
}
STRATEGIES: tuple[str, ...] = tuple(STRATEGY_SETTINGS)


def make_strategy(name: str, index: PropositionIndex, embedder: Embedder | None=None, llm: Any=None, engine: Any=None,
                  fold_duplicates: bool = True):
    """The strategy ``name`` (one of :data:`STRATEGIES`) over ``index``; with ``llm`` (an
    LLMClient) BGR's forward step uses the LLM reformulator and Hi-Q the LLM reader,
    splitter and verifier; ``engine``: where it runs
    (:func:`evireform.engine.make_engine`'s by default); ``fold_duplicates``: a text several
    passages hold shown once (as ``EviReformConfig.fold_duplicates``)."""
    if name not in STRATEGY_SETTINGS:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
    cls, settings, _ = STRATEGY_SETTINGS[name]
    if cls is Search:
        return Search(index, embedder, engine=engine, fold_duplicates=fold_duplicates,
                      **settings)
    if cls is BGR:
        ref = None
        if llm is not None:
            from .llm import LLMReformulator
            ref = LLMReformulator(llm)
        return BGR(index, embedder, reformulator=ref, engine=engine,
                   fold_duplicates=fold_duplicates, **settings)
    return HiQ(index, embedder, llm=llm, engine=engine, fold_duplicates=fold_duplicates,
               **settings)
