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

An update never decodes the strings it keeps: :meth:`PropositionIndex.add
<evireform.PropositionIndex.add>` holds the old passages and the new ones as a
:class:`Concat`, :func:`~evireform.index.subset_index` the kept ones as a :class:`Take`, and
:func:`pack` copies the bytes of every table range such views cover straight from the old
blob (an update's memory is proportional to what it changes, not to the texts).
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import json
import mmap
from bisect import bisect_right
from collections.abc import Sequence
from itertools import chain

import numpy as np

from ._checks import metadata_json
from .types import Passage

__all__ = ["StringTable", "PassageTable", "MetadataColumn", "Concat", "Take", "column",
           "metadata_of", "metadata_values", "MISSING", "split_metadata", "pack", "TABLES"]

#: the tables of an index, in blob order, with the count each spans (``S``: the metadata the
#: passages of a document share, each held once: :class:`MetadataColumn`; none before format
#: version 4)
TABLES = (("passage_ids", "N"), ("passage_titles", "N"), ("passage_texts", "N"),
          ("passage_metadata", "N"), ("propositions", "M"), ("entities", "E"),
          ("shared_metadata", "S"))


class _View(Sequence[Any]):
    """What the tables and views share: equal to a list with the same items, ``+`` makes a
    list."""

    __slots__ = ()

    def __eq__(self, other):
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other))

    def __add__(self, other):
        return list(self) + list(other)

    def _index(self, i: Any) -> int:
        i = int(i)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"item {i} of a sequence of {n}")
        return i


class StringTable(_View):
    """Strings ``lo .. hi - 1`` of a blob with ``offsets`` (see the module docstring).
    Invalid UTF-8 decodes with U+FFFD (the full verification tier refuses it)."""

    offsets: np.ndarray

    __slots__ = ("blob", "offsets", "lo", "n", "_mv", "_off")

    def __init__(self, blob: Any, offsets: np.ndarray, lo: int = 0, hi: int | None = None) -> None:
        self.blob, self.offsets = blob, offsets
        self.lo: int = int(lo)
        self.n: int = int((len(offsets) - 1 if hi is None else hi) - lo)
        # plain views: slicing a memoryview and indexing an ndarray skip np.memmap's
        # per-item overhead (a few microseconds each)
        self._mv = memoryview(np.asarray(blob).view(np.uint8)).cast("B")
        self._off = np.asarray(offsets).view(np.ndarray)

    def __len__(self) -> int:
        return self.n

    def _one(self, i: int) -> str:
        a, b = int(self._off[self.lo + i]), int(self._off[self.lo + i + 1])
        return bytes(self._mv[a:b]).decode("utf-8", "replace")

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._one(j) for j in range(*i.indices(self.n))]
        i = int(i)
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(f"string {i} of a table of {self.n}")
        return self._one(i)

    def __iter__(self) -> Iterator[Any]:
        if self.n == 0:
            return
        off = self._off[self.lo:self.lo + self.n + 1].tolist()
        base = off[0]
        raw = bytes(self._mv[base:off[-1]])  # the table's bytes, read once
        for a, b in zip(off, off[1:]):
            yield raw[a - base:b - base].decode("utf-8", "replace")

    def pieces(self, i: int, size: int = 1 << 18) -> Iterator[str]:
        """String ``i`` decoded in pieces of about ``size`` bytes, each cut after an ASCII
        whitespace byte, so that no word spans two pieces (a piece grows past ``size``
        while it holds no whitespace): what reads a long text in bounded memory, word by
        word."""
        a, b = int(self._off[self.lo + i]), int(self._off[self.lo + i + 1])
        while a < b:
            end = min(b, a + size)
            while end < b:
                chunk = bytes(self._mv[a:end])
                cut = max(chunk.rfind(c) for c in (b" ", b"\n", b"\t", b"\r"))
                if cut >= 0:
                    end = a + cut + 1
                    break
                end = min(b, end + size)
            yield bytes(self._mv[a:end]).decode("utf-8", "replace")
            a = end

    def __repr__(self) -> str:
        return f"StringTable({self.n} strings)"

    def nbytes(self) -> int:
        return int(self._off[self.lo + self.n] - self._off[self.lo])


