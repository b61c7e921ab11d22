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

from typing import Any, Literal, Union, TYPE_CHECKING
from urllib.parse import quote

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

try:  # pydantic (the service's models) reads typing_extensions' TypedDict before 3.12
    from typing_extensions import TypedDict
except ImportError:  # pragma: no cover - a core install without it: plain typing's
    from typing import TypedDict  # type: ignore[assignment]

__all__ = ["PassageRecord", "BridgeRecord", "EviReformTraceRecord", "BGRTraceRecord", "HiQNodeRecord",
           "HiQTraceRecord", "SearchTraceRecord", "TraceRecord", "GraphRecord", "ResultRecord", "SCORE_MEANING"]

#: what ``score`` means, per method (stated in every trace)
SCORE_MEANING: dict[str, str] = {
    "evireform": "EviReform's passage score (Eq. 12-13): the readout of the seed mixed from "
                 "the question and the residual queries, spread one step through shared "
                 "entities; from_question + from_residual + from_propagation add up to it. "
                 "On an index with passage embeddings the ranking alternates with the "
                 "question's own search (trace.own_search): such a passage keeps the score "
                 "EviReform gave it, 0 if none, so scores need not descend",
    "bgr": "1/(1 + rank) in the merged order (the question's ranking fused with the two "
           "chains, the intersection's passages first); 0 for passages filling up to k",
    "hiq": "1/(1 + rank) in the order read off the query tree (see trace.ranking); 0 for "
           "passages filling up to k",
    "bm25": "BM25 (Lucene's idf, k1 1.5, b 0.75) of the question over the passage's title "
            "and text; 0 for passages filling up to k",
    "dense": "the readout of the question's top propositions by cosine (u normalised to sum "
             "1, 1/sqrt(|P_j|) per passage); 0 for passages filling up to k",
    "hybrid": "reciprocal-rank fusion of the bm25 and dense rankings: the sum of "
              "1/(60 + rank) over the two; 0 for passages filling up to k",
}


#: the metadata keys that say where a passage is in its file (besides ``source`` and
#: ``chunk``): what the CLI's location line, the MCP text and the page show
LOCATION_KEYS = ("section", "page", "slide", "row")


class PassageRecord(TypedDict):
    """One ranked passage."""

    #: the passage's id (a document's chunks: ``SOURCE#CHUNK``)
    id: str
    #: its document's title
    title: str
    #: the passage's text
    text: str
    #: its metadata: source, chunk, section, page, and the document's own
    metadata: dict[str, Any]
    #: the method's score (the trace's ``score`` says what it means)
    score: float
    #: the part of EviReform's score that came from the question's seed (0 for others)
    from_question: float
    #: the part that came from the residual queries' hits
    from_residual: float
    #: the part spread one step through propositions sharing an entity
    from_propagation: float
    #: the ids of the other passages with this text, byte for byte, which the result leaves
    #: out (EviReform's ``fold_duplicates``; empty for the other methods)
    duplicates: list[str]


class BridgeRecord(TypedDict):
    """One residual query of the LLM-free reformulator and the bridge it carries."""

    #: the residual query
    query: str
    #: the bridge as the observed passage spells it
    bridge: str
    #: the id of the observed passage it came from
    passage: str
    #: its rank score: the lookahead's best cosine (or the shared question words)
    score: float


class HitRecord(TypedDict):
    """One proposition a query reached: its passage's id, its position and its score."""

    #: the id of the proposition's passage
    passage: str
    #: the proposition's position in the index
    proposition: int
    #: its score: cosine (dense) or BM25 (lexical)
    score: float


class QueryHitsRecord(TypedDict):
    """What one query (the question or a residual query) reached each way: its best
    propositions by the embeddings (cosine) and by BM25 (dense and lexical together,
    issue 67), best first."""

    #: the query: the question, or a residual query
    query: str
    #: its best propositions by the embeddings (cosine)
    dense: list[HitRecord]
    #: its best propositions by BM25
    lexical: list[HitRecord]


