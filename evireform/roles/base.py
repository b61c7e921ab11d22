"""What every role shares: the protocols (:class:`Selector`, :class:`Reformulator`,
:class:`Controller`), the candidates a selector is shown, and :class:`RoleResult`, a role's
output with what happened on the way.
"""
from __future__ import annotations

from collections.abc import Sequence as _SequenceABC
from dataclasses import dataclass
from typing import Any, Iterable, Protocol, Sequence, TYPE_CHECKING, runtime_checkable

from ..types import Passage

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike


class RoleResult(list[Any]):
    """A role's list output plus what happened on the way (reported in the trace): whether a
    repair turn was needed, and why the LLM-free fallback answered, if it did."""

    def __init__(self, items: Any=(), role: str = "", repaired: bool = False,
                 fallback: str | None = None, notes: Iterable[str] = ()) -> None:
        super().__init__(items)
        self.role: str = role
        self.repaired: bool = repaired
        self.fallback: str | None = fallback
        #: further events, e.g. "select:cut:40" when candidates were cut to fit the context
        self.notes: list[str] = list(notes)
        #: per item, what the role knows of it (the LLM-free reformulator: each query's
        #: bridge, the observed passage it came from and the bridge's score)
        self.details: list[dict[str, Any]] = []

    def events(self) -> list[str]:
        out = list(self.notes)
        if self.repaired:
            out.append(f"{self.role}:repaired")
        if self.fallback:
            out.append(f"{self.role}:fallback:{self.fallback}")
        return out


@dataclass(frozen=True)
class Candidate:
    """A candidate proposition shown to the selector."""

    id: int
    score: float
    text: str
    passage: int


class Candidates(_SequenceABC):
    """The candidates shown to a selector, best first: a read-only sequence of
    :class:`Candidate` made on first access, so a selector that looks at the top few (the
    LLM-free one) costs a few objects, not one per candidate; one that reads them all gets
    the same objects a list would hold.  ``texts``: indexable by proposition id (the index's
    texts), or None for candidates shown without text."""

    __slots__ = ("_ids", "_scores", "_passages", "_texts", "_made", "_owner")

    def __init__(self, ids: Any, scores: ArrayLike, passages: Sequence[Any] | None,
                 texts: Sequence[str] | None = None, *, owner: Any = None) -> None:
        """``passages``: each candidate's passage position, or None with ``owner`` (the
        index's proposition -> passage array, read per candidate made)."""
        if passages is None and owner is None:
            raise ValueError("Candidates needs passages or owner")
        self._ids, self._scores, self._passages, self._texts = ids, scores, passages, texts
        self._owner = owner
        self._made: list[Any] = [None] * len(ids)

    def __len__(self) -> int:
        return len(self._ids)

    def _at(self, t: int) -> Candidate:
        c = self._made[t]
        if c is None:
            i = self._ids[t]
            c = self._made[t] = Candidate(i, self._scores[t],
                                          "" if self._texts is None else self._texts[i],
                                          int(self._owner[i]) if self._passages is None
                                          else self._passages[t])
        return c

    def __getitem__(self, t):
        if isinstance(t, slice):
            return [self._at(u) for u in range(*t.indices(len(self._ids)))]
        n = len(self._ids)
        t = int(t)
        if t < 0:
            t += n
        if not 0 <= t < n:
            raise IndexError("candidate index out of range")
        return self._at(t)

    def __iter__(self):
        return (self._at(t) for t in range(len(self._ids)))

    def __repr__(self) -> str:
        return f"Candidates({list(self)!r})"


@runtime_checkable
class Selector(Protocol):
    name: str

    def select(self, question: str, candidates: Sequence[Candidate], max_selected: int) -> list[int]:
        """Proposition ids chosen among ``candidates`` (invalid ids are dropped later)."""
        ...


@runtime_checkable
class Reformulator(Protocol):
    name: str

    def reformulate(self, question: str, observed: Sequence[Passage], max_queries: int) -> list[str]:
        """Residual queries for what ``observed`` leaves unresolved (empty ones are dropped)."""
        ...


@runtime_checkable
class Controller(Protocol):
    name: str

    def sufficient(self, question: str, passages: Sequence[Passage]) -> bool:
        """True when ``passages`` suffice to answer ``question`` (stop adding rounds)."""
        ...

    def assess(self, question: str, passages: Sequence[Passage]) -> tuple[bool, list[str]]:
        """(sufficient, queries for what is missing).  The retriever calls this between
        rounds; the default names no gaps.  An LLM controller returns its gap queries, which
        become the next round's residual queries."""
        return bool(self.sufficient(question, passages)), []
