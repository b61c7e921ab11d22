"""The retriever's equations on the worked example, its options, C.1 fallbacks, threads."""
import threading

import numpy as np
import pytest

from evireform import Passage, Proposition, PropositionIndex
from evireform.embed import HashingEmbedder
from evireform.retriever import EviReform, EviReformConfig

U = [0.9, 0.5, 0.3, 0.0, 0.2, 0.1, 0.4]
VEC = {
    "question": np.array(U),
    "query one": np.array([0, 0, 0, 0, 0.6, 0.2, 0]),
    "query two": np.array([0, 0, 0, 0.5, 0, 0, 0.5]),
}


class DictEmbedder:
    """Maps known strings to fixed vectors (the worked example's similarities)."""

    name = "dict-7"
    dim = 7

    def encode(self, texts, **kw):
        X = np.stack([VEC[t] if t in VEC else np.eye(7)[6] * 0 + 1e-3 for t in texts])
        return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


class FixedSelector:
    name = "fixed"

    def __init__(self, ids):
        self.ids = ids

    def select(self, question, candidates, max_selected):
        return list(self.ids)


class FixedReformulator:
    name = "fixed"

    def __init__(self, queries):
        self.queries = queries
        self.seen = []

    def reformulate(self, question, observed, max_queries):
        self.seen.append([p.id for p in observed])
        return list(self.queries)


@pytest.fixture
def worked():
    passages = [Passage("d0", "d0", "x"), Passage("d1", "d1", "y"), Passage("d2", "d2", "z")]
    ents = [("Alice", "Paris"), ("Alice",), ("Paris", "France"), ("Bob",), ("Bob", "France"),
            ("France",), ()]
    owners = ["d0", "d0", "d1", "d2", "d2", "d1", "d2"]
    props = [Proposition(f"p{i}", o, e) for i, (o, e) in enumerate(zip(owners, ents))]
    return PropositionIndex.from_propositions(passages, props, np.eye(7, dtype=np.float32),
                                              "dict-7")


def make(idx, queries=("query one", "query two"), sel=(0, 1), **cfg):
    return EviReform(idx, EviReformConfig(**cfg), embedder=DictEmbedder(),
                     selector=FixedSelector(sel), reformulator=FixedReformulator(queries))


def scores(res):
    return {p.id: p.score for p in res.passages}


def test_worked_example_full(worked):
    r = make(worked)
    res = r.retrieve("question", 3)
    assert [p.id for p in res.passages] == ["d0", "d2", "d1"]
    np.testing.assert_allclose([p.score for p in res.passages], [0.296732, 0.194598, 0.127847],
                               atol=1e-6)
    t = res.trace
    assert t.selected == [0, 1] and t.observed == [0]
    assert r.reformulator.seen == [["d0"]]  # the reformulator reads the passages of S_q
    assert t.residual_queries == ["query one", "query two"]
    assert [i for i, _ in t.residual_hits[0]] == [4, 5]
    assert [i for i, _ in t.residual_hits[1]] in ([3, 6], [6, 3])
    # score parts: alpha*beta*b, alpha*(1-beta)*r, and the rest from propagation
    d0 = res.passages[0]
    np.testing.assert_allclose(d0.from_question, 0.5 * 0.5 * 1 / np.sqrt(2), atol=1e-9)
    assert d0.from_residual == 0
    np.testing.assert_allclose(d0.from_question + d0.from_residual + d0.from_propagation,
                               d0.score)
    d2 = res.passages[1]
    np.testing.assert_allclose(d2.from_residual, 0.5 * 0.5 * (0.25 + 0.375 + 0.25) / np.sqrt(3),
                               atol=1e-6)


