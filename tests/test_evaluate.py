"""Loaders, the paper's metrics (checked by hand), and the eval / query / demo commands."""
import json
import types
from pathlib import Path

import pytest

from evireform import Passage
from evireform.cli import main
from evireform.evaluation import Question, load_questions, metrics, parse_methods


def test_metrics_by_hand():
    qs = [Question("a", "q", "", frozenset({0, 1})), Question("b", "q", "", frozenset({2, 3, 4}))]
    rankings = [[1, 9, 0], [5, 2, 6]]
    m = metrics(rankings, qs, ks=(1, 2, 3))
    # K=1: q1 hits 1 of 2, q2 hits 0 of 3
    assert m["recall@1"] == 25.0 and m["hit@1"] == 50.0 and m["chain@1"] == 0.0
    # K=2: q1 1/2, q2 1/3 -> recall (0.5 + 0.3333)/2
    assert m["recall@2"] == pytest.approx(41.67, abs=0.01) and m["hit@2"] == 100.0
    # K=3: q1 complete, q2 1/3
    assert m["chain@3"] == 50.0 and m["recall@3"] == pytest.approx(66.67, abs=0.01)


def test_a_document_cut_into_passages_is_one_piece_of_gold_evidence(tmp_path):
    """A supporting title that several passages share (a chunked document) is found when
    any of its passages is in the top K: Chain@K asks for every document, Recall@K counts
    documents; titles of one passage each keep the paper's per-passage metrics."""
    passages = [Passage("a1", "A", "x"), Passage("a2", "A", "y"), Passage("a3", "A", "z"),
                Passage("b1", "B", "u"), Passage("c1", "C", "v")]
    f = tmp_path / "q.json"
    f.write_text(json.dumps([
        {"_id": "two", "question": "q", "answer": "", "supporting_facts": [["A", 0], ["B", 0]]},
        {"_id": "one", "question": "q", "answer": "", "supporting_facts": [["C", 0], ["B", 0]]}]))
    two, one = load_questions(f, passages)
    assert two.gold == {0, 1, 2, 3} and two.evidence == (frozenset({0, 1, 2}), frozenset({3}))
    assert one.gold_groups is None and one.evidence == (frozenset({3}), frozenset({4}))
    m = metrics([[2, 3], [4, 0]], [two, one], ks=(1, 2))
    assert m["chain@2"] == 50.0 and m["recall@2"] == 75.0 and m["hit@1"] == 100.0
    assert m["recall@1"] == 50.0 and m["chain@1"] == 0.0
    # the pool-coverage analysis reads the same evidence
    from evireform.evaluation.analyses import pool_coverage
    tr = types.SimpleNamespace(candidates=[(2, 1.0)],
                               residual_hits=[[(3, 1.0)]])
    cov = pool_coverage([0, 1, 2, 3, 4], [two], [tr])
    assert cov["passages_before"] == 50.0 and cov["chains_after"] == 100.0


def test_answer_recall_by_hand():
    """Answer@K: the answer (or an alias) in one of the top K passages' texts, lower-cased,
    white space folded; recall/chain/hit are unchanged beside it."""
    texts = ["The file is /etc/login.defs here.", "nothing", "Set  PASS_MAX_DAYS to 90", "x"]
    qs = [Question("a", "q", "PASS_MAX_DAYS", frozenset({2})),
          Question("b", "q", "/ETC/LOGIN.DEFS", frozenset({0})),
          Question("c", "q", "nowhere", frozenset({3}), aliases=("set pass_max_days",))]
    rankings = [[1, 2], [1, 0], [2, 3]]
    m = metrics(rankings, qs, ks=(1, 2), texts=texts)
    assert m["answer@1"] == pytest.approx(100 / 3, abs=0.01)  # only c (alias, spaces folded)
    assert m["answer@2"] == 100.0
    assert m["recall@2"] == 100.0 and "answer@1" not in metrics(rankings, qs, ks=(1,))


