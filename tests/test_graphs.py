"""Evidence graphs, graph metrics (hand-made graphs, GED on known cases) and the BGR and
Hi-Q strategies on a toy index."""
import json

import numpy as np
import pytest

from evireform import EviReform, EviReformConfig, Passage
from evireform.embed import HashingEmbedder
from evireform.evaluation.data import load_questions
from evireform.evaluation.graph_metrics import ged, graph_metrics, graph_scores
from evireform.explain import EvidenceEdge, EvidenceGraph
from evireform.index import PropositionIndex
from evireform.strategies import BGR, HiQ, make_strategy
from graphs_common import Q  # noqa: F401

CORPUS = [
    Passage("zeta", "Journal Zeta", "Journal Zeta is published by the Orvel Society, an "
            "association of therapists."),
    Passage("orvel", "Orvel Society", "The Orvel Society was founded in 1890. Its first "
            "president was Marta Quill."),
    Passage("quill", "Marta Quill", "Marta Quill was a psychologist born in Vienna."),
    Passage("d1", "Lake Ponder", "Lake Ponder is a lake in Canada with many fish."),
    Passage("d2", "Harbor Mill", "Harbor Mill produced flour for the town of Easton."),
    Passage("d3", "Easton", "Easton is a town near the river Lune."),
]


@pytest.fixture(scope="module")
def toy():
    e = HashingEmbedder(1024)
    return PropositionIndex.build(CORPUS, e, show_progress=False), e


# --------------------------------------------------------------------------- GED and metrics
def test_ged_known_cases():
    assert ged([], [], [], []) == 0
    assert ged([1], [], [2], []) == 1                      # one substitution
    assert ged([1], [], [2], [], labelled=False) == 0
    assert ged([1, 2], [(1, 2)], [1, 2], [(2, 1)]) == 2    # delete + insert an edge
    assert ged([1, 2], [(1, 2)], [1, 2], []) == 1
    assert ged([1, 2, 3], [(1, 2), (2, 3)], [1, 2], [(1, 2)]) == 2  # node 3 and its edge
    # the same chain shape over other passages: structure equal, labels not
    assert ged([7, 8, 9], [(7, 8), (8, 9)], [1, 2, 3], [(1, 2), (2, 3)], labelled=False) == 0
    assert ged([7, 8, 9], [(7, 8), (8, 9)], [1, 2, 3], [(1, 2), (2, 3)]) == 3
    with pytest.raises(ValueError, match="limited"):
        ged(list(range(9)), [], [], [])


def test_ged_matches_networkx_on_random_small_graphs(rng):
    nx = pytest.importorskip("networkx")
    for _ in range(60):
        n1, n2 = (int(x) for x in rng.integers(0, 5, 2))
        N1 = [int(x) for x in rng.choice(6, n1, replace=False)]
        N2 = [int(x) for x in rng.choice(6, n2, replace=False)]
        E1 = {(a, b) for a in N1 for b in N1 if a != b and rng.random() < 0.3}
        E2 = {(a, b) for a in N2 for b in N2 if a != b and rng.random() < 0.3}
        G1, G2 = nx.DiGraph(), nx.DiGraph()
        G1.add_nodes_from((v, {"p": v}) for v in N1)
        G1.add_edges_from(E1)
        G2.add_nodes_from((v, {"p": v}) for v in N2)
        G2.add_edges_from(E2)
        assert ged(N1, E1, N2, E2) == nx.graph_edit_distance(
            G1, G2, node_match=lambda a, b: a["p"] == b["p"])
        assert ged(N1, E1, N2, E2, labelled=False) == nx.graph_edit_distance(G1, G2)


def test_graph_scores_hand_made():
    gold_n, gold_e = [1, 2, 3], {(1, 2), (2, 3)}
    s = graph_scores([3, 1, 2], [(1, 2), (2, 3)], gold_n, gold_e)
    assert s == {"ev_em": 1.0, "ev_p": 1.0, "ev_r": 1.0, "ev_f1": 1.0, "gm": 1.0, "gs": 1.0,
                 "ged": 0.0}
    s = graph_scores([1, 2, 3], [(2, 1), (3, 2)], gold_n, gold_e)   # reversed chain
    # relabelling the two ends (2 substitutions) beats 4 edge edits
    assert s["ev_em"] == 1 and s["gm"] == 0 and s["gs"] == 1 and s["ged"] == 2
    s = graph_scores([1, 2, 9], [(1, 2), (2, 9)], gold_n, gold_e)   # one wrong passage
    assert s["ev_em"] == 0 and s["gm"] == 0 and s["gs"] == 1 and s["ged"] == 1
    assert s["ev_p"] == pytest.approx(2 / 3) and s["ev_f1"] == pytest.approx(2 / 3)
    s = graph_scores([1, 2, 3], [], gold_n, gold_e)                 # a baseline: no edges
    assert s["gm"] == 0 and s["gs"] == 0 and s["ged"] == 2
    s = graph_scores([1, 4], [(1, 4)], [1, 2], set())
    assert s["gs"] == 0 and s["ged"] == 2


