import numpy as np

from evireform import Passage, Proposition, PropositionIndex
from evireform.evaluation.analyses import by_type, growth_steps, initial_pool, pool_coverage
from evireform.evaluation import Question
from evireform.index import subset_index
from evireform.retriever import Trace

from helpers import unit_rows


def test_initial_pool_takes_first_distinct_passages():
    owner = np.array([0, 0, 1, 2, 1, 3])
    cands = [(0, .9), (1, .8), (2, .7), (4, .6), (3, .5), (5, .4)]
    assert initial_pool(owner, cands, size=3) == [0, 1, 2]


def test_pool_coverage_by_hand():
    owner = np.array([0, 1, 2, 3, 4, 5])
    q1 = Question("1", "q", "", frozenset({0, 1}))   # complete before
    q2 = Question("2", "q", "", frozenset({2, 3}))   # 2 before, 3 added by a residual hit
    q3 = Question("3", "q", "", frozenset({4, 5}))   # never complete: 4 only
    t1 = Trace(candidates=[(0, .9), (1, .8)])
    t2 = Trace(candidates=[(2, .9)], residual_hits=[[(3, .5)]])
    t3 = Trace(candidates=[(4, .9)])
    cov = pool_coverage(owner, [q1, q2, q3], [t1, t2, t3], size=20)
    # gold passages: 6 in all; before 2 + 1 + 1 = 4, after 2 + 2 + 1 = 5
    assert cov["passages_before"] == round(100 * 4 / 6, 2)
    assert cov["passages_after"] == round(100 * 5 / 6, 2)
    assert cov["chains_before"] == round(100 / 3, 2) and cov["chains_after"] == round(200 / 3, 2)
    assert cov["completed"] == 1


def test_by_type_groups():
    qs = [Question("a", "q", "", frozenset({0}), "2hop"), Question("b", "q", "", frozenset({1}), "3hop"),
          Question("c", "q", "", frozenset({2}), "2hop")]
    out = by_type({"m": [[0], [0], [0]]}, qs, ks=(1,))
    assert out["2hop"]["n"] == 2 and out["2hop"]["methods"]["m"]["recall@1"] == 50.0
    assert out["3hop"]["methods"]["m"]["recall@1"] == 0.0


def test_growth_steps():
    assert growth_steps(6119, 4) == [0, 2040, 4079, 6119]
    assert growth_steps(0, 4) == [0]


def test_subset_index_equals_direct_build(rng):
    passages = [Passage(str(j), f"t{j}", "x") for j in range(5)]
    props = [Proposition(f"p{i}", str(i % 5), (f"E{i % 3}", f"F{i % 2}", "Hub")) for i in range(12)]
    H = unit_rows(rng, 12, 8)
    full = PropositionIndex.from_propositions(passages, props, H, "e")
    keep = [0, 2, 3]
    sub = subset_index(full, keep)
    kept_props = [i for i, p in enumerate(props) if int(p.passage) in keep]
    direct = PropositionIndex.from_propositions([passages[j] for j in keep],
                                                [props[i] for i in kept_props], H[kept_props], "e")
    # equal up to the numbering of entities (which follows mention order in a direct build)
    np.testing.assert_array_equal(sub.graph.a_indptr, direct.graph.a_indptr)
    for f in ("diag", "inv_w"):  # sums in another entity order: equal to rounding
        np.testing.assert_allclose(getattr(sub.graph, f), getattr(direct.graph, f), rtol=1e-12)
    np.testing.assert_array_equal(sub.owner, direct.owner)
    np.testing.assert_array_equal(sub.pmap.inv_sqrt, direct.pmap.inv_sqrt)
    np.testing.assert_array_equal(sub.embeddings, direct.embeddings)
    assert sub.prop_texts == direct.prop_texts and sub.passages == direct.passages

    def names(ix):
        g = ix.graph
        return [sorted(ix.entity_names[e] for e in g.a_indices[g.a_indptr[i]:g.a_indptr[i + 1]])
                for i in range(ix.n_props)]
    assert names(sub) == names(direct)
    assert sorted(sub.entity_names) == sorted(direct.entity_names)