def test_the_manpages_development_set_is_consistent():
    """The shipped real-documents set: every gold title is a passage, each answer string is in
    the question's last gold passage (where a reader finds it), half of the questions are
    two-hop with two distinct gold passages, a few are in Chinese over Chinese text."""
    from evireform import load_corpus
    from evireform.evaluation import DATASETS
    qf, cf = DATASETS["manpages"]
    corpus = load_corpus(cf)
    qs = load_questions(qf, corpus)
    recs = {r["_id"]: r for r in json.loads(open(qf, encoding="utf-8").read())}
    by_title = {p.title: p for p in corpus}
    for q in qs:
        last = by_title[recs[q.id]["supporting_facts"][-1][0]]
        assert q.answer.lower() in (last.title + " " + last.text).lower(), q.id
    two = [q for q in qs if q.type.startswith("bridge")]
    assert len(qs) >= 60 and len(two) >= len(qs) // 2 and all(len(q.gold) == 2 for q in two)
    zh = [q for q in qs if q.type.endswith("-zh")]
    assert len(zh) >= 4 and all("[zh_CN]" in corpus[j].title for q in zh for j in q.gold)


def test_the_python_documentation_set_is_consistent():
    """The second real-documents set (issue 67): 80 questions over the standard library's
    HTML documentation, every gold title a passage, each answer string in the question's
    last gold passage, about half two-hop with two distinct gold passages; the corpus holds
    no page chrome (read by the package's HTML reader)."""
    from evireform import load_corpus
    from evireform.evaluation import DATASETS
    qf, cf = DATASETS["pydoc"]
    corpus = load_corpus(cf)
    qs = load_questions(qf, corpus)
    recs = {r["_id"]: r for r in json.loads(open(qf, encoding="utf-8").read())}
    by_title = {p.title: p for p in corpus}
    assert len(by_title) == len(corpus)
    for q in qs:
        last = by_title[recs[q.id]["supporting_facts"][-1][0]]
        assert q.answer in last.text, q.id
    two = [q for q in qs if q.type.startswith("bridge")]
    assert len(qs) >= 80 and len(two) >= len(qs) // 2 - 1 and all(len(q.gold) == 2 for q in two)
    for chrome in ("¶", "Previous topic", "Next topic", "Navigation", "Table of Contents",
                   "Copyright", "Report a Bug"):
        assert not any(chrome in p.text for p in corpus), chrome


def test_the_python_documentation_set_in_a_users_words_asks_the_same_questions():
    """``pydoc-user``: every question of ``pydoc`` reworded, with the same id, answer, type
    and gold passages, and no question left in the documentation's words."""
    from evireform import load_corpus
    from evireform.evaluation import DATASETS
    (qf, cf), (uf, ucf) = DATASETS["pydoc"], DATASETS["pydoc-user"]
    assert cf == ucf
    corpus = load_corpus(cf)
    doc, user = load_questions(qf, corpus), load_questions(uf, corpus)
    assert [(q.id, q.answer, q.type, q.gold) for q in doc] == \
        [(q.id, q.answer, q.type, q.gold) for q in user]
    assert all(d.question != u.question for d, u in zip(doc, user))
    assert not [u.id for u in user if u.answer.lower() in u.question.lower()]


def test_the_readme_set_is_consistent_in_both_readings():
    """The third real-documents set (issues 67, 68): the same 15 READMEs read as Markdown
    and as plain text, the same questions, each answer string in a passage of the
    question's last document in both readings; the Markdown reading holds no badge, image
    or link markup and titles each document by its own name, not a section's."""
    from evireform import load_corpus
    from evireform.evaluation import DATASETS
    readings = {}
    for name in ("readmes", "readmes-plain"):
        qf, cf = DATASETS[name]
        corpus = load_corpus(cf)
        qs = load_questions(qf, corpus)
        by_title: dict = {}
        for p in corpus:
            by_title.setdefault(p.title, []).append(" ".join(p.text.lower().split()))
        recs = {r["_id"]: r for r in json.loads(open(qf, encoding="utf-8").read())}
        for q in qs:
            last = by_title[recs[q.id]["supporting_facts"][-1][0]]
            assert any(" ".join(q.answer.lower().split()) in t for t in last), (name, q.id)
        readings[name] = (corpus, [(q.question, q.answer) for q in qs])
    assert readings["readmes"][1] == readings["readmes-plain"][1]
    assert len(readings["readmes"][1]) >= 35
    md = readings["readmes"][0]
    for junk in ("![", "](http", "[![", "badge.svg", "**"):
        assert not any(junk in p.text for p in md), junk
    titles = {p.title for p in md}
    assert {"APT", "PyYAML", "libxml2", "zstd"} <= titles
    assert not titles & {"Installation", "License", "Sponsors", "Documentation"}


