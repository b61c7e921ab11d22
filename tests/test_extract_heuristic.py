"""The heuristic extractor (evireform.extract.heuristic): a passage's title as the
subject of its propositions, named entities as its entities."""


from evireform import (
    Passage,
)
from evireform.extract import (
    HeuristicExtractor,
)


def test_heuristic_extractor_title_prefix_and_entity():
    p = Passage("x", "Teutberga", "Teutberga was a queen. She was a daughter of Boso.")
    props = HeuristicExtractor().extract(p)
    assert [q.text for q in props] == ["Teutberga was a queen.",
                                      "Teutberga: She was a daughter of Boso."]
    assert all("Teutberga" in q.entities for q in props)
    assert all(q.passage == "x" for q in props)
