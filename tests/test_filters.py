"""Metadata filters: the where-clause grammar, and the equality property (retrieval with a
filter = retrieval on an index built from the matching passages alone)."""
import numpy as np
import pytest

from evireform import Passage, Proposition, PropositionIndex
from evireform.embed import HashingEmbedder
from evireform.filters import compile_filter, restriction
from evireform.retriever import EviReform, EviReformConfig
from evireform.strategies import BGR, HiQ

NAMES = ["Alice Smith", "Bob Stone", "Paris", "France", "Nile River", "Carl Jung", "Delta Inc",
         "Eve Park", "Fjord Bay", "Gina Lane"]
LANGS = ["en", "de", "fr"]
DIM = 16


def random_corpus(rng, n_passages):
    passages, props, rows = [], [], []
    for j in range(n_passages):
        md = {"year": int(rng.integers(1990, 2030)), "lang": str(rng.choice(LANGS))}
        if rng.random() < 0.5:
            md["tag"] = str(rng.choice(["x", "y"]))
        if rng.random() < 0.3:
            md["namespace"] = f"t{int(rng.integers(0, 3))}"
        names = list(rng.choice(NAMES, size=int(rng.integers(1, 4)), replace=False))
        passages.append(Passage(f"p{j}", names[0], " ".join(f"{n} met {m}." for n, m in
                                                            zip(names, names[1:] + names[:1])),
                                metadata=md))
        for _ in range(int(rng.integers(0, 4))):  # passages without propositions too
            ents = tuple(rng.choice(NAMES, size=int(rng.integers(0, 3)), replace=False))
            props.append(Proposition(" ".join(ents) or "nothing", f"p{j}", ents))
            rows.append(rng.normal(size=DIM))
    emb = np.asarray(rows, np.float32).reshape(-1, DIM)
    return passages, props, emb


def random_filter(rng, passages):
    y = int(rng.integers(1990, 2030))
    pick = [
        {"year": {"$gte": y}},
        {"lang": str(rng.choice(LANGS))},
        {"$or": [{"lang": "de"}, {"year": {"$lt": y}}]},
        {"$and": [{"tag": {"$exists": True}}, {"lang": {"$ne": "en"}}]},
        {"lang": {"$in": ["en", "fr"]}, "year": {"$gt": y, "$lte": y + 15}},
        {"tag": {"$nin": ["x"]}},
        {"namespace": f"t{int(rng.integers(0, 3))}"},
        [p.id for p in passages if rng.random() < 0.3],
    ]
    return pick[int(rng.integers(0, len(pick)))]


def sub_index(passages, props, emb, keep_ids):
    keep = [p for p in passages if p.id in keep_ids]
    rows = [i for i, pr in enumerate(props) if pr.passage in keep_ids]
    return PropositionIndex.from_propositions(keep, [props[i] for i in rows],
                                              emb[rows].reshape(-1, DIM),
                                              HashingEmbedder(DIM).name)


def matching(passages, flt):
    f = compile_filter(flt)
    if f.ids is not None:
        return set(f.ids)
    return {p.id for p in passages if f.predicate(p.metadata)}


def _same(full_res, sub_res):
    assert [p.id for p in full_res.passages] == [p.id for p in sub_res.passages]
    np.testing.assert_allclose([p.score for p in full_res.passages],
                               [p.score for p in sub_res.passages], rtol=1e-12, atol=1e-15)
    for a, b in zip(full_res.passages, sub_res.passages):
        assert (a.from_question, a.from_residual) == pytest.approx(
            (b.from_question, b.from_residual), rel=1e-12, abs=1e-15)
        assert a.metadata == b.metadata
    assert full_res.trace.residual_queries == sub_res.trace.residual_queries


@pytest.mark.parametrize("cfg", [EviReformConfig(n_candidates=6, k_residual=2),
                                 EviReformConfig(n_candidates=4, fill="dense", alpha=0.3),
                                 EviReformConfig(n_candidates=5, propagation=False)])
