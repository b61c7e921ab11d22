"""HippoRAG's OpenIE files read (evireform.extract.openie): the real file, its
conventions, what is repeated, empty or missing, and named entities as whole words."""

import json

import pytest

from evireform import (
    Passage,
    PropositionIndex,
    load_corpus,
)
from evireform.embed import HashingEmbedder
from evireform.extract import (
    read_openie,
)


def test_read_openie_real_file(data_dir):
    passages = load_corpus(data_dir / "musique/musique_corpus.json")
    props, skipped = read_openie(data_dir / "musique/musique_openie_gpt-3.5-turbo-1106.json",
                                 passages)
    assert len(props) + skipped == 17419  # every triple accounted for
    first = passages[0]
    mine = [p for p in props if p.passage == first.id]
    assert mine[0].text == "Journal of Mathematical Physics published by American Institute of Physics"
    assert mine[0].entities == ("Journal of Mathematical Physics", "American Institute of Physics")
    plain, _ = read_openie(data_dir / "musique/musique_openie_gpt-3.5-turbo-1106.json",
                           passages, plain=True)
    assert [p.passage for p in plain] == [p.passage for p in props]
    assert all(p.text.endswith(q.text) for p, q in zip(props, plain))
    prefixed = sum(p.text != q.text for p, q in zip(props, plain))
    assert 0 < prefixed < len(props)  # only triples that do not mention their title
    idx = PropositionIndex.from_openie(data_dir / "musique/musique_openie_gpt-3.5-turbo-1106.json",
                                       passages, HashingEmbedder(16), show_progress=False)
    assert idx.n_props == len(props) and idx.stats()["passages_without_propositions"] >= 1


def test_read_openie_conventions_and_plain(tmp_path):
    """Default: the title prefixed where the triple does not mention it, the title as an
    entity, and the doc's named entities found as whole words (any case) in the subject or
    object; plain: the triple as the file has it."""
    f = tmp_path / "o.json"
    f.write_text(json.dumps({"docs": [
        {"title": "Alice Smith", "text": "Alice Smith was born in Paris in 1901. She wrote.",
         "extracted_entities": ["Paris", "1901", "Alice Smith", "Paris", "Ice", 7],
         "extracted_triples": [["Alice Smith", "born in", "paris"],
                               ["She", "wrote", "novels in 1901"],
                               ["her police", "served", "Nice"]]},
        {"title": "Bob", "text": "Bob.", "extracted_triples": [["Bob", "is", "Bob"]]}]}))
    passages = [Passage("a", "Alice Smith", "Alice Smith was born in Paris in 1901. She wrote."),
                Passage("b", "Bob", "Bob.")]
    props, skipped = read_openie(f, passages)
    assert skipped == 0
    assert [p.text for p in props] == ["Alice Smith born in paris",
                                       "Alice Smith: She wrote novels in 1901",
                                       "Alice Smith: her police served Nice", "Bob is Bob"]
    assert props[0].entities == ("Alice Smith", "paris", "Paris")
    assert props[1].entities == ("She", "novels in 1901", "Alice Smith", "1901")
    assert props[2].entities == ("her police", "Nice", "Alice Smith")  # "Ice" is no word there
    assert props[3].entities == ("Bob", "Bob")
    plain, _ = read_openie(f, passages, plain=True)
    assert [p.text for p in plain] == ["Alice Smith born in paris", "She wrote novels in 1901",
                                       "her police served Nice", "Bob is Bob"]
    assert [p.entities for p in plain] == [("Alice Smith", "paris"), ("She", "novels in 1901"),
                                           ("her police", "Nice"), ("Bob", "Bob")]
    f.write_text(json.dumps({"docs": [["not", "an", "object"]]}))
    with pytest.raises(ValueError, match="o.json: doc 0 is not an object"):
        read_openie(f, passages)
    f.write_text(json.dumps({"docs": [{"title": "Bob", "text": "Bob.",
                                       "extracted_entities": "not a list"}]}))
    with pytest.raises(ValueError, match=r"o.json: doc 0 \('Bob'\): 'extracted_entities' "
                                         "must be a list, not str"):
        read_openie(f, passages)


def test_read_openie_warns_of_repeated_empty_and_missing_docs(tmp_path, caplog):
    f = tmp_path / "o.json"
    doc = {"title": "A", "text": "Alpha met Beta.", "extracted_triples": [["Alpha", "met", "Beta"]]}
    f.write_text(json.dumps({"docs": [doc, doc, {"title": "B", "text": "Beta.",
                                                 "extracted_triples": []}]}))
    passages = [Passage("a", "A", "Alpha met Beta."), Passage("b", "B", "Beta."),
                Passage("c", "C", "Gamma.")]
    with caplog.at_level("WARNING", logger="evireform.extract"):
        props, _ = read_openie(f, passages)
    assert len(props) == 1  # the repeated doc's triple is not read twice
    msg = caplog.text
    assert "1 docs repeat a passage" in msg and "1 docs have no triples" in msg
    assert "1 of 3 passages have no doc" in msg


def test_named_entities_are_found_as_whole_words_in_linear_time():
    """The OpenIE reader's spotter equals one whole-word pattern per name (what it replaced:
    quadratic in a doc's names x triples) on random names and arguments with punctuation,
    underscores, digits and case-folded letters."""
    import random
    import re

    from evireform.extract.openie import _WholeWords
    rng = random.Random(7)
    parts = ["a", "b", "ab", "x y", "c.d", ".net", "asp", ".", "-", "é", "ß", "1963",
             "foo_bar", " ", "(", ")", "a-b"]
    for _ in range(3000):
        names = [n for n in ("".join(rng.choice(parts) for _ in range(rng.randint(1, 3)))
                             .strip() for _ in range(rng.randint(1, 6))) if n]
        args = ["".join(rng.choice(parts) for _ in range(rng.randint(0, 8))).casefold()
                for _ in range(2)]
        want = []
        for e in names:
            pat = re.compile(r"(?<!\w)" + re.escape(e.casefold()) + r"(?!\w)")
            if e not in want and any(pat.search(a) for a in args):
                want.append(e)
        spot = _WholeWords(names)
        assert (spot.found(*args) if spot else []) == want, (names, args)


def test_read_openie_rejects_unknown_doc(tmp_path):
    f = tmp_path / "o.json"
    f.write_text(json.dumps({"docs": [{"title": "X", "text": "nowhere",
                                       "extracted_triples": [["a", "b", "c"]]}]}))
    with pytest.raises(ValueError, match="matches no corpus passage"):
        read_openie(f, [Passage("0", "Y", "elsewhere")])