class MetadataColumn(_View):
    """Passages' metadata as compact JSON (what a :class:`StringTable` of metadata holds),
    each a passage's own part joined to the part it shares with the other passages of its
    document, which is held once (format version 4, :func:`split_metadata`).

    ``own[i]``: passage ``i``'s keys after the shared ones; ``codes[i]``: which string of
    ``shared`` opens its object (-1: none, ``own[i]`` is the whole object).  A shared part is
    a prefix of the object's keys, so joining is string work, never decoding:
    ``shared[c][:-1] + "," + own[i][1:]`` is byte for byte the object written whole."""

    codes: np.ndarray

    __slots__ = ("codes", "own", "shared")

    def __init__(self, own: Sequence[Any], codes: Any, shared: Sequence[Any]) -> None:
        self.own, self.shared = own, shared
        self.codes = np.asarray(codes, dtype=np.int64).reshape(-1)

    def __len__(self) -> int:
        return len(self.own)

    @staticmethod
    def _join(head: str, tail: str) -> str:
        return head if not tail else head[:-1] + "," + tail[1:]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = self._index(i)
        c = int(self.codes[i])
        return self.own[i] if c < 0 else self._join(self.shared[c], self.own[i])

    def __iter__(self) -> Iterator[Any]:
        shared = list(self.shared)  # one string per document, decoded once
        for o, c in zip(self.own, self.codes.tolist()):
            yield o if c < 0 else self._join(shared[c], o)

    def __repr__(self) -> str:
        return f"MetadataColumn({len(self)} passages, {len(self.shared)} shared parts)"


class PassageTable(_View):
    """:class:`Passage` objects built on access from four :class:`StringTable` columns (the
    metadata a :class:`MetadataColumn` when its documents' shared part is held once)."""

    ids: StringTable
    metadata: Any
    texts: StringTable
    titles: StringTable

    __slots__ = ("ids", "titles", "texts", "metadata")

    def __init__(self, ids: StringTable, titles: StringTable, texts: StringTable,
                 metadata: Any) -> None:
        self.ids, self.titles, self.texts, self.metadata = ids, titles, texts, metadata

    def __len__(self) -> int:
        return len(self.ids)

    @staticmethod
    def _meta(raw: str) -> dict[str, Any]:
        if not raw:
            return {}
        try:
            md = json.loads(raw)
        except ValueError:
            return {}
        return md if isinstance(md, dict) else {}

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return Passage(self.ids[i], self.titles[i], self.texts[i],
                       self._meta(self.metadata[i]))

    def __iter__(self) -> Iterator[Any]:
        for pid, t, x, m in zip(self.ids, self.titles, self.texts, self.metadata):
            yield Passage(pid, t, x, self._meta(m))

    def __repr__(self) -> str:
        return f"PassageTable({len(self)} passages)"


class Concat(_View):
    """The sequences ``parts`` one after another (tables, lists, other views), read in place:
    nothing is copied or decoded until an item is read."""

    parts: list[Any]

    __slots__ = ("parts", "_ends")

    def __init__(self, *parts: Any) -> None:
        flat: list[Any] = []
        for part in parts:
            flat.extend(part.parts if isinstance(part, Concat) else [part])
        self.parts = [part for part in flat if len(part)]
        self._ends = np.cumsum([len(part) for part in self.parts], dtype=np.int64).tolist()

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = self._index(i)
        k = bisect_right(self._ends, i)
        return self.parts[k][i - (self._ends[k - 1] if k else 0)]

    def __iter__(self) -> Iterator[Any]:
        return chain.from_iterable(self.parts)

    def __repr__(self) -> str:
        return f"Concat({len(self)} items in {len(self.parts)} parts)"