def _fixture_data(tmp_path):
    corpus = [{"title": "Alice", "text": "Alice was born in Paris."},
              {"title": "Paris", "text": "Paris is the capital of France."},
              {"title": "Bob", "text": "Bob likes tea."}]
    mus = [{"id": "m1", "question": "Which country is Alice's birthplace in?", "answer": "France",
            "question_decomposition": [{}, {}],
            "paragraphs": [{"idx": 0, "title": "Alice", "paragraph_text": "Alice was born in  Paris.",
                            "is_supporting": True},
                           {"idx": 1, "title": "Paris", "paragraph_text": "Paris is the capital of France.",
                            "is_supporting": True},
                           {"idx": 2, "title": "Bob", "paragraph_text": "Bob likes tea.",
                            "is_supporting": False}]}]
    hot = [{"_id": "h1", "question": "Which country is Alice's birthplace in?", "answer": "France",
            "type": "bridge", "supporting_facts": [["Alice", 0], ["Paris", 0], ["Alice", 1]]}]
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    (tmp_path / "mus.json").write_text(json.dumps(mus))
    (tmp_path / "hot.json").write_text(json.dumps(hot))
    return [Passage(str(i), c["title"], c["text"]) for i, c in enumerate(corpus)]


def test_loaders(tmp_path):
    passages = _fixture_data(tmp_path)
    m = load_questions(tmp_path / "mus.json", passages)
    assert m[0].gold == {0, 1} and m[0].type == "2hop"  # matched by text, whitespace folded
    h = load_questions(tmp_path / "hot.json", passages)
    assert h[0].gold == {0, 1} and h[0].type == "bridge"  # by title; no 'context' needed
    bad = json.loads((tmp_path / "hot.json").read_text())
    bad[0]["supporting_facts"] = [["Nobody", 0]]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="'Nobody' is not in the corpus"):
        load_questions(tmp_path / "bad.json", passages)


def test_real_loaders(data_dir):
    from evireform import load_corpus
    mp = load_corpus(data_dir / "musique/musique_corpus.json")
    mq = load_questions(data_dir / "musique/musique.json", mp)
    assert len(mq) == 100 and all(len(q.gold) >= 2 for q in mq)
    hp = load_corpus(data_dir / "hotpotqa/hotpotqa_corpus.json")
    hq = load_questions(data_dir / "hotpotqa/hotpotqa.json", hp)
    assert len(hq) == 100 and sum(q.type == "bridge" for q in hq) == 78


def test_parse_methods():
    assert parse_methods("dense,evireform") == ["dense", "evireform"]
    assert "base" in parse_methods("all")
    with pytest.raises(ValueError, match="unknown method"):
        parse_methods("dense,nope")


