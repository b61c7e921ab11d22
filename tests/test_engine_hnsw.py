"""The HNSW graph (evireform.engine.hnsw, made by evireform.engine.structures): its
search agrees with the exact one on a small index, and the size threshold picks it."""

import numpy as np
from evireform.kernels import config as kconfig
from helpers import search_one, unit_rows

from evireform import Passage, Proposition, PropositionIndex
from evireform.engine import search_index, structures_of


def test_search_exact_and_hnsw_agree_on_small(rng):
    M = 2000
    H = unit_rows(rng, M, 16)
    ps = [Passage(str(i), "t", "x") for i in range(M)]
    pr = [Proposition(f"p{i}", str(i)) for i in range(M)]
    idx = PropositionIndex.from_propositions(ps, pr, H, "e", hnsw=True)
    Q = unit_rows(rng, 20, 16)
    ei, es = search_index(idx, Q, 10, exact=True)
    hi, hs = search_index(idx, Q, 10)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ei, hi)]) >= 0.98
    i1, s1 = search_one(idx, Q[0], 10)
    np.testing.assert_array_equal(i1, hi[0][hi[0] >= 0])


def test_threshold_selects_hnsw(rng, monkeypatch):
    monkeypatch.setattr(kconfig, "EXACT_SEARCH_MAX", 10)
    ps = [Passage(str(i), "t", "x") for i in range(12)]
    pr = [Proposition(f"p{i}", str(i)) for i in range(12)]
    assert structures_of(PropositionIndex.from_propositions(ps, pr, unit_rows(rng, 12, 4), "e")).hnsw is not None
    assert structures_of(PropositionIndex.from_propositions(ps[:9], pr[:9], unit_rows(rng, 9, 4),
                                              "e")).hnsw is None