def _musique_file(tmp_path, decomposition, support):
    paras = [{"idx": i, "title": p.title, "paragraph_text": p.text,
              "is_supporting": i in support} for i, p in enumerate(CORPUS)]
    rec = {"id": "q1", "question": Q, "answer": "Marta Quill", "paragraphs": paras,
           "question_decomposition": decomposition}
    f = tmp_path / "q.json"
    f.write_text(json.dumps([rec]))
    return f


def test_gold_graph_from_question_decomposition(tmp_path):
    dec = [{"id": 1, "question": "Who published Journal Zeta?", "answer": "Orvel Society",
            "paragraph_support_idx": 0},
           {"id": 2, "question": "Who was the first president of #1 ?", "answer": "Marta Quill",
            "paragraph_support_idx": 1},
           {"id": 3, "question": "Where was #2 born, given #1 ?", "answer": "Vienna",
            "paragraph_support_idx": 2}]
    q = load_questions(_musique_file(tmp_path, dec, {0, 1, 2}), CORPUS)[0]
    assert q.gold == {0, 1, 2} and q.gold_edges == {(0, 1), (1, 2), (0, 2)}
    # two steps on one paragraph: no self-loop
    dec[1]["paragraph_support_idx"] = 0
    q = load_questions(_musique_file(tmp_path, dec[:2], {0}), CORPUS)[0]
    assert q.gold_edges == frozenset()
    hotpot = tmp_path / "h.json"
    hotpot.write_text(json.dumps([{"_id": "h", "question": "q?", "answer": "a",
                                   "supporting_facts": [["Easton", 0]]}]))
    assert load_questions(hotpot, CORPUS)[0].gold_edges is None


def test_graph_metrics_skip_questions_without_a_gold_graph(tmp_path):
    hotpot = tmp_path / "h.json"
    hotpot.write_text(json.dumps([{"_id": "h", "question": "q?", "answer": "a",
                                   "supporting_facts": [["Easton", 0]]}]))
    qs = load_questions(hotpot, CORPUS)
    assert graph_metrics([[5, 1]], None, qs) == {}


# --------------------------------------------------------------------------- evidence graphs
def test_evidence_graph_json_networkx_and_top():
    g = EvidenceGraph([4, 7, 9], ["a", "b", "c"], ["A", "B", "C"],
                      [EvidenceEdge(4, 7, "query", "q1"), EvidenceEdge(7, 9, "entity", "e")])
    js = g.to_json()
    assert [n["id"] for n in js["nodes"]] == ["a", "b", "c"]
    assert js["edges"][1] == {"src": "b", "dst": "c", "kind": "entity", "via": "e"}
    assert g.top(2).edge_set() == {(4, 7)}
    assert "[2] B  <- [1] via query" in g.format()
    nx = pytest.importorskip("networkx")
    G = g.to_networkx()
    assert isinstance(G, nx.DiGraph) and G.edges["b", "c"]["via"] == "e"


def test_evireform_residual_query_edge(toy):
    idx, e = toy
    from evireform.roles import TopScoreSelector
    res = EviReform(idx, EviReformConfig(propagation=False), embedder=e,
                    selector=TopScoreSelector(1)).retrieve(Q, k=4)
    g = res.evidence_graph()
    assert res.trace.observed == [0]
    edges = {(idx.passages[a].id, idx.passages[b].id): (k, v)
             for (a, b), k, v in ((x[:2], x[2], x[3]) for x in
                                  [(x.src, x.dst, x.kind, x.via) for x in g.edges])}
    assert ("zeta", "orvel") in edges
    kind, via = edges[("zeta", "orvel")]
    assert kind == "query" and "Orvel Society" in via and via in res.trace.residual_queries