def test_eval_cli_json(tmp_path, monkeypatch, capsys):
    _fixture_data(tmp_path)
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out.json"
    rc = main(["eval", "--questions", str(tmp_path / "hot.json"), "--corpus",
               str(tmp_path / "corpus.json"), "--embedder", "hashing-64", "--methods", "all",
               "--json", str(out), "--quiet"])
    assert rc == 0
    rep = json.loads(out.read_text())
    assert rep["dataset"] == "hot" and rep["n_questions"] == 1 and rep["n_passages"] == 3
    for m in ("dense", "evireform", "full", "reform_only", "prop_only", "base"):
        assert set(rep["methods"][m]) >= {"recall@5", "chain@5", "hit@5", "recall@20"}
    # 3 passages, 2 gold: everything is found by K = 5
    assert rep["methods"]["evireform"]["chain@5"] == 100.0
    assert "R@5" in capsys.readouterr().out
    # the second run reuses the cached index and dense embeddings
    before = sorted(p.name for p in (tmp_path / "cache").rglob("*"))
    assert main(["eval", "--questions", str(tmp_path / "hot.json"), "--corpus",
                 str(tmp_path / "corpus.json"), "--embedder", "hashing-64", "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "cache").rglob("*")) == before


def test_query_cli(tmp_path, capsys):
    _fixture_data(tmp_path)
    assert main(["index", str(tmp_path / "corpus.json"), str(tmp_path / "ix"), "--embedder",
                 "hashing-64", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["query", str(tmp_path / "ix"), "Where was Alice born?", "-k", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the two passages share their one entity, so one propagation step gives both the same
    # mass (z = s_A / 2 + s_P / 2 for each): both come back, in either order
    assert len(out["passages"]) == 2 and {p["title"] for p in out["passages"]} == \
        {"Alice", "Paris"}
    assert isinstance(out["trace"]["residual_queries"], list) and out["question"]
    assert main(["query", str(tmp_path / "ix"), "  "]) == 2


def test_demo_runs_on_a_data_folder(tmp_path, monkeypatch, capsys):
    pytest.importorskip("sentence_transformers")
    from evireform import demo
    _fixture_data(tmp_path)
    (tmp_path / "hotpotqa").mkdir()
    (tmp_path / "hot.json").rename(tmp_path / "hotpotqa/hotpotqa.json")
    (tmp_path / "corpus.json").rename(tmp_path / "hotpotqa/hotpotqa_corpus.json")
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path / "cache"))
    assert demo.main(["--data", str(tmp_path), "-n", "1", "-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "gold found in top 2" in out and "*" in out


def test_eval_cli_overrides(tmp_path, monkeypatch, capsys):
    _fixture_data(tmp_path)
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "o.json"
    assert main(["eval", "--questions", str(tmp_path / "hot.json"), "--corpus",
                 str(tmp_path / "corpus.json"), "--embedder", "hashing-64", "--methods",
                 "evireform", "--set", "beta=0.75", "--set", "propagation=false",
                 "--selector-n", "0", "--json", str(out), "--quiet"]) == 0
    rep = json.loads(out.read_text())
    assert rep["config"]["beta"] == 0.75 and rep["config"]["propagation"] is False
    assert rep["selector_n"] is None
    assert main(["eval", "--questions", str(tmp_path / "hot.json"), "--corpus",
                 str(tmp_path / "corpus.json"), "--set", "gamma=1", "--quiet"]) == 2
    assert "unknown setting 'gamma'" in capsys.readouterr().err


def test_eval_with_llm_roles_and_reader(tmp_path, monkeypatch, capsys):
    pytest.importorskip("openai")
    from scripted_server import Script, serve
    _fixture_data(tmp_path)
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path / "cache"))
    # one JSON object that satisfies every role's contract
    every = {"selected": [1, 2], "queries": ["Paris capital country"], "sufficient": True,
             "answer": "France"}
    script = Script(default={"content": json.dumps(every)})
    srv, url = serve(script)
    try:
        out = tmp_path / "o.json"
        assert main(["eval", "--questions", str(tmp_path / "hot.json"), "--corpus",
                     str(tmp_path / "corpus.json"), "--embedder", "hashing-64", "--methods",
                     "dense,evireform", "--llm", "--reader", "--llm-base-url", url,
                     "--llm-model", "scripted", "--json", str(out), "--quiet"]) == 0
        printed = capsys.readouterr().out
        assert main(["eval", "--questions", str(tmp_path / "hot.json"), "--corpus",
                     str(tmp_path / "corpus.json"), "--embedder", "hashing-64", "--methods",
                     "dense,evireform", "--reader", "--llm-base-url", url, "--llm-model",
                     "scripted", "--markdown", "--quiet"]) == 0
        md = capsys.readouterr().out
        assert "| answer F1 | answer EM |" in md and "| 100.00 | 100.00 |" in md
    finally:
        srv.shutdown()
    rep = json.loads(out.read_text())
    assert rep["methods"]["evireform"]["f1"] == 100.0 and rep["methods"]["dense"]["em"] == 100.0
    assert rep["llm_usage"]["select"]["calls"] == 1
    assert rep["llm_usage"]["reformulate"]["calls"] == 1
    assert rep["llm_usage"]["reader"]["tokens_in"] == 2 * 11
    assert "F1 100.00" in printed and "llm reader: 2 calls" in printed
    assert main(["eval", "--questions", str(tmp_path / "hot.json"), "--corpus",
                 str(tmp_path / "corpus.json"), "--embedder", "hashing-64", "--reader",
                 "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-retries", "0",
                 "--llm-timeout", "1", "--quiet"]) == 0  # endpoint down: fallbacks, no crash


def test_eval_reuses_a_built_index_and_builds_from_openie(tmp_path, monkeypatch, capsys):
    """eval --index DIR: the saved index (its own embedder), the same report as the index
    eval builds itself, nothing built; a corpus other than the index's is refused by name.
    eval --openie FILE builds from the triples."""
    _fixture_data(tmp_path)
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path / "cache"))
    q, c = str(tmp_path / "hot.json"), str(tmp_path / "corpus.json")
    base = ["eval", "--questions", q, "--corpus", c, "--methods", "dense,evireform",
            "--quiet"]
    assert main(base + ["--embedder", "hashing-64", "--json", str(tmp_path / "a.json")]) == 0
    assert main(["index", c, str(tmp_path / "ix"), "--embedder", "hashing-64", "--quiet"]) == 0
    built = sorted(p.name for p in (tmp_path / "cache" / "indexes").iterdir())
    assert main(base + ["--index", str(tmp_path / "ix"), "--json",
                        str(tmp_path / "b.json")]) == 0
    a, b = (json.loads((tmp_path / f).read_text())["methods"] for f in ("a.json", "b.json"))
    assert a == b
    assert sorted(p.name for p in (tmp_path / "cache" / "indexes").iterdir()) == built
    other = json.loads((tmp_path / "corpus.json").read_text())[:2]
    (tmp_path / "small.json").write_text(json.dumps(other))
    capsys.readouterr()
    assert main(["eval", "--questions", q, "--corpus", str(tmp_path / "small.json"),
                 "--index", str(tmp_path / "ix"), "--quiet"]) == 2
    assert "the index holds 3 passages, the corpus small.json 2" in capsys.readouterr().err
    assert main(base + ["--index", str(tmp_path / "ix"), "--lowercase"]) == 2
    openie = {"docs": [{"title": "Alice", "passage": "Alice was born in Paris.",
                        "extracted_triples": [["Alice", "born in", "Paris"]]},
                       {"title": "Paris", "passage": "Paris is the capital of France.",
                        "extracted_triples": [["Paris", "capital of", "France"]]}]}
    (tmp_path / "openie.json").write_text(json.dumps(openie))
    assert main(base + ["--embedder", "hashing-64", "--openie", str(tmp_path / "openie.json"),
                        "--json", str(tmp_path / "o.json")]) == 0
    assert any(p.name.endswith("hashing-64") and "openie2-" in p.name
               for p in (tmp_path / "cache" / "indexes").iterdir())
    # --openie-plain: the plain triples, cached apart (the key plain indexes had before)
    assert main(base + ["--embedder", "hashing-64", "--openie", str(tmp_path / "openie.json"),
                        "--openie-plain", "--json", str(tmp_path / "p.json")]) == 0
    keys = sorted(p.name for p in (tmp_path / "cache" / "indexes").iterdir()
                  if "openie" in p.name and not p.name.startswith("."))
    assert len(keys) == 2 and any("-openie-" in k for k in keys)
    from evireform.index import PropositionIndex
    for k in keys:
        ix = PropositionIndex.load(tmp_path / "cache" / "indexes" / k)
        assert ix.meta["openie_plain"] is ("-openie-" in k)
    capsys.readouterr()
    assert main(base + ["--embedder", "hashing-64", "--openie-plain"]) == 2
    assert "--openie-plain reads the --openie file" in capsys.readouterr().err
    for flags, plain in (([], False), (["--openie-plain"], True)):
        out = tmp_path / f"oix{int(plain)}"
        assert main(["index", c, str(out), "--extractor", str(tmp_path / "openie.json"),
                     "--embedder", "hashing-64", "--quiet", *flags]) == 0
        ix = PropositionIndex.load(out)
        assert ix.meta["openie_plain"] is plain
        assert ix.prop_texts[0] == "Alice born in Paris"  # it mentions its title
    assert main(["index", c, str(tmp_path / "oix2"), "--openie-plain", "--quiet"]) == 2
    assert "give its path as --extractor" in capsys.readouterr().err
    # hipporag2 reads the OpenIE file's own triples (and the index's without one)
    for extra in (["--openie", str(tmp_path / "openie.json")], []):
        assert main(["eval", "--questions", q, "--corpus", c, "--methods",
                     "hipporag2,evireform", "--embedder", "hashing-64", "--quiet", *extra,
                     "--json", str(tmp_path / "h.json")]) == 0
        rep = json.loads((tmp_path / "h.json").read_text())
        assert rep["methods"]["hipporag2"]["chain@5"] == 100.0  # 3 passages, 2 gold


def test_eval_plot_draws_recall_at_k(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    _fixture_data(tmp_path)
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path / "cache"))
    png = tmp_path / "r.png"
    assert main(["eval", "--questions", str(tmp_path / "hot.json"), "--corpus",
                 str(tmp_path / "corpus.json"), "--embedder", "hashing-64", "--methods",
                 "dense,evireform", "--plot", str(png), "--quiet"]) == 0
    assert f"wrote {png}" in capsys.readouterr().out
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert (width, height) == (840, 504)  # 7 x 4.2 inches at 120 dpi