class EviReformTraceRecord(TypedDict):
    """How EviReform reached its ranking."""

    #: the method that answered
    method: Literal["evireform"]
    #: what the passages' scores mean
    score: str
    #: the queries written from the observed passages (the bridges they reveal)
    residual_queries: list[str]
    #: the LLM-free reformulator's bridges (empty for LLM roles)
    bridges: list[BridgeRecord]
    #: the question's share of the seed mass it got (Eq. 11's beta)
    beta: float | None
    #: LLM roles' repairs and fallbacks, e.g. "select:fallback:APITimeoutError"
    role_events: list[str]
    #: wall time per stage in milliseconds (evireform.timing; a batch's for a batch)
    timings_ms: dict[str, float]
    #: each query's dense and lexical hits (the question first, then the residual queries;
    #: empty when the retriever scores with the embeddings alone)
    hits: list[QueryHitsRecord]
    #: the ids of the passages the question's own search placed in the ranking (every
    #: other place: ``EviReformConfig.own_search``), in ranking order; empty when it did
    #: not run (an index without passage embeddings, an LLM's selection, "off")
    own_search: list[str]


class BGRTraceRecord(TypedDict):
    """How BGR (bidirectional graph retrieval) reached its ranking."""

    #: the method that answered
    method: Literal["bgr"]
    #: what the passages' scores mean
    score: str
    #: the forward chain (from the question's best passage), passage ids in chain order
    forward: list[str]
    #: the backward chain (from the last hop's passage), passage ids in chain order
    backward: list[str]
    #: the edges both chains hold, ``[src id, dst id]``
    intersection: list[list[str]]
    #: the query that took each forward step
    queries: list[str]
    #: how the two chains were merged
    merge: Literal["intersection", "union"]
    #: LLM roles' repairs and fallbacks
    role_events: list[str]
    #: wall time per stage in milliseconds (evireform.timing; a batch's for a batch)
    timings_ms: dict[str, float]


class HiQNodeRecord(TypedDict):
    """One node of Hi-Q's question tree."""

    #: the node's (sub)question
    query: str
    #: its depth in the tree (the question: 0)
    depth: int
    #: whether it was resolved
    status: str
    #: its answer, when resolved
    answer: str | None
    #: the node's own top passages, ids best first
    passages: list[str]
    #: its subquestions
    children: list["HiQNodeRecord"]


class HiQTraceRecord(TypedDict):
    """How Hi-Q reached its ranking."""

    #: the method that answered
    method: Literal["hiq"]
    #: what the passages' scores mean
    score: str
    #: the question tree
    tree: HiQNodeRecord
    #: how the ranking was read off the tree: ``"interleave"`` (rank by rank, the leaves in
    #: dependency order) or ``"resolved_first"`` (resolved leaves' passages, then the others')
    ranking: Literal["interleave", "resolved_first"]
    #: LLM roles' repairs and fallbacks
    role_events: list[str]
    #: wall time per stage in milliseconds (evireform.timing; a batch's for a batch)
    timings_ms: dict[str, float]


class SearchTraceRecord(TypedDict):
    """How a one-search method (bm25, dense, hybrid) ranked: one search, no hops."""

    #: the method that answered
    method: Literal["bm25", "dense", "hybrid"]
    #: what the passages' scores mean
    score: str
    #: wall time per stage in milliseconds (evireform.timing; a batch's for a batch)
    timings_ms: dict[str, float]


TraceRecord = Union[EviReformTraceRecord, BGRTraceRecord, HiQTraceRecord, SearchTraceRecord]


class GraphNodeRecord(TypedDict):
    """A passage of the evidence graph."""

    #: its position in the index
    index: int
    #: its id
    id: str
    #: its title
    title: str


class GraphEdgeRecord(TypedDict):
    """How one passage led to another."""

    #: the id of the passage it came from
    src: str
    #: the id of the passage it reached
    dst: str
    #: how: a residual query, a shared entity, ...
    kind: str
    #: what carried it: the query or the entity
    via: str


