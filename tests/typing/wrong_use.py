"""Mistakes mypy must catch in a user's program (tests/test_typing.py lists the lines)."""
from evireform import EviReform, PropositionIndex

idx = PropositionIndex.load("ix")
n: str = idx.n_passages                                  # an int is not a str
res = EviReform(idx).retrieve("q", k=2)
res.passages[0].score.upper()                            # a float has no upper
EviReform(idx).retrieve_many("one question", 3).ids      # a list has no ids
