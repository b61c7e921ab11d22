"""Sentences, entity spans, identifiers and the words capitalised by their place
(evireform.extract.tokens), and entity names made canonical."""


import pytest

from evireform import (
    canonical_entity,
)
from evireform.extract import (
    identifiers,
    placed,
    split_sentences,
    spot_entities,
)


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


def test_identifiers_are_the_words_that_carry_their_own_type():
    s = ("-A Enables forwarding from an agent such as ssh-agent(1); see login.defs(5), "
         "SSH_AUTH_SOCK, ~/.ssh/config, /etc/shells, bzip2 --best and ProxyJump, FIDO. "
         "Not: e.g. i.e. 3072 9.0 2nd 10ms a-b x.")
    assert identifiers(s) == ["ssh-agent", "login.defs", "SSH_AUTH_SOCK", "~/.ssh/config",
                              "/etc/shells", "bzip2", "--best", "ProxyJump", "FIDO"]
    assert identifiers("") == [] and identifiers("plain words only here") == []
    # manual page references name things written as plain words
    assert identifiers("See lexgrog(1), mandb(8) and ssh-agent(1).") == \
        ["lexgrog", "mandb", "ssh-agent"]


@pytest.mark.parametrize("before,want", [("", True), ("It ends.", True), ("-A", True),
                                         ("-b bits", True), ("• ", True), ("see the", False),
                                         ("the key (", True), ("a Note", False)])
def test_placed_words_start_a_sentence_clause_or_option(before, want):
    assert placed(before) is want