def test_evireform_propagation_edge_names_the_shared_entity(toy):
    idx, e = toy
    cfg = EviReformConfig(reformulation=False)
    res = EviReform(idx, cfg, embedder=e).retrieve("Who publishes Journal Zeta?", k=4)
    byid = {p.id: p for p in res.passages}
    assert byid["orvel"].from_propagation > 0 and byid["orvel"].from_question == 0
    assert all(type(getattr(p, f)) is float for p in res.passages  # plain floats, not numpy
               for f in ("score", "from_question", "from_residual", "from_propagation"))
    edge = [x for x in res.evidence_graph().edges if idx.passages[x.dst].id == "orvel"]
    assert len(edge) == 1 and edge[0].kind == "entity" and edge[0].via == "orvel society"
    assert idx.passages[edge[0].src].id == "zeta"


# --------------------------------------------------------------------------- BGR
def test_bgr_chains_intersect_on_the_bridge(toy):
    idx, e = toy
    res = BGR(idx, e).retrieve(Q, k=5)
    ids = lambda js: [idx.passages[j].id for j in js]  # noqa: E731
    assert ids(res.trace.forward)[:2] == ["zeta", "orvel"]
    assert "orvel" in ids(res.trace.backward) and "zeta" in ids(res.trace.backward)
    assert [(idx.passages[a].id, idx.passages[b].id) for a, b in res.trace.intersection] == \
        [("zeta", "orvel")]
    assert res.ids[:2] == ["zeta", "orvel"]
    g = res.evidence_graph(2)
    assert len(g.edges) == 1 and g.edges[0].kind == "chain"
    assert "intersection: Journal Zeta -> Orvel Society" in res.trace.format(idx.passages)
    with pytest.raises(ValueError):
        BGR(idx, e, depth=0)


# --------------------------------------------------------------------------- Hi-Q
def test_hiq_tree_resolves_and_rewrites_the_dependent(toy):
    idx, e = toy
    res = HiQ(idx, e, k_check=1).retrieve(Q, k=5)
    root = res.trace.tree
    assert root.status == "expanded" and len(root.children) == 2
    c1, c2 = root.children
    assert c1.status == "resolved" and c1.answer == "Orvel Society"
    assert c2.query == "Who was the first president of Orvel Society"
    assert c2.status == "resolved" and c2.answer == "Marta Quill"
    assert res.ids[:2] == ["zeta", "orvel"]
    g = res.evidence_graph(2)
    assert [(idx.passages[x.src].id, idx.passages[x.dst].id, x.kind) for x in g.edges] == \
        [("zeta", "orvel", "dependency")]
    text = res.trace.format(idx.passages)
    assert "[expanded]" in text and "    [resolved] 'Who was the first president of Orvel" in text


def test_hiq_depth_budget_and_bad_settings(toy):
    idx, e = toy
    res = HiQ(idx, e, max_depth=0, k_check=1).retrieve(Q, k=3)
    assert res.trace.tree.status == "failed" and not res.trace.tree.children
    assert len(res.passages) == 3 and res.evidence_graph().edges == []
    with pytest.raises(ValueError):
        HiQ(idx, e, coverage=1.5)
    with pytest.raises(ValueError):
        make_strategy("nope", idx, e)
    with pytest.raises(ValueError):
        HiQ(idx, e).retrieve("  ")


@pytest.fixture
def scripted_llm():
    """(LLMClient, Script) against the scripted HTTP endpoint of tests/scripted_server.py."""
    pytest.importorskip("openai")
    from evireform.llm import LLMClient, LLMConfig
    from scripted_server import Script, serve
    script = Script()
    srv, url = serve(script)
    yield LLMClient(LLMConfig(base_url=url, model="scripted", timeout=5, max_retries=0)), script
    srv.shutdown()


def _hiq_script(first: str, dependent: str) -> list[dict]:
    """Scripted replies for one split of Q: the root unresolved, split and verified, then the
    reader's answers for the independent sub-question, the rewrite of the dependent from it
    (only when it resolved: hiq-rewrite) and the dependent's answer."""
    rd = lambda a: {"content": json.dumps({"answer": a})}  # noqa: E731
    rewrite = [] if first == "noanswer" else [
        {"content": json.dumps({"query": f"First president of {first}?"})}]
    return [rd("noanswer"),
            {"content": json.dumps({"decomposable": True, "independent": "Who publishes "
                                    "Journal Zeta?", "dependent": "First president of #1?"})},
            {"content": json.dumps({"covers": True})}, rd(first), *rewrite, rd(dependent)]