class GraphRecord(TypedDict):
    """The evidence graph (:meth:`evireform.explain.EvidenceGraph.to_json`)."""

    #: the passages, in rank order
    nodes: list[GraphNodeRecord]
    #: how each was reached
    edges: list[GraphEdgeRecord]


class AnswerCiteRecord(TypedDict):
    """A passage an answer cites."""

    #: the passage's id
    id: str
    #: the passage's title
    title: str
    #: the passage's sentence that best matches the question (and the answer)
    sentence: str


class AnswerRecord(TypedDict):
    """An answer from the retrieved passages (:meth:`evireform.answer.Answer.to_dict`)."""

    #: the answer, or "not found in these documents"
    text: str
    #: whether the passages hold an answer
    found: bool
    #: "llm" (an LLM's answer from the passages) or "extractive" (the passages' sentence
    #: that best matches the question, as it stands)
    kind: str
    #: the share of the question's content words the top 3 passages hold (0..1; LLM-free:
    #: below 0.7, with the similarity below 0.5, the extractive answer says "not found")
    confidence: float
    #: the cosine of the question's best dense hit (null when the method has none)
    similarity: float | None
    #: the passages the answer cites, best first
    cites: list[AnswerCiteRecord]
    #: what happened on the way ("answer:fallback:ContractError": the LLM's reply was
    #: refused twice and the extractive answer stands)
    events: list[str]


class _ResultFields(TypedDict):
    #: the question asked
    question: str
    #: the passages, best first
    passages: list[PassageRecord]
    #: how the method reached them
    trace: TraceRecord


class ResultRecord(_ResultFields, total=False):
    """One question's result: ``id`` when the question had one, ``graph`` when asked for."""

    #: the question's id, when it had one
    id: str
    #: the evidence graph, when asked for
    graph: GraphRecord
    #: the answer from the passages, when asked for (``evireform ask``, ``"answer": true``)
    answer: AnswerRecord


def field_docs(cls: type) -> dict[str, str]:
    """The ``#:`` comments above a record class's fields (its own and its bases'), by field:
    the descriptions the HTTP API's schema publishes."""
    import inspect
    out: dict[str, str] = {}
    chain, todo = [], [cls]
    while todo:  # a TypedDict's bases are in __orig_bases__, not its __mro__
        k = todo.pop()
        if isinstance(k, type) and k.__module__ in (__name__, cls.__module__) and \
                k not in chain:
            chain.append(k)
            todo.extend(getattr(k, "__orig_bases__", ()))
    for klass in reversed(chain):
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        doc: list[str] = []
        for line in lines:
            t = line.strip()
            if t.startswith("#:"):
                doc.append(t[2:].strip())
            elif doc and ":" in t and not t.startswith(("#", '"')):
                out[t.split(":", 1)[0].strip()] = " ".join(doc)
                doc = []
            elif not t.startswith("#"):
                doc = []
    return out


# --------------------------------------------------------------------------- TREC runs
def trec_docid(pid: str) -> str:
    """A passage id as a TREC docid: whitespace, control characters and ``%`` are
    percent-encoded, so the docid is one token and distinct ids stay distinct."""
    return quote(pid, safe="".join(chr(c) for c in range(33, 127) if chr(c) != "%"))


def trec_scores(scores: ArrayLike) -> list[float]:
    """Scores for a TREC run, strictly decreasing down the ranking both as written (float64)
    and as float32, so that trec_eval-family tools keep evireform's order: they re-sort by
    score, ties by docid, and pytrec_eval (ir_measures' default) compares scores in float32.
    A score whose float32 value stays below the one above it is written in full float64
    precision; one that does not (the zero-score fill, equal sums, scores closer than
    float32 resolves) is written as the next float32 value below the one above it."""
    out: list[float] = []
    above = None  # the float32 value of the score above
    for s in map(float, scores):
        s32 = np.float32(s)
        if above is not None and not s32 < above:
            s32 = np.nextafter(above, np.float32(-np.inf))
            s = float(s32)
        out.append(s)
        above = s32
    return out
