"""The LLM-free reformulator that reads bridges from the index (GraphBridgeReformulator) and
the extractor chosen for the corpus's letter case (``--extractor auto``)."""
import json

import numpy as np
import pytest

from evireform import EviReform, PropositionIndex
from evireform.corpus import load_corpus
from evireform.embed import HashingEmbedder, encode_queries
from evireform.entities import words
from evireform.evaluation.data import load_questions
from evireform.extract import (
    HeuristicExtractor, PhraseExtractor, choose_extractor, make_extractor, measure_case)
from evireform.filters import restriction
from evireform.index import subset_index
from evireform.roles import (
    BridgeReformulator, GraphBridgeReformulator, make_reformulator, residual_words,
    surface_form)
from evireform.roles.queries import _RESIDUAL_STOP
from evireform.types import Passage, Proposition


# --------------------------------------------------------------------------- a small world
def _world(lower: bool = False):
    """Three passages: the question's film, its star (the bridge) and a decoy the observed
    passage also names; lower-cased when ``lower``."""
    texts = [
        ("alpha", "Alpha Film", "Alpha Film is a 1990 drama. It stars John Doe and was shot "
                                "near the Grey Mill."),
        ("doe", "John Doe", "John Doe was born in Lyon. John Doe studied acting in Paris."),
        ("mill", "Grey Mill", "Grey Mill grinds wheat. Grey Mill makes flour."),
        ("lyon", "Lyon", "Lyon is a city where many actors were born."),
    ]
    f = str.lower if lower else (lambda s: s)
    return [Passage(i, f(t), f(x)) for i, t, x in texts]


Q = "Where was the star of Alpha Film born?"


def _index(passages, extractor):
    return PropositionIndex.build(passages, HashingEmbedder(2048), extractor=extractor,
                                  show_progress=False)


def _vector(text):
    return encode_queries(HashingEmbedder(2048), [text])[0]


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


def test_surface_form_and_residual_words():
    assert surface_form("Sweden: The U.S. and Dala-Järna.", "u s") == "U.S"
    assert surface_form("near Dala-Järna today", "dala järna") == "Dala-Järna"
    assert surface_form("Publix Super Markets, Inc.", "publix super markets") == \
        "Publix Super Markets"
    assert surface_form("no such words", "grey mill") == "grey mill"
    assert residual_words("If Hello Love's performer died in it, into which state?") == \
        ["hello", "love", "performer", "died", "state"]


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


# --------------------------------------------------------------------------- extractor auto
def test_choose_extractor_by_letter_case():
    cased = [Passage("a", "A", "The quick fox met John Smith in Paris last May.")]
    assert choose_extractor(cased)[1]["chosen"] == "heuristic"
    lower = [Passage("a", "A", "the quick fox met john smith in paris last may.")]
    assert choose_extractor(lower)[1]["chosen"] == "phrases"
    shout = [Passage("a", "A", "THE QUICK FOX MET JOHN SMITH IN PARIS.")]
    assert choose_extractor(shout)[1]["chosen"] == "phrases"
    cjk = [Passage("a", "A", "北京 是 中国 的 首都 ， 上海 是 最大 的 城市 。")]
    ex, choice = choose_extractor(cjk)
    assert choice["chosen"] == "phrases" and isinstance(ex, PhraseExtractor)
    assert choice["uncased_share"] == 1.0
    m = measure_case(cased)
    assert m["words"] == 10 and m["capitalised_share"] == pytest.approx(0.5)
    assert measure_case([]) == {"words": 0, "capitalised_share": 0.0, "uncased_share": 0.0}
    with pytest.raises(ValueError, match="passages"):
        make_extractor("auto")
    assert make_extractor("auto", passages=cased).choice["chosen"] == "heuristic"


def test_build_records_the_automatic_choice(tmp_path):
    lower = [Passage(f"p{i}", f"t{i}", f"the mill near lyon grinds wheat number {i}.")
             for i in range(5)]
    idx = PropositionIndex.build(lower, HashingEmbedder(32), show_progress=False)
    assert idx.meta["extractor"].startswith("phrases")
    assert idx.meta["extractor_choice"]["chosen"] == "phrases"
    out = idx.save(tmp_path / "ix")
    assert PropositionIndex.load(out).meta["extractor_choice"]["capitalised_share"] == 0.0
    cased = _world()
    idx2 = PropositionIndex.build(cased, HashingEmbedder(32), show_progress=False)
    assert idx2.meta["extractor"] == HeuristicExtractor.name
    explicit = PropositionIndex.build(cased, HashingEmbedder(32), extractor="heuristic",
                                      show_progress=False)
    assert "extractor_choice" not in explicit.meta
    assert explicit.prop_texts == idx2.prop_texts


def test_cli_index_says_the_choice(tmp_path, capsys):
    from evireform.cli import main
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps([{"title": f"t{i}", "text": f"the grey mill grinds wheat {i}."}
                                  for i in range(4)]))
    assert main(["index", str(corpus), str(tmp_path / "ix"), "--embedder", "hashing-32"]) == 0
    captured = capsys.readouterr()
    assert "extractor auto: phrases" in captured.err
    assert "extractor_choice" in captured.out
    meta = PropositionIndex.load(tmp_path / "ix").meta
    assert meta["extractor_choice"]["chosen"] == "phrases"


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
