"""What the lexical tests share (tests/test_engine_lexical.py, test_lexical.py)."""

import pytest

from evireform import PropositionIndex
from evireform.embed import HashingEmbedder

from evireform.types import Passage

EMB = HashingEmbedder(32)

DOCS = [Passage("a", "Agent", "The agent keeps keys in memory. It listens on SSH_AUTH_SOCK."),
        Passage("b", "Shell", "Use --shell to pick the login shell of a new account."),
        Passage("c", "Config", "ProxyJump names a jump host in ssh_config."),
        Passage("d", "Zeta", "Journal Zeta is published by the Orvel Society."),
        Passage("e", "Orvel", "Alice Smith founded the Orvel Society in Paris.")]


@pytest.fixture(scope="module")
def small():
    return PropositionIndex.build(DOCS, EMB, extractor="heuristic", show_progress=False)
