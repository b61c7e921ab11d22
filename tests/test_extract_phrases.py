"""The phrase extractor (evireform.extract.phrases): names found without capitals, in
German and in Chinese, a common noun no name."""

from evireform import Passage
from evireform.extract import HeuristicExtractor, PhraseExtractor


def _entities(extractor, passages):
    extractor.fit(passages)
    return [sorted({e.casefold() for pr in extractor.extract(p) for e in pr.entities})
            for p in passages]


def test_phrase_extractor_does_not_need_capitals():
    ps = [Passage("1", "Charles Babbage", "Charles Babbage designed the Analytical Engine. "
                  "He worked in London."),
          Passage("2", "Analytical Engine", "The Analytical Engine was a mechanical computer. "
                  "Ada Lovelace wrote about the Analytical Engine."),
          Passage("3", "Ada Lovelace", "Ada Lovelace was born in London in 1815.")]
    lower = [Passage(p.id, p.title.lower(), p.text.lower()) for p in ps]
    orig = _entities(PhraseExtractor(), ps)
    low = _entities(PhraseExtractor(), lower)
    assert orig == low  # letter case changes nothing
    assert "analytical engine" in low[0] and "london" in low[0] and "ada lovelace" in low[1]
    assert "1815" in low[2]
    # the capitalised-name heuristic finds nothing but the title in lower-case text
    h = [{e for pr in HeuristicExtractor().extract(p) for e in pr.entities} for p in lower]
    assert h[0] == {"charles babbage"}


def test_phrase_extractor_german_and_chinese():
    de = [Passage(str(i), "", t) for i, t in enumerate([
        "Der Hund lief durch den Park. Angela Merkel besuchte Hamburg.",
        "Angela Merkel sprach in Hamburg über den Hafen.",
        "Der Hund schlief. Der Park war leer.",
        "Hamburg hat einen großen Hafen und einen Hund.",
        "Ein Hund und eine Katze spielten im Garten."])]
    ex = PhraseExtractor(max_df_min=3)  # at most 3 of these 5 passages
    ents = _entities(ex, de)
    assert "angela merkel" in ents[1] and "hamburg" in ents[3]
    every = {e for row in ents for e in row}
    assert "der" not in every and "hund" not in every  # a common noun in 4 of 5 is no name
    zh = [Passage("a", "", "北京是中国的首都。长城在北京附近。"),
          Passage("b", "", "长城很长。北京有很多人。"),
          Passage("c", "", "上海是一个大城市。")]
    ents = _entities(PhraseExtractor(), zh)
    assert "北京" in ents[0] and "长城" in ents[1]
    props = PhraseExtractor().fit(zh).extract(zh[0])
    assert [p.text for p in props] == ["北京是中国的首都。", "长城在北京附近。"]
