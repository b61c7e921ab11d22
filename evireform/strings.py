"""Texts read on demand: string tables over one memory-mapped UTF-8 blob.

An index stores every string it holds (passage ids, titles, texts and metadata, proposition
texts, entity names) in ``strings.utf8`` with an ``int64`` offsets array
(``string_offsets.npy``): string ``i`` is ``blob[offsets[i]:offsets[i + 1]]``.  Loading maps
both files and builds nothing proportional to the corpus in Python objects; a string is
decoded when it is read (the passages a result returns, the candidates a selector reads).

:class:`StringTable` is a read-only sequence of ``str`` over one range of the blob;
:class:`PassageTable` a read-only sequence of :class:`~evireform.types.Passage` over four
tables (ids, titles, texts, metadata as JSON).  Both compare equal to lists with the same
items, and ``list(table)`` materialises them.  :func:`pack` writes the blob and offsets of
any sequences of strings.
"""
from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from .types import Passage

__all__ = ["StringTable", "PassageTable", "pack", "TABLES"]

#: the tables of an index, in blob order, with the count each spans
TABLES = (("passage_ids", "N"), ("passage_titles", "N"), ("passage_texts", "N"),
          ("passage_metadata", "N"), ("propositions", "M"), ("entities", "E"))


class StringTable(Sequence):
    """Strings ``lo .. hi - 1`` of a blob with ``offsets`` (see the module docstring).
    Invalid UTF-8 decodes with U+FFFD (the full verification tier refuses it)."""

    __slots__ = ("blob", "offsets", "lo", "n", "_mv", "_off")

    def __init__(self, blob, offsets: np.ndarray, lo: int = 0, hi: int | None = None):
        self.blob, self.offsets = blob, offsets
        self.lo = int(lo)
        self.n = int((len(offsets) - 1 if hi is None else hi) - lo)
        # plain views: slicing a memoryview and indexing an ndarray skip np.memmap's
        # per-item overhead (a few microseconds each)
        self._mv = memoryview(np.asarray(blob).view(np.uint8)).cast("B")
        self._off = np.asarray(offsets).view(np.ndarray)

    def __len__(self) -> int:
        return self.n

    def _one(self, i: int) -> str:
        a, b = int(self._off[self.lo + i]), int(self._off[self.lo + i + 1])
        return bytes(self._mv[a:b]).decode("utf-8", "replace")

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._one(j) for j in range(*i.indices(self.n))]
        i = int(i)
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(f"string {i} of a table of {self.n}")
        return self._one(i)

    def __iter__(self):
        if self.n == 0:
            return
        off = self._off[self.lo:self.lo + self.n + 1].tolist()
        base = off[0]
        raw = bytes(self._mv[base:off[-1]])  # the table's bytes, read once
        for a, b in zip(off, off[1:]):
            yield raw[a - base:b - base].decode("utf-8", "replace")

    def __eq__(self, other):
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == self.n and all(a == b for a, b in zip(self, other))

    def __add__(self, other):
        return list(self) + list(other)

    def __repr__(self) -> str:
        return f"StringTable({self.n} strings)"

    def nbytes(self) -> int:
        return int(self._off[self.lo + self.n] - self._off[self.lo])


class PassageTable(Sequence):
    """:class:`Passage` objects built on access from four :class:`StringTable` columns."""

    __slots__ = ("ids", "titles", "texts", "metadata")

    def __init__(self, ids: StringTable, titles: StringTable, texts: StringTable,
                 metadata: StringTable):
        self.ids, self.titles, self.texts, self.metadata = ids, titles, texts, metadata

    def __len__(self) -> int:
        return len(self.ids)

    @staticmethod
    def _meta(raw: str) -> dict:
        if not raw:
            return {}
        try:
            md = json.loads(raw)
        except ValueError:
            return {}
        return md if isinstance(md, dict) else {}

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return Passage(self.ids[i], self.titles[i], self.texts[i],
                       self._meta(self.metadata[i]))

    def __iter__(self):
        for pid, t, x, m in zip(self.ids, self.titles, self.texts, self.metadata):
            yield Passage(pid, t, x, self._meta(m))

    def __eq__(self, other):
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other))

    def __add__(self, other):
        return list(self) + list(other)

    def __repr__(self) -> str:
        return f"PassageTable({len(self)} passages)"


def _metadata_json(md: dict) -> str:
    return json.dumps(md, ensure_ascii=False, separators=(",", ":")) if md else ""


def pack(passages, propositions, entities, write) -> np.ndarray:
    """Write the UTF-8 blob of an index's strings (in :data:`TABLES` order) through
    ``write(bytes)`` in chunks, and return the offsets (int64, one more than strings)."""
    sizes: list[int] = []
    buf: list[bytes] = []
    held = 0

    def put(s: str):
        nonlocal held
        try:
            b = s.encode("utf-8")
        except UnicodeEncodeError:  # never write invalid UTF-8 (a copy could not load it)
            from ._checks import check_text
            check_text(s, f"string {len(sizes)} of the index ({s[:60]!r})")
            raise
        sizes.append(len(b))
        buf.append(b)
        held += len(b)
        if held >= 1 << 24:
            flush()

    def flush():
        nonlocal held
        write(b"".join(buf))
        buf.clear()
        held = 0

    if isinstance(passages, PassageTable):  # no Passage objects for a table's columns
        cols = (passages.ids, passages.titles, passages.texts, passages.metadata)
        for col in cols:
            for s in col:
                put(s)
    else:
        for get in (lambda p: p.id, lambda p: p.title, lambda p: p.text,
                    lambda p: _metadata_json(p.metadata)):
            for p in passages:
                put(get(p))
    for s in propositions:
        put(s)
    for s in entities:
        put(s)
    flush()
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(np.asarray(sizes, dtype=np.int64), out=offsets[1:])
    return offsets
