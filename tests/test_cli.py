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
