import json
import subprocess
import sys

import pytest

from evireform import PropositionIndex
from evireform.cli import main
from evireform.engine import quantize


def test_cli_index_json(tmp_path, capsys, data_dir):
    rc = main(["index", str(data_dir / "hotpotqa/hotpotqa_corpus.json"), str(tmp_path / "ix"),
               "--embedder", "hashing-32", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passages"] == 994 and out["reload_identical"] is True
    assert out["w_nnz_if_materialised"] > out["incidence_nnz"] > 0
    assert out["bytes_on_disk"] > 0
    idx = PropositionIndex.load(tmp_path / "ix")
    assert idx.n_props == out["propositions"]


def test_cli_errors(tmp_path, capsys):
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    assert main(["index", str(empty), str(tmp_path / "ix"), "--embedder", "hashing-8"]) == 2
    assert "is empty" in capsys.readouterr().err
    assert not (tmp_path / "ix").exists()
    assert main(["index", str(empty), str(tmp_path / "ix"), "--extractor", "nope.json",
                 "--embedder", "hashing-8"]) == 2


def test_module_entry_point():
    out = subprocess.run([sys.executable, "-m", "evireform", "index", "--help"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "--extractor" in out.stdout


def test_cli_index_with_llm_extractor(tmp_path, capsys):
    pytest.importorskip("openai")
    from scripted_server import Script, serve
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps([{"title": "Alice", "text": "Alice lives in Paris."},
                                  {"title": "Paris", "text": "Paris is in France."}]))
    reply = {"propositions": [{"text": "Alice lives in Paris", "entities": ["Alice", "Paris"]}]}
    srv, url = serve(Script(default={"content": json.dumps(reply)}))
    try:
        assert main(["index", str(corpus), str(tmp_path / "ix"), "--extractor", "llm",
                     "--llm-base-url", url, "--llm-model", "m", "--embedder", "hashing-16",
                     "--json"]) == 0
    finally:
        srv.shutdown()
    out = json.loads(capsys.readouterr().out)
    # passage 1's reply names "Alice", which is not in "Paris is in France.": dropped
    assert out["propositions"] == 2 and out["incidence_nnz"] == 3
    assert out["extractor"].startswith("llm-extract:m:")


def test_cli_llm_cache_roundtrip(tmp_path, capsys):
    from evireform.llm import ReplyCache
    c = ReplyCache(str(tmp_path / "a.sqlite"))
    c.put("k1", "select", {"selected": [1]})
    assert main(["llm-cache", "export", str(tmp_path / "r.jsonl"), "--cache",
                 str(tmp_path / "a.sqlite")]) == 0
    (tmp_path / "more.jsonl").write_text(json.dumps({"key": "k2", "content": "x {\"queries\": []}"}) + "\n")
    assert main(["llm-cache", "import", str(tmp_path / "r.jsonl"), "--cache",
                 str(tmp_path / "b.sqlite")]) == 0
    assert main(["llm-cache", "import", str(tmp_path / "more.jsonl"), "--cache",
                 str(tmp_path / "b.sqlite")]) == 0
    b = ReplyCache(str(tmp_path / "b.sqlite"))
    assert b.get("k1") == {"selected": [1]} and b.get("k2") == {"queries": []}
    capsys.readouterr()
    assert main(["llm-cache", "export", str(tmp_path / "r2.jsonl"), "--cache",
                 str(tmp_path / "b.sqlite"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "action": "export", "file": str(tmp_path / "r2.jsonl"),
        "cache": str(tmp_path / "b.sqlite"), "replies": 2}
    (tmp_path / "bad.jsonl").write_text("{\"nokey\": 1}\n")
    assert main(["llm-cache", "import", str(tmp_path / "bad.jsonl"), "--cache",
                 str(tmp_path / "b.sqlite")]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err


def test_batch_query_jsonl_and_trec(tmp_path, capsys):
    import json
    from evireform import Passage, Proposition, PropositionIndex
    from evireform.embed import HashingEmbedder
    emb = HashingEmbedder(32)
    ps = [Passage(f"p {i}", f"T{i}", f"Alpha {i} met Beta {i}.") for i in range(8)]
    pr = [Proposition(f"Alpha {i} met Beta {i}", f"p {i}", (f"a{i}", "beta")) for i in range(8)]
    PropositionIndex.from_propositions(ps, pr, emb.encode([p.text for p in pr]),
                                       emb.name).save(tmp_path / "ix")
    qf = tmp_path / "q.jsonl"
    qf.write_text('{"id": "q1", "question": "Whom did Alpha 3 meet?"}\n'
                  '{"question": "Where is Beta 5?"}\n')
    tf = tmp_path / "q.txt"
    tf.write_text("Whom did Alpha 3 meet?\n\nWhere is Beta 5?\n")
    for f, ids in ((qf, ["q1", "2"]), (tf, ["1", "3"])):
        out, trec = tmp_path / "r.jsonl", tmp_path / "run.trec"
        assert main(["query", str(tmp_path / "ix"), "--questions", str(f), "--out", str(out),
                     "--trec", str(trec), "-k", "3", "--batch", "1", "--quiet"]) == 0
        recs = [json.loads(l) for l in out.read_text().splitlines()]
        assert [r["id"] for r in recs] == ids and all(len(r["passages"]) == 3 for r in recs)
        lines = trec.read_text().splitlines()
        assert len(lines) == 6 and lines[0].split()[:4] == [ids[0], "Q0", "p%203", "1"]
        err = capsys.readouterr().err
        assert "questions/s" in err and "2 batches of up to 1, time per batch p50" in err
    single = main(["query", str(tmp_path / "ix"), "Whom did Alpha 3 meet?", "--json"])
    got = json.loads(capsys.readouterr().out)["passages"]
    assert single == 0 and got[0]["id"] == "p 3"
    assert not any("excerpt" in p for p in got)  # the service's record, unless asked
    assert main(["query", str(tmp_path / "ix"), "Whom did Alpha 3 meet?", "--json",
                 "--excerpts"]) == 0
    got = json.loads(capsys.readouterr().out)["passages"]
    # the sentences the terminal shows, beside the whole text (issue 82)
    assert all(p["excerpt"] == " ".join(p["text"].split()) for p in got)
    assert main(["query", str(tmp_path / "ix"), "--questions", str(qf), "--out", str(out),
                 "-k", "3", "--excerpts", "--quiet"]) == 0
    assert all("excerpt" in p for line in out.read_text().splitlines()
               for p in json.loads(line)["passages"])
    assert main(["query", str(tmp_path / "ix")]) == 2  # neither a question nor --questions


def test_trec_runs_keep_the_ranking_under_a_score_sort(tmp_path):
    """Ties (the zero-score fill, equal sums) and scores that agree to six decimals are
    written strictly decreasing, so a tool that sorts by score keeps evireform's order."""
    from evireform.cli import trec_scores
    import numpy as np
    got = trec_scores([0.5, 0.1234564, 0.1234561, 0.1234561, 0.0, 0.0, 0.0, 0.1 - 1e-12])
    assert all(a > b for a, b in zip(got, got[1:]))
    f32 = [np.float32(x) for x in got]  # how pytrec_eval compares them
    assert all(a > b for a, b in zip(f32, f32[1:]))
    assert got[:3] == [0.5, 0.1234564, 0.1234561] and abs(got[-1]) < 1e-40
    assert trec_scores([]) == [] and trec_scores([0.0]) == [0.0]
    assert float(repr(got[3])) == got[3]  # written in full: the file reads back the same


def test_query_backend_and_precision_go_to_make_engine(tmp_path, capsys):
    """--precision int8 needs codes (refused by name without them, the same ranking with
    them); --precision fp16 on the CPU is refused, not ignored."""
    from evireform.embed import HashingEmbedder
    emb = HashingEmbedder(32)
    ix = PropositionIndex.build([f"Alpha {i} met Beta {i % 4} in Rome." for i in range(20)],
                                emb, show_progress=False).save(tmp_path / "ix")
    base = ["query", str(ix), "Alpha 3 met whom?", "-k", "5", "--json"]
    assert main(base) == 0
    want = json.loads(capsys.readouterr().out)["passages"]
    assert main(base + ["--precision", "int8"]) == 2
    assert "needs int8 codes" in capsys.readouterr().err
    assert main(base + ["--backend", "cpu", "--precision", "fp16"]) == 2
    assert "runs on the GPU" in capsys.readouterr().err
    quantize(PropositionIndex.load(ix), "int8").save(ix, overwrite=True)
    for p in ("int8", "float32"):
        assert main(base + ["--precision", p]) == 0
        got = json.loads(capsys.readouterr().out)["passages"]
        assert [(g["id"], round(g["score"], 6)) for g in got] == \
            [(w["id"], round(w["score"], 6)) for w in want]


@pytest.mark.parametrize("vectors", [False, True])
def test_one_question_on_a_small_index_needs_no_numba(tmp_path, capsys, vectors):
    """``evireform query`` with one question on a small index answers on numpy (make_engine's
    one_shot) in a fresh process: numba is never imported, and the passages and their scores
    are the CPU kernels' (``--backend cpu``, in this process); with passage embeddings, the
    question's own search too (issue 85)."""
    from evireform.embed import HashingEmbedder
    ix = PropositionIndex.build([f"Alpha {i} met Beta {i % 4} in Rome. Beta {i % 4} wrote "
                                 f"Gamma {i % 3}." for i in range(30)],
                                HashingEmbedder(32), show_progress=False,
                                passage_vectors=vectors).save(tmp_path / "ix")
    q = ["query", str(ix), "Whom did Alpha 3 meet?", "-k", "5", "--json"]
    code = ("import sys; from evireform.cli import main\n"
            f"rc = main({q!r})\n"
            "print('NUMBA', 'numba' in sys.modules, file=sys.stderr); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "NUMBA False" in r.stderr, r.stderr
    got = json.loads(r.stdout)["passages"]
    assert bool(json.loads(r.stdout)["trace"]["own_search"]) is vectors
    assert main(q + ["--backend", "cpu"]) == 0
    want = json.loads(capsys.readouterr().out)["passages"]
    assert [g["id"] for g in got] == [w["id"] for w in want] and len(got) == 5
    for g, w in zip(got, want):
        for key in ("score", "from_question", "from_residual", "from_propagation"):
            assert abs(g[key] - w[key]) <= 1e-6 * max(1.0, abs(w[key])), key


def test_the_encoder_thread_is_joined_on_every_exit_path(tmp_path, capsys, monkeypatch):
    """evireform query loads its question encoder on a thread (native code: ONNX Runtime);
    main() joins it before it returns, on a refused request too (a filter naming a key the
    index lacks is refused after the thread started)."""
    import threading
    import time

    from evireform.cli import querying
    from evireform.embed import HashingEmbedder
    ix = PropositionIndex.build(["Alpha met Beta in Rome."], HashingEmbedder(32),
                                show_progress=False).save(tmp_path / "ix")
    loading = []

    class SlowSession(HashingEmbedder):
        def query_encoder(self):  # a session that takes a while to load
            loading.append(threading.current_thread())
            time.sleep(0.5)
    monkeypatch.setattr(querying, "_index_embedder", lambda args, idx: SlowSession(32))
    assert main(["query", str(ix), "Who met Beta?", "--filter", '{"no_such_key": 1}']) == 2
    assert loading and loading[0].name == "evireform-encoder" and not loading[0].is_alive()


def test_every_option_of_every_command_says_what_it_does():
    """Help text for every argument, and the defaults shown where they say something."""
    import argparse
    from evireform.cli import build_parser
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    missing = {name: [a.dest for a in sp._actions if not a.help] for name, sp in
               sub.choices.items()}
    assert not {k: v for k, v in missing.items() if v}, missing
    text = sub.choices["query"].format_help()
    assert "passages to return (default: 10)" in text and "(default: False)" not in text


def test_a_trec_run_scores_in_ir_measures_as_in_evireform(tmp_path, capsys):
    """The TREC run of ``query --questions --trec`` read by ir_measures (pytrec_eval: it
    re-sorts by score, ties by docid) gives the recall evireform's metrics give on the same
    rankings, at every K, on rankings full of ties (the zero-score fill)."""
    ir_measures = pytest.importorskip("ir_measures")
    from evireform.embed import HashingEmbedder
    from evireform.evaluation.data import Question
    from evireform.evaluation.metrics import metrics
    emb = HashingEmbedder(32)
    recs = [{"id": f"z{i:02d}" if i % 2 else f"a{i:02d}", "title": f"T{i}",
             "text": f"Anna{i} met Bo{i} in Rome{i}." if i % 4 else
             f"Anna {i % 5} met Bo {i % 3} in Rome {i}."} for i in range(40)]
    ix = PropositionIndex.build(recs, emb, show_progress=False).save(tmp_path / "ix")
    qs = [(f"q{i}", f"Who did Anna {i % 5} meet in Rome {i * 3}?") for i in range(12)]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"id": a, "question": b}) + "\n"
                                              for a, b in qs))
    assert main(["query", str(ix), "--questions", str(tmp_path / "q.jsonl"), "-k", "40",
                 "--out", str(tmp_path / "r.jsonl"), "--trec", str(tmp_path / "run.trec"),
                 "--quiet", "--embedder", "hashing-32"]) == 0
    capsys.readouterr()
    res = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    pos = {r["id"]: j for j, r in enumerate(recs)}
    rankings = [[pos[p["id"]] for p in r["passages"]] for r in res]
    ties = sum(a["score"] == b["score"] for r in res
               for a, b in zip(r["passages"], r["passages"][1:]))
    assert ties > 20  # rankings a score sort would reorder, had the run file kept the ties
    gold = [{(3 * i + 7) % 40, (5 * i + 11) % 40, (i * 7 + 19) % 40} for i in range(12)]
    ours = metrics(rankings, [Question(str(i), q, "", frozenset(g)) for i, ((_, q), g) in
                              enumerate(zip(qs, gold))], ks=(5, 10, 20))
    qrels = [ir_measures.Qrel(qid, recs[j]["id"], 1) for (qid, _), g in zip(qs, gold)
             for j in g]
    run = list(ir_measures.read_trec_run(str(tmp_path / "run.trec")))
    theirs = ir_measures.calc_aggregate([ir_measures.R @ 5, ir_measures.R @ 10,
                                         ir_measures.R @ 20], qrels, run)
    for K in (5, 10, 20):
        assert round(100 * theirs[ir_measures.R @ K], 2) == ours[f"recall@{K}"], K


def test_query_prints_each_passage_with_its_source_and_text(tmp_path, capsys):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ops.md").write_text("---\nowner: infra\n---\n# Operations\n\n## Build farm\n\n"
                                  "The build farm is run by **Dana Ruiz**. " + "Filler words "
                                  "about other things entirely. " * 30 + "\n")
    (notes / "team.md").write_text("# Team\n\nDana Ruiz joined from the Lisbon office.\n")
    assert main(["index", str(notes), str(tmp_path / "n.idx"), "--embedder", "hashing-64",
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["query", str(tmp_path / "n.idx"), "who runs the build farm?", "-k", "2"]) == 0
    out = capsys.readouterr().out
    # the opening heading is the title ("Operations"), not the head of the section path
    assert "notes/ops.md #0 · section Build farm" in out and "Operations >" not in out
    assert "owner" not in out  # other metadata only with --metadata (issue 68)
    assert "The build farm is run by Dana Ruiz." in out and "**" not in out
    assert "…" in out  # the long passage trimmed around the question's words
    assert main(["query", str(tmp_path / "n.idx"), "who runs the build farm?", "-k", "2",
                 "--metadata"]) == 0
    assert '{"owner": "infra"}' in capsys.readouterr().out
    assert main(["query", str(tmp_path / "n.idx"), "who runs the build farm?", "-k", "2",
                 "--no-text"]) == 0
    compact = capsys.readouterr().out
    assert "is run by" not in compact and "notes/ops.md #0 · section Build farm" in compact
    assert "owner" not in compact


def test_an_excerpt_holds_the_sentences_of_the_residual_query_that_reached_it():
    """Issue 68: a passage reached by a residual query shows the sentences that match it,
    whole, not only those that match the question."""
    from types import SimpleNamespace
    from evireform.cli.querying import format_passage
    text = ("The farm builds every branch nightly. " + "Filler words about other things "
            "entirely. " * 12 + "Contact Ted Ts'o about the e2fsprogs mailing list. "
            + "More filler words go here. " * 12)
    p = SimpleNamespace(score=0.5, title="e2fsprogs README", id="r#0", index=0,
                        metadata={"source": "e2fsprogs/README", "chunk": 0})
    p.text = text
    q = "who maintains the farm builds?"
    assert "Ted Ts'o" not in format_passage(1, p, q)
    got = format_passage(1, p, q, queries=["e2fsprogs mailing list contact"])
    assert "Contact Ted Ts'o about the e2fsprogs mailing list." in " ".join(got.split())


def test_a_passage_standing_for_copies_names_them(tmp_path, capsys):
    """Issue 68: the same section in two files is one result naming the other copy, in the
    full and the compact text form and in --json."""
    notes = tmp_path / "notes"
    notes.mkdir()
    licence = "The tool is released under the MIT licence by the Orvel Society."
    for name in ("alpha", "beta"):
        (notes / f"{name}.md").write_text(f"# {name}\n\n{licence}\n")
    (notes / "gamma.md").write_text("# gamma\n\nGamma reads tea leaves.\n")
    ix = str(tmp_path / "n.idx")
    assert main(["index", str(notes), ix, "--embedder", "hashing-64", "--quiet"]) == 0
    capsys.readouterr()
    q = "Which licence does the Orvel Society release the tool under?"
    assert main(["query", ix, q, "-k", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("MIT licence") == 1 and "same text in notes/beta.md#0" in out
    assert main(["query", ix, q, "-k", "2", "--no-text"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "[notes/alpha.md#0]" in x)
    assert line.endswith("same text in notes/beta.md#0")
    assert main(["query", ix, q, "-k", "2", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert [p["duplicates"] for p in rec["passages"]] == [["notes/beta.md#0"], []]


def test_update_and_verify_report_as_json(tmp_path, capsys):
    """Issue 70: --json on every command that reports: update and verify too."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nAlpha met Beta in Paris.\n")
    ix = str(tmp_path / "n.idx")
    assert main(["index", str(notes), ix, "--embedder", "hashing-64", "--quiet"]) == 0
    (notes / "b.md").write_text("# B\n\nBeta founded Gamma in Rome.\n")
    (notes / "c.key").write_bytes(b"PK")
    capsys.readouterr()
    assert main(["update", ix, "--add", str(notes), "--json", "--quiet"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["passages"] == {"before": 1, "after": 2} and got["changes"]["added"] == 1
    assert any("1 .key" in w for w in got["warnings"])
    assert main(["verify", ix, "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["verified"] == "full" and v["passages"] == 2 and v["stamped"] is True


def test_query_json_gives_each_long_passage_the_sentences_the_terminal_shows(tmp_path,
                                                                               capsys):
    """Issue 82: `query --json` printed the whole chunk but not the matched sentences the
    terminal shows; with ``--excerpts`` each passage has ``excerpt``, the same snippet (not
    by default: the record is the service's /query record, shared by every door)."""
    filler = " ".join(f"Filler sentence number {i} says nothing at all." for i in range(40))
    recs = [{"id": "long", "title": "Long", "text": filler + " Orla Quist runs the build "
             "farm in Oslo. " + filler},
            {"id": "short", "title": "Short", "text": "Bo Chen met Orla Quist."}]
    f = tmp_path / "c.json"
    f.write_text(json.dumps(recs))
    assert main(["index", str(f), str(tmp_path / "ix"), "--embedder", "hashing-64",
                 "--quiet"]) == 0
    capsys.readouterr()
    q = "Who runs the build farm in Oslo?"
    assert main(["query", str(tmp_path / "ix"), q, "--json", "--excerpts", "-k", "2"]) == 0
    got = {p["id"]: p for p in json.loads(capsys.readouterr().out)["passages"]}
    assert "Orla Quist runs the build farm in Oslo." in got["long"]["excerpt"]
    assert len(got["long"]["excerpt"]) < len(got["long"]["text"]) / 3
    assert main(["query", str(tmp_path / "ix"), q, "-k", "2"]) == 0
    assert "Orla Quist runs the build farm in Oslo." in capsys.readouterr().out