def test_extra_corpora_are_distractors_that_keep_the_gold(tmp_path, monkeypatch):
    """eval --extra-corpus: the other corpus's passages join the index after the first
    corpus's (a copy of a first-corpus passage left out), the gold passages stay where they
    were, and recall can only fall."""
    _fixture_data(tmp_path)
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path / "cache"))
    extra = [{"title": f"Noise {i}", "text": f"Noise {i} was born in Paris {i}."}
             for i in range(12)] + [{"title": "Alice", "text": "Alice was born in Paris."}]
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    base = ["eval", "--questions", str(tmp_path / "hot.json"), "--corpus",
            str(tmp_path / "corpus.json"), "--embedder", "hashing-64", "--methods",
            "dense,evireform", "--quiet"]
    assert main(base + ["--json", str(tmp_path / "a.json")]) == 0
    assert main(base + ["--extra-corpus", str(tmp_path / "extra.json"),
                        "--json", str(tmp_path / "b.json")]) == 0
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert (a["n_passages"], b["n_passages"]) == (3, 3 + 12)
    for m in ("dense", "evireform"):
        assert b["methods"][m]["recall@1"] <= a["methods"][m]["recall@1"]
    from evireform.evaluation.data import combined_copy
    from evireform import load_corpus
    merged = load_corpus(combined_copy(tmp_path / "corpus.json", [tmp_path / "extra.json"],
                                       tmp_path / "c"))
    assert [p.title for p in merged[:3]] == ["Alice", "Paris", "Bob"]
    assert main(base + ["--extra-corpus", str(tmp_path / "extra.json"), "--index",
                        str(tmp_path)]) == 2


