"""The extractor chosen for a corpus (evireform.extract.auto)."""


from evireform import (
    Passage,
)
from evireform.extract import (
    AUTO_CAPITALISED,
    ProseExtractor,
    choose_extractor,
    make_extractor,
)
from evireform.types import Passage


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
