"""The LLM-free reformulator on real prose (evireform.roles.reformulate and .queries):
the question's focus in residual queries, the bridges and beta in the trace, the rule
that keeps the base ranking without a credible bridge."""

import json

import pytest

from evireform import (
    EviReform,
    EviReformConfig,
    Passage,
    PropositionIndex,
)
from evireform.embed import HashingEmbedder, encode_queries
from evireform.extract import (
    ProseExtractor,
)
from evireform.roles import GraphBridgeReformulator, focus_words, prose_index
from evireform.types import Passage


def _prose_index():
    docs = [
        Passage("t", "tool", "The tool needs an agent. It talks to keyholder over KEY_SOCKET, "
                             "a variable."),
        Passage("k", "keyholder", "keyholder stores its process id in KEYHOLDER_PID. "
                                  "keyholder exits when the session ends."),
        Passage("o", "other", "Note that nothing here is about agents. Note again."),
        Passage("m", "more", "The KEY_SOCKET variable names the socket of keyholder."),
    ]
    return PropositionIndex.build(docs, HashingEmbedder(512), extractor=ProseExtractor(),
                                  show_progress=False)


@pytest.mark.parametrize("q,want", [
    ("Which hash algorithm is its default?", ["hash", "algorithm"]),
    ("What is the birthplace of the director of Titanic?", ["birthplace"]),
    ("The tool that signs keys: which of its options removes a user?", ["options", "removes"]),
    ("How many stores are in the state?", ["stores"]),
    ("Besides the river which the Tekeze turns into, where is it?", []),
    ("Who directed Titanic?", []),
])
def test_focus_words_are_what_the_question_asks_for(q, want):
    assert focus_words(q) == want


def test_bridges_and_beta_are_in_the_trace_and_its_record():
    idx = _prose_index()
    assert prose_index(idx)
    q = "The agent the tool talks to: which variable holds its process id?"
    res = EviReform(idx, embedder=HashingEmbedder(512)).retrieve(q, 3)
    tr = res.trace
    assert tr.residual_queries and len(tr.bridges) == len(tr.residual_queries)
    for d, rq in zip(tr.bridges, tr.residual_queries):
        assert d["query"] == rq and rq.startswith(d["bridge"])
        assert d["passage"] in {p.id for p in idx.passages} and isinstance(d["score"], float)
        # the focus ("variable") is kept even where the observed passage holds it
        assert "variable" in rq.split()
    rec = tr.to_dict()
    assert rec["bridges"] == tr.bridges and rec["beta"] == 0.5 == tr.beta
    json.dumps(rec)
    # no reformulation: the question's seed alone, beta 1
    base = EviReform(idx, EviReformConfig(reformulation=False),
                     embedder=HashingEmbedder(512)).retrieve(q, 3)
    assert base.trace.beta == 1.0 and base.trace.bridges == []


def test_the_evidence_rule_ranks_as_the_base_without_a_credible_bridge(monkeypatch):
    idx = _prose_index()
    q = "The agent the tool talks to: which variable holds its process id?"
    emb = HashingEmbedder(512)
    # every bridge mentioned nowhere outside the observed passages: score 0
    orig = GraphBridgeReformulator._bridges
    monkeypatch.setattr(GraphBridgeReformulator, "_bridges",
                        lambda self, *a, **k: [(r, e, i, 0.0) for r, e, i, _ in orig(self, *a, **k)])
    ev = EviReform(idx, EviReformConfig(beta_rule="evidence"), embedder=emb).retrieve(q, 4)
    base = EviReform(idx, EviReformConfig(reformulation=False), embedder=emb).retrieve(q, 4)
    fixed = EviReform(idx, EviReformConfig(beta_rule="fixed"), embedder=emb).retrieve(q, 4)
    assert "reformulate:no-credible-bridge" in ev.trace.role_events and ev.trace.beta == 1.0
    assert [p.id for p in ev.passages] == [p.id for p in base.passages]
    assert [p.score for p in ev.passages] == pytest.approx([p.score for p in base.passages])
    assert fixed.trace.beta == 0.5 and "reformulate:no-credible-bridge" not in \
        fixed.trace.role_events
    with pytest.raises(ValueError, match="beta_rule"):
        EviReformConfig(beta_rule="sometimes")


def test_focus_is_kept_on_prose_indexes_only():
    """On an encyclopedic index (the heuristic extractor) the residual query drops what the
    observed passage holds, as before issue 52; the v1 reformulator never keeps it."""
    from evireform.extract import HeuristicExtractor
    docs = [Passage("a", "Alpha Film", "Alpha Film stars John Doe. Its director was born."),
            Passage("b", "John Doe", "John Doe was born in Lyon.")]
    idx = PropositionIndex.build(docs, HashingEmbedder(512), extractor=HeuristicExtractor(),
                                 show_progress=False)
    assert not prose_index(idx)
    q = "What is the director's birthplace for Alpha Film?"
    assert focus_words(q) == ["director"]
    vec = encode_queries(HashingEmbedder(512), [q])[0]
    out = GraphBridgeReformulator().reformulate_indexed(q, idx, [0], 2, vector=vec)
    assert out and all("director" not in x.split() for x in out)
    pidx = _prose_index()
    q2 = "The agent the tool talks to: which variable holds its process id?"
    v2 = encode_queries(HashingEmbedder(512), [q2])[0]
    keep = GraphBridgeReformulator().reformulate_indexed(q2, pidx, [0], 2, vector=v2)
    drop = GraphBridgeReformulator(prose=False).reformulate_indexed(q2, pidx, [0], 2, vector=v2)
    assert all("variable" in x.split() for x in keep)
    assert GraphBridgeReformulator(prose=False).name == "graph-bridge-v1"
    assert keep != drop or not drop