def test_hipporag2_gets_the_same_llm_as_evireform(tmp_path, monkeypatch, capsys):
    """eval --llm: hipporag2's recognition-memory filter is the role hipporag2-filter; offline,
    its requests go to --llm-pending beside EviReform's, and the LLM-free fallback (keep every
    candidate fact) answers them, so the ranking equals the run without an LLM."""
    pytest.importorskip("openai")
    _fixture_data(tmp_path)
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path / "cache"))
    openie = {"docs": [{"title": "Alice", "passage": "Alice was born in Paris.",
                        "extracted_triples": [["Alice", "born in", "Paris"]]},
                       {"title": "Paris", "passage": "Paris is the capital of France.",
                        "extracted_triples": [["Paris", "capital of", "France"]]}]}
    (tmp_path / "openie.json").write_text(json.dumps(openie))
    base = ["eval", "--questions", str(tmp_path / "hot.json"), "--corpus",
            str(tmp_path / "corpus.json"), "--embedder", "hashing-64", "--methods",
            "hipporag2,evireform", "--openie", str(tmp_path / "openie.json"), "--quiet"]
    assert main(base + ["--json", str(tmp_path / "a.json")]) == 0
    pending = tmp_path / "pending.jsonl"
    assert main(base + ["--llm", "--llm-offline", "--llm-cache", str(tmp_path / "c.sqlite"),
                        "--llm-pending", str(pending), "--json", str(tmp_path / "b.json")]) == 0
    roles = [json.loads(line)["role"] for line in pending.read_text().splitlines()]
    assert "hipporag2-filter" in roles and "select" in roles
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert a["methods"]["hipporag2"] == b["methods"]["hipporag2"]
    from evireform.llm import LLMFactFilter

    class Fixed:  # a client whose LLM keeps the second fact
        def ask(self, role, messages, validate):
            assert role == "hipporag2-filter" and "2. <data>" in messages[1]["content"]
            return validate({"facts": [2]}), False

        def _count(self, role, **kw):
            pass
    assert list(LLMFactFilter(Fixed()).filter("q", [("a", "r", "b"), ("c", "r", "d")])) == [1]