def test_filter_equals_sub_index_build(rng, cfg):
    emb_q = HashingEmbedder(DIM)
    checked = 0
    for trial in range(25):
        passages, props, emb = random_corpus(rng, int(rng.integers(3, 30)))
        if not props:
            continue
        full = PropositionIndex.from_propositions(passages, props, emb, emb_q.name)
        flt = random_filter(rng, passages)
        keep = matching(passages, flt)
        Q = rng.normal(size=(3, DIM)).astype(np.float32)
        Q /= np.linalg.norm(Q, axis=1, keepdims=True)
        full_r = EviReform(full, cfg, embedder=emb_q)
        if not keep:
            res = full_r.retrieve_embedded("who met whom?", Q[0], 5, filter=flt)
            assert res.passages == []
            continue
        sub_r = EviReform(sub_index(passages, props, emb, keep), cfg, embedder=emb_q)
        for q in Q:
            k = int(rng.integers(1, 12))
            a = full_r.retrieve_embedded("who met whom?", q, k, filter=flt)
            b = sub_r.retrieve_embedded("who met whom?", q, k)
            assert {p.id for p in a.passages} <= keep
            _same(a, b)
            checked += 1
    assert checked >= 20


def test_filter_batch_equals_single_and_strategies_isolate(rng):
    passages, props, emb = random_corpus(rng, 30)
    emb_q = HashingEmbedder(DIM)
    full = PropositionIndex.from_propositions(passages, props, emb, emb_q.name)
    flt = {"lang": "de"}
    keep = matching(passages, flt)
    r = EviReform(full, EviReformConfig(n_candidates=6), embedder=emb_q)
    qs = ["Alice Smith met whom?", "where is Paris?", "who is Carl Jung?"]
    many = r.retrieve_many(qs, 7, filter=flt)
    for q, m in zip(qs, many):
        one = r.retrieve(q, 7, filter=flt)
        assert one.ids == m.ids and {p for p in m.ids} <= keep
    sub = sub_index(passages, props, emb, keep)
    for cls in (BGR, HiQ):
        a = cls(full, emb_q).retrieve_many(qs, 6, filter=flt)
        b = cls(sub, emb_q).retrieve_many(qs, 6)
        assert [x.ids for x in a] == [x.ids for x in b]
        assert all(set(x.ids) <= keep for x in a)


def test_hnsw_index_filtered_search(rng, monkeypatch):
    passages, props, emb = random_corpus(rng, 40)
    emb_q = HashingEmbedder(DIM)
    full = PropositionIndex.from_propositions(passages, props, emb, emb_q.name, hnsw=True)
    r = restriction(full, {"lang": "en"})
    from evireform.engine import CpuEngine
    from evireform.kernels import config as kconfig
    Q = rng.normal(size=(4, DIM)).astype(np.float32)
    exact = CpuEngine(full).search_batch(Q, 5, restriction=r)
    monkeypatch.setattr(kconfig, "EXACT_SEARCH_MAX", 0)  # force the HNSW filter path
    got = CpuEngine(full).search_batch(Q, 5, restriction=r)
    ids = got[0][got[0] >= 0]
    assert r.prop_mask[ids].all()
    np.testing.assert_array_equal(got[0], exact[0])  # a tiny graph searches exactly


@pytest.mark.parametrize("bad, msg", [
    ({"year": {"$near": 3}}, "unknown operator '\\$near'"),
    ({"$xor": []}, "unknown operator"),
    ({"year": {"$gt": [1]}}, "number or a string"),
    ({"year": {"$in": 3}}, "takes a list"),
    ({"year": {"$exists": "yes"}}, "true or false"),
    ({"$or": []}, "non-empty list"),
    ({"$and": [3]}, "must be a JSON object"),
    ("{not json", "not valid JSON"),
    (3.5, "where clause"),
    ([1.5], "passage ids"),
])
def test_bad_filters_are_refused(bad, msg):
    with pytest.raises(ValueError, match=msg):
        compile_filter(bad)


