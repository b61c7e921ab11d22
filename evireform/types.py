"""Plain records shared across the package."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, Union

#: a file or folder path as the library takes it
StrPath = Union[str, "os.PathLike[str]"]
#: a filter (:mod:`evireform.filters`): a where clause over passage metadata, a list of
#: passage ids, or None for none
FilterSpec = Union[dict[str, Any], Sequence[str], None]


@dataclass(frozen=True)
class Passage:
    """One retrievable unit of the corpus; ``id`` is unique, ``title`` may repeat.

    ``metadata`` is a JSON object (str keys; str, number, bool, null or lists and objects of
    them): every field of a corpus record other than id/title/text, a framework document's
    metadata, or ``{source, chunk, title}`` for a chunk of a file.  Filters
    (:mod:`evireform.filters`) read it; results return it.  It takes no part in hashing."""

    id: str
    title: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Proposition:
    """A proposition of an index: its text, its owner passage (by id) and its entity mentions."""

    text: str
    passage: str
    entities: tuple[str, ...] = field(default_factory=tuple)


class IndexData(Protocol):
    """What the store and the search data read of an index
    (:class:`~evireform.index.PropositionIndex` is one): annotations through this protocol,
    so that modules below the index never import it (no circle, even for annotations)."""

    passages: Any
    prop_texts: Any
    entity_names: Any
    graph: Any
    pmap: Any
    embeddings: Any
    embedder_name: str
    meta: dict[str, Any]
    search_state: Any

    @property
    def n_passages(self) -> int: ...

    @property
    def n_props(self) -> int: ...

    @property
    def n_entities(self) -> int: ...

    @property
    def dim(self) -> int: ...
