"""EviReform online retrieval (the paper's Algorithm 1) with the options its analyses study.

One round, for a question q with embedding h_q (paper sections 3.5-3.8):

1. u_i = max(0, h_i . h_q); the top ``n_candidates`` propositions with u > 0 are the candidates.
2. The selector picks S_q (at most ``max_selected``); b = 1[i in S_q] u_i / ||.||_1.  When no
   selected id is a positive candidate, the best positive candidate is the seed (C.1).
3. E_q = the distinct source passages of S_q.
4. The reformulator maps (q, E_q) to at most ``max_residual`` residual queries; empty, duplicate
   and non-string queries are dropped (C.1).
5. Each residual query l retrieves its top ``k_residual`` propositions I_l;
   r^(l) = max(0, h_i . h_l) / sum over I_l.  V = the queries with positive mass.
6. s = beta b + (1 - beta) mean_{l in V} r^(l)  (s = b when V is empty).
7. z = alpha s + (1 - alpha) T s  (one step through shared entities, W never formed).
8. score(d_j) = sum_{i in P_j} z_i / sqrt(|P_j|); passages ranked by score, ties by stored order.

Every result carries a :class:`Trace` with the candidates, selection, observed passages,
residual queries and their hits, and for each returned passage the part of its score that
came from the question's seed, from the residual seeds and from propagation.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from ._checks import int_at_least, positive_int
from .embed import Embedder, encode_queries
from . import kernels as K
from .engine import Scope, make_engine, pack_seeds
from .explain import EvidenceGraph, evireform_edges
from .records import SCORE_MEANING
from .strings import column
from .timing import Stopwatch
from .index import PropositionIndex
from .roles import (
    Candidates, Controller, GraphBridgeReformulator, ObservationController, Reformulator,
    RoleResult, Selector, TopScoreSelector, clean_queries)

if TYPE_CHECKING:  # annotations only
    from .records import EviReformTraceRecord, PassageRecord, ResultRecord
    from numpy.typing import ArrayLike
    from .engine import Engine
    from .roles import Controller, Reformulator, Selector
    from .types import FilterSpec

MODES = ("residual", "residual_only", "repeat_question")
FILLS = ("corpus", "dense")
BETA_RULES = ("evidence", "fixed")
OWN_SEARCH = ("auto", "on", "off")
#: how many passages each of the own search's two rankings (dense, BM25) reads
OWN_SEARCH_POOL = 100
LEXICAL_FUSIONS = ("seed", "mix", "rrf")
#: reciprocal-rank fusion's constant (Cormack et al.; the hybrid baseline's too)
RRF_K = 60
#: how many of each query's dense and lexical hits a trace keeps
TRACE_HITS = 3


@dataclass(frozen=True)
class EviReformConfig:
    """Retrieval settings; the defaults are the paper's (section 4.2, Table C.5).

    Types are strict (``alpha="0.5"`` is refused here, not at retrieval).  ``n_candidates``
    and ``k_residual`` larger than the index's propositions, and a ``k`` larger than its
    passages, are clipped to them, so memory scales with the index, not with the setting.
    """

    n_candidates: int = 100
    max_selected: int = 12
    max_residual: int = 3
    k_residual: int = 2
    alpha: float = 0.5
    beta: float = 0.5
    #: rounds of reformulation (1-3); later rounds run only while the controller says the
    #: evidence is insufficient
    rounds: int = 1
    #: the 2x2 ablation: reformulation on/off, propagation on/off
    reformulation: bool = True
    propagation: bool = True
    #: "residual" (the method), "residual_only" (s = r: drop the question's seed when V is
    #: nonempty) or "repeat_question" (the control: the question itself is issued as many times
    #: as the reformulator produced residual queries, at the same k_residual)
    mode: str = "residual"
    #: how the ranking continues after the last positive score: "corpus" (stored passage order,
    #: the paper's convention) or "dense" (the question's own dense order over its candidate
    #: propositions' passages first, then stored order)
    fill: str = "corpus"
    #: a passage whose text another, better-ranked passage has byte for byte (the same
    #: section in two files: a README's licence paragraph, a man page's AUTHORS) is left out
    #: of the result and named on the one shown (``RankedPassage.duplicates``), so the k
    #: passages hold k different texts (issue 68); False keeps every copy (the paper's
    #: ranking: an index without repeated texts ranks alike either way)
    fold_duplicates: bool = True
    #: how the question's share of the seed is set: "fixed" (the paper: beta for every
    #: question whose residual queries found something) or "evidence" (issue 52's do-no-harm
    #: rule: as "fixed", except that a question whose LLM-free bridges are all mentioned
    #: nowhere outside the observed passages (lookahead score 0: no credible bridge) ranks
    #: as its base does, beta 1; LLM reformulators report no bridges, so it never fires for
    #: them).  "fixed" is the default: "evidence" fires on a few questions of each set and
    #: costs MuSiQue half a point of R@5 (docs/results.md, "Real documents").  The trace
    #: records the beta each question got.
    beta_rule: str = "fixed"
    #: dense and lexical together (issue 67): the question and every residual query are also
    #: scored by BM25 over the propositions (:mod:`evireform.engine.lexical`), and the two
    #: signals both enter the question's seed and the residual hits (``lexical_fusion``);
    #: False is the paper's dense-only method
    lexical: bool = True
    #: how the question's lexical signal enters: "seed" (the candidates the selector reads
    #: stay the dense ones, as the paper has them, so an LLM selector's prompt is unchanged;
    #: the question's top ``lexical_seed`` BM25 propositions join its seed b, their scores
    #: normalised to sum 1 and weighted ``w / (1 - w)`` against the selection's 1),
    #: "mix" (the candidates ranked by ``(1 - w) u + w bm25 / max bm25`` over both lists)
    #: or "rrf" (reciprocal-rank fusion, k = 60, the dense and lexical ranks weighted
    #: ``1 - w`` and ``w``); w = ``lexical_weight``.  A residual query's hits are fused as
    #: "mix" (or "rrf" under "rrf") whichever it is
    lexical_fusion: str = "seed"
    lexical_weight: float = 0.4
    lexical_seed: int = 8
    #: whether those BM25 propositions also join a seed that an LLM selector chose (read
    #: from the candidates' text; False: they join the LLM-free selector's seed, or a seed
    #: whose LLM selection fell back to it, only).  Measured with the recorded replies
    #: (``python scripts/lexical_fusions.py --llm``): an LLM's choice is already precise, and
    #: diluting it costs R@5 on both sets; its lexical signal enters through the residual
    #: queries' hits
    lexical_seed_llm: bool = False
    #: how many of a query's dense and lexical hits the fusion ranks (at least
    #: ``k_residual`` for a residual query)
    lexical_pool: int = 20
    #: whether the residual queries' hits are fused too (False: dense hits, as the paper)
    lexical_residual: bool = True
    #: BM25's top passages for the question (over title and text), joined to the observed
    #: passages E_q and to the question's seed (each passage's mass ``bm25 / sum bm25``
    #: spread over its propositions, weight ``lexical_passage_weight`` against b's 1); 0: none
    lexical_passages: int = 0
    lexical_passage_weight: float = 1.0
    #: the question's own search keeps its places (issue 85): on an index holding passage
    #: embeddings (:attr:`PropositionIndex.passage_embeddings`: the ``prose`` indexes of
    #: documentation), the ranking alternates EviReform's passages with those of the
    #: question's hybrid search (reciprocal-rank fusion, k = 60, of its dense passage and
    #: BM25 passage rankings, each read to 100), EviReform's first, each passage once, so a
    #: passage the question finds by itself is not pushed out by its residual queries.
    #: "auto": for questions whose evidence the LLM-free selector chose (an LLM's choice is
    #: precise: its ranking is left as it is); "on": for every question; "off": the paper's
    #: ranking.  An index without passage embeddings ranks as "off" whichever is set
    own_search: str = "auto"

    def __post_init__(self) -> None:
        # strict types: a string or a bool here is a caller's mistake, caught now rather than
        # at retrieval.  Counts larger than the index are fine: they are clipped to it.
        for name in ("n_candidates", "max_selected", "max_residual", "k_residual", "rounds",
                     "lexical_passages", "lexical_pool", "lexical_seed"):
            v = getattr(self, name)
            int_at_least(v, 0 if name in ("max_residual", "lexical_passages") else 1, name)
            object.__setattr__(self, name, int(v))
        if self.rounds > 3:
            raise ValueError(f"rounds must be 1, 2 or 3; got {self.rounds}")
        for name in ("alpha", "beta", "lexical_weight"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not 0.0 <= float(v) <= 1.0:
                raise ValueError(f"{name} must be a number in [0, 1]; got {v!r}")
            object.__setattr__(self, name, float(v))
        v = self.lexical_passage_weight
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not 0.0 <= float(v) < float("inf"):
            raise ValueError(f"lexical_passage_weight must be a number >= 0; got {v!r}")
        object.__setattr__(self, "lexical_passage_weight", float(v))
        if self.lexical_fusion not in LEXICAL_FUSIONS:
            raise ValueError(f"lexical_fusion must be one of {LEXICAL_FUSIONS}; got "
                             f"{self.lexical_fusion!r}")
        for name in ("reformulation", "propagation", "lexical", "lexical_residual",
                     "lexical_seed_llm", "fold_duplicates"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False; got {getattr(self, name)!r}")
            object.__setattr__(self, name, bool(getattr(self, name)))
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}; got {self.mode!r}")
        if self.fill not in FILLS:
            raise ValueError(f"fill must be one of {FILLS}; got {self.fill!r}")
        if self.beta_rule not in BETA_RULES:
            raise ValueError(f"beta_rule must be one of {BETA_RULES}; got {self.beta_rule!r}")
        if self.own_search not in OWN_SEARCH:
            raise ValueError(f"own_search must be one of {OWN_SEARCH}; got {self.own_search!r}")

    def with_(self, **kw: Any) -> "EviReformConfig":
        return replace(self, **kw)


class Pairs(Sequence[tuple[int, float]]):
    """``(id, score)`` pairs over two parallel lists, each tuple made when read: a
    question's hundred candidates cost the trace one object, not a hundred tuples (with
    the garbage collector's passes over them).  Reads as the list of tuples it stands for:
    indexing, slices (lists), iteration, ``len``, ``==`` with a list, its ``repr``."""

    __slots__ = ("_ids", "_vals")

    def __init__(self, ids: list[int], vals: list[float]) -> None:
        if len(ids) != len(vals):
            raise ValueError(f"ids and scores differ in length: {len(ids)} vs {len(vals)}")
        self._ids, self._vals = ids, vals

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, t):
        if isinstance(t, slice):
            return list(zip(self._ids[t], self._vals[t]))
        return (self._ids[t], self._vals[t])

    def __iter__(self):
        return zip(self._ids, self._vals)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Pairs):
            return self._ids == other._ids and self._vals == other._vals
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to a list, so unhashable like one

    def __repr__(self) -> str:
        return repr(list(self))

    def __getstate__(self):
        return (self._ids, self._vals)

    def __setstate__(self, state) -> None:
        self._ids, self._vals = state


@dataclass(frozen=True)
class SparseSignal:
    """A sparse vector over propositions: distinct-or-repeated ``ids`` (int64) and ``vals``
    (float64); repeated ids add up in the kernels."""

    ids: np.ndarray
    vals: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Seed:
    """The seed s of one round (Eq. 11) with the two parts the trace attributes scores to:
    the question's part (beta b: s's first ``split`` entries) and the residual queries'
    part ((1 - beta) r: the rest), read as views when asked for."""

    s: SparseSignal
    #: how many of s's first entries are the question's part; the rest of s is the residual
    #: queries' (``residual_only``: 0, the question's part being zero)
    split: int = 0

    @property
    def question(self) -> SparseSignal:
        return SparseSignal(self.s.ids[:self.split], self.s.vals[:self.split])

    @property
    def residual(self) -> SparseSignal:
        return SparseSignal(self.s.ids[self.split:], self.s.vals[self.split:])


@dataclass(slots=True)
class RankedPassage:
    index: int
    id: str
    title: str
    score: float
    from_question: float = 0.0
    from_residual: float = 0.0
    from_propagation: float = 0.0
    #: the passage's text (a reference to the index's string, not a copy)
    text: str = field(default="", repr=False)
    #: the passage's metadata (the index's object, not a copy: do not modify it)
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)
    #: the ids of the other passages with this text, byte for byte (another file's copy of
    #: the same section), which the result leaves out (``EviReformConfig.fold_duplicates``)
    duplicates: tuple[str, ...] = ()

    def to_dict(self) -> PassageRecord:
        """JSON form (the CLI's --json and batch output, the service)."""
        return {"id": self.id, "title": self.title, "text": self.text,
                "metadata": self.metadata, "score": self.score,
                "from_question": self.from_question, "from_residual": self.from_residual,
                "from_propagation": self.from_propagation,
                "duplicates": list(self.duplicates)}


@dataclass
class Trace:
    #: the question's candidates ``(proposition, u)``, best first (a :class:`Pairs`: reads
    #: as a list of tuples)
    candidates: Sequence[tuple[int, float]] = field(default_factory=list)
    selected: list[int] = field(default_factory=list)
    selector_fallback: bool = False
    observed: list[int] = field(default_factory=list)
    residual_queries: list[str] = field(default_factory=list)
    dropped_queries: int = 0
    residual_hits: list[list[tuple[int, float]]] = field(default_factory=list)
    rounds_run: int = 1
    #: repairs and fallbacks of LLM roles, e.g. "select:repaired", "reformulate:fallback:APITimeoutError"
    role_events: list[str] = field(default_factory=list)
    #: wall time per stage in ms (:mod:`evireform.timing`; a batch's, for a batch)
    timings_ms: dict[str, float] = field(default_factory=dict)
    #: the LLM-free reformulator's bridges, one per residual query it made: ``{"query",
    #: "bridge", "passage" (the observed passage's id), "score"}`` (empty for LLM roles)
    bridges: list[dict[str, Any]] = field(default_factory=list)
    #: the question's share of the seed's mass this question got (Eq. 11's beta; see
    #: EviReformConfig.beta_rule), None before a round ran
    beta: float | None = None
    #: what each query reached each way, when the retriever scores lexically too: the
    #: question's and every residual query's ``{"query", "dense", "lexical"}``, each a list
    #: of ``{"passage", "proposition", "score"}`` (the best :data:`TRACE_HITS`)
    hits: list[dict[str, Any]] = field(default_factory=list)
    #: the ids of the passages the question's own search placed in the ranking
    #: (:attr:`EviReformConfig.own_search`), in ranking order; empty when it did not run
    own_search: list[str] = field(default_factory=list)

    def to_dict(self) -> EviReformTraceRecord:
        """The trace's record (:mod:`evireform.records`)."""
        return {"method": "evireform", "score": SCORE_MEANING["evireform"],
                "residual_queries": list(self.residual_queries),
                "bridges": [dict(b) for b in self.bridges],
                "beta": self.beta,
                "role_events": list(self.role_events),
                "timings_ms": dict(self.timings_ms),
                "hits": [{"query": q["query"], "dense": [dict(h) for h in q["dense"]],
                          "lexical": [dict(h) for h in q["lexical"]]}
                         for q in self.hits],
                "own_search": list(self.own_search)}


@dataclass
class RetrievalResult:
    question: str
    passages: list[RankedPassage]
    trace: Trace
    #: the evidence edges, when the method states them (Hi-Q, BGR); EviReform's are derived
    #: on demand from the trace by ``_explain``
    edges: list[Any] | None = None
    _explain: object = field(default=None, repr=False, compare=False)

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.passages]

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its evidence edges computed, not with the index they come from."""
        state = dict(self.__dict__)
        if state.get("edges") is None and state.get("_explain") is not None:
            state["edges"] = list(self._explain())
        state["_explain"] = None
        return state

    def to_dict(self, *, graph: bool = False, id: str | None = None) -> ResultRecord:
        """The result record, the one JSON shape every door prints (``query --json``, each
        line of ``query --questions``, the service's ``/query`` and each of ``/query_batch``'s
        results), declared in :mod:`evireform.records`: ``{"id"?, "question", "passages":
        [RankedPassage.to_dict()], "trace": the method's trace record, "graph"?}``; ``id`` is
        the question's id when it has one, ``graph`` adds the evidence graph
        (:meth:`evidence_graph`)."""
        out: dict[str, Any] = {} if id is None else {"id": id}
        out.update({"question": self.question,
                    "passages": [p.to_dict() for p in self.passages],
                    "trace": self.trace.to_dict()})
        if graph:
            out["graph"] = self.evidence_graph().to_json()
        return out  # type: ignore[return-value]

    def evidence_graph(self, n: int | None = None) -> EvidenceGraph:
        """The :class:`~evireform.explain.EvidenceGraph` of the top ``n`` passages (all when
        None): nodes in rank order, edges saying how each passage was reached."""
        edges = self.edges
        if edges is None:
            edges = self._explain() if self._explain is not None else []
        g = EvidenceGraph([p.index for p in self.passages], [p.id for p in self.passages],
                          [p.title for p in self.passages], list(edges))
        return g.top(len(self.passages) if n is None else n)


def check_embedder(index: PropositionIndex, embedder: Embedder) -> None:
    """:meth:`PropositionIndex.check_embedder` (kept as a function for callers)."""
    index.check_embedder(embedder)


def fold_repeats(index: PropositionIndex, rows: Iterable[tuple], k: int,
                   pmask: np.ndarray | None = None) -> list[RankedPassage]:
    """The first ``k`` of ``rows`` (:class:`RankedPassage` fields, best first) with distinct
    texts, each naming the other passages that hold its text byte for byte
    (:attr:`RankedPassage.duplicates`: ids in stored order; ``pmask``: the passages a filter
    allows, None for all).  What every method's result shows once
    (``EviReformConfig.fold_duplicates``; BGR's and Hi-Q's ``fold_duplicates``)."""
    same, out, seen = index.same_text, [], set()
    ids = None
    for e in rows:
        c = int(same[e[0]])
        if c in seen:
            continue
        seen.add(c)
        twins = index.same_text_group(c)
        if len(twins) > 1:
            if ids is None:
                ids = column(index.passages, "ids")
            e = tuple(e) + (tuple(ids[t] for t in twins
                                  if t != e[0] and (pmask is None or pmask[t])),)
        out.append(RankedPassage(*e))
        if len(out) == k:
            break
    return out


class EviReform:
    """The EviReform retriever over a :class:`PropositionIndex`.

    ``embedder`` must be the one the index was built with (its name is checked).  The roles
    default to the LLM-free implementations.  Instances hold no mutable per-query state, so
    one retriever may serve many threads.
    """

    def __init__(self, index: PropositionIndex, config: EviReformConfig | None = None, *,
                 embedder: Embedder | None = None, selector: Selector | None = None,
                 reformulator: Reformulator | None = None, controller: Controller | None = None,
                 backend: str = "auto", max_workers: int = 1, searcher: Any=None, engine: Any=None,
                 precision: str = "auto") -> None:
        self.index: PropositionIndex = index
        #: where search, propagation and readout run (:mod:`evireform.engine`): ``engine``,
        #: or the one :func:`~evireform.engine.make_engine` builds for ``backend``
        #: (``"auto"``, ``"cpu"``, ``"gpu"`` or a ``DeviceIndex``), ``precision``
        #: (``"auto"``, ``"float32"``, ``"int8"``, ``"fp16"``) and ``searcher`` (sharded
        #: search: :class:`evireform.engine.shards.ShardedSearcher`,
        #: :class:`evireform.distributed.RayShardedSearcher`); the roles stay on the host
        if engine is not None and (searcher is not None or backend != "auto"
                                   or precision != "auto"):
            raise ValueError("give engine=, or backend= / precision= / searcher=, not both")
        self.engine: Engine = make_engine(index, engine if engine is not None else backend,
                                  precision=precision, searcher=searcher)
        self.config: EviReformConfig = config or EviReformConfig()
        if embedder is not None:
            check_embedder(index, embedder)
        self.embedder: Embedder | None = embedder
        self.selector: Selector = selector or TopScoreSelector()
        self.reformulator: Reformulator = reformulator or GraphBridgeReformulator()
        self.controller: Controller = controller or ObservationController()
        for role, want in ((self.selector, "select"), (self.reformulator, "reformulate"),
                           (self.controller, "assess")):
            if not callable(getattr(role, want, None)):
                raise TypeError(f"{type(role).__name__} has no {want}() method; implement "
                                "the role's protocol (evireform.roles), or subclass it to "
                                "inherit the optional methods")
        #: role calls (selection, reformulation, the controller) in flight at once across the
        #: questions of retrieve_many; results are merged in input order, so runs are
        #: deterministic.  Raise it for LLM roles; the LLM-free roles gain nothing.
        self.max_workers: int = positive_int(max_workers, "max_workers")

    # ------------------------------------------------------------------ helpers
    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.embedder is None:
            raise ValueError("this retriever has no embedder: pass embedder=..., or call "
                             "retrieve_embedded with your own question embeddings")
        return encode_queries(self.embedder, texts)

    @staticmethod
    def _check_question(question: str) -> str:
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"question must be a non-empty string; got {question!r}")
        return question

    def _select(self, question: str, ids: list[int], us: list[float], trace
                ) -> tuple[SparseSignal, bool]:
        """The selector's seed b (Eq. 7), validated (C.1), and whether an LLM chose it (an
        LLM role's answer, not its fallback's); ``ids``, ``us``: the candidates and their
        scores u > 0, best first."""
        cfg, idx = self.config, self.index
        # made on access: a selector reading the top few builds a few; one that ranks by
        # score alone (reads_text False) is shown no text, so none is decoded per question
        cands = Candidates(ids, us, None,
                           idx.prop_texts if getattr(self.selector, "reads_text", True)
                           else None, owner=idx.owner)
        try:
            chosen = self.selector.select(question, cands, cfg.max_selected)
        except Exception:  # a role never crashes retrieval: fall back (C.1)
            chosen = []
            trace.role_events.append("select:raised")
        by_llm = False
        if isinstance(chosen, RoleResult):
            trace.role_events.extend(chosen.events())
            by_llm = chosen.fallback is None
        sel: list[int] = []
        score: list[float] = []
        for i in chosen or []:  # a chosen id counts once, if it is a positive candidate
            try:
                i = int(i)
            except (TypeError, ValueError):
                continue
            if i in sel:
                continue
            try:  # a few chosen among ~100: no dict of all
                at = ids.index(i)
            except ValueError:
                continue
            if us[at] > 0:
                sel.append(i)
                score.append(us[at])
        sel, score = sel[:cfg.max_selected], score[:cfg.max_selected]
        if not sel and ids:
            sel = [ids[0]]  # the positive candidate with the highest score
            score = [us[0]]
            trace.selector_fallback = True
        trace.selected = sel
        ids = np.asarray(sel, dtype=np.int64)
        if len(score) < 8:  # numpy's sum of fewer than 8 is this left-to-right sum
            tot = sum(score)
            vals = np.asarray([v / tot for v in score], dtype=np.float64)
        else:
            vals = np.asarray(score, dtype=np.float64)
            vals = vals / vals.sum()
        return SparseSignal(ids, vals), by_llm and not trace.selector_fallback

    def _fuse(self, d_ids: Sequence[int], d_s: Sequence[float], l_ids: Sequence[int],
              l_s: Sequence[float], h: np.ndarray, n: int) -> tuple[list[int], list[float]]:
        """One query's dense hits (ids, u > 0, best first) and lexical hits (ids, BM25 > 0,
        best first) as one list of at most ``n`` (ids, fused score > 0), best first, ties by
        lower id (``lexical_fusion``: "mix" needs the dense score of a lexical-only hit,
        computed from its row; "rrf" reads ranks only)."""
        cfg = self.config
        w = cfg.lexical_weight
        fused: dict[int, float] = {}
        if cfg.lexical_fusion == "rrf":
            for rank, i in enumerate(d_ids):
                fused[i] = (1.0 - w) / (RRF_K + rank + 1)
            for rank, i in enumerate(l_ids):
                fused[i] = fused.get(i, 0.0) + w / (RRF_K + rank + 1)
        else:
            u = dict(zip(d_ids, d_s))
            top = l_s[0] if len(l_s) else 0.0
            lex = {i: s / top for i, s in zip(l_ids, l_s)} if top > 0 else {}
            missing = [i for i in lex if i not in u]
            if missing:  # lexical-only hits: their dense score from their rows
                emb = np.asarray(self.index.embeddings)
                for i, v in zip(missing, (emb[missing] @ h).tolist()):
                    u[i] = max(float(v), 0.0)
            for i, v in u.items():
                fused[i] = (1.0 - w) * v + w * lex.get(i, 0.0)
            for i, v in lex.items():
                if i not in fused:
                    fused[i] = w * v
        order = sorted((i for i, v in fused.items() if v > 0), key=lambda i: (-fused[i], i))
        order = order[:n]
        return order, [fused[i] for i in order]

    def _hits(self, ids: Sequence[int], scores: Sequence[float]) -> list[dict[str, Any]]:
        """A query's best :data:`TRACE_HITS` hits as trace records (passage ids looked up)."""
        pairs = [(i, s) for i, s in zip(ids, scores) if i >= 0 and s > 0][:TRACE_HITS]
        owner = self.index.owner
        ps = self.index.passages_at([int(owner[i]) for i, _ in pairs])
        return [{"passage": p.id, "proposition": int(i), "score": float(s)}
                for (i, s), p in zip(pairs, ps)]

    def _lexical_seed(self, b: SparseSignal, ids: Sequence[int], scores: Sequence[float]
                      ) -> SparseSignal:
        """The question's seed b joined with its top BM25 propositions (``lexical_fusion=
        "seed"``): their scores normalised to sum 1, weighted ``w / (1 - w)`` against b's 1
        (w = ``lexical_weight``), the whole normalised to mass 1."""
        pairs = [(i, s) for i, s in zip(ids, scores) if i >= 0 and s > 0]
        w = self.config.lexical_weight
        if not pairs or w == 0.0:
            return b
        if w == 1.0:
            g, b_mass = 1.0, 0.0
        else:
            g, b_mass = w / (1.0 - w), 1.0
        tot = sum(s for _, s in pairs)
        vals = np.concatenate([b.vals * b_mass, np.asarray([g * s / tot for _, s in pairs])])
        return SparseSignal(np.concatenate([b.ids, np.asarray([i for i, _ in pairs], np.int64)]),
                            vals / vals.sum())

    def _passage_prior(self, b: SparseSignal, pids: Sequence[int], ps: Sequence[float]
                       ) -> SparseSignal:
        """The question's seed b joined with BM25's top passages (``lexical_passages``):
        each passage's share ``bm25 / sum bm25`` spread evenly over its propositions, the
        two weighted 1 : ``lexical_passage_weight`` and normalised to mass 1."""
        g = self.config.lexical_passage_weight
        pairs = [(j, s) for j, s in zip(pids, ps) if j >= 0 and s > 0]
        tot = sum(s for _, s in pairs)
        ids: list[int] = []
        vals: list[float] = []
        for j, s in pairs:
            props = self.index.propositions_of(j)
            if len(props):
                ids.extend(props.tolist())
                vals.extend([g * (s / tot) / len(props)] * len(props))
        if not ids or g == 0.0:
            return b
        mass = float(b.vals.sum()) + sum(vals)
        return SparseSignal(np.concatenate([b.ids, np.asarray(ids, np.int64)]),
                            np.concatenate([b.vals, np.asarray(vals)]) / mass)

    def _observed(self, sel) -> list[int]:
        seen: list[int] = []
        for i in sel:
            j = int(self.index.owner[i])
            if j not in seen:
                seen.append(j)
        return seen

    def _queries(self, question: str, observed: Any, trace, vector: ArrayLike | None=None, allowed: ArrayLike | None=None) -> list[str]:
        cfg = self.config
        if not cfg.reformulation or cfg.max_residual == 0:
            return []
        try:
            indexed = getattr(self.reformulator, "reformulate_indexed", None)
            if indexed is not None:  # it reads the index's entities (GraphBridgeReformulator)
                raw = indexed(question, self.index, list(observed), cfg.max_residual,
                              vector=vector, allowed=allowed)
            else:
                passages = [self.index.passage(j) for j in observed]
                raw = self.reformulator.reformulate(question, passages, cfg.max_residual)
        except Exception:
            raw = []
            trace.role_events.append("reformulate:raised")
        if isinstance(raw, RoleResult):
            trace.role_events.extend(raw.events())
            trace.bridges.extend(d for d in raw.details if isinstance(d, dict))
        queries, dropped = clean_queries(raw, cfg.max_residual)
        trace.dropped_queries += dropped
        if cfg.mode == "repeat_question":
            queries = [question] * len(queries)
        return queries

    def _residual_signal(self, hits: list[list[tuple[int, float]]]
                         ) -> tuple[list[int], list[float]]:
        """Mean of the per-query normalised signals r^(l) over valid queries V (Eq. 10), as
        its ids and values (first-seen order); ``hits``: each residual query's (proposition,
        score) pairs (``Trace.residual_hits``)."""
        acc: dict[int, float] = {}
        n_valid = 0
        get = acc.get
        for hit in hits:
            # Python ints and floats: the same sums as numpy's, bit for bit (numpy adds
            # fewer than 8 numbers left to right; more go through numpy as before)
            pairs = [(i, v) for i, v in hit if v > 0]
            if not pairs:
                continue
            mass = sum([v for _, v in pairs]) if len(pairs) < 8 else \
                float(np.sum(np.fromiter((v for _, v in pairs), np.float64, len(pairs))))
            if mass <= 0:
                continue
            n_valid += 1
            for i, v in pairs:
                acc[i] = get(i, 0.0) + v / mass
        if n_valid == 0:
            return [], []
        return list(acc), [v / n_valid for v in acc.values()]

    def _combine(self, b: SparseSignal, r: tuple[list[int], list[float]],
                 trace: Trace | None = None) -> Seed:
        """s = beta b + (1 - beta) r (``r``: :meth:`_residual_signal`'s ids and values);
        s = b when no residual query is valid, or when the do-no-harm rule
        (``beta_rule="evidence"``) finds no credible bridge in ``trace``.  The products are
        Python floats', bit for bit numpy's."""
        cfg = self.config
        r_ids, r_vals = r
        if r_ids and cfg.beta_rule == "evidence" and trace is not None and trace.bridges \
                and not any(d.get("score", 0.0) > 0.0 for d in trace.bridges):
            r_ids, r_vals = [], []
            trace.role_events.append("reformulate:no-credible-bridge")
        if trace is not None:
            trace.beta = 1.0 if not r_ids else \
                (0.0 if cfg.mode == "residual_only" else cfg.beta)
        if not r_ids:
            return Seed(b, split=len(b))
        if cfg.mode == "residual_only":
            rr = SparseSignal(np.array(r_ids, np.int64), np.array(r_vals, np.float64))
            return Seed(rr, split=0)
        beta, rest, nb = cfg.beta, 1.0 - cfg.beta, len(b)
        ids = np.array(b.ids.tolist() + r_ids, np.int64)
        vals = np.array([beta * v for v in b.vals.tolist()] + [rest * v for v in r_vals],
                        np.float64)
        return Seed(SparseSignal(ids, vals), split=nb)

    def _rank_many(self, states: list["_QuestionState"], scope: Scope,
                   sw: Stopwatch | None = None) -> list[list[RankedPassage]]:
        """Propagate and read out every question's seed at once (batched kernels); one ranked
        passage list per state, each passage's score split into its parts (``sw``: the
        seeds' mixing and the kernels timed as ``rank``).  With ``fold_duplicates``, a
        passage whose text a better-ranked one has is left out and named on it
        (:attr:`RankedPassage.duplicates`); the ranking reads far enough down to give
        ``scope.k`` distinct texts."""
        cfg, idx = self.config, self.index
        k = scope.k
        fold = cfg.fold_duplicates and idx.n_same_text > 0
        k_rank = scope.clip(k + min(idx.n_same_text, k)) if fold else k
        while True:
            rows = self._rank_rows(states, scope, k_rank, sw)
            if not fold:
                return [[RankedPassage(*e) for e in row] for row in rows]
            folded = [self._fold(row, k, scope) for row in rows]
            short = any(len(f) < k and len(row) == k_rank for f, row in zip(folded, rows))
            # k + every repeat always holds k texts (or all there are): never read past it
            most = scope.clip(k + idx.n_same_text)
            if not short or k_rank >= most:
                return folded
            k_rank = min(scope.clip(2 * k_rank), most)  # more repeats than read: read on

    def _own_search(self, states: list["_QuestionState"], scope: Scope) -> bool:
        """Each state's own search (``st.own``: reciprocal-rank fusion, k = 60, ties by the
        lower position, of the question's dense passage ranking over the index's passage
        embeddings and its BM25 passage ranking, each read to :data:`OWN_SEARCH_POOL`,
        within the scope) where :attr:`EviReformConfig.own_search` applies to it; True when
        one was made."""
        cfg, pe = self.config, self.index.passage_embeddings
        if pe is None or cfg.own_search == "off":
            return False
        todo = [st for st in states if cfg.own_search == "on" or not st.by_llm]
        if not todo:
            return False
        n = scope.clip(OWN_SEARCH_POOL)
        Q = np.stack([np.asarray(st.vector, np.float32) for st in todo])
        d_i = passage_topk(pe, Q, n, scope.allowed)
        l_i, l_s = scope.lexical([st.text for st in todo], n, "passages")
        for st, di, li, ls in zip(todo, d_i, l_i.tolist(), l_s.tolist()):
            score: dict[int, float] = {}
            for ranking in (di,
                            [j for j, v in zip(li, ls) if j >= 0 and v > 0]):
                for r, j in enumerate(ranking):
                    score[j] = score.get(j, 0.0) + 1.0 / (RRF_K + r + 1)
            st.own = sorted(score, key=lambda j: (-score[j], j))
        return True

    def _rank_rows(self, states: list["_QuestionState"], scope: Scope, k: int,
                   sw: Stopwatch | None) -> list[list[tuple]]:
        """Each state's top ``k`` passages as RankedPassage fields (position, id, title,
        score, its three parts, text, metadata)."""
        cfg, idx = self.config, self.index
        alpha = cfg.alpha if cfg.propagation else 1.0
        indptr, s_ids, s_vals = pack_seeds([(st.seed.s.ids, st.seed.s.vals)
                                            for st in states])
        split = np.array([st.seed.split for st in states], np.int64)
        own = any(st.own is not None for st in states)
        # the score parts come with the ranking where the engine makes them in its pass
        # (not when the dense fill or the own search changes the ranked passages after)
        got = scope.rank(indptr, s_ids, s_vals, alpha, scope.clip(2 * k) if own else k,
                         propagation=cfg.propagation,
                         split=split if cfg.fill != "dense" and not own else None)
        if sw is not None:
            sw.lap("rank")
        P, S = np.asarray(got[0]), np.asarray(got[1], np.float64)
        sizes = [P.shape[1]] * len(states)
        if cfg.fill == "dense":  # rows may come back shorter: -1 / 0 after their end
            P, S = P.copy(), S.copy()
            for b, st in enumerate(states):
                pids, scores = self._dense_fill(P[b], S[b], st.cand, P.shape[1],
                                                scope.allowed)
                sizes[b] = len(pids)
                P[b, :len(pids)], S[b, :len(pids)] = pids, scores
                P[b, len(pids):], S[b, len(pids):] = -1, 0.0
        if own:  # EviReform's passages alternating with the question's own search's
            # (a text shown once: passed over where a placed passage has it)
            key = idx.same_text if cfg.fold_duplicates and idx.n_same_text else None
            P2 = np.full((len(states), min(k, P.shape[1])), -1, np.int64)
            S2 = np.zeros(P2.shape)
            # a passage EviReform did not rank as far as it read: score and parts 0
            unread = np.zeros(P2.shape, bool)
            for b, st in enumerate(states):
                evi = [j for j in P[b, :sizes[b]].tolist() if j >= 0]
                got_s = dict(zip(evi, S[b, :len(evi)].tolist()))
                if st.own is None:
                    order = evi[:P2.shape[1]]
                else:
                    order, placed = interleave(evi, st.own, P2.shape[1], key)
                    st.trace.own_search = [p.id for p in idx.passages_at(placed)]
                sizes[b] = len(order)
                P2[b, :len(order)] = order
                S2[b, :len(order)] = [got_s.get(j, 0.0) for j in order]
                unread[b, :len(order)] = [j not in got_s for j in order]
            P, S, got = P2, S2, got[:2]
        # each passage's score split into the question's and the residual queries' parts
        FQ, FR = got[2:] if len(got) == 4 else \
            K.score_parts(idx.pmap, indptr, s_ids, s_vals, split, alpha, P)
        if own:
            FQ[unread], FR[unread] = 0.0, 0.0
        out = []
        for n, js, scs, fqs, frs in zip(sizes, P.tolist(), S.tolist(), FQ.tolist(),
                                        FR.tolist()):
            js = js[:n]
            # from_propagation = max(0.0, sc - fq - fr), without a call per passage
            out.append([(j, p.id, p.title, sc, fq, fr,
                         fp if (fp := sc - fq - fr) > 0.0 else 0.0, p.text, p.metadata)
                        for j, sc, fq, fr, p in zip(js, scs, fqs, frs, idx.passages_at(js))])
        return out

    def _fold(self, row: list[tuple], k: int, scope: Scope) -> list[RankedPassage]:
        return fold_repeats(self.index, row, k, scope.pmask)

    def _dense_fill(self, pids, scores: ArrayLike, cand: SparseSignal, k, universe=None):
        """Replace the zero-score tail (corpus order) by the question's dense passage order;
        ``universe``: the passage positions a filter allows (stored order), None for all."""
        npos = int(np.sum(scores > 0))
        taken = set(int(j) for j in pids[:npos])
        tail = []
        for i in cand.ids:
            j = int(self.index.owner[i])
            if j not in taken:
                taken.add(j)
                tail.append(j)
        tail += [int(j) for j in pids[npos:] if int(j) not in taken]
        rest = range(self.index.n_passages) if universe is None else map(int, universe)
        for j in rest:
            if npos + len(tail) >= k:
                break
            if j not in taken and j not in tail:
                tail.append(j)
        out = np.concatenate([pids[:npos], np.asarray(tail[: k - npos], np.int64)])
        return out, np.concatenate([scores[:npos], np.zeros(len(out) - npos)])

    # ------------------------------------------------------------------ public API
    def retrieve(self, question: str, k: int = 10, *, filter: FilterSpec=None) -> RetrievalResult:
        """Rank passages for one question (embedded with the retriever's embedder).

        ``filter``: a where clause over passage metadata or a list of passage ids
        (:mod:`evireform.filters`); the result equals retrieval on an index of the matching
        passages alone.  A filter that matches nothing gives a result with no passages."""
        self._check_question(question)
        return self.retrieve_many([question], k, filter=filter)[0]

    def retrieve_embedded(self, question: str, h_q: ArrayLike, k: int = 10,
                          residual_embed: Callable[[list[str]], Any] | None = None, *,
                          filter: FilterSpec = None) -> RetrievalResult:
        """As :meth:`retrieve`, with the question embedding given; residual queries are embedded
        with ``residual_embed`` (a callable list[str] -> array) or the retriever's embedder."""
        self._check_question(question)
        scope = self.scope(filter, k)
        embed = residual_embed or self._embed
        return self._run([question], np.asarray(h_q, np.float32)[None, :], scope, embed,
                         Stopwatch())[0]

    def retrieve_many(self, questions: Sequence[str], k: int = 10, *,
                      filter: FilterSpec=None) -> list[RetrievalResult]:
        """Rank passages for many questions: questions and residual queries are embedded in
        one batch each and the proposition searches run batched.  Equal to :meth:`retrieve`.
        ``filter`` applies to every question (see :meth:`retrieve`)."""
        if isinstance(questions, (str, bytes)):
            raise TypeError("retrieve_many takes a list of questions, not one string; use "
                            "retrieve(question) or retrieve_many([question])")
        questions = [self._check_question(q) for q in questions]
        scope = self.scope(filter, k)
        if not questions:
            return []
        sw = Stopwatch()
        H_q = self._embed(questions)
        sw.lap("encode_question")
        return self._run(questions, H_q, scope, self._embed, sw)

    def scope(self, filter: FilterSpec = None, k: int = 10) -> Scope:
        """The :class:`~evireform.engine.Scope` of one batch of questions: the retriever's own
        engine, ``filter``'s cached :class:`~evireform.filters.Restriction` (None without a
        filter) and ``k`` checked and clipped to the passages it matches; every search and
        ranking of the batch goes through it.  ``engine, restriction = retriever.scope(f)``
        still unpacks as before."""
        return Scope.of(self.engine, self.index, filter, k)

    def _map(self, fn: Any, items: Any) -> list[Any]:
        """``[fn(x) for x in items]`` with at most ``max_workers`` calls in flight, in order."""
        items = list(items)
        if self.max_workers == 1 or len(items) < 2:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            return list(pool.map(fn, items))

    def _assess(self, question: str, passages: Sequence[Any], trace):
        """(sufficient, gap queries) from the controller (:meth:`Controller.assess`); an LLM
        controller's repairs and fallbacks go to the trace."""
        try:
            ok, queries = self.controller.assess(question, passages)
            if isinstance(queries, RoleResult):
                trace.role_events.extend(queries.events())
            return bool(ok), list(queries or [])
        except Exception:
            trace.role_events.append("controller:raised")
            return True, []  # a failing controller stops the rounds (the one-round method)

    def _run(self, questions: Sequence[str], H_q, scope: Scope, embed,
             sw: Stopwatch | None = None) -> list[RetrievalResult]:
        """The method for a batch of embedded questions; ``sw`` times its stages
        (:mod:`evireform.timing`: contiguous laps, so they add up to the run)."""
        cfg = self.config
        sw = sw if sw is not None else Stopwatch()
        if scope.n_passages == 0:  # a filter matches nothing: documented empty results
            sw.lap("search")
            return [RetrievalResult(q, [], Trace(timings_ms=sw.rounded())) for q in questions]
        cand_i, cand_s = scope.search(H_q, cfg.n_candidates)
        sw.lap("search")
        if cfg.lexical:  # the question's BM25 propositions (and passages)
            n_lex = cfg.lexical_seed if cfg.lexical_fusion == "seed" else cfg.lexical_pool
            lex_i, lex_s = scope.lexical(questions, n_lex)
            if cfg.lexical_passages:
                lp_i, lp_s = scope.lexical(questions, cfg.lexical_passages, "passages")
            sw.lap("lexical")
        states = []
        for t, q in enumerate(questions):
            ids, us = cand_i[t], cand_s[t]
            ids_l, us_l = ids.tolist(), us.tolist()
            if -1 in ids_l:  # fewer than n_candidates found: the empty slots are -1
                keep = ids >= 0
                ids, us = ids[keep], us[keep]
                ids_l, us_l = ids.tolist(), us.tolist()
            parts = None if not cfg.lexical else \
                {"query": q, "dense": self._hits(ids_l, us_l),
                 "lexical": self._hits(lex_i[t].tolist(), lex_s[t].tolist())}
            if cfg.lexical and cfg.lexical_fusion != "seed":
                li, ls = lex_i[t].tolist(), lex_s[t].tolist()
                li, ls = [i for i in li if i >= 0], [s for i, s in zip(li, ls) if i >= 0]
                ids_l, us_l = self._fuse(ids_l, us_l, li, ls, H_q[t], cfg.n_candidates)
                ids, us = np.asarray(ids_l, np.int64), np.asarray(us_l, np.float64)
            st = _QuestionState(q, SparseSignal(ids, us))
            if parts is not None:
                st.trace.hits.append(parts)
            st.vector = H_q[t]
            st.trace.candidates = Pairs(ids_l, us_l)
            st.cand_lists = (ids_l, us_l)
            states.append(st)
        bs = self._map(lambda st: self._select(st.text, *st.cand_lists, st.trace), states)
        for t, (st, (b, by_llm)) in enumerate(zip(states, bs)):
            st.b, st.by_llm = b, by_llm
            st.observed = self._observed(st.trace.selected)
            if cfg.lexical and cfg.lexical_fusion == "seed" and \
                    (cfg.lexical_seed_llm or not by_llm):
                st.b = self._lexical_seed(st.b, lex_i[t].tolist(), lex_s[t].tolist())
            if cfg.lexical and cfg.lexical_passages:
                pids, ps = lp_i[t].tolist(), lp_s[t].tolist()
                st.b = self._passage_prior(st.b, pids, ps)
                st.observed += [j for j, s in zip(pids, ps)
                                if j >= 0 and s > 0 and j not in st.observed]
        sw.lap("select")
        if self._own_search(states, scope):
            sw.lap("own_search")
        active = states
        for rnd in range(cfg.rounds):
            for st in active:
                st.trace.observed = list(st.observed)
            made = self._map(lambda st: st.pop_gap_queries()
                             or self._queries(st.text, st.observed, st.trace, st.vector,
                                              scope.pmask), active)
            flat = [(st, q) for st, qs in zip(active, made) for q in qs]
            sw.lap("reformulate")
            if flat:
                H_r = embed([q for _, q in flat])
                sw.lap("encode_residual")
                if cfg.lexical and cfg.lexical_residual:  # both kinds, fused to k_residual
                    pool = max(cfg.k_residual, cfg.lexical_pool)
                    hi, hs = scope.search(H_r, pool)
                    li, ls = scope.lexical([q for _, q in flat], pool)
                    for n, ((st, q), ids, sc) in enumerate(zip(flat, hi.tolist(), hs.tolist())):
                        d = [(i, v) for i, v in zip(ids, sc) if i >= 0 and v > 0]
                        lx = [(i, v) for i, v in zip(li[n].tolist(), ls[n].tolist()) if i >= 0]
                        f_i, f_s = self._fuse([i for i, _ in d], [v for _, v in d],
                                              [i for i, _ in lx], [v for _, v in lx], H_r[n],
                                              cfg.k_residual)
                        st.trace.residual_queries.append(q)
                        st.trace.residual_hits.append(list(zip(f_i, f_s)))
                        st.trace.hits.append({
                            "query": q, "dense": self._hits([i for i, _ in d], [v for _, v in d]),
                            "lexical": self._hits([i for i, _ in lx], [v for _, v in lx])})
                else:
                    hi, hs = scope.search(H_r, cfg.k_residual)
                    for (st, q), ids, sc in zip(flat, hi.tolist(), hs.tolist()):
                        st.trace.residual_queries.append(q)  # a hit's empty slots are -1
                        st.trace.residual_hits.append([(i, v) for i, v in zip(ids, sc)
                                                       if i >= 0])
                sw.lap("search")
            for st in active:  # every round's hits so far (Eq. 10 over all valid queries)
                st.seed = self._combine(st.b, self._residual_signal(st.trace.residual_hits),
                                        st.trace)
            for st, ranked in zip(active, self._rank_many(active, scope, sw)):
                st.result = RetrievalResult(st.text, ranked, st.trace,
                                            _explain=self._explainer(st, ranked))
                st.trace.rounds_run = rnd + 1
            sw.lap("readout")
            if rnd + 1 == cfg.rounds or not cfg.reformulation:
                break
            active = self._next_round(active)
            sw.lap("assess")
            if not active:
                break
        timings = sw.rounded()
        for st in states:
            st.trace.timings_ms = dict(timings)
        return [st.result for st in states]

    def _explainer(self, st, ranked):
        """The evidence edges of one result, computed when asked for."""
        cfg = self.config
        alpha = cfg.alpha if cfg.propagation else 1.0
        return partial(evireform_edges, self.index, st.text, ranked, st.trace, st.seed, alpha,
                       cfg.propagation)

    def _next_round(self, active: list["_QuestionState"]) -> list["_QuestionState"]:
        """Ask the controller about each question's top passages; the insufficient ones observe
        the newly ranked passages next round (and search for the gaps it named, if any)."""
        cfg, idx = self.config, self.index
        tops = [[p.index for p in st.result.passages[: cfg.max_selected]] for st in active]
        verdicts = self._map(lambda a: self._assess(a[0].text, [idx.passage(j) for j in a[1]],
                                                    a[0].trace), list(zip(active, tops)))
        still = []
        for st, top, (ok, gaps) in zip(active, tops, verdicts):
            if ok:
                continue
            new = [j for j in top if j not in st.observed]
            gaps = clean_queries(gaps, cfg.max_residual)[0]
            if gaps:  # the controller named what is missing: search for it next
                st.gap_queries = gaps
            if new or gaps:
                st.observed = new or st.observed
                still.append(st)
        return still


