"""The result record: the one JSON shape every door prints, declared once.

``query --json``, each line of ``query --questions``, the service's ``/query`` and each of
``/query_batch``'s results print :meth:`evireform.retriever.RetrievalResult.to_dict`, whose
shape is declared here as typed dictionaries; the service's OpenAPI models are generated
from them (:mod:`evireform.service`), not restated.

Every method's trace says which method ran (``method``), what its passages' ``score``
means (``score``: a sentence), and what it did:

* EviReform: its residual queries (with each one's bridge and score where the LLM-free
  reformulator states them) and the role events;
* BGR: the forward and backward chains (passage ids), the edges both share
  (``intersection``), the forward step's queries and how the chains were merged;
* Hi-Q: the query tree, each node with its query, status, answer and passages, and how the
  ranking was read off the tree;

and where its time went: ``timings_ms``, wall time per stage (:mod:`evireform.timing`).
"""
from __future__ import annotations

from typing import Any, Literal, Union

try:  # pydantic (the service's models) reads typing_extensions' TypedDict before 3.12
    from typing_extensions import TypedDict
except ImportError:  # pragma: no cover - a core install without it: plain typing's
    from typing import TypedDict  # type: ignore[assignment]

__all__ = ["PassageRecord", "BridgeRecord", "EviReformTraceRecord", "BGRTraceRecord", "HiQNodeRecord",
           "HiQTraceRecord", "TraceRecord", "GraphRecord", "ResultRecord", "SCORE_MEANING"]

#: what ``score`` means, per method (stated in every trace)
SCORE_MEANING: dict[str, str] = {
    "evireform": "EviReform's passage score (Eq. 12-13): the readout of the seed mixed from "
                 "the question and the residual queries, spread one step through shared "
                 "entities; from_question + from_residual + from_propagation add up to it",
    "bgr": "1/(1 + rank) in the merged order (the question's ranking fused with the two "
           "chains, the intersection's passages first); 0 for passages filling up to k",
    "hiq": "1/(1 + rank) in the order read off the query tree (see trace.ranking); 0 for "
           "passages filling up to k",
}


class PassageRecord(TypedDict):
    """One ranked passage."""

    id: str
    title: str
    text: str
    metadata: dict[str, Any]
    score: float
    from_question: float
    from_residual: float
    from_propagation: float


class BridgeRecord(TypedDict):
    """One residual query of the LLM-free reformulator and the bridge it carries."""

    query: str
    #: the bridge as the observed passage spells it
    bridge: str
    #: the id of the observed passage it came from
    passage: str
    #: its rank score: the lookahead's best cosine (or the shared question words)
    score: float


class HitRecord(TypedDict):
    """One proposition a query reached: its passage's id, its position and its score."""

    passage: str
    proposition: int
    score: float


class QueryHitsRecord(TypedDict):
    """What one query (the question or a residual query) reached each way: its best
    propositions by the embeddings (cosine) and by BM25 (dense and lexical together,
    issue 67), best first."""

    query: str
    dense: list[HitRecord]
    lexical: list[HitRecord]


class EviReformTraceRecord(TypedDict):
    method: Literal["evireform"]
    score: str
    residual_queries: list[str]
    #: the LLM-free reformulator's bridges (empty for LLM roles)
    bridges: list[BridgeRecord]
    #: the question's share of the seed mass it got (Eq. 11's beta)
    beta: float | None
    role_events: list[str]
    #: wall time per stage in milliseconds (evireform.timing; a batch's for a batch)
    timings_ms: dict[str, float]
    #: each query's dense and lexical hits (the question first, then the residual queries;
    #: empty when the retriever scores with the embeddings alone)
    hits: list[QueryHitsRecord]


class BGRTraceRecord(TypedDict):
    method: Literal["bgr"]
    score: str
    #: the forward chain (from the question's best passage), passage ids in chain order
    forward: list[str]
    #: the backward chain (from the last hop's passage), passage ids in chain order
    backward: list[str]
    #: the edges both chains hold, ``[src id, dst id]``
    intersection: list[list[str]]
    #: the query that took each forward step
    queries: list[str]
    merge: Literal["intersection", "union"]
    role_events: list[str]
    #: wall time per stage in milliseconds (evireform.timing; a batch's for a batch)
    timings_ms: dict[str, float]


class HiQNodeRecord(TypedDict):
    query: str
    depth: int
    status: str
    answer: str | None
    #: the node's own top passages, ids best first
    passages: list[str]
    children: list["HiQNodeRecord"]


class HiQTraceRecord(TypedDict):
    method: Literal["hiq"]
    score: str
    tree: HiQNodeRecord
    #: how the ranking was read off the tree: ``"interleave"`` (rank by rank, the leaves in
    #: dependency order) or ``"resolved_first"`` (resolved leaves' passages, then the others')
    ranking: Literal["interleave", "resolved_first"]
    role_events: list[str]
    #: wall time per stage in milliseconds (evireform.timing; a batch's for a batch)
    timings_ms: dict[str, float]


TraceRecord = Union[EviReformTraceRecord, BGRTraceRecord, HiQTraceRecord]


class GraphNodeRecord(TypedDict):
    index: int
    id: str
    title: str


class GraphEdgeRecord(TypedDict):
    src: str
    dst: str
    kind: str
    via: str


class GraphRecord(TypedDict):
    """The evidence graph (:meth:`evireform.explain.EvidenceGraph.to_json`)."""

    nodes: list[GraphNodeRecord]
    edges: list[GraphEdgeRecord]


class _ResultFields(TypedDict):
    question: str
    passages: list[PassageRecord]
    trace: TraceRecord


class ResultRecord(_ResultFields, total=False):
    """One question's result: ``id`` when the question had one, ``graph`` when asked for."""

    id: str
    graph: GraphRecord