class Take(_View):
    """Items ``positions`` (ascending or not) of ``base``, read in place."""

    positions: np.ndarray

    __slots__ = ("base", "positions")

    def __init__(self, base: Sequence[Any], positions: Any) -> None:
        if isinstance(base, Take):  # a view of a view reads the first base directly
            positions, base = base.positions[np.asarray(positions, dtype=np.int64)], base.base
        self.base = base
        self.positions = np.asarray(positions, dtype=np.int64).reshape(-1)

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.base[int(self.positions[self._index(i)])]

    def __iter__(self) -> Iterator[Any]:
        base = self.base
        return (base[j] for j in self.positions.tolist())

    def __repr__(self) -> str:
        return f"Take({len(self)} of {len(self.base)} items)"


_GETTERS = {"ids": lambda p: p.id, "titles": lambda p: p.title, "texts": lambda p: p.text,
            "metadata": lambda p: metadata_json(p.metadata)}


def column(passages: Sequence[Any], name: str) -> Sequence[Any]:
    """The strings of one passage field (``"ids"``, ``"titles"``, ``"texts"`` or
    ``"metadata"`` as stored: compact JSON, ``""`` for none) of any passage sequence: a
    table's own :class:`StringTable`, views of the views' columns, a list for
    :class:`Passage` objects."""
    if isinstance(passages, PassageTable):
        return getattr(passages, name)
    if isinstance(passages, Concat):
        return Concat(*(column(part, name) for part in passages.parts))
    if isinstance(passages, Take):
        return Take(column(passages.base, name), passages.positions)
    return [_GETTERS[name](p) for p in passages]


def string_bytes(strings: Sequence[Any], i: int) -> bytes:
    """String ``i`` of any string sequence as UTF-8 bytes: a table's bytes straight from its
    blob (nothing decoded), through :class:`Concat` and :class:`Take` views."""
    if isinstance(strings, StringTable):
        lo = strings.lo + int(i)
        return bytes(strings._mv[int(strings._off[lo]):int(strings._off[lo + 1])])
    if isinstance(strings, Concat):
        k = bisect_right(strings._ends, int(i))
        return string_bytes(strings.parts[k], int(i) - (strings._ends[k - 1] if k else 0))
    if isinstance(strings, Take):
        return string_bytes(strings.base, int(strings.positions[int(i)]))
    return str(strings[int(i)]).encode("utf-8", "surrogatepass")


def first_equal(strings: Sequence[Any]) -> np.ndarray:
    """For each string, the position of the first string with the same bytes (its own
    position when none before it has them), as int64: equal strings found by an 8-byte
    digest of their bytes, then compared byte for byte (a digest collision never joins two
    different strings).  A blank string (empty or white space) equals no other: a passage
    without text is no copy of another."""
    import hashlib

    def key(i: int) -> int:
        b = string_bytes(strings, i)
        if not b.strip():
            return -1 - i  # its own key: digests are >= 0
        return int.from_bytes(hashlib.blake2b(b, digest_size=8).digest(), "big") >> 1
    n = len(strings)
    keys = np.fromiter((key(i) for i in range(n)), dtype=np.int64, count=n)
    out = np.arange(n, dtype=np.int64)
    if n < 2:
        return out
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    cand = first[inverse].astype(np.int64)
    later = np.flatnonzero(cand != out)
    # the members of digests held more than once, in order: each takes the first position
    # of its own bytes within its digest
    buckets: dict[int, dict[bytes, int]] = {}
    for j in np.union1d(later, cand[later]).tolist():
        out[j] = buckets.setdefault(int(keys[j]), {}).setdefault(string_bytes(strings, j), j)
    return out


def metadata_of(passages: Sequence[Any]) -> Iterable[dict[str, Any]]:
    """Every passage's metadata dict, in order, decoding only the metadata column of tables
    (not their ids, titles and texts)."""
    if isinstance(passages, (PassageTable, Concat, Take)):
        return map(PassageTable._meta, column(passages, "metadata"))
    return (p.metadata for p in passages)


#: what :func:`metadata_values` gives a passage whose metadata lacks the key
MISSING = object()


