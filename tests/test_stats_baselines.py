import numpy as np
import pytest

from evireform import Passage, Proposition, PropositionIndex
from evireform.evaluation.baselines import PPRRetriever, bm25_rankings, dense_prop_rankings
from evireform.evaluation.data import Question
from evireform.evaluation.runner import bootstrap_vs_strongest
from evireform.evaluation.stats import paired_bootstrap, seed_offset



def test_bootstrap_constant_difference():
    r = paired_bootstrap(np.ones(50), np.zeros(50), seed=1, n_resamples=500)
    assert r["diff"] == 100.0 and r["ci"] == [100.0, 100.0]


def test_bootstrap_two_questions_by_hand():
    # d = [1, 0]: resampled means are 0, 0.5, 1 with probability 1/4, 1/2, 1/4, so the
    # 2.5th and 97.5th percentiles are 0 and 100 points
    r = paired_bootstrap([1, 0], [0, 0], seed=202707, n_resamples=10_000)
    assert r["diff"] == 50.0 and r["ci"] == [0.0, 100.0]


def test_bootstrap_is_reproducible_and_seeded():
    rng = np.random.default_rng(0)
    a, b = rng.random(100), rng.random(100)
    assert paired_bootstrap(a, b, seed=5) == paired_bootstrap(a, b, seed=5)
    assert paired_bootstrap(a, b, seed=5)["ci"] != paired_bootstrap(a, b, seed=6)["ci"]
    assert seed_offset("musique", "recall@5") == seed_offset("musique", "recall@5")
    assert seed_offset("musique", "recall@5") != seed_offset("hotpotqa", "recall@5")


def test_bootstrap_vs_strongest_picks_best_other():
    qs = [Question(str(i), "q", "", frozenset({0, 1})) for i in range(4)]
    # baselines are the "other methods"; EviReform's own cells (base) are not
    rankings = {"evireform": [[0, 1]] * 4, "bm25": [[5, 6]] * 4, "dense": [[0, 5]] * 4,
                "base": [[0, 1]] * 4}
    out = bootstrap_vs_strongest(rankings, qs, "t", ks=(2,))
    assert out["recall@2"]["vs"] == "dense" and out["recall@2"]["diff"] == 50.0
    assert out["chain@2"]["ci"] == [100.0, 100.0]


def test_bm25_ranks_lexical_match_first():
    pytest.importorskip("bm25s")
    texts = ["Paris\nParis is the capital of France", "Tea\nBob likes green tea",
             "Rome\nRome is in Italy"]
    r = bm25_rankings(texts, ["which capital is France's", "green tea"], 2)
    assert r[0][0] == 0 and r[1][0] == 1


def _idx(rng):
    passages = [Passage(str(j), f"t{j}", "x") for j in range(4)]
    props = [Proposition("a", "0", ("A",)), Proposition("b", "1", ("A", "B")),
             Proposition("c", "2", ("B",)), Proposition("d", "3", ("C",))]
    return PropositionIndex.from_propositions(passages, props, np.eye(4, dtype=np.float32), "e")


def test_dense_prop_readout_order(rng):
    idx = _idx(rng)
    Q = np.array([[0.1, 0.9, 0.5, 0.0]], dtype=np.float32)
    assert dense_prop_rankings(idx, Q, [[3, 0, 1, 2]], 4) == [[1, 2, 0, 3]]


def test_ppr_is_stationary(rng):
    idx = _idx(rng)
    ppr = PPRRetriever(idx, tol=1e-14, max_iter=10_000)
    s = ppr.scores(np.array([0]), np.array([1.0]), np.zeros(4))
    # mass flows from entity A to passages 0 and 1, then through B to passage 2, never to 3
    assert s[0] > 0 and s[1] > 0 and s[2] > 0 and s[3] == 0
    assert s[1] > s[2]