def test_trace_candidates_read_as_a_list_of_pairs(worked):
    """The trace keeps a question's candidates as one Pairs object: it reads, compares,
    slices, copies and pickles as the list of (proposition, u) tuples it stands for."""
    import copy
    import pickle
    from evireform.retriever import Pairs
    res = make(worked).retrieve("question", 3)
    c = res.trace.candidates
    as_list = [(i, u) for i, u in c]
    assert isinstance(c, Pairs) and len(c) == len(as_list) > 0
    assert all(type(i) is int and type(u) is float and u > 0 for i, u in as_list)
    assert [u for _, u in as_list] == sorted((u for _, u in as_list), reverse=True)
    assert c == as_list and as_list == c and c[0] == as_list[0] and c[-1] == as_list[-1]
    assert c[:2] == as_list[:2] and repr(c) == repr(as_list)
    assert pickle.loads(pickle.dumps(c)) == c and copy.deepcopy(res.trace) == res.trace
    assert c != as_list[:-1] and Pairs([1], [0.5]) != Pairs([1], [0.25])
    with pytest.raises(ValueError, match="differ in length"):
        Pairs([1, 2], [0.5])


def test_worked_example_ablations(worked):
    s = scores(make(worked, propagation=False).retrieve("question", 3))
    np.testing.assert_allclose([s["d0"], s["d1"], s["d2"]], [0.353553, 0.044194, 0.252591],
                               atol=1e-6)
    res = make(worked, reformulation=False).retrieve("question", 3)
    s = scores(res)
    np.testing.assert_allclose([s["d0"], s["d1"], s["d2"]], [0.593465, 0.113642, 0], atol=1e-6)
    assert res.trace.residual_queries == []


def test_residual_only_and_repeat_question(worked):
    # residual only: s = r (normalised), so d0 (no residual hits) gets only propagated mass
    res = make(worked, mode="residual_only", propagation=False).retrieve("question", 3)
    s = scores(res)
    np.testing.assert_allclose(s["d0"], 0)
    np.testing.assert_allclose(s["d2"], (0.25 + 0.375 + 0.25) / np.sqrt(3))
    # repeat question: the question is issued as many times as there were residual queries
    res = make(worked, mode="repeat_question").retrieve("question", 3)
    assert res.trace.residual_queries == ["question", "question"]
    assert all([i for i, _ in h] == [0, 1] for h in res.trace.residual_hits)


def test_selector_fallback_and_invalid_ids(worked):
    # no valid id: p3 has u = 0 (not a candidate), 99 is not a proposition, "x" is not an id
    res = make(worked, sel=(3, 99, "x", None), reformulation=False).retrieve("question", 3)
    assert res.trace.selected == [0] and res.trace.selector_fallback
    # duplicates are dropped and the cap holds
    res = make(worked, sel=(1, 1, 0, 2, 4), max_selected=2).retrieve("question", 3)
    assert res.trace.selected == [1, 0]


def test_the_selector_sees_each_candidates_passage_text_and_score(worked):
    """What a selector is shown (Candidates, made on access): ids best first, their u,
    texts, and the passage position each proposition belongs to."""
    seen = []

    class Looking:
        name = "looking"

        def select(self, question, candidates, max_selected):
            seen.extend((c.id, round(c.score, 6), c.text, c.passage) for c in candidates)
            assert candidates[-1] == list(candidates)[-1] and len(candidates) == len(seen)
            return [candidates[1].id]

    r = EviReform(worked, EviReformConfig(reformulation=False), embedder=DictEmbedder(),
                  selector=Looking())
    res = r.retrieve("question", 3)
    u = np.asarray(U) / np.linalg.norm(U)
    want = [(i, round(float(np.float32(u[i])), 6), f"p{i}", int(worked.owner[i]))
            for i in np.argsort(-u, kind="stable") if u[i] > 0]
    assert seen == want and res.trace.selected == [want[1][0]]


def test_invalid_queries_ignored(worked):
    r = make(worked, queries=("", "   ", None, 7, "query one", "query one"))
    res = r.retrieve("question", 3)
    assert res.trace.residual_queries == ["query one"]
    assert res.trace.dropped_queries == 5
    # no valid query at all: s = b
    res = make(worked, queries=("",)).retrieve("question", 3)
    want = scores(make(worked, reformulation=False).retrieve("question", 3))
    np.testing.assert_allclose([scores(res)[k] for k in want], list(want.values()))


def test_roles_that_raise_fall_back(worked):
    class Boom:
        name = "boom"

        def select(self, *a):
            raise RuntimeError("x")

        def reformulate(self, *a):
            raise RuntimeError("x")

    r = EviReform(worked, embedder=DictEmbedder(), selector=Boom(), reformulator=Boom())
    res = r.retrieve("question", 3)
    assert res.trace.selector_fallback and res.trace.residual_queries == []


