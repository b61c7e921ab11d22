"""Evidence graphs: which passages a retriever returned and why each was reached.

An :class:`EvidenceGraph` has the returned passages as nodes (corpus positions, in rank
order) and directed edges ``src -> dst`` that say how ``dst`` was reached from ``src``:

* ``query``: a residual query built from the observed passage ``src`` retrieved ``dst``
  (EviReform; ``via`` = the query);
* ``entity``: one propagation step through an entity that a seed proposition of ``src``
  shares with a proposition of ``dst`` (EviReform; ``via`` = the entity);
* ``dependency``: the answer resolved from ``src`` was substituted into the sub-query that
  retrieved ``dst`` (Hi-Q; ``via`` = the rewritten sub-query);
* ``chain``: a forward/backward retrieval chain stepped from ``src`` to ``dst`` (BGR).

A passage reached from the question itself has no incoming edge (a root).  For EviReform,
:func:`evireform_edges` gives every returned passage at most one incoming edge: the parts of
its score (question, residual queries, propagation; see
:class:`~evireform.retriever.RankedPassage`) are tried from the largest down, and the first
that names another passage gives the edge (the question's part names none: a root).  A
residual query is attributed to the passage its bridge came from where the reformulator
names it (the LLM-free one: ``trace.bridges``), else to the observed passage that shares
most of the query's words that are not the question's (none shared: no edge, the query
being the question's words); propagation to the entity
carrying the most seed mass from other passages into it, and the passage that contributed
most of that mass (propagation that only echoes a passage's own seed names none).  An
edge that would close a cycle (two passages naming each other) is left out.
"""
from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

import json
from dataclasses import dataclass, field

import numpy as np

from .entities import words

if TYPE_CHECKING:  # annotations only
    from .index import PropositionIndex

__all__ = ["EvidenceEdge", "EvidenceGraph", "evireform_edges"]

@dataclass(frozen=True)
class EvidenceEdge:
    src: int      # corpus position of the passage the step started from
    dst: int      # corpus position of the passage it reached
    kind: str     # query | entity | dependency | chain
    via: str = ""  # the query, entity or sub-query on the edge


@dataclass
class EvidenceGraph:
    """Nodes (corpus positions, rank order) with their passage ids and titles, and edges."""

    nodes: list[int]
    ids: list[str]
    titles: list[str]
    edges: list[EvidenceEdge] = field(default_factory=list)

    def top(self, n: int) -> "EvidenceGraph":
        """The graph on the first ``n`` nodes and the edges among them."""
        keep = set(self.nodes[:n])
        return EvidenceGraph(self.nodes[:n], self.ids[:n], self.titles[:n],
                             [e for e in self.edges if e.src in keep and e.dst in keep])

    def edge_set(self) -> set[tuple[int, int]]:
        return {(e.src, e.dst) for e in self.edges}

    def to_json(self) -> dict[str, Any]:
        pos = {j: i for i, j in enumerate(self.nodes)}
        return {"nodes": [{"index": j, "id": i, "title": t}
                          for j, i, t in zip(self.nodes, self.ids, self.titles)],
                "edges": [{"src": self.ids[pos[e.src]], "dst": self.ids[pos[e.dst]],
                           "kind": e.kind, "via": e.via}
                          for e in self.edges if e.src in pos and e.dst in pos]}

    def to_networkx(self):
        """A ``networkx.DiGraph`` (needs networkx): nodes are passage ids with ``title`` and
        ``rank``; edges carry ``kind`` and ``via``."""
        import networkx as nx
        g = nx.DiGraph()
        pos = {}
        for r, (j, i, t) in enumerate(zip(self.nodes, self.ids, self.titles)):
            g.add_node(i, title=t, rank=r + 1, index=j)
            pos[j] = i
        for e in self.edges:
            if e.src in pos and e.dst in pos:
                g.add_edge(pos[e.src], pos[e.dst], kind=e.kind, via=e.via)
        return g

    def format(self) -> str:
        """A printable tree-like listing: each node, then how it was reached."""
        into: dict[int, list[EvidenceEdge]] = {}
        for e in self.edges:
            into.setdefault(e.dst, []).append(e)
        rank = {j: r + 1 for r, j in enumerate(self.nodes)}
        lines = []
        for r, (j, i, t) in enumerate(zip(self.nodes, self.ids, self.titles), 1):
            how = into.get(j)
            if not how:
                lines.append(f"[{r}] {t or i}  <- a query (no passage before it)")
                continue
            for e in how:
                src = f"[{rank[e.src]}]" if e.src in rank else f"(passage {e.src})"
                lines.append(f"[{r}] {t or i}  <- {src} via {e.kind} {json.dumps(e.via)}")
        return "\n".join(lines)


def _words(text: str) -> set[str]:
    return set(words(text))