def test_hiq_llm_roles_and_their_fallbacks(toy, scripted_llm):
    idx, e = toy
    client, script = scripted_llm
    script.replies[:] = _hiq_script("Orvel Society", "Marta Quill")
    res = HiQ(idx, e, llm=client).retrieve(Q, k=3)
    c1, c2 = res.trace.tree.children
    assert c1.query == "Who publishes Journal Zeta?" and c1.answer == "Orvel Society"
    assert c2.query == "First president of Orvel Society?" and c2.answer == "Marta Quill"
    # every reply broken: the LLM-free operators answer and the trace says so
    script.replies[:] = [{"content": "not json"}] * 40
    res = HiQ(idx, e, llm=client).retrieve(Q, k=3)
    assert any("fallback" in ev for ev in res.trace.role_events)
    assert res.trace.tree.status in ("expanded", "failed")


def test_hiq_never_rewrites_an_unresolved_prerequisite(toy, scripted_llm):
    """The paper's control rule: an unresolved prerequisite's guess is not an answer; the
    dependent keeps the prerequisite's question, is tried once (blocked), and the root has
    no answer.  The reader reads k_read passages; resolved leaves rank first."""
    idx, e = toy
    client, script = scripted_llm
    script.replies[:] = _hiq_script("noanswer", "noanswer")  # first unresolved, then blocked
    n_before = len(script.requests)
    res = HiQ(idx, e, llm=client, k_read=3).retrieve(Q, k=3)
    root = res.trace.tree
    c1, c2 = root.children
    assert c1.status == "failed" and c1.answer is None
    assert c2.status == "blocked" and c2.query == "First president of (Who publishes Journal Zeta)?"
    assert root.answer is None and "hiq:prerequisite-unresolved" in res.trace.role_events
    reads = [r for r in script.requests[n_before:] if "Passages:" in r["messages"][-1]["content"]]
    shown = [r["messages"][-1]["content"].count("<data>") - 1 for r in reads]
    assert shown and max(shown) == 3  # k_read passages (fewer when fewer scored)
    # the dependent resolves once the prerequisite does: the root's answer is its answer
    script.replies[:] = _hiq_script("Orvel Society", "Marta Quill")
    res = HiQ(idx, e, llm=client, k_read=3).retrieve(Q, k=3)
    assert res.trace.tree.answer == "Marta Quill"
    resolved = [x for x in res.trace.tree.leaves() if x.status == "resolved"]
    assert res.passages[0].index == resolved[0].passages[0]  # resolved leaves rank first


def test_bgr_forward_step_sees_the_path(toy):
    idx, e = toy
    seen = []

    class Recorder:
        def reformulate(self, question, observed, max_queries):
            seen.append(len(observed))
            return [p.title for p in observed][-1:]
    BGR(idx, e, reformulator=Recorder(), depth=3).retrieve(Q, k=3)
    full = list(seen)
    seen.clear()
    BGR(idx, e, reformulator=Recorder(), depth=3, path="last").retrieve(Q, k=3)
    assert full[0] == 1 and (len(full) < 2 or full[1] == 2) and set(seen) == {1}
    with pytest.raises(ValueError, match="path"):
        BGR(idx, e, path="middle")


def test_eval_runs_the_strategies_with_graph_metrics(tmp_path):
    from evireform.evaluation import run_eval
    dec = [{"id": 1, "question": "Who published Journal Zeta?", "answer": "Orvel Society",
            "paragraph_support_idx": 0},
           {"id": 2, "question": "Who was the first president of #1 ?", "answer": "Marta Quill",
            "paragraph_support_idx": 1}]
    qf = _musique_file(tmp_path, dec, {0, 1})
    cf = tmp_path / "c.json"
    cf.write_text(json.dumps([{"title": p.title, "text": p.text} for p in CORPUS]))
    rep = run_eval(qf, cf, ["dense", "evireform", "bgr", "hiq"], embedder=HashingEmbedder(1024),
                   cache_dir=tmp_path / "cache", show_progress=False, graph_metrics=True)
    for m in ("dense", "evireform", "bgr", "hiq"):
        assert rep.methods[m]["n_graph_questions"] == 1
    assert rep.methods["dense"]["gm"] == 0.0            # no edges stated
    assert rep.methods["bgr"]["gm"] == 100.0 and rep.methods["bgr"]["ged"] == 0.0
    assert rep.methods["evireform"]["ev_f1"] == 100.0
    from evireform.evaluation.runner import format_graph_table, format_table
    assert "GED" in format_table(rep) and "| bgr |" in format_graph_table(rep, markdown=True)


