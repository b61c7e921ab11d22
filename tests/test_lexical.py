"""Dense and lexical together in EviReform (issue 67): the lexical seed, the fusions, the
settings, the passage prior, the hybrid baseline and the command line."""

import numpy as np
import pytest
from lexical_common import DOCS, EMB, small  # noqa: F401

from evireform import EviReform, EviReformConfig, PropositionIndex  # noqa: E402
from evireform.embed import HashingEmbedder


class _Noise(HashingEmbedder):
    """Each whole text to its own pseudo-random direction: dense scores that know no words."""

    def _vec(self, text):
        import hashlib
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        return np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)


class _Chooser:
    """An LLM selector's shape: a RoleResult, answered by the LLM or by its fallback."""

    def __init__(self, fallback=None):
        self.fallback = fallback

    def select(self, question, candidates, max_selected):
        from evireform.roles import RoleResult
        return RoleResult([candidates[0].id], role="select", fallback=self.fallback)


def test_lexical_false_is_the_dense_only_method(small):
    q = ["Which variable names the agent socket SSH_AUTH_SOCK?", "Who founded the publisher?"]
    dense = EviReform(small, EviReformConfig(lexical=False), embedder=EMB).retrieve_many(q, 5)
    assert all(r.trace.hits == [] and r.trace.to_dict()["hits"] == [] for r in dense)
    both = EviReform(small, EviReformConfig(), embedder=EMB).retrieve_many(q, 5)
    # the question first, then every residual query, each with both ways' hits
    for r in both:
        assert [h["query"] for h in r.trace.hits] == [r.question] + r.trace.residual_queries
    hit = both[0].trace.hits[0]["lexical"][0]
    assert hit["passage"] == "a" and hit["score"] > 0
    assert "lexical" in both[0].trace.timings_ms


def test_the_lexical_seed_reaches_what_the_embedding_misses():
    """With dense scores that know no words, an identifier's parts or a rare word still
    find their passage through the lexical seed, at the top; dense only misses some."""
    emb = _Noise(32)
    idx = PropositionIndex.build(DOCS, emb, extractor="heuristic", show_progress=False)
    qs = {"auth sock": "a", "proxy jump host": "c", "login shell account": "b",
          "Journal Zeta": "d"}
    cfg = EviReformConfig(reformulation=False)
    got = EviReform(idx, cfg, embedder=emb).retrieve_many(list(qs), 5)
    assert [r.ids[0] for r in got] == list(qs.values())
    assert all(r.passages[0].from_question > 0 for r in got)
    dense = EviReform(idx, cfg.with_(lexical=False), embedder=emb).retrieve_many(list(qs), 5)
    assert [r.ids[0] for r in dense] != list(qs.values())
    # "seed": the selector is shown the dense candidates, as the paper has them
    assert [r.trace.candidates for r in got] == [r.trace.candidates for r in dense]


def test_the_lexical_seed_joins_an_llm_selection_only_when_asked():
    """An LLM's selection is the seed as it chose it (``lexical_seed_llm=False``); BM25's
    propositions join it when asked, and join a selection its fallback made."""
    emb = _Noise(32)
    idx = PropositionIndex.build(DOCS, emb, extractor="heuristic", show_progress=False)
    q = "login shell account"
    cfg = EviReformConfig(reformulation=False)

    def seeded(sel, **over):  # the passages the question's seed reaches directly
        r = EviReform(idx, cfg.with_(**over), embedder=emb, selector=sel).retrieve(q, 5)
        return {p.id for p in r.passages if p.from_question > 0}, r.trace.selected

    chosen, selected = seeded(_Chooser())
    assert chosen == {DOCS[int(idx.owner[i])].id for i in selected}  # the LLM's choice alone
    joined, _ = seeded(_Chooser(), lexical_seed_llm=True)
    assert chosen < joined and "b" in joined  # the passage of its words
    assert seeded(_Chooser(fallback="APITimeoutError"))[0] == joined
    assert seeded(_Chooser(), lexical=False)[0] == chosen