def test_fill_orders(worked):
    # with no propagation and no reformulation only d0 scores; the rest is filled
    corpus = make(worked, reformulation=False, propagation=False, sel=(2,)).retrieve("question", 3)
    assert [p.id for p in corpus.passages] == ["d1", "d0", "d2"]
    dense = make(worked, reformulation=False, propagation=False, sel=(2,),
                 fill="dense").retrieve("question", 3)
    # dense order of the question's candidates: p0 (d0), p1 (d0), p6 (d2), p2 (d1), ...
    assert [p.id for p in dense.passages] == ["d1", "d0", "d2"]
    assert dense.passages[2].score == 0


def test_config_validation():
    for bad in [dict(alpha=1.5), dict(beta=-0.1), dict(rounds=4), dict(k_residual=0),
                dict(mode="x"), dict(fill="x"), dict(n_candidates=True)]:
        with pytest.raises(ValueError):
            EviReformConfig(**bad)


def test_bad_question_and_k(worked):
    r = make(worked)
    with pytest.raises(ValueError, match="question"):
        r.retrieve("   ", 3)
    with pytest.raises(ValueError, match="k must be"):
        r.retrieve("question", 0)
    with pytest.raises(ValueError, match="embedder"):
        EviReform(worked, embedder=HashingEmbedder(7))


@pytest.fixture(scope="module")
def small_real(data_dir):
    from evireform import load_corpus
    import json
    passages = load_corpus(data_dir / "hotpotqa/hotpotqa_corpus.json")
    emb = HashingEmbedder(128)
    idx = PropositionIndex.build(passages, emb, show_progress=False)
    qs = [q["question"] for q in json.loads((data_dir / "hotpotqa/hotpotqa.json").read_text())]
    return idx, emb, qs[:40]


@pytest.mark.parametrize("cfg", [dict(), dict(rounds=3), dict(mode="repeat_question"),
                                 dict(propagation=False, fill="dense")])
def test_retrieve_many_equals_retrieve(small_real, cfg):
    idx, emb, qs = small_real
    r = EviReform(idx, EviReformConfig(**cfg), embedder=emb)
    many = r.retrieve_many(qs, 10)
    for q, m in zip(qs, many):
        one = r.retrieve(q, 10)
        assert one.ids == m.ids
        np.testing.assert_allclose([p.score for p in one.passages],
                                   [p.score for p in m.passages], rtol=1e-9)
        assert one.trace.residual_queries == m.trace.residual_queries


def test_thread_safety(small_real):
    idx, emb, qs = small_real
    r = EviReform(idx, embedder=emb)
    want = [r.retrieve(q, 10).ids for q in qs]
    got = [None] * len(qs)

    def work(start):
        for i in range(start, len(qs), 4):
            got[i] = r.retrieve(qs[i], 10).ids

    ts = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert got == want




def _copies():
    """Four manual pages holding the same AUTHORS text and three texts of their own:
    ``(embedder, passages, index, the shared text, a question it answers)``."""
    e = HashingEmbedder(64)
    same = "OpenSSH is a derivative of the original ssh release by Tatu Ylonen."
    ps = [Passage(f"{t}#1", f"{t} AUTHORS", same) for t in ("ssh", "scp", "sftp", "ssh-add")]
    ps += [Passage("ssh#2", "ssh", "ssh logs into a remote machine and runs commands."),
           Passage("scp#2", "scp", "scp copies files between hosts on a network."),
           Passage("sftp#2", "sftp", "sftp transfers files over an encrypted session.")]
    idx = PropositionIndex.build(ps, e, show_progress=False)
    return e, ps, idx, same, "Who made the original ssh release that OpenSSH derives from?"