def metadata_values(passages: Sequence[Any], key: str) -> list[Any]:
    """Every passage's value of the metadata ``key`` (:data:`MISSING` where it has none),
    decoding only what can hold it: each shared part of a :class:`MetadataColumn` once, and
    a passage's own JSON only when it spells the key (``"key":``).  What an update reads to
    find the namespaces of an index's passages: no JSON decoded for a passage whose
    metadata does not name the key."""
    if not isinstance(passages, (PassageTable, Concat, Take)):
        return [p.metadata.get(key, MISSING) for p in passages]
    spelt = json.dumps(key, ensure_ascii=False) + ":"

    def value(raw: str) -> Any:
        if spelt not in raw:
            return MISSING
        got = PassageTable._meta(raw)
        return got.get(key, MISSING)

    col = split_metadata(column(passages, "metadata"))
    heads = [value(h) for h in col.shared]
    out = []
    for own, c in zip(col.own, col.codes.tolist()):
        v = value(own)
        out.append(heads[c] if v is MISSING and c >= 0 else v)
    return out


def _split_run(objs: list[str], dicts: list[dict[str, Any]]) -> tuple[str, list[str]] | None:
    """The longest run of leading keys (with their values) that every object of ``objs``
    (compact JSON; ``dicts`` decoded) opens with, as compact JSON, and what each object
    holds after it; None when they share no key or the parts would not join back byte for
    byte."""
    items = [list(d.items()) for d in dicts]
    first = items[0]
    n = 0
    while n < len(first) and all(
            len(it) > n and it[n][0] == first[n][0]
            and metadata_json({"": it[n][1]}) == metadata_json({"": first[n][1]})
            for it in items[1:]):
        n += 1
    if n == 0:
        return None
    head = metadata_json(dict(first[:n]))
    tails = [metadata_json(dict(it[n:])) for it in items]
    if any(MetadataColumn._join(head, t) != o for t, o in zip(tails, objs)):
        return None  # not written as compact JSON: kept whole
    return head, tails


def split_metadata(col: Sequence[Any]) -> MetadataColumn:
    """Any metadata column (:func:`column` ``(passages, "metadata")``) as a
    :class:`MetadataColumn`: what a document's passages share held once.  The shared parts of
    stored tables are kept (their own parts copied as bytes by :func:`pack`, codes remapped,
    a part no passage uses any longer dropped); passages given as objects share the keys
    that every passage of a run with the same ``"source"`` (a file's chunks) opens with."""
    if isinstance(col, MetadataColumn):
        return col
    if isinstance(col, StringTable):
        return MetadataColumn(col, np.full(len(col), -1, np.int64), [])
    if isinstance(col, Take):
        base = split_metadata(col.base)
        codes = base.codes[col.positions]
        used = np.unique(codes[codes >= 0])
        remap = np.full(len(base.shared) + 1, -1, np.int64)
        remap[used] = np.arange(len(used))
        return MetadataColumn(Take(base.own, col.positions),
                              np.where(codes >= 0, remap[codes], -1),
                              Take(base.shared, used))
    if isinstance(col, Concat):
        own, codes, shared = [], [], []
        seen: dict[bytes, int] = {}
        for part in col.parts:
            m = split_metadata(part)
            remap = np.asarray([seen.setdefault(string_bytes(m.shared, c), len(seen))
                                for c in range(len(m.shared))] + [-1], np.int64)
            for c in range(len(m.shared)):
                if remap[c] == len(shared):
                    shared.append(m.shared[c])
            own.append(m.own)
            codes.append(np.where(m.codes >= 0, remap[m.codes], -1))
        return MetadataColumn(Concat(*own) if own else [],
                              np.concatenate(codes) if codes else np.zeros(0, np.int64),
                              shared)
    objs = [str(o) for o in col]
    sources = []
    dicts: list[Any] = []
    for o in objs:
        try:
            d = json.loads(o) if o else None
        except ValueError:
            d = None
        d = d if isinstance(d, dict) and d else None
        dicts.append(d)
        src = d.get("source") if d is not None else None
        sources.append(src if isinstance(src, str) else None)
    own_l, codes_l = list(objs), [-1] * len(objs)
    heads: dict[str, int] = {}  # each shared part once, however many runs open with it
    i = 0
    while i < len(objs):
        j = i + 1
        if sources[i] is not None:
            while j < len(objs) and sources[j] == sources[i]:
                j += 1
        got = _split_run(objs[i:j], dicts[i:j]) if j - i > 1 else None
        if got is not None:
            codes_l[i:j] = [heads.setdefault(got[0], len(heads))] * (j - i)
            own_l[i:j] = got[1]
        i = j
    return MetadataColumn(own_l, np.asarray(codes_l, np.int64), list(heads))