def test_cli_query_graph_and_methods(toy, tmp_path, capsys):
    from evireform.cli import main
    idx, _ = toy
    d = idx.save(tmp_path / "idx")
    assert main(["query", str(d), Q, "-k", "3", "--graph"]) == 0
    out = capsys.readouterr().out
    assert "evidence graph" in out and "<- [" in out
    assert main(["query", str(d), Q, "-k", "3", "--method", "hiq", "--graph"]) == 0
    out = capsys.readouterr().out
    assert "[expanded]" in out or "[resolved]" in out or "[failed]" in out
    assert main(["query", str(d), Q, "-k", "2", "--method", "bgr", "--json", "--graph"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["graph"]["edges"] == [{"src": "zeta", "dst": "orvel", "kind": "chain",
                                      "via": rec["graph"]["edges"][0]["via"]}]


def test_bootstrap_counts_the_strategies_as_other_methods(tmp_path):
    from evireform.evaluation.runner import bootstrap_vs_strongest
    dec = [{"id": 1, "question": "Who published Journal Zeta?", "answer": "Orvel Society",
            "paragraph_support_idx": 0},
           {"id": 2, "question": "Who was the first president of #1 ?", "answer": "Marta Quill",
            "paragraph_support_idx": 1}]
    qs = load_questions(_musique_file(tmp_path, dec, {0, 1}), CORPUS)
    rankings = {"evireform": [[3, 0, 1, 2, 4, 5]], "dense": [[0, 3, 4, 5, 1, 2]],
                "hiq": [[0, 1, 2, 3, 4, 5]], "reform_only": [[0, 1, 2, 3, 4, 5]]}
    bs = bootstrap_vs_strongest(rankings, qs, "toy", ks=(2,))
    # hiq (recall@2 100) beats dense (50); EviReform's own cells are not "other methods"
    assert bs["recall@2"]["vs"] == "hiq" and bs["recall@2"]["diff"] == -50.0


def test_bgr_union_keeps_both_chains_edges(toy):
    idx, e = toy
    inter = BGR(idx, e).retrieve(Q, k=6)
    union = make_strategy("bgr_union", idx, e).retrieve(Q, k=6)
    assert inter.ids == union.ids  # the ranking does not depend on the merge
    ie, ue = set(inter.evidence_graph().edge_set()), set(union.evidence_graph().edge_set())
    assert ie <= ue
    chains = set()
    for a, b in zip(union.trace.forward, union.trace.forward[1:]):
        chains.add((a, b))
    for a, b in zip(union.trace.backward, union.trace.backward[1:]):
        chains.add((b, a))
    assert ue == chains
    with pytest.raises(ValueError, match="merge"):
        BGR(idx, e, merge="both")


def test_results_pickle_with_their_edges_not_the_index(toy):
    import pickle
    idx, e = toy
    res = EviReform(idx, EviReformConfig(reformulation=False), embedder=e).retrieve(
        "Who publishes Journal Zeta?", k=4)
    blob = pickle.dumps(res)
    back = pickle.loads(blob)
    assert back.ids == res.ids and back._explain is None
    assert back.evidence_graph().edges == res.evidence_graph().edges != []
    # results carry their own passages' texts, but the index is not in the pickle
    others = [p.text for p in idx.passages if p.id not in set(res.ids)]
    assert others and not any(t.encode() in blob for t in others)


def test_propagation_that_only_echoes_its_own_seed_names_no_source(toy):
    from evireform.explain import evireform_edges
    from evireform.retriever import RankedPassage, Seed, SparseSignal, Trace
    idx, _ = toy
    quill = [i for i in range(idx.n_props) if idx.passages[int(idx.owner[i])].id == "quill"]
    orvel = [j for j, p in enumerate(idx.passages) if p.id == "orvel"][0]
    j = int(idx.owner[quill[0]])
    trace = Trace(observed=[orvel], residual_queries=["Marta Quill psychologist"],
                  residual_hits=[[(quill[0], 0.5)]])
    s = SparseSignal(np.asarray(quill[:1]), np.asarray([1.0]))
    # its propagation part is larger than its residual part, but it is its own seed's echo
    ranked = [RankedPassage(j, "quill", "Marta Quill", 0.3, 0.0, 0.1, 0.2)]
    edges = evireform_edges(idx, Q, ranked, trace, Seed(s, split=0), 0.5, True)
    assert [(idx.passages[x.src].id, x.kind, x.via) for x in edges] == \
        [("orvel", "query", "Marta Quill psychologist")]


def test_bgr_llm_reformulator_and_its_fallback(toy, scripted_llm):
    idx, e = toy
    client, script = scripted_llm
    script.replies[:] = [{"content": json.dumps({"queries": ["Orvel Society president"]})}] \
        + [{"content": "no json"}] * 10
    res = make_strategy("bgr", idx, e, client).retrieve(Q, k=4)
    assert [idx.passages[j].id for j in res.trace.forward[:2]] == ["zeta", "orvel"]
    assert any(ev.startswith("reformulate:fallback") for ev in res.trace.role_events)


def test_strategies_on_an_index_without_propositions_fill_to_k():
    e = HashingEmbedder(32)
    idx = PropositionIndex.from_propositions([Passage("a", "", ""), Passage("b", "", "")], [],
                                             np.zeros((0, 32)), e.name)
    for S in (BGR, HiQ):
        r = S(idx, e).retrieve("Who is the Zeta of Orvel?", 3)
        assert r.ids == ["a", "b"] and [p.score for p in r.passages] == [0.0, 0.0]
        assert r.evidence_graph().edges == []


def test_hiq_rewrites_the_dependent_from_the_resolved_prerequisite():
    """Hi-Q's resolution operator rewrites a dependent query from the resolved history
    before retrieving it: the rewriter's query is the one retrieved (the LLM-free rewriter
    substitutes the answer for #1; the LLM's, role hiq-rewrite, falls back to it)."""
    from evireform import PropositionIndex
    from evireform.embed import HashingEmbedder
    from evireform.llm import LLMRewriter
    from evireform.roles import SubstitutionRewriter
    from evireform.strategies import HiQ
    emb = HashingEmbedder(32)
    idx = PropositionIndex.build(["Alice Smith was born in Paris.", "Paris is in France."],
                                 emb, show_progress=False)

    class Split:
        def split(self, q):
            return [("Where was Alice Smith born?", "Which country is #1 in?")]

        def verify(self, q, a, b):
            return True

    class Rewrite:
        seen = []

        def rewrite(self, dependent, prerequisite, answer):
            self.seen.append((dependent, prerequisite, answer))
            return f"country of {answer}"
    h = HiQ(idx, emb, splitter=Split(), rewriter=Rewrite(), max_depth=1)
    h._resolve = lambda node, events: (setattr(node, "answer", "Paris") or True) \
        if node.query.startswith("Where") else False
    res = h.retrieve("Which country was Alice Smith born in?", 2)
    tree = res.trace.tree
    assert Rewrite.seen == [("Which country is #1 in?", "Where was Alice Smith born?",
                             "Paris")]
    assert [c.query for c in tree.children] == ["Where was Alice Smith born?",
                                                 "country of Paris"]
    assert SubstitutionRewriter().rewrite("Which country is #1 in?", "x", "Paris") == \
        "Which country is Paris in?"

    class Down:
        def ask(self, role, messages, validate):
            assert role == "hiq-rewrite" and "#1" in messages[1]["content"]
            raise ConnectionError("down")

        def _count(self, role, **kw):
            pass
    got = LLMRewriter(Down()).rewrite("Which country is #1 in?", "Where?", "Paris")
    assert list(got) == ["Which country is Paris in?"]
    assert got.events() == ["hiq-rewrite:fallback:ConnectionError"]


# --------------------------------------------------------------------------- one search
def test_the_one_search_methods_are_their_signals_alone(toy):
    """Issue 82: ``bm25``, ``dense`` and ``hybrid`` at query time (make_strategy, so the
    CLI, the service, MCP and the page offer them): bm25 is the index's BM25 over passages
    (eval's bm25_engine ranking), dense the question's proposition search read out per
    passage (the first search BGR and Hi-Q make), hybrid their reciprocal-rank fusion; each with its own scores, filled to k at 0, and a filter ranks as a sub-index."""
    from evireform.evaluation.baselines import engine_bm25_rankings
    from evireform.index import subset_index
    from evireform.strategies import Search, _rrf
    idx, e = toy
    q = "Who was the first president of the society that publishes Journal Zeta?"
    bm = make_strategy("bm25", idx, e).retrieve(q, k=6)
    scored = [p.index for p in bm.passages if p.score > 0]
    assert scored and scored == list(engine_bm25_rankings(idx, [q], 6)[0])[:len(scored)]
    assert bm.to_dict()["trace"]["method"] == "bm25" and len(bm.passages) == 6
    dense = make_strategy("dense", idx, e).retrieve(q, k=6)
    from evireform.strategies import _PassageSearch
    order, sc = _PassageSearch(idx, e).rank([q], 6)[0]  # BGR's and Hi-Q's first search
    got = [(p.index, p.score) for p in dense.passages if p.score > 0]
    assert got == [(int(j), float(v)) for j, v in zip(order, sc)] and len(got) >= 2
    hy = make_strategy("hybrid", idx, e).retrieve(q, k=6)
    score, seen = _rrf([[p.index for p in make_strategy(m, idx, e).retrieve(q, k=6).passages
                         if p.score > 0] for m in ("bm25", "dense")])
    want = sorted(score, key=lambda j: (-score[j], seen[j]))
    assert [p.index for p in hy.passages if p.score > 0] == want
    assert [p.score for p in hy.passages if p.score > 0] == [score[j] for j in want]
    keep = ["orvel", "quill", "d1", "d3"]
    sub = subset_index(idx, [idx.passage_index(i) for i in keep])
    for m in ("bm25", "dense", "hybrid"):
        res = make_strategy(m, idx, e).retrieve(q, k=3, filter=keep)
        assert {p.id for p in res.passages} <= set(keep) and len(res.passages) == 3
        alone = make_strategy(m, sub, e).retrieve(q, k=3)
        assert [(p.id, round(p.score, 6)) for p in res.passages] == \
            [(p.id, round(p.score, 6)) for p in alone.passages]
    with pytest.raises(ValueError, match="kind must be one of"):
        Search(idx, e, kind="sparse")


def test_evidence_edges_name_the_bridge_passage_drop_question_words_and_cycles(toy):
    """Issue 82: a residual query's edge starts at the passage its bridge came from
    (trace.bridges), a query whose own words are all the question's names no passage, and
    two passages never name each other (the later edge of a cycle is left out)."""
    from types import SimpleNamespace

    from evireform.explain import _acyclic, _query_source, evireform_edges
    idx, e = toy
    # the bridge's passage wins over word overlap: "Orvel Society" is in zeta and orvel,
    # and the bridge names orvel
    q = "founded Orvel Society"
    assert _query_source(q, "Who founded it?", [0, 1], idx.passages) == 0
    trace = SimpleNamespace(residual_queries=[q], residual_hits=[[(int(idx.propositions_of(2)[0]), 1.0)]],
                            observed=[0, 1], bridges=[{"query": q, "bridge": "orvel society",
                                                       "passage": "orvel", "score": 1.0}])
    ranked = [SimpleNamespace(index=2, from_question=0.0, from_residual=1.0,
                              from_propagation=0.0)]
    seed = SimpleNamespace(s=SimpleNamespace(ids=np.zeros(0, np.int64), vals=np.zeros(0)))
    got = evireform_edges(idx, "Who founded it?", ranked, trace, seed, 0.5, False)
    assert [(x.src, x.dst, x.kind) for x in got] == [(1, 2, "query")]
    trace.bridges = []  # without it, word overlap: the earlier observed passage
    got = evireform_edges(idx, "Who founded it?", ranked, trace, seed, 0.5, False)
    assert [(x.src, x.dst) for x in got] == [(0, 2)]
    # a query of the question's words only names no passage
    assert _query_source("Who founded the society?", "Who founded the society?", [0, 1],
                         idx.passages) is None
    # cycles: 0 -> 1, 1 -> 0 keeps the first; a longer one too
    E = EvidenceEdge
    assert _acyclic([E(0, 1, "query"), E(1, 0, "entity")]) == [E(0, 1, "query")]
    assert _acyclic([E(0, 1, "query"), E(1, 2, "query"), E(2, 0, "entity"), E(2, 3, "query")]) \
        == [E(0, 1, "query"), E(1, 2, "query"), E(2, 3, "query")]
