import json

import pytest

from evireform import Passage, PropositionIndex, canonical_entity, load_corpus
from evireform.embed import HashingEmbedder
from evireform.extract import HeuristicExtractor, read_openie, split_sentences, spot_entities


def test_canonical_entity():
    assert canonical_entity("  The  Beatles!") == "beatles"
    assert canonical_entity("U.S.A.") == "u s a"
    assert canonical_entity("Straße") == "strasse"
    assert canonical_entity("ＡＢＣ") == "abc"  # NFKC
    assert canonical_entity("the") == "the"
    assert canonical_entity("---") == ""
    assert canonical_entity("St. Maurice's Abbey") == canonical_entity("st maurice s abbey")


def test_split_sentences():
    s = "Dr. J. R. R. Tolkien wrote it in 1937. It sold well! Did it? Yes. U.S. troops left."
    assert split_sentences(s) == ["Dr. J. R. R. Tolkien wrote it in 1937.", "It sold well!",
                                  "Did it?", "Yes.", "U.S. troops left."]
    assert split_sentences("  ") == []


def test_spot_entities():
    ents = spot_entities("The current editor is Jan Philip Solovej from University of "
                         "Copenhagen, since 11 November 1998 (about 20 years).")
    assert "Jan Philip Solovej" in ents and "University of Copenhagen" in ents
    assert "11 November 1998" in ents and "1998" in ents
    assert "The" not in ents and "20" not in ents and "November" not in ents


def test_heuristic_extractor_title_prefix_and_entity():
    p = Passage("x", "Teutberga", "Teutberga was a queen. She was a daughter of Boso.")
    props = HeuristicExtractor().extract(p)
    assert [q.text for q in props] == ["Teutberga was a queen.",
                                      "Teutberga: She was a daughter of Boso."]
    assert all("Teutberga" in q.entities for q in props)
    assert all(q.passage == "x" for q in props)


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
