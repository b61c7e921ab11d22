import json
import subprocess
import sys

import pytest

from evireform import PropositionIndex
from evireform.cli import main


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
    (tmp_path / "bad.jsonl").write_text("{\"nokey\": 1}\n")
    assert main(["llm-cache", "import", str(tmp_path / "bad.jsonl"), "--cache",
                 str(tmp_path / "b.sqlite")]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
