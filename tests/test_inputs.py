"""Hostile and mistaken inputs of the command line: every input a regular file before
anything reads or hashes it (a FIFO or /dev/zero would never end), options that contradict
each other refused instead of ignored, and every refusal naming the option, file or record
and what to do."""
import json
import os
import time

import pytest

from evireform.cli import main


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "pipe"
    os.mkfifo(p)
    return p


@pytest.mark.parametrize("args,msg", [
    (["--dataset", "musique", "--extra-corpus", "/dev/zero"],
     "--extra-corpus /dev/zero: is a device"),
    (["--dataset", "musique", "--extra-corpus", "FIFO"], "is a FIFO"),
    (["--dataset", "musique", "--openie", "/dev/zero"], "--openie /dev/zero: is a device"),
    (["--dataset", "musique", "--corpus", "X", "--questions", "Y"],
     "--dataset names the questions and the corpus itself"),
    (["--corpus", "/dev/zero"], "--corpus /dev/zero: is a device"),
    (["--questions", "FIFO", "--corpus", "/dev/zero"], "is a FIFO"),
])
def test_eval_refuses_special_files_and_contradictions_at_once(args, msg, fifo, data_dir,
                                                                 capsys):
    args = [str(fifo) if a == "FIFO" else a for a in args]
    t = time.monotonic()
    assert main(["eval", "--data", str(data_dir), "--methods", "dense", *args]) == 2
    assert time.monotonic() - t < 2.0
    assert msg in capsys.readouterr().err


def test_eval_names_the_missing_half_of_a_pair(tmp_path, capsys):
    c = tmp_path / "c.json"
    c.write_text(json.dumps([{"title": "A", "text": "B"}]))
    assert main(["eval", "--corpus", str(c), "--methods", "dense"]) == 2
    assert "--corpus needs --questions" in capsys.readouterr().err


def test_questions_with_a_lone_surrogate_are_named_by_record(tmp_path, capsys):
    from evireform import PropositionIndex
    from evireform.embed import HashingEmbedder
    PropositionIndex.build(["Alpha met Beta.", "Beta lives in Rome."], HashingEmbedder(8),
                           show_progress=False).save(tmp_path / "ix")
    q = tmp_path / "q.jsonl"
    q.write_text('{"question": "ok?"}\n{"question": "bad \\ud800 here"}\n')
    assert main(["query", str(tmp_path / "ix"), "--questions", str(q), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "q.jsonl:2 (question): not valid Unicode text" in err and "Traceback" not in err


def test_a_trec_run_name_is_one_token(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["query", str(tmp_path), "--questions", "x", "--trec", "r", "--run-name", "a b"])
    assert "a TREC run name has no spaces" in capsys.readouterr().err


def test_an_unknown_extractor_lists_every_name_before_reading_the_corpus(tmp_path, capsys,
                                                                        monkeypatch):
    import evireform.cli.indexing as ix
    monkeypatch.setattr(ix, "_read_paths", lambda *a, **k: pytest.fail("read first"))
    c = tmp_path / "c.json"
    c.write_text(json.dumps([{"title": "A", "text": "B"}]))
    assert main(["index", str(c), str(tmp_path / "ix"), "--extractor", "bogus"]) == 2
    assert "--extractor must be one of auto, heuristic, phrases, prose, llm" in \
        capsys.readouterr().err