def test_eval_writes_runs_that_ir_measures_reads(tmp_path, monkeypatch, capsys):
    """Issue 70: `eval --run-out DIR` writes each method's TREC run and per-question JSONL;
    ir_measures' recall over the TREC run equals eval's own, and the JSONL holds each
    question's ranking, residual queries and metrics."""
    ir_measures = pytest.importorskip("ir_measures")
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path / "cache"))
    data = Path(__file__).resolve().parents[2] / "shared" / "data"
    if not (data / "hotpotqa").exists():
        pytest.skip("../shared/data is not beside the repository")
    out = tmp_path / "runs"
    assert main(["eval", "--dataset", "hotpotqa", "--data", str(data), "-n", "12",
                 "--embedder", "hashing-64", "--methods", "bm25,evireform", "--json",
                 str(tmp_path / "rep.json"), "--run-out", str(out), "--quiet"]) == 0
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == ["bm25.jsonl", "bm25.trec",
                                                     "evireform.jsonl", "evireform.trec"]
    from evireform import load_corpus
    from evireform.evaluation import DATASETS
    corpus = load_corpus(data / DATASETS["hotpotqa"][1])
    ids = [p.id for p in corpus]
    qs = load_questions(data / DATASETS["hotpotqa"][0], corpus)[:12]
    from evireform.records import trec_docid  # ids with spaces are percent-encoded there
    qrels = [ir_measures.Qrel(trec_docid(q.id), trec_docid(ids[j]), 1) for q in qs
             for j in q.gold]
    for m in ("bm25", "evireform"):
        run = list(ir_measures.read_trec_run(str(out / f"{m}.trec")))
        got = ir_measures.calc_aggregate([ir_measures.R @ 5], qrels, run)[ir_measures.R @ 5]
        assert round(100 * got, 2) == rep["methods"][m]["recall@5"], m
        lines = [json.loads(x) for x in (out / f"{m}.jsonl").read_text().splitlines()]
        assert [x["id"] for x in lines] == [q.id for q in qs]
        assert all(len(x["passages"]) >= 5 and "recall@5" in x["metrics"] for x in lines)
        assert ("residual_queries" in lines[0]) == (m == "evireform")


