"""The hipporag2 baseline: HippoRAG 2's graph, seeding and PageRank on hand-made cases."""
import numpy as np
import pytest

pytest.importorskip("igraph")

from evireform.evaluation.hipporag2 import HippoRAG2, text_processing  # noqa: E402


class TableEmbedder:
    """Fixed unit vectors for known strings (others: a hash direction)."""
    name, dim = "table-4", 4

    def __init__(self, table):
        self.table = {k: np.asarray(v, np.float64) / np.linalg.norm(v) for k, v in table.items()}

    def encode(self, texts, **kw):
        out = []
        for t in texts:
            v = self.table.get(t)
            if v is None:
                r = np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(4)
                v = r / np.linalg.norm(r)
            out.append(v)
        return np.asarray(out, np.float32)


TRIPLES = [[("Alice Smith", "born in", "Paris"), ("Alice Smith", "born in", "Paris"),
            ("Alice Smith", "met", "Bob")],
           [("Paris", "capital of", "France"), ("Paris!", "twin of", "Rome")],
           [("Bob", "likes", "tea")], []]
EMB = TableEmbedder({"paris": [1, 0, 0, 0], "paris ": [1, 0, 0, 0],
                     "rome": [0.9, 0.1, 0, 0], "alice smith": [0, 1, 0, 0],
                     "bob": [0, 0, 1, 0], "tea": [0, 0, 0, 1], "france": [0, 0.2, 0.1, 1]})


def _edges(h):
    out = {}
    for e in h.graph.es:
        key = tuple(sorted((e.source, e.target)))
        out.setdefault(key, []).append(round(e["weight"], 6))
    return {k: sorted(v) for k, v in out.items()}


def test_the_graph_is_hipporags():
    assert text_processing("Paris!") == "paris" and text_processing(" A-b ") == "a b"
    h = HippoRAG2(TRIPLES, EMB)
    assert h.entities == ["alice smith", "bob", "france", "paris", "rome", "tea"]
    e = {n: i for i, n in enumerate(h.entities)}
    E = h.E
    got = _edges(h)
    # a duplicate triple counts once per passage; each direction is its own parallel edge
    assert got[tuple(sorted((e["alice smith"], e["paris"])))] == [1.0, 1.0]
    # paris ~ rome (cosine 0.994 >= 0.8): the synonymy weight replaces the fact edge's in
    # both directions (each entity finds the other)
    sim = round(float(EMB.table["paris"] @ EMB.table["rome"]), 6)
    assert got[tuple(sorted((e["paris"], e["rome"])))] == [sim, sim]
    # passage edges, weight 1, once; the passage without triples has no edge
    assert got[(e["alice smith"], E + 0)] == [1.0] and got[(e["paris"], E + 1)] == [1.0]
    assert h.graph.degree(E + 3) == 0
    assert list(h.ent_passages[[e["paris"], e["bob"], e["tea"]]]) == [2, 2, 1]
    assert len(h.facts) == 5 and str(h.facts[0]) == "('alice smith', 'born in', 'paris')"


def test_the_seeding_and_pagerank_are_hipporags():
    h = HippoRAG2(TRIPLES, EMB)
    e = {n: i for i, n in enumerate(h.entities)}
    q = EMB.encode(["('bob', 'likes', 'tea')"])[0]
    sims = np.array([0.2, 0.6, 0.9, 0.1])
    r = h.reset(q, sims)
    fs = h.fact_emb @ q
    fs = (fs - fs.min()) / (fs.max() - fs.min())
    top = np.argsort(fs)[-5:][::-1]
    want = np.zeros(h.E)
    n = np.zeros(h.E)
    for f in top:
        s_, _, o = h.facts[f]
        for p in (s_, o):
            want[e[p]] += fs[f] / h.ent_passages[e[p]]
            n[e[p]] += 1
    want = np.divide(want, n, out=np.zeros_like(want), where=n > 0)
    keep = np.argsort(-want, kind="stable")[:5]
    mask = np.zeros(h.E, bool)
    mask[keep] = True
    np.testing.assert_allclose(r[:h.E], np.where(mask, want, 0), rtol=1e-12)
    np.testing.assert_allclose(r[h.E:], 0.05 * (sims - 0.1) / 0.8, rtol=1e-12)
    # igraph's PageRank equals the power iteration of the weighted multigraph walk
    W = np.zeros((h.E + h.N,) * 2)
    for ed in h.graph.es:
        W[ed.source, ed.target] += ed["weight"]
        W[ed.target, ed.source] += ed["weight"]
    deg = W.sum(1)
    reset = r / r.sum()
    p = reset.copy()
    for _ in range(500):
        walk = W.T @ np.divide(p, deg, out=np.zeros_like(p), where=deg > 0)
        walk += reset * p[deg == 0].sum()  # dangling mass restarts (prpack's rule)
        p = 0.5 * reset + 0.5 * walk
    np.testing.assert_allclose(h.pagerank(r), p / p.sum(), rtol=1e-6, atol=1e-9)
    assert h.scores(q, sims).shape == (4,)


def test_no_fact_means_the_dense_ranking():
    assert HippoRAG2([[], []], EMB).scores(np.ones(4) / 2, np.array([0.3, 0.1])) is None
