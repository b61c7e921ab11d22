"""Hi-Q's split without an LLM (evireform.roles.split): a question split into its hops and
what each hop covers."""

from graphs_common import Q  # noqa: F401

from evireform.strategies import covers, split_query


# --------------------------------------------------------------------------- Hi-Q
def test_split_query_and_coverage():
    first, second = split_query(Q)
    assert first == "association which published Journal Zeta"
    assert second == "Who was the first president of #1"
    assert covers(Q, first, second)
    assert split_query("Who wrote the music of Brand Hollow about 1900?") == \
        ("music of Brand Hollow", "Who wrote #1 about 1900")
    assert split_query("Where is Easton?") is None  # one relation: nothing to split
    assert split_query("what is the capital of france?") is None  # no named constraint
    assert not covers(Q, "association which published", "first president of #1")
    assert not covers(Q, first, "Who was the first president")
