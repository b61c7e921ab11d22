"""The LLM-free selectors (evireform.roles.select): the learned selector, its features and
its fit."""



def test_learned_selector_and_its_fit():
    import numpy as np

    from evireform.evaluation.learn_selector import fit_logistic
    from evireform.roles import (
        SELECTOR_FEATURES,
        Candidate,
        LearnedSelector,
        selector_features,
    )
    cands = [Candidate(10 + i, 0.9 - 0.1 * i, t, p) for i, (t, p) in enumerate(
        [("Alice lives in Paris", 0), ("Paris is in France", 1), ("Bob met Alice", 2),
         ("Alice paints", 0), ("Carol sings", 3)])]
    X = selector_features("Where does Alice live?", cands)
    assert X.shape == (5, len(SELECTOR_FEATURES)) and np.all(X[:, -1] == 1)
    assert X[0, SELECTOR_FEATURES.index("first_of_passage")] == 1
    assert X[3, SELECTOR_FEATURES.index("first_of_passage")] == 0
    assert X[1, SELECTOR_FEATURES.index("links_earlier_passage")] == 1  # Paris, passage 0
    # a separable toy problem: the fit recovers the sign of the one useful feature
    rng = np.random.default_rng(0)
    F = np.c_[rng.standard_normal((400, 2)), np.ones(400)]
    y = (F[:, 0] > 0).astype(float)
    w = fit_logistic(F, y)
    assert w[0] > 2 and abs(w[1]) < 1
    weights = np.zeros(len(SELECTOR_FEATURES))
    weights[SELECTOR_FEATURES.index("rank")] = 1.0  # prefers later candidates
    sel = LearnedSelector(weights, n=2).select("q", cands, 12)
    assert sel == [13, 14]  # the two highest-rated, in candidate order
    assert LearnedSelector(weights, n=2).select("q", [], 12) == []