@pytest.mark.parametrize("fusion", ["mix", "rrf"])
def test_fused_candidates(small, fusion):
    r = EviReform(small, EviReformConfig(lexical_fusion=fusion, reformulation=False),
                  embedder=EMB)
    got = r.retrieve("SSH_AUTH_SOCK", 5)
    ids = [i for i, _ in got.trace.candidates]
    scores = [s for _, s in got.trace.candidates]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    assert int(small.owner[ids[0]]) == 0  # passage "a": the one lexical match leads


def test_fuse_mix_and_rrf_by_hand(small):
    h = np.asarray(small.embeddings[0])
    r = EviReform(small, EviReformConfig(lexical_fusion="mix", lexical_weight=0.5),
                  embedder=EMB)
    # dense: 1 (0.8), 2 (0.4); lexical: 2 (10), 0 (5) -> 0's dense score from its row
    u0 = max(float(np.asarray(small.embeddings[0]) @ h), 0.0)
    ids, sc = r._fuse([1, 2], [0.8, 0.4], [2, 0], [10.0, 5.0], h, 10)
    want = {1: 0.4, 2: 0.2 + 0.5, 0: 0.5 * u0 + 0.25}
    assert ids == sorted(want, key=lambda i: (-want[i], i))
    np.testing.assert_allclose(sc, [want[i] for i in ids])
    r = EviReform(small, EviReformConfig(lexical_fusion="rrf", lexical_weight=0.5),
                  embedder=EMB)
    ids, sc = r._fuse([1, 2], [0.8, 0.4], [2, 0], [10.0, 5.0], h, 2)
    assert ids == [2, 1]  # 2 is in both lists; only the best n are kept
    np.testing.assert_allclose(sc, [0.5 / 62 + 0.5 / 61, 0.5 / 61])


@pytest.mark.parametrize("bad", [dict(lexical_fusion="sum"), dict(lexical_weight=1.5),
                                 dict(lexical_seed=0), dict(lexical_pool=0),
                                 dict(lexical="yes"), dict(lexical_passages=-1),
                                 dict(lexical_passage_weight=-1.0),
                                 dict(lexical_residual=1),
                                 dict(lexical_seed_llm="no")])
def test_lexical_settings_are_checked(bad):
    with pytest.raises(ValueError):
        EviReformConfig(**bad)


def test_passage_prior_joins_observed_passages(small):
    r = EviReform(small, EviReformConfig(lexical_passages=2, reformulation=False),
                  embedder=EMB)
    got = r.retrieve("SSH_AUTH_SOCK agent socket", 5)
    assert 0 in got.trace.observed and got.ids[0] == "a"


def test_hybrid_baseline_is_reciprocal_rank_fusion():
    from evireform.evaluation.baselines import rrf_rankings
    got = rrf_rankings([[3, 1, 2]], [[1, 4]], 3)
    # 1: 1/62 + 1/61, 3: 1/61, 4: 1/62 (ties by lower position), 2: 1/63
    assert got == [[1, 3, 4]]


def test_engine_bm25_baseline_ranks_passages_with_the_engines_tokenizer(small):
    """``bm25_engine``: BM25 over passages with the index's own lexical index, so a
    question's plural meets a passage's singular and an identifier's part its word."""
    from evireform.evaluation.baselines import BASELINES, engine_bm25_rankings
    got = engine_bm25_rankings(small, ["which socks does the agent listen on",
                                       "logins shells", "nothing here matches"], 3)
    assert got[0][0] == 0  # "socks" folds to "sock", SSH_AUTH_SOCK's part; "agent"
    assert got[1][0] == 1  # "shells" -> "shell", "logins" -> "login"
    assert got[2] == []  # no term of the question is in the index: nothing ranked
    assert "bm25_engine" in BASELINES


def test_query_searches_both_ways_unless_told(tmp_path, capsys, small):
    import json

    from evireform.cli import main
    small.save(tmp_path / "ix")
    args = ["query", str(tmp_path / "ix"), "What does the agent keep in memory?",
            "--embedder", "hashing-32", "--json"]
    assert main(args) == 0
    both = json.loads(capsys.readouterr().out)
    assert both["trace"]["hits"][0]["lexical"][0]["passage"] == "a"
    assert main(args + ["--no-lexical"]) == 0
    assert json.loads(capsys.readouterr().out)["trace"]["hits"] == []
