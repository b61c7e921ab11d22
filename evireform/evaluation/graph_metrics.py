"""Evidence-graph metrics (Graph-hop, ReasonGraphQA): the evidence set and the graph.

For each question the prediction is the method's evidence graph on its top ``n`` passages,
``n`` = the number of gold passages (as Graph-hop evaluates single-hop retrievers with
k = the gold set's size); the gold graph's nodes are the supporting paragraphs and its edges
the ``#k`` dependencies of MuSiQue's ``question_decomposition``.

* evidence set: EM (the sets are equal), precision, recall, F1;
* GM (graph matching): the same nodes and the same directed edges;
* GS (graph structure): the two directed graphs are isomorphic, node identity ignored;
* GED (graph edit distance): the least number of node substitutions, insertions, deletions
  and edge insertions and deletions turning the prediction into the gold graph, unit costs,
  a node substitution free only between the same passage (networkx's
  ``graph_edit_distance`` with ``node_match`` on the passage), computed exactly by search
  over node mappings (the graphs here have at most a few nodes).

Baselines state no edges, so their graphs are edgeless: GM and GS then hold only for
questions whose gold graph has no edges.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

MAX_EXACT_NODES = 7
GRAPH_METRICS = ("ev_em", "ev_p", "ev_r", "ev_f1", "gm", "gs", "ged")


def _canon(nodes, edges):
    nodes = list(dict.fromkeys(nodes))
    pos = {v: i for i, v in enumerate(nodes)}
    return nodes, {(pos[a], pos[b]) for a, b in edges if a in pos and b in pos and a != b}


def _mappings(n1: int, n2: int):
    """Every partial injection of range(n1) into range(n2): tuples with None = deleted."""
    def rec(u, used, cur):
        if u == n1:
            yield tuple(cur)
            return
        for v in [None] + [v for v in range(n2) if v not in used]:
            cur.append(v)
            if v is not None:
                used.add(v)
            yield from rec(u + 1, used, cur)
            if v is not None:
                used.discard(v)
            cur.pop()
    yield from rec(0, set(), [])


def ged(nodes1, edges1, nodes2, edges2, *, labelled: bool = True) -> int:
    """Exact graph edit distance between two small directed graphs (see the module
    docstring); ``labelled=False`` makes every node substitution free (structure only)."""
    n1, e1 = _canon(nodes1, edges1)
    n2, e2 = _canon(nodes2, edges2)
    if max(len(n1), len(n2)) > MAX_EXACT_NODES:
        raise ValueError(f"exact GED is limited to {MAX_EXACT_NODES} nodes a graph")
    best = len(n1) + len(n2) + len(e1) + len(e2)
    for perm in _mappings(len(n1), len(n2)):
        cost = 0
        for u, v in enumerate(perm):
            if v is None:
                cost += 1  # delete u
            elif labelled and n1[u] != n2[v]:
                cost += 1  # substitute
        mapped = {v for v in perm if v is not None}
        cost += len(n2) - len(mapped)  # insert the rest
        matched = sum(1 for a, b in e1 if perm[a] is not None and perm[b] is not None
                      and (perm[a], perm[b]) in e2)
        cost += len(e1) + len(e2) - 2 * matched
        best = min(best, cost)
    return best


def graph_scores(pred_nodes, pred_edges, gold_nodes, gold_edges) -> dict[str, Any]:
    """The metrics of one question (0/1 for EM, GM, GS; fractions for P, R, F1)."""
    p, g = set(pred_nodes), set(gold_nodes)
    hit = len(p & g)
    prec = hit / len(p) if p else 0.0
    rec = hit / len(g) if g else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    pe = {(a, b) for a, b in pred_edges if a in p and b in p and a != b}
    ge = {(a, b) for a, b in gold_edges if a != b}
    gm = float(p == g and pe == ge)
    gs = float(len(p) == len(g) and len(pe) == len(ge)
               and ged(pred_nodes, pe, gold_nodes, ge, labelled=False) == 0)
    return {"ev_em": float(p == g), "ev_p": prec, "ev_r": rec, "ev_f1": f1, "gm": gm,
            "gs": gs, "ged": float(ged(list(pred_nodes), pe, sorted(g), ge))}


def method_graphs(ranking, results, questions: Sequence[str]):
    """Per question: (nodes, edges) of the method's evidence graph on its top |gold|
    passages; ``results`` (RetrievalResults) give edges, a bare ranking gives none."""
    out = []
    for t, q in enumerate(questions):
        n = len(q.gold)
        if results is not None:
            g = results[t].evidence_graph(n)
            out.append((g.nodes, sorted(g.edge_set())))
        else:
            out.append((list(ranking[t][:n]), []))
    return out


def graph_metrics(ranking, results, questions: Sequence[str]) -> dict[str, Any]:
    """Means over the questions with a gold graph: EM/P/R/F1/GM/GS in percent, GED raw;
    ``n_graph_questions`` says how many.  Empty when none has one."""
    rows = []
    for (nodes, edges), q in zip(method_graphs(ranking, results, questions), questions):
        if q.gold_edges is None:
            continue
        rows.append(graph_scores(nodes, edges, sorted(q.gold), q.gold_edges))
    if not rows:
        return {}
    out = {m: float(np.mean([r[m] for r in rows])) * (1 if m == "ged" else 100)
           for m in GRAPH_METRICS}
    out["n_graph_questions"] = len(rows)
    return out