def passage_topk(P: Any, Q: np.ndarray, n: int, rows: Any = None) -> list[list[int]]:
    """Each row of ``Q``'s top ``n`` rows of ``P`` by positive cosine (ties by the lower
    position), within ``rows`` (positions; None: all): the CPU kernel
    (:func:`~evireform.kernels.cosine_topk_batch`), or numpy in a process that has not
    loaded the numba kernels when ``P`` is small (as a one-shot ``evireform query``'s
    engine: it does not pay numba's start for a scan of a few milliseconds)."""
    if K._numba_free(len(P), K.config.ONE_SHOT_NUMPY_PROPS):
        ids = np.arange(len(P)) if rows is None else np.asarray(rows, np.int64)
        sub = np.asarray(P) if rows is None else np.asarray(P)[ids]
        out = []
        for s in Q @ sub.T:
            pos = s > 0
            c_i, c_s = ids[pos], s[pos]
            out.append(c_i[np.lexsort((c_i, -c_s))[:n]].tolist())
        return out
    got, _ = K.cosine_topk_batch(P, Q, n, rows=rows)
    return [[j for j in row if j >= 0] for row in got.tolist()]


def interleave(a: Sequence[int], b: Sequence[int], n: int, key: Any = None
               ) -> tuple[list[int], list[int]]:
    """``a``'s and ``b``'s items alternating from ``a``'s first, each item once (one already
    placed is passed over; with ``key``, an array, one whose ``key[item]`` a placed item
    has), to ``n`` places; when one runs out the other goes on.  Returns the order and the
    items ``b`` placed (in order)."""
    out: list[int] = []
    placed: list[int] = []
    seen: set[int] = set()
    of = (lambda j: j) if key is None else (lambda j: int(key[j]))
    at = [0, 0]
    turn = 0
    while len(out) < n and (at[0] < len(a) or at[1] < len(b)):
        src = b if turn else a
        i = at[turn]
        while i < len(src) and of(src[i]) in seen:
            i += 1
        if i < len(src):
            seen.add(of(src[i]))
            out.append(src[i])
            if turn:
                placed.append(src[i])
            i += 1
        at[turn] = i
        turn ^= 1
    return out, placed


@dataclass(eq=False)
class _QuestionState:
    """One question's state across the rounds of a batch."""

    text: str
    cand: SparseSignal                       # candidate propositions and their u > 0
    trace: Trace = field(default_factory=Trace)
    b: SparseSignal | None = None            # the selector's seed (Eq. 7)
    observed: list[int] = field(default_factory=list)   # E_q, passage positions
    gap_queries: list[str] | None = None     # the controller's queries for the next round
    vector: np.ndarray | None = None         # the question's embedding (the lookahead's)
    cand_lists: tuple[list[int], list[float]] = ((), ())  # cand as Python lists
    seed: Seed | None = None                 # s of the latest round
    result: RetrievalResult | None = None
    by_llm: bool = False                     # an LLM selector chose its evidence
    own: list[int] | None = None             # its own search's ranking (own_search)

    def pop_gap_queries(self) -> list[str] | None:
        q, self.gap_queries = self.gap_queries, None
        return q