def _query_source(query: str, question: str, observed: list[int], passages: Sequence[Any]) -> int | None:
    """The observed passage the residual query came from: most shared words that the
    question does not have (ties: the earlier observed passage); None when it shares none
    of them with any (its words are the question's: no passage named it)."""
    if not observed:
        return None
    own = _words(query) - _words(question)
    best, best_n = observed[0], -1
    for j in observed:
        p = passages[j]
        n = len(own & _words(p.title + " " + p.text))
        if n > best_n:
            best, best_n = j, n
    return best if best_n > 0 else None


def evireform_edges(index: PropositionIndex, question: str, ranked, trace, seed, alpha: float,
                    propagation: bool) -> list[EvidenceEdge]:
    """One incoming edge per returned passage that was not reached from the question (see
    the module docstring).  ``seed``: the round's :class:`~evireform.retriever.Seed`."""
    owner, g, passages = index.owner, index.graph, index.passages
    edges: list[EvidenceEdge] = []
    # per residual query: its source passage and its normalised mass per passage
    q_src, q_mass = [], []
    # the LLM-free reformulator names each query's bridge passage (trace.bridges)
    named = {b.get("query"): b.get("passage") for b in getattr(trace, "bridges", None) or []}
    for q, hits in zip(trace.residual_queries, trace.residual_hits):
        pid = named.get(q)
        src = index.passage_index(pid) if pid is not None and index.has_passage(pid) else None
        q_src.append(src if src is not None
                     else _query_source(q, question, trace.observed, passages))
        acc: dict[int, float] = {}
        total = sum(s for _, s in hits if s > 0)
        for i, s in hits:
            if s > 0 and total > 0:
                acc[int(owner[i])] = acc.get(int(owner[i]), 0.0) + s / total
        q_mass.append(acc)
    s_ids = np.asarray(seed.s.ids, np.int64)
    s_vals = np.asarray(seed.s.vals, np.float64)
    # seed mass per entity (sum over seed propositions mentioning it), and its best source
    ent_mass: dict[int, float] = {}
    ent_src: dict[int, dict[int, float]] = {}  # entity -> seed mass per source passage
    if propagation and len(s_ids):
        for i, v in zip(s_ids, s_vals):
            for e in g.a_indices[g.a_indptr[i]:g.a_indptr[i + 1]]:
                e, o = int(e), int(owner[i])
                ent_mass[e] = ent_mass.get(e, 0.0) + float(v)
                per = ent_src.setdefault(e, {})
                per[o] = per.get(o, 0.0) + float(v)
    for rp in ranked:
        parts = {"question": rp.from_question, "residual": rp.from_residual,
                 "propagation": rp.from_propagation}
        # the parts in decreasing order; the first that names a source passage gives the
        # edge (propagation that only echoes the passage's own seed names none)
        for kind in sorted(parts, key=lambda k: (-parts[k], k != "question")):
            if parts[kind] <= 0 or kind == "question":
                break
            edge = (_residual_edge(rp.index, q_src, q_mass, trace) if kind == "residual"
                    else _entity_edge(index, rp.index, ent_mass, ent_src))
            if edge is not None:
                edges.append(edge)
                break
    return _acyclic(edges)


def _acyclic(edges: list[EvidenceEdge]) -> list[EvidenceEdge]:
    """``edges`` (at most one into each passage, in rank order of their ``dst``) without
    those that would close a cycle: an edge ``src -> dst`` is left out when ``dst`` is
    already reached on the way into ``src`` (two passages each naming the other)."""
    parent: dict[int, int] = {}
    out = []
    for e in edges:
        j, seen = e.src, set()
        while j in parent and j not in seen and j != e.dst:
            seen.add(j)
            j = parent[j]
        if j == e.dst:
            continue
        parent[e.dst] = e.src
        out.append(e)
    return out


def _residual_edge(j, q_src, q_mass, trace):
    """The residual query that brought most mass to passage ``j``, from its source passage."""
    best = max(range(len(q_mass)), key=lambda l: q_mass[l].get(j, 0.0), default=None)
    if best is None or q_mass[best].get(j, 0.0) <= 0:
        return None
    src = q_src[best]
    if src is None or src == j:
        return None
    return EvidenceEdge(src, j, "query", trace.residual_queries[best])


def _entity_edge(index: PropositionIndex, j, ent_mass, ent_src):
    """The entity of ``j``'s propositions carrying the most seed mass into ``j`` from seed
    propositions of other passages, and the passage that contributed most of it."""
    g = index.graph
    contrib: dict[int, float] = {}
    for i in index.propositions_of(j):
        for e in g.a_indices[g.a_indptr[i]:g.a_indptr[i + 1]]:
            e = int(e)
            other = ent_mass.get(e, 0.0) - ent_src.get(e, {}).get(j, 0.0)
            if other > 0:
                contrib[e] = contrib.get(e, 0.0) + other * float(g.inv_deg[e])
    if not contrib:
        return None
    e = min(contrib, key=lambda e: (-contrib[e], e))
    per = ent_src[e]
    src = min((o for o in per if o != j), key=lambda o: (-per[o], o))
    return EvidenceEdge(src, j, "entity", index.entity_names[e])
