"""Hostile filters: long $in lists, huge integers and NUL strings, malformed and deeply nested clauses, restrictions that must hold no copies, filtered HNSW search."""
import numpy as np
import pytest
from evireform import Passage, PropositionIndex
from evireform.filters import compile_filter
from evireform.engine import structures_of, quantize

from hostile_common import REPO, EMB, _run, _index, _ps, _ranks  # noqa: F401


def _flt_index(values):
    ps = [Passage(f"p{i}", "t", f"text {i}.", {"v": v} if v is not None else {})
          for i, v in enumerate(values)]
    return PropositionIndex.build(ps, EMB, show_progress=False)


def test_in_with_many_values_is_linear(monkeypatch):
    idx = _flt_index(list(range(2000)) + ["s1", "s2", None])
    vals = list(range(0, 60_000, 3)) + ["s2", "zz"]
    calls = []
    import evireform.filters as F
    real = F._eq_mask
    monkeypatch.setattr(F, "_eq_mask", lambda *a: calls.append(1) or real(*a))
    mask = compile_filter({"v": {"$in": vals}}).passage_mask(idx)
    want = np.array([i % 3 == 0 for i in range(2000)] + [False, True, False])
    assert (mask == want).all() and not calls  # no per-value mask (no L x N block)
    nin = compile_filter({"v": {"$nin": vals}}).passage_mask(idx)
    assert (nin == ~want).all()


def test_integers_beyond_2_53_and_nul_strings_compare_exactly():
    big = 2 ** 53
    idx = _flt_index([big, big + 1, 1.5, "a", "a\x00", "b", 10 ** 18])
    m = lambda f: [p.id for p, k in zip(idx.passages, compile_filter(f).passage_mask(idx))
                   if k]
    assert m({"v": big + 1}) == ["p1"]
    assert m({"v": {"$in": [big + 1]}}) == ["p1"]
    assert m({"v": {"$gt": big}}) == ["p1", "p6"]
    assert m({"v": {"$gte": big + 1, "$lt": 10 ** 18}}) == ["p1"]
    assert m({"v": {"$gt": "a"}}) == ["p4", "p5"]
    assert m({"v": "a\x00"}) == ["p4"]
    assert m({"v": {"$lte": "a\x00"}}) == ["p3", "p4"]
    # the vectorised mask equals the per-passage rule on every such case
    for f in ({"v": {"$gt": big}}, {"v": {"$lt": "a\x00"}}, {"v": {"$ne": big}},
              {"v": {"$in": ["a", big + 1, 1.5]}}):
        c = compile_filter(f)
        assert list(c.passage_mask(idx)) == [c.predicate(p.metadata) for p in idx.passages]


@pytest.mark.parametrize("flt,msg", [
    ({"v": 10 ** 400}, "beyond the 64-bit range"),
    ({"v": {"$in": [1, 10 ** 30]}}, "beyond the 64-bit range"),
    ('{"v": 1e400}', "not finite"),
    ({"v": {"$gt": 1, "x": 2}}, "mixes operators and keys"),
    ("[" * 100_000, "nested too deeply"),
])
def test_bad_filters_are_refused_with_a_message(flt, msg):
    with pytest.raises(ValueError, match=msg):
        compile_filter(flt)


def test_deeply_nested_and_and_a_stored_huge_number():
    f = {"v": 1}
    for _ in range(600):
        f = {"$and": [f]}
    with pytest.raises(ValueError, match="nested more than"):
        compile_filter(f)
    with pytest.raises(ValueError, match="64-bit"):
        _flt_index([10 ** 400])


def test_restrictions_hold_no_embedding_copies_and_absent_keys_leave_nothing(tmp_path):
    import evireform.filters as F
    idx = _flt_index([i % 7 for i in range(50)])
    cache = F.RestrictionCache(idx)  # what each engine keeps (evireform.engine)
    for v in range(7):
        r = cache.get({"v": v})
        assert not any(isinstance(x, np.ndarray) and x.dtype == np.float32
                       and x.ndim == 2 for x in vars(r).values())
    for i in range(50):
        with pytest.raises(ValueError, match="no passage of the index has"):
            cache.get({f"absent{i}": 1})
    assert set(cache.columns.cols) == {"v"} and len(cache) == 7
    cache.clear()  # the restrictions go, the columns they are built from stay
    assert len(cache) == 0 and set(cache.columns.cols) == {"v"}
    assert cache.get({"v": 3}).n_passages == 7
    assert not any(k.startswith("_restr") or k.startswith("_col") for k in vars(idx))
    old = F.CACHE_BYTES
    try:
        F.CACHE_BYTES = 1  # one restriction over the bound is used, not kept
        assert cache.get({"v": 99}) is not None
        assert {"v": 99} not in cache
    finally:
        F.CACHE_BYTES = old


def test_filtered_hnsw_is_documented_and_exact_search_equals_the_sub_index(monkeypatch):
    """What the filters' docstring says, checked: below the HNSW threshold a filter equals
    the sub-index exactly; with HNSW (the threshold lowered so this small index uses it) the
    filtered candidates come from the same graph and the docstring calls it approximate."""
    import evireform.filters as F
    assert "HNSW" in F.__doc__ and "approximate" in F.__doc__
    ps = _ps(40, md=lambda i: {"namespace": f"t{i % 2}"})
    idx = PropositionIndex.build(ps, EMB, show_progress=False, hnsw=False)
    sub = PropositionIndex.build([p for p in ps if p.metadata["namespace"] == "t0"], EMB,
                                 show_progress=False, hnsw=False)
    qs = ["Alpha 4 met whom?", "Gamma Ray in 1910", "Alpha 12"]
    assert _ranks(idx, qs, {"namespace": "t0"}) == _ranks(sub, qs, None)
    q8 = PropositionIndex.build(ps, EMB, show_progress=False, hnsw=False)
    quantize(q8, "int8")  # the int8 scan re-scores exactly: the same rankings
    assert structures_of(q8).codes is not None
    assert _ranks(q8, qs, {"namespace": "t0"}) == _ranks(sub, qs, None)
    hn = PropositionIndex.build(ps, EMB, show_progress=False, hnsw=True)
    got = _ranks(hn, qs, {"namespace": "t0"})
    assert all(pid.endswith(("0", "2", "4", "6", "8")) for r in got for pid, _ in r)
