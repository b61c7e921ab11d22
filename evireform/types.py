"""Plain records shared across the package."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Passage:
    """One retrievable unit of the corpus; ``id`` is unique, ``title`` may repeat."""

    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Proposition:
    """A proposition of an index: its text, its owner passage (by id) and its entity mentions."""

    text: str
    passage: str
    entities: tuple[str, ...] = field(default_factory=tuple)
