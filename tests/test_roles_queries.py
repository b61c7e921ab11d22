"""Residual queries cleaned and read as queries (evireform.roles.queries): the words a
bridge's surface form and the question leave."""

from evireform.roles import residual_words, surface_form


def test_surface_form_and_residual_words():
    assert surface_form("Sweden: The U.S. and Dala-Järna.", "u s") == "U.S"
    assert surface_form("near Dala-Järna today", "dala järna") == "Dala-Järna"
    assert surface_form("Publix Super Markets, Inc.", "publix super markets") == \
        "Publix Super Markets"
    assert surface_form("no such words", "grey mill") == "grey mill"
    assert residual_words("If Hello Love's performer died in it, into which state?") == \
        ["hello", "love", "performer", "died", "state"]
