"""The LLM-free reformulators (evireform.roles.reformulate): GraphBridgeReformulator reads
bridges from the index (with and without capitals, the lookahead, filters, fallbacks, a
passage decoded once), and on real prose the question's focus in residual queries, the
bridges and beta in the trace, the rule that keeps the base ranking without a credible
bridge."""

import json

import numpy as np
import pytest
from roles_common import _world  # noqa: F401

from evireform import (
    EviReform,
    EviReformConfig,
    Passage,
    PropositionIndex,
)
from evireform.corpus import load_corpus
from evireform.embed import HashingEmbedder, encode_queries
from evireform.entities import words
from evireform.evaluation.data import load_questions
from evireform.extract import (
    HeuristicExtractor,
    PhraseExtractor,
    ProseExtractor,
)
from evireform.filters import restriction
from evireform.index import subset_index
from evireform.roles import (
    BridgeReformulator,
    GraphBridgeReformulator,
    focus_words,
    make_reformulator,
    prose_index,
)
from evireform.roles.queries import _RESIDUAL_STOP
from evireform.types import Proposition


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


Q = "Where was the star of Alpha Film born?"


def _index(passages, extractor):
    return PropositionIndex.build(passages, HashingEmbedder(2048), extractor=extractor,
                                  show_progress=False)


def _vector(text):
    return encode_queries(HashingEmbedder(2048), [text])[0]


def _check_query(q, idx, observed, question):
    toks = words(q)
    assert toks, q
    ents = {idx.entity_names[e] for j in observed for i in idx.propositions_of(j)
            for e in idx.graph.a_indices[idx.graph.a_indptr[i]:idx.graph.a_indptr[i + 1]]}
    head = next((" ".join(toks[:n]) for n in range(len(toks), 0, -1)
                 if " ".join(toks[:n]) in ents), None)
    assert head is not None, f"{q!r} does not start with an observed passage's entity"
    rest = toks[len(head.split()):]
    assert all(w not in _RESIDUAL_STOP and (len(w) > 1 or w.isdigit()) for w in rest), q
    assert all(w in words(question) for w in rest), q
    assert len(set(rest)) == len(rest), q


@pytest.mark.parametrize("lower", [False, True])
def test_bridge_found_with_and_without_capitals(lower):
    ps = _world(lower)
    q = Q.lower() if lower else Q
    idx = _index(ps, PhraseExtractor() if lower else HeuristicExtractor())
    vec = _vector(q)
    out = GraphBridgeReformulator().reformulate_indexed(q, idx, [0], 3, vector=vec)
    assert out, "no residual query"
    assert out[0].lower().startswith("john doe"), out
    spans = BridgeReformulator().reformulate(q, [ps[0]], 3)
    if lower:  # the capitalised-span reformulator has nothing to read in lower-case text
        assert spans == []
    else:
        assert spans and spans[0].startswith("John Doe")


def test_lookahead_prefers_the_entity_whose_other_mentions_continue_the_question():
    """Two candidates in one sentence: the lookahead picks the one whose mentions in other
    passages are closest to the question, whatever their order in the text."""
    ps = [Passage("a", "A", "x"), Passage("b", "B", "y"), Passage("c", "C", "z")]
    props = [Proposition("a mentions decoy and bridge", "a", ("decoy", "bridge")),
             Proposition("b about bridge", "b", ("bridge",)),
             Proposition("c about decoy", "c", ("decoy",))]
    E = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], np.float32)
    idx = PropositionIndex.from_propositions(ps, props, E, "user")
    ref = GraphBridgeReformulator(per_passage=2)
    toward_b = np.array([0.1, 0.9, 0.1], np.float32)
    toward_c = np.array([0.1, 0.1, 0.9], np.float32)
    assert ref.reformulate_indexed("q?", idx, [0], 2, vector=toward_b)[0].startswith("bridge")
    assert ref.reformulate_indexed("q?", idx, [0], 2, vector=toward_c)[0].startswith("decoy")
    # no vector: the text order (overlap ties), as the capitalised-span reformulator ranks
    assert ref.reformulate_indexed("q?", idx, [0], 2)[0].startswith("decoy")
    # the lookahead stays inside a filter's passages: with b filtered out, c decides
    allowed = np.array([True, False, True])
    assert ref.reformulate_indexed("q?", idx, [0], 2, vector=toward_b,
                                   allowed=allowed)[0].startswith("decoy")
    # observed passages never count: observing b too leaves only c's mention of decoy
    assert ref._lookahead(idx, [idx.entity_names.index("bridge")], [0, 1], toward_b) == [0.0]