def test_a_text_held_by_several_passages_is_shown_once_naming_the_others():
    """Issue 68: the same section in several files (a man page's AUTHORS) takes one place
    in the result, the best-ranked copy, naming the others; the result still holds k
    different texts, read further down when the copies outnumber k; under a filter only
    the matching copies are named; fold_duplicates=False ranks every copy (the paper)."""
    e, ps, idx, same, q = _copies()
    res = EviReform(idx, embedder=e).retrieve(q, k=3)
    first = res.passages[0]
    assert first.text == same and len(res.passages) == 3
    assert len({p.text for p in res.passages}) == 3  # k different texts
    assert set(first.duplicates) == {p.id for p in ps[:4]} - {first.id}
    assert res.to_dict()["passages"][0]["duplicates"] == list(first.duplicates)
    assert all(p.duplicates == () for p in res.passages[1:])
    # k covers every distinct text: the ranking reads past all four copies
    every = EviReform(idx, embedder=e).retrieve(q, k=10)
    assert sorted(p.text for p in every.passages) == sorted({p.text for p in ps})
    # k=2 reads k + 2 = 4 first, all copies of one text, then further down, never past
    # k + the index's 3 repeats (EviReform's own ranking: the own search's interleave
    # passes over a placed text itself, so it never reads further)
    r = EviReform(idx, EviReformConfig(own_search="off"), embedder=e)
    calls = []
    real = r._rank_rows
    r._rank_rows = lambda *a: calls.append(a[2]) or real(*a)
    two = r.retrieve(q, k=2)
    assert len({p.text for p in two.passages}) == 2 and calls == [4, 5]
    # a filter names the matching copies only
    got = EviReform(idx, embedder=e).retrieve(q, k=3, filter=["scp#1", "sftp#1", "scp#2"])
    kept = [p for p in got.passages if p.text == same]
    assert len(kept) == 1 and set(kept[0].duplicates) | {kept[0].id} == {"scp#1", "sftp#1"}
    # the paper's ranking: every copy, in score order
    plain = EviReform(idx, EviReformConfig(fold_duplicates=False), embedder=e).retrieve(q, k=3)
    assert [p.text for p in plain.passages].count(same) >= 2
    assert all(p.duplicates == () for p in plain.passages)
    with pytest.raises(ValueError, match="fold_duplicates must be True or False"):
        EviReformConfig(fold_duplicates=1)


@pytest.mark.parametrize("method", ["bgr", "hiq", "bm25", "dense", "hybrid"])
def test_bgr_and_hiq_show_a_repeated_text_once_too(method):
    """BGR and Hi-Q fold repeated texts as EviReform does (one copy, naming the others, k
    different texts, a filter naming its matching copies only); fold_duplicates=False
    shows every copy, and the fill past their order folds too."""
    from evireform.strategies import make_strategy
    e, ps, idx, same, q = _copies()
    for k in (3, 10):
        res = make_strategy(method, idx, e).retrieve(q, k=k)
        texts = [p.text for p in res.passages]
        assert len(texts) == len(set(texts)) == min(k, 4), (k, texts)
        (kept,) = [p for p in res.passages if p.text == same]
        assert set(kept.duplicates) == {p.id for p in ps[:4]} - {kept.id}
        assert all(p.duplicates == () for p in res.passages if p is not kept)
    got = make_strategy(method, idx, e).retrieve(q, k=3, filter=["scp#1", "sftp#1", "scp#2"])
    (kept,) = [p for p in got.passages if p.text == same]
    assert set(kept.duplicates) | {kept.id} == {"scp#1", "sftp#1"}
    plain = make_strategy(method, idx, e, fold_duplicates=False).retrieve(q, k=7)
    assert [p.text for p in plain.passages].count(same) == 4
    assert all(p.duplicates == () for p in plain.passages)


def test_passages_without_text_are_no_copies_of_each_other():
    """A corpus of titles only (every text empty) folds nothing: k passages come back, and
    the ranking reads no further than k (the bench's synthetic index is such a corpus)."""
    e = HashingEmbedder(64)
    ps = [Passage(str(i), f"Alpha {i} met Beta {i % 3}", "") for i in range(8)]
    ps[3] = Passage("3", "Gamma", "Gamma met Alpha 1 in Paris.")
    idx = PropositionIndex.build(ps, e, show_progress=False)
    assert idx.n_same_text == 0
    r = EviReform(idx, embedder=e)
    calls = []
    real = r._rank_rows
    r._rank_rows = lambda *a: calls.append(a[2]) or real(*a)
    assert len(r.retrieve("Who did Alpha 1 meet?", k=4).passages) == 4 and calls == [4]