def test_filter_semantics_and_errors(rng):
    passages = [Passage("a", "A", "x", {"year": 2000, "ok": True}),
                Passage("b", "B", "y", {"year": 2010.0, "tags": ["p", "q"]}),
                Passage("c", "C", "z", {"year": "2020"})]
    props = [Proposition("x", "a", ("X",)), Proposition("y", "b", ("X",)),
             Proposition("z", "c", ())]
    idx = PropositionIndex.from_propositions(passages, props, np.eye(3, dtype=np.float32), "e")

    def ids(flt):
        return [passages[j].id for j in restriction(idx, flt).passages]
    assert ids({"year": 2010}) == ["b"]                  # 2010 == 2010.0
    assert ids({"year": {"$gte": 2000}}) == ["a", "b"]   # "2020" is a string: no match
    assert ids({"year": {"$gt": "2"}}) == ["c"]
    assert ids({"ok": 1}) == []                          # true is not 1
    assert ids({"ok": {"$ne": True}}) == ["b", "c"]      # missing key matches $ne
    assert ids({"tags": ["p", "q"]}) == ["b"]
    assert ids({"tags": {"$exists": False}}) == ["a", "c"]
    assert ids({"nokey": {"$exists": True}}) == []       # $exists may name any key
    assert ids(["c", "a"]) == ["a", "c"]
    with pytest.raises(ValueError, match="no passage of the index has the metadata key 'yaer'"):
        restriction(idx, {"yaer": 2000})
    with pytest.raises(ValueError, match="unknown passage ids"):
        restriction(idx, ["zz"])
    # entity degrees are recounted over the matching propositions: X has degree 1 under the
    # filter, 2 without it
    r = restriction(idx, ["a", "c"])
    assert r.graph.inv_deg.tolist() == [1.0] and idx.graph.inv_deg.tolist() == [0.5]
    from evireform.filters import RestrictionCache
    cache = RestrictionCache(idx)                        # an engine's: cached per filter
    assert cache.get(["c", "a"]) is cache.get(["a", "c"])
    assert cache.get(["a", "c"]).graph.inv_deg.tolist() == [1.0]


def test_vectorised_masks_equal_the_per_passage_predicate(rng):
    values = [0, 1, 2.5, -3, True, False, None, "a", "b", "10", "2", [1, 2], {"x": 1}, []]
    passages = []
    for j in range(60):
        md = {k: values[int(rng.integers(0, len(values)))]
              for k in ("u", "v") if rng.random() < 0.8}
        passages.append(Passage(f"p{j}", "", "t", md))
    props = [Proposition("t", p.id, ()) for p in passages]
    idx = PropositionIndex.from_propositions(passages, props,
                                             np.ones((60, 2), np.float32), "e")
    ops = ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"]
    for _ in range(300):
        op = ops[int(rng.integers(0, len(ops)))]
        v = values[int(rng.integers(0, len(values)))]
        if op in ("$gt", "$gte", "$lt", "$lte") and not isinstance(v, (int, float, str)) \
                or isinstance(v, bool) and op in ("$gt", "$gte", "$lt", "$lte"):
            v = [1, "b", 2.5][int(rng.integers(0, 3))]
        if op in ("$in", "$nin"):
            v = [values[int(i)] for i in rng.integers(0, len(values), int(rng.integers(0, 4)))]
        if op == "$exists":
            v = bool(rng.random() < 0.5)
        clause = {"u": {op: v}}
        if rng.random() < 0.3:
            clause = {"$or": [clause, {"v": values[int(rng.integers(0, 11))]}]}
        f = compile_filter(clause)
        want = [f.predicate(p.metadata) for p in passages]
        assert f.passage_mask(idx).tolist() == want, clause


def test_eval_under_a_filter(tmp_path, data_dir):
    """eval --filter: only questions whose gold passages all match, and every method ranks
    only matching passages (EviReform and BGR retrieve under the filter)."""
    from evireform.evaluation import load_questions, run_eval
    from evireform.corpus import load_corpus
    qf = data_dir / "hotpotqa" / "hotpotqa.json"
    cf = data_dir / "hotpotqa" / "hotpotqa_corpus.json"
    passages = load_corpus(cf)
    qs = load_questions(qf, passages)[:30]
    keep = sorted({passages[j].id for q in qs[:12] for j in q.gold}
                  | {p.id for p in passages[::5]})
    rep = run_eval(qf, cf, ["dense", "bm25", "evireform", "bgr"], embedder=HashingEmbedder(256),
                   n=30, cache_dir=tmp_path / "cache", show_progress=False, filter=keep)
    allowed = {j for j, p in enumerate(passages) if p.id in set(keep)}
    assert 12 <= rep.n_questions < 30
    assert all(q.gold <= allowed for q in rep.questions)
    for m in ("dense", "bm25", "evireform", "bgr"):
        assert all(set(rk) <= allowed for rk in rep.rankings[m]), m
    gold5 = {j for q in qs[:5] for j in q.gold}
    outsider = next(p.id for j, p in enumerate(passages) if j not in gold5)
    with pytest.raises(ValueError, match="leaves no question"):
        run_eval(qf, cf, ["dense"], embedder=HashingEmbedder(256), n=5,
                 cache_dir=tmp_path / "cache", show_progress=False, filter=[outsider])
