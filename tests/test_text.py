"""The lexical tokenizer (evireform.text): identifiers whole and in parts, CJK bigrams, and
texts read in pieces that never cut a word."""

import numpy as np
import pytest

from evireform.text import lexical_tokens


# --------------------------------------------------------------------------- tokenizer
@pytest.mark.parametrize("text, want", [
    ("SSH_AUTH_SOCK", ["ssh_auth_sock", "ssh", "auth", "sock"]),
    ("use --shell now", ["use", "--shell", "shell", "now"]),
    ("see /etc/login.defs.", ["see", "/etc/login.defs", "etc", "login", "def"]),
    ("Filters archives via libraries", ["filter", "archive", "library"]),
    ("class status analysis gas ties", ["class", "status", "analysis", "gas", "tie"]),
    ("ProxyJumps CACHE_DIRS --files", ["proxyjump", "proxy", "jump", "cache_dirs", "cache",
                                       "dir", "--files", "file"]),
    ("lexgrog(1)", ["lexgrog(1)", "lexgrog"]),
    ("ProxyJump", ["proxyjump", "proxy", "jump"]),
    ("The HTTPServer", ["httpserver", "http", "server"]),
    ("the end.", ["end"]),
    ("环境变量", ["环境", "境变", "变量"]),
    ("猫", ["猫"]),
])
def test_lexical_tokens(text, want):
    assert lexical_tokens(text) == want


def test_a_plural_and_its_singular_are_one_term():
    """Plural folding (issue 67): the question's words meet the answer's whichever number
    either uses; identifiers keep their written form whole."""
    doc = lexical_tokens("Filter the archive through a program; SSH_AUTH_SOCKS stays whole")
    q = lexical_tokens("which option filters archives through programs")
    assert {"filter", "archive", "program"} <= set(doc) & set(q)
    assert "ssh_auth_socks" in doc


def test_identifier_parts_match_plain_words():
    doc = set(lexical_tokens("Set SSH_AUTH_SOCK to the agent's socket"))
    assert {"ssh_auth_sock", "sock", "socket", "agent"} <= doc
    assert "the" not in doc and "to" not in doc


def test_string_pieces_never_cut_a_word():
    from evireform.strings import StringTable
    texts = ["alpha beta " * 50, "x" * 300 + " tail", "环境变量" * 200, "", "a\nb\tc d"]
    blob = "".join(texts).encode()
    off = np.r_[0, np.cumsum([len(t.encode()) for t in texts])].astype(np.int64)
    table = StringTable(np.frombuffer(blob, np.uint8), off)
    for i, t in enumerate(texts):
        parts = list(table.pieces(i, size=64))
        assert "".join(parts) == t
        tokens = [x for p in parts for x in lexical_tokens(p)]
        assert tokens == lexical_tokens(t)