def test_analyze_reports_as_json(tmp_path, monkeypatch, capsys):
    """Issue 70: --json on every command that reports: analyze's figures as JSON (each
    method's metrics), and a kind that has only a table says so."""
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path / "cache"))
    data = Path(__file__).resolve().parents[2] / "shared" / "data"
    if not (data / "hotpotqa").exists():
        pytest.skip("../shared/data is not beside the repository")
    assert main(["analyze", "ablation", "--dataset", "hotpotqa", "--data", str(data),
                 "-n", "6", "--embedder", "hashing-64", "--json", "--quiet"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["analysis"] == "ablation" and got["n_questions"] == 6
    assert "evireform" in got["methods"] and "recall@5" in got["methods"]["evireform"]
    assert main(["analyze", "growth", "--dataset", "hotpotqa", "--data", str(data),
                 "--embedder", "hashing-64", "--json", "--quiet"]) == 2
    assert "table only" in capsys.readouterr().err


def test_repeated_texts_count_once_for_every_method(tmp_path, monkeypatch):
    """Issue 68: two passages holding the same text are one result for every method (as
    EviReform's result shows them): a ranking keeps the group's first appearance, a
    question whose gold is either copy is answered by whichever ranks, and the group's
    answer text names both titles; with fold_duplicates=False the copies count apart."""
    from evireform.embed import HashingEmbedder
    from evireform.evaluation import run_eval
    from evireform.evaluation.runner import fold_same_text
    from evireform.retriever import EviReformConfig
    licence = "This software is released under the MIT licence by the Orvel Society."
    corpus = [{"title": "Alice", "text": "Alice was born in Paris."},
              {"title": "tool-a", "text": licence}, {"title": "tool-b", "text": licence},
              {"title": "Orvel", "text": "The Orvel Society was founded by Bob Smith."}]
    # one question asked twice, its gold either copy
    hot = [{"_id": f"h{i}", "question": "Under which licence does the Orvel Society release "
            "its software?", "answer": "MIT", "type": "comparison",
            "supporting_facts": [[tool, 0]]} for i, tool in enumerate(("tool-a", "tool-b"))]
    (tmp_path / "c.json").write_text(json.dumps(corpus))
    (tmp_path / "q.json").write_text(json.dumps(hot))
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path / "cache"))
    kw = dict(embedder=HashingEmbedder(64), show_progress=False, answer_recall=True)
    rep = run_eval(tmp_path / "q.json", tmp_path / "c.json", ["bm25", "evireform"], **kw)
    assert [q.gold for q in rep.questions] == [frozenset({1})] * 2  # the group of 1 and 2
    for m in ("bm25", "evireform"):
        assert rep.methods[m]["recall@1"] == 100.0, m
        assert sorted(rep.rankings[m][0]) == [0, 1, 3], m  # three texts, each once
    assert rep.answer_texts[1].split("\n")[:2] == ["tool-a", "tool-b"]
    plain = run_eval(tmp_path / "q.json", tmp_path / "c.json", ["bm25"],
                     config=EviReformConfig(fold_duplicates=False), **kw)
    assert plain.methods["bm25"]["recall@1"] == 50.0  # one copy ranks first: one gold
    assert sorted(plain.rankings["bm25"][0]) == [0, 1, 2, 3]
    # by hand: the first appearance of each group, cut to k
    groups = types.SimpleNamespace(same_text=[0, 0, 2, 2, 4],
                                   same_text_groups={0: [0, 1], 2: [2, 3]})
    got, qs, texts = fold_same_text(groups, {"m": [[3, 1, 0, 4, 2]]},
                                    rep.questions[:0], None, 2)
    assert got == {"m": [[2, 0]]} and qs == [] and texts is None