def release_pages(blob: Any, a: int, b: int) -> None:
    """Drop the pages of bytes a .. b of a memory-mapped blob from this process (they stay
    in the file and the page cache): copying a large blob leaves the process's resident
    memory where it was.  A no-op for blobs in memory."""
    mm = getattr(blob, "_mmap", None)
    if mm is None or getattr(blob, "offset", 1) != 0 or not hasattr(mm, "madvise"):
        return
    page = mmap.PAGESIZE
    a0 = a - a % page
    try:
        mm.madvise(mmap.MADV_DONTNEED, a0, b - a0)
    except (OSError, ValueError):  # a platform without it: only the residency differs
        pass


def pack(passages: Sequence[Any], propositions: Any, entities: Any, write: Any,
         metadata: MetadataColumn | None = None) -> np.ndarray:
    """Write the UTF-8 blob of an index's strings (in :data:`TABLES` order) through
    ``write(bytes)`` in chunks, and return the offsets (int64, one more than strings).
    ``metadata``: the passages' metadata split (:func:`split_metadata`), whose own parts
    and shared parts are written (the caller saves its codes); None: whole, no shared part.

    Ranges of a :class:`StringTable` (directly, or inside a :class:`Concat` or
    :class:`Take`) are copied as bytes, never decoded; other strings are encoded strictly
    (a lone surrogate raises ``ValueError`` naming the string: never invalid UTF-8)."""
    chunks: list[np.ndarray] = []   # string sizes, in order
    sizes: list[int] = []           # sizes of the strings encoded since the last chunk
    buf: list[Any] = []
    held = 0
    count = 0

    def put(s: str) -> None:
        nonlocal held, count
        try:
            b = s.encode("utf-8")
        except UnicodeEncodeError:  # never write invalid UTF-8 (a copy could not load it)
            from ._checks import check_text
            check_text(s, f"string {count} of the index ({s[:60]!r})")
            raise
        sizes.append(len(b))
        count += 1
        buf.append(b)
        held += len(b)
        if held >= 1 << 24:
            flush()

    def flush() -> None:
        nonlocal held
        if buf:
            write(b"".join(buf))
            buf.clear()
        held = 0
        if sizes:
            chunks.append(np.asarray(sizes, dtype=np.int64))
            sizes.clear()

    def raw(table: StringTable, a: int, b: int) -> None:
        """Strings a .. b - 1 of ``table``, copied as bytes."""
        nonlocal count
        if b <= a:
            return
        flush()
        off = table._off[table.lo + a:table.lo + b + 1]
        lo, hi = int(off[0]), int(off[-1])
        step = 1 << 24
        for x in range(lo, hi, step):
            write(table._mv[x:min(x + step, hi)])
            release_pages(table.blob, x, min(x + step, hi))
        chunks.append(np.diff(off).astype(np.int64))
        count += b - a

    def put_all(col) -> None:
        if isinstance(col, StringTable):
            raw(col, 0, len(col))
        elif isinstance(col, Concat):
            for part in col.parts:
                put_all(part)
        elif isinstance(col, Take) and isinstance(col.base, StringTable):
            pos = col.positions
            if len(pos):  # runs of consecutive positions, one copy each
                breaks = np.flatnonzero(np.diff(pos) != 1) + 1
                for r in np.split(pos, breaks):
                    raw(col.base, int(r[0]), int(r[-1]) + 1)
        else:
            for s in col:
                put(s)

    for name in ("ids", "titles", "texts"):
        put_all(column(passages, name))
    put_all(column(passages, "metadata") if metadata is None else metadata.own)
    put_all(propositions)
    put_all(entities)
    if metadata is not None:
        put_all(metadata.shared)
    flush()
    allsizes = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    offsets = np.zeros(len(allsizes) + 1, dtype=np.int64)
    np.cumsum(allsizes, out=offsets[1:])
    return offsets
