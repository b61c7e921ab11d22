"""Corpora read (evireform.corpus): the formats load_corpus takes, the shared data, plain
corpora and their content ids."""

import json

import pytest

from evireform import (
    Passage,
    PropositionIndex,
    load_corpus,
)
from evireform.embed import HashingEmbedder


def test_load_corpus_formats(tmp_path):
    a = tmp_path / "a.json"
    a.write_text(json.dumps([{"title": "T", "text": "x"}, {"title": "T", "text": "y"}]))
    from evireform.corpus import content_id
    assert [p.id for p in load_corpus(a)] == [content_id("T", "x"), content_id("T", "y")]
    b = tmp_path / "b.json"
    b.write_text(json.dumps({"T1": ["One.", " Two."], "T2": ["Three."]}))
    assert load_corpus(b)[0] == Passage("T1", "T1", "One. Two.")
    c = tmp_path / "c.json"
    c.write_text("[]")
    with pytest.raises(ValueError, match="is empty"):
        load_corpus(c)
    c.write_text("{oops")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_corpus(c)
    with pytest.raises(FileNotFoundError):
        load_corpus(tmp_path / "nope.json")


def test_shared_corpora_load(data_dir):
    assert len(load_corpus(data_dir / "musique/musique_corpus.json")) == 1890
    assert len(load_corpus(data_dir / "hotpotqa/hotpotqa_corpus.json")) == 994
    assert len(load_corpus(data_dir / "2wikimultihopqa/2wikimultihopqa_corpus.json")) == 6119


def test_plain_corpora(tmp_path):
    from evireform.corpus import as_passages
    f = tmp_path / "c.jsonl"
    f.write_text('{"id": "x1", "title": "Alpha", "text": "Alpha met Beta."}\n\n'
                 '{"text": "No id or title."}\n"just a string"\n')
    ps = load_corpus(f)
    from evireform.corpus import content_id
    assert [(p.id, p.title) for p in ps] == [("x1", "Alpha"), (content_id("", "No id or title."), ""),
                                             (content_id("", "just a string"), "")]
    g = tmp_path / "c.json"
    g.write_text('["First text.", "Second text."]')
    assert [p.text for p in load_corpus(g)] == ["First text.", "Second text."]
    h = tmp_path / "lines.txt"  # JSONL without the suffix: detected
    h.write_text('{"text": "a"}\n{"text": "b"}\n')
    assert len(load_corpus(h)) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a"}\n{oops\n')
    import pytest
    with pytest.raises(ValueError, match="line 2"):
        load_corpus(bad)
    idx = PropositionIndex.build(["Alice lives in Paris.", "Paris is in France."],
                                 HashingEmbedder(16), show_progress=False)
    assert [p.id for p in idx.passages] == [content_id("", "Alice lives in Paris."),
                                            content_id("", "Paris is in France.")]
    assert idx.n_props >= 2
    assert as_passages([{"id": "k", "text": "t"}])[0].id == "k"
