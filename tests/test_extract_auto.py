"""The extractor chosen for a corpus (evireform.extract.auto)."""

import json

import pytest
from roles_common import _world  # noqa: F401

from evireform import (
    Passage,
    PropositionIndex,
)
from evireform.embed import HashingEmbedder
from evireform.extract import (
    AUTO_CAPITALISED,
    HeuristicExtractor,
    PhraseExtractor,
    ProseExtractor,
    choose_extractor,
    make_extractor,
    measure_case,
)


def test_auto_picks_prose_for_ordinary_cased_prose():
    prose = [Passage("a", "A", "The tool reads the file and writes the key to the disk when "
                               "it runs. Note that it stops on errors and then exits. It "
                               "never asks twice.")]
    m = choose_extractor(prose)[1]
    assert AUTO_CAPITALISED[0] > m["capitalised_share"] >= 0.05
    assert m["chosen"] == "prose" and isinstance(make_extractor("auto", passages=prose),
                                                  ProseExtractor)
    names = [Passage("b", "B", "The quick fox met John Smith in Paris last May.")]
    assert choose_extractor(names)[1]["chosen"] == "heuristic"


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