def test_lookahead_cap_and_empty_cases():
    ps = [Passage(f"p{i}", f"T{i}", "t") for i in range(6)]
    props = [Proposition("hub", "p0", ("hub",))] + [
        Proposition(f"hub {i}", f"p{i}", ("hub",)) for i in range(1, 6)]
    E = np.eye(6, dtype=np.float32)
    idx = PropositionIndex.from_propositions(ps, props, E, "user")
    e = idx.entity_names.index("hub")
    v = np.eye(6, dtype=np.float32)[5]  # only the hub's last mention matches
    assert GraphBridgeReformulator(max_lookahead=64)._lookahead(idx, [e], [0], v) == [1.0]
    assert GraphBridgeReformulator(max_lookahead=2)._lookahead(idx, [e], [0], v) == [0.0]
    assert GraphBridgeReformulator()._lookahead(idx, [e], list(range(6)), v) == [0.0]
    # a passage without propositions, an isolated proposition: no bridge, no error
    ps2 = ps + [Passage("empty", "Empty", "")]
    idx2 = PropositionIndex.from_propositions(
        ps2, props + [Proposition("alone", "p1", ())], np.eye(7, dtype=np.float32), "user")
    assert GraphBridgeReformulator().reformulate_indexed("q", idx2, [6], 3,
                                                         vector=np.ones(7, np.float32)) == []


def test_filtered_bridges_equal_the_subset_index():
    ps = _world()
    idx = _index(ps, HeuristicExtractor())
    keep = ["alpha", "mill", "lyon"]  # the bridge's own passage filtered out
    r = restriction(idx, keep)
    sub = subset_index(idx, [idx.passage_index(p) for p in keep])
    vec = _vector(Q)
    ref = GraphBridgeReformulator()
    a = ref.reformulate_indexed(Q, idx, [0], 3, vector=vec, allowed=r.pmask)
    b = ref.reformulate_indexed(Q, sub, [0], 3, vector=vec)
    assert a == b


def test_fallbacks_and_names():
    ps = _world()
    g = GraphBridgeReformulator()
    assert g.reformulate(Q, [ps[0]], 3) == BridgeReformulator().reformulate(Q, [ps[0]], 3)
    assert isinstance(make_reformulator("graph"), GraphBridgeReformulator)
    assert isinstance(make_reformulator("spans"), BridgeReformulator)
    with pytest.raises(ValueError, match="unknown reformulator"):
        make_reformulator("capitals")
    with pytest.raises(ValueError, match="ranking"):
        GraphBridgeReformulator(ranking="random")
    idx = _index(ps, HeuristicExtractor())
    assert isinstance(EviReform(idx).reformulator, GraphBridgeReformulator)


@pytest.mark.parametrize("lower", [False, True])
def test_residual_queries_read_as_queries_on_the_demo_questions(data_dir, lower):
    """On HotpotQA's first 20 questions (the demo shows the first 3), cased with the heuristic
    extractor and lower-cased with the phrase one: every residual query is an entity of an
    observed passage followed by question content words only, once each; no dangling
    function words ("if", "s", "into")."""
    passages = load_corpus(data_dir / "hotpotqa/hotpotqa_corpus.json")
    qs = load_questions(data_dir / "hotpotqa/hotpotqa.json", passages)[:20]
    gold = sorted({j for q in qs for j in q.gold})
    texts = [q.question for q in qs]
    if lower:
        passages = [Passage(p.id, p.title.lower(), p.text.lower()) for p in passages]
        texts = [t.lower() for t in texts]
    # the gold passages plus a slice of the rest keeps the build fast
    keep = sorted(set(gold) | set(range(0, len(passages), 4)))
    emb = HashingEmbedder(128)
    idx = PropositionIndex.build([passages[j] for j in keep], emb,
                                 extractor="phrases" if lower else "heuristic",
                                 show_progress=False)
    r = EviReform(idx, embedder=emb)
    n = 0
    for t, res in zip(texts, r.retrieve_many(texts, 5)):
        for q in res.trace.residual_queries:
            _check_query(q, idx, res.trace.observed, t)
            n += 1
    assert n >= 30  # most questions get queries


def test_bridges_are_kept_per_passage_without_keeping_the_index_alive():
    """Each observed passage's bridge candidates are made once per index
    (PropositionIndex.memo) and give the same queries when met again; what is kept does not
    point back at the index, so a dropped index is freed at once (no cycle for the garbage
    collector to find)."""
    import gc
    import weakref
    ps = _world()
    idx = _index(ps, HeuristicExtractor())
    ref = GraphBridgeReformulator()
    vec = _vector(Q)
    first = ref.reformulate_indexed(Q, idx, [0, 2], 3, vector=vec)
    kept = idx._derived["memo"]["bridges"]
    assert set(kept) == {0, 2}
    made = kept[0]
    assert ref.reformulate_indexed(Q, idx, [0, 2], 3, vector=vec) == first
    assert idx._derived["memo"]["bridges"][0] is made  # not made again
    alive = weakref.ref(idx)
    gc.disable()
    try:
        del idx, kept, made
        assert alive() is None
    finally:
        gc.enable()


def test_a_passage_is_decoded_once_per_index():
    """PropositionIndex.passage: the decoded Passage, made on first use and then the same
    object (the retrieval loop reads its ranked and observed passages through it)."""
    idx = _index(_world(), HeuristicExtractor())
    p = idx.passage(1)
    assert p == idx.passages[1] and idx.passage(1) is p
    assert set(idx._derived["memo"]["passage"]) == {1}
