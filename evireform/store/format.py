"""The on-disk index format: file names, versions, the array specs, the manifest and the
stamp, and writing an index (:func:`save_index`, through :mod:`evireform.store.atomic`);
what a save refuses (:func:`check_target`)."""
from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

import datetime as _dt
import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import __version__
from ..strings import column, pack, split_metadata
from .._checks import loads as _json_loads
from ..kernels import EntityGraph, PassageMap
from ..kernels.graph import array_fields
from ..search_data import SearchStructures
from .atomic import UnsafeTargetError, _fsync, write_dir_atomically

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from ..types import IndexData as PropositionIndex  # a protocol: no circle
    from ..types import StrPath


FORMAT = "evireform-index"


FORMAT_VERSION = 5


#: versions this code reads: 1 (JSON texts, no passage metadata), 2 (JSON texts), 3 (the
#: strings blob), 4 (the metadata a document's passages share held once) and 5 (the lexical
#: vocabulary memory-mapped: :data:`VOCAB_FILES` instead of :data:`LEXICAL_TERMS`)
READ_VERSIONS = (1, 2, 3, 4, 5)


MANIFEST = "manifest.json"


JSONS = ("passages.json", "propositions.json", "entities.json")


STRINGS_FILE, OFFSETS_FILE = "strings.utf8", "string_offsets.npy"


#: int64, one per passage: which shared metadata string opens its metadata (-1: none;
#: :class:`~evireform.strings.MetadataColumn`)
SHARED_METADATA_FILE = "metadata_shared.npy"


STAMP = "verified.json"
#: a service's updates since the last save (:mod:`evireform.store.journal`)
JOURNAL = "journal.evj"


#: int8 codes of the embeddings and their per-dimension scale (PropositionIndex.quantize)
CODES_FILE, SCALE_FILE = "codes.npy", "code_scale.npy"
#: each passage embedded whole (PropositionIndex.passage_embeddings), when the index has them
PASSAGE_EMBEDDINGS_FILE = "passage_embeddings.npy"


TIERS = ("auto", "fast", "checksums", "full")


HNSW_FILE = "hnsw.bin"


#: HNSW label -> proposition id after deletions (only then)
HNSW_IDS_FILE = "hnsw_ids.npy"


#: the lexical index (evireform.engine.lexical): its vocabulary (the terms' UTF-8 bytes in
#: id order, their offsets, and the term ids in byte order: a
#: evireform.kernels.lexical.SortedTerms, memory-mapped and searched by binary search),
#: and the term counts of the propositions and of the passages as CSR rows
VOCAB_BLOB, VOCAB_OFFSETS, VOCAB_ORDER = ("lexical_vocab.utf8", "lexical_vocab_offsets.npy",
                                          "lexical_vocab_order.npy")
VOCAB_FILES = (VOCAB_BLOB, VOCAB_OFFSETS, VOCAB_ORDER)
#: the vocabulary as format versions 3 and 4 stored it: a JSON list in id order (read, never
#: written: opening it builds a dict of every term)
LEXICAL_TERMS = "lexical_terms.json"
LEXICAL_ARRAYS = {f"lexical_{level}_{part}.npy": (level, part, dtype)
                  for level in ("props", "passages")
                  for part, dtype in (("indptr", np.int64), ("terms", np.int32),
                                      ("counts", np.float32))}
LEXICAL_FILES = (*VOCAB_FILES, *LEXICAL_ARRAYS)

#: the raw counts the extractor's corpus statistics come from (JSON; an update adds its
#: passages' counts to them instead of reading every passage again:
#: evireform.extract.base._FittedExtractor.counts); derived data, optional
EXTRACT_COUNTS = "extract_counts.json"


@dataclass(frozen=True)
class CountsFile:
    """A loaded index's :data:`EXTRACT_COUNTS`, read when an update needs it: its bytes
    are taken only while they are the ones the index was loaded with (the sha256 its
    manifest gave), so a directory replaced since (a later update) never lends its
    counts to an older generation."""

    path: Path
    sha256: str

    def data(self) -> bytes | None:
        try:
            raw = self.path.read_bytes()
        except OSError:
            return None
        return raw if hashlib.sha256(raw).hexdigest() == self.sha256 else None

    def read(self) -> Any:
        """The counts (JSON data), or None when the file changed or does not parse."""
        raw = self.data()
        if raw is None:
            return None
        try:
            return _json_loads(raw.decode("utf-8"), str(self.path))
        except (ValueError, UnicodeDecodeError):
            return None


class IndexFormatError(ValueError):
    """A saved index directory is missing, truncated, edited, inconsistent or of another format
    version."""


@dataclass(frozen=True)
class ArraySpec:
    """One stored array: which structure holds it, its file, dtype and shape symbols."""

    owner: str          # "graph", "pmap" or "index"
    name: str
    dtype: np.dtype
    shape: tuple[str, ...]

    @property
    def file(self) -> str:
        return f"{self.name}.npy"


def array_specs() -> tuple[ArraySpec, ...]:
    """Every stored array, derived from the dataclass fields (plus the embeddings)."""
    out = [ArraySpec("graph", n, d, s) for n, d, s in array_fields(EntityGraph)]
    out += [ArraySpec("pmap", n, d, s) for n, d, s in array_fields(PassageMap)]
    out.append(ArraySpec("index", "embeddings", np.dtype(np.float32), ("M", "dim")))
    return tuple(out)


SPECS = array_specs()


FORMAT_FILES = frozenset([s.file for s in SPECS] + list(JSONS) +
                         [STRINGS_FILE, OFFSETS_FILE, SHARED_METADATA_FILE, HNSW_FILE,
                          HNSW_IDS_FILE, CODES_FILE,
                          SCALE_FILE, *LEXICAL_FILES, LEXICAL_TERMS, EXTRACT_COUNTS,
                          PASSAGE_EMBEDDINGS_FILE])


OPTIONAL_FILES = frozenset([HNSW_FILE, HNSW_IDS_FILE, CODES_FILE, SCALE_FILE, *LEXICAL_FILES,
                            LEXICAL_TERMS, EXTRACT_COUNTS, PASSAGE_EMBEDDINGS_FILE])


def _required_files(version: int) -> frozenset[Any]:
    texts = set(JSONS) if version in (1, 2) else {STRINGS_FILE, OFFSETS_FILE}
    if version >= 4:
        texts.add(SHARED_METADATA_FILE)
    return frozenset(s.file for s in SPECS) | texts


def file_sha256(path: StrPath) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def disk_bytes(path: StrPath) -> int:
    """Bytes of the files directly inside ``path``."""
    return sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file())


# =========================================================================== saving
def _write_json(path: Path, obj, indent=None) -> None:
    # json.dumps, not json.dump: dump streams through the pure-Python encoder, dumps
    # (without indent) through the C one, ten times as fast on the extractor's counts
    # (the same bytes)
    text = json.dumps(obj, ensure_ascii=False, indent=indent)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


#: how the store gets an index's search structures to save (the engine's
#: :func:`~evireform.engine.structures.structures_of` with its lexical index counted):
#: handed over by :func:`provide_structures` when the engine is imported
_PROVIDER: list[Any] = []


def provide_structures(fn: Any) -> None:
    """Tell the store how to get an index's search structures (a function of the index
    returning a :class:`~evireform.search_data.SearchStructures`): the engine does, so the
    store saves them without importing it."""
    _PROVIDER[:] = [fn]


def save_index(idx: PropositionIndex, path: StrPath, *, overwrite: bool = False) -> Path:
    """Write ``idx`` (a :class:`~evireform.index.PropositionIndex`) as a directory at ``path``
    (:func:`write_dir_atomically`).  See the module docstring for what is refused.  Returns
    the absolute path."""
    path = check_target(path, overwrite=overwrite)
    return write_dir_atomically(path, lambda tmp: _write_files(idx, tmp),
                                check=lambda: check_target(path, overwrite=overwrite),
                                looks_like=looks_like_index)


def index_arrays(idx: PropositionIndex, joined: bool = True) -> dict[str, Any]:
    """Every stored array of ``idx`` by name (``joined=False``: an added index's
    embeddings as its :class:`~evireform.index.AppendedRows`, when not yet read whole)."""
    holders = {"graph": idx.graph, "pmap": idx.pmap, "index": idx}
    out = {s.name: np.asarray(getattr(holders[s.owner], s.name)) for s in SPECS
           if joined or s.name != "embeddings"}
    if not joined:
        out["embeddings"] = idx.stored_embeddings()
    return out


def remember_file(a: np.memmap, f: Path) -> None:
    """Note on a memory-mapped array which file it maps (device, inode, size, modification
    time, data offset): :func:`_copied_prefix` copies its bytes only while that file is
    still the one under its name."""
    try:
        st = os.stat(f)
        a._evireform_file = (str(f), st.st_dev, st.st_ino, st.st_size,  # type: ignore[attr-defined]
                             st.st_mtime_ns, int(a.offset))
    except (OSError, AttributeError):
        pass


def _copied_prefix(fh: Any, prefix: Any, arr: np.ndarray) -> int:
    """Copy into ``fh`` (positioned after the header) the data bytes of ``prefix``, the
    first rows of ``arr``, from the file ``prefix`` maps, in the kernel
    (``os.copy_file_range``: no pass through this process's memory); the number of rows
    copied, 0 when ``prefix`` maps no file, the file under its name is no longer the one
    mapped, or the kernel cannot copy (the caller then writes the rows itself)."""
    rec = getattr(prefix, "_evireform_file", None)
    copy = getattr(os, "copy_file_range", None)
    if rec is None or copy is None or prefix.dtype != arr.dtype \
            or prefix.ndim != len(arr.shape) or tuple(prefix.shape[1:]) != tuple(arr.shape[1:]) \
            or len(prefix) > len(arr) or not prefix.flags.c_contiguous:
        return 0
    name, dev, ino, size, mtime, offset = rec
    n = int(prefix.nbytes)
    start = fh.tell()
    try:
        src = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return 0
    try:
        st = os.fstat(src)
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != (dev, ino, size, mtime) \
                or offset + n > st.st_size:
            return 0
        fh.flush()
        dst, done = fh.fileno(), 0
        while done < n:
            got = copy(src, dst, n - done, offset + done, start + done)
            if got <= 0:
                raise OSError("copy_file_range copied nothing")
            done += got
    except OSError:
        fh.seek(start)
        fh.truncate()
        return 0
    finally:
        os.close(src)
    fh.seek(start + n)
    # the two ends compared with the rows in memory: a file that is not these rows is
    # caught here (a changed one has another inode or modification time already)
    last = len(prefix) - 1
    if n and not (np.array_equal(_rows_at(fh, start, arr, 0), _rows(arr, 0, 1))
                  and np.array_equal(_rows_at(fh, start, arr, last),
                                     _rows(arr, last, last + 1))):
        fh.seek(start)
        fh.truncate()
        return 0
    return len(prefix)


def _rows_at(fh: Any, start: int, arr: Any, i: int) -> np.ndarray:
    row = int(np.dtype(arr.dtype).itemsize * int(np.prod(arr.shape[1:])))
    fh.flush()
    raw = os.pread(fh.fileno(), row, start + i * row)
    return np.frombuffer(raw, arr.dtype).reshape((1, *arr.shape[1:]))


def _rows(arr: Any, lo: int, hi: int) -> np.ndarray:
    return arr.rows(lo, hi) if hasattr(arr, "rows") else arr[lo:hi]


def save_array(path: Path, arr: Any, prefix: Any = None) -> None:
    """``np.save(path, arr)`` (the same bytes); with ``prefix``, an array holding the first
    rows of ``arr`` mapped from a file, those rows are copied from that file by the kernel
    and only the rest written from memory (an add saves work as large as the add).
    ``arr`` may be an added index's :class:`~evireform.index.AppendedRows`: its parts are
    written one after the other, never joined."""
    parts = hasattr(arr, "rows") and hasattr(arr, "head")
    if not parts:
        arr = np.ascontiguousarray(arr)
        if prefix is None or arr.ndim == 0:
            np.save(path, arr, allow_pickle=False)
            return
    with open(path, "w+b") as fh:  # read too: the copied rows are compared
        np.lib.format.write_array_header_1_0(fh, {
            "descr": np.lib.format.dtype_to_descr(np.dtype(arr.dtype)),
            "fortran_order": False, "shape": tuple(arr.shape)})
        k = _copied_prefix(fh, prefix, arr) if prefix is not None else 0
        if parts:
            n = len(arr.head)
            for lo in range(k, n, 1 << 16):  # what was not copied, a block at a time
                fh.write(np.ascontiguousarray(arr.head[lo:lo + (1 << 16)],
                                              dtype=arr.dtype).reshape(-1).view(np.uint8))
            fh.write(np.ascontiguousarray(arr.tail[max(0, k - n):], dtype=arr.dtype)
                     .reshape(-1).view(np.uint8))
        else:
            fh.write(arr[k:].reshape(-1).view(np.uint8))


def _write_files(idx: PropositionIndex, tmp: Path) -> None:
    prefixes = {"embeddings": getattr(idx, "embedding_prefix", None)}
    for name, arr in index_arrays(idx, joined=False).items():
        save_array(tmp / f"{name}.npy", arr, prefixes.get(name))
    # what the passages of a document share is written once (their own parts copied as
    # bytes from a loaded index's blob, a new document's split from its passages)
    metadata = split_metadata(column(idx.passages, "metadata"))
    with open(tmp / STRINGS_FILE, "wb") as fh:
        offsets = pack(idx.passages, idx.prop_texts, idx.entity_names, fh.write, metadata)
    np.save(tmp / OFFSETS_FILE, offsets, allow_pickle=False)
    np.save(tmp / SHARED_METADATA_FILE, np.ascontiguousarray(metadata.codes, dtype=np.int64),
            allow_pickle=False)
    # the engine's structures, handed to the store (the engine registers how to make them:
    # the store never imports it); an index nobody searched gets them made now, its
    # lexical index counted, so that a loaded index searches at once
    s = _PROVIDER[0](idx) if _PROVIDER else idx.search_state
    lex = getattr(s, "lexical", None)
    if lex is not None:
        vocab = lex.terms.sorted_terms()
        with open(tmp / VOCAB_BLOB, "wb") as fh:
            fh.write(memoryview(np.ascontiguousarray(vocab.blob)))
        np.save(tmp / VOCAB_OFFSETS, vocab.offsets, allow_pickle=False)
        np.save(tmp / VOCAB_ORDER, vocab.order, allow_pickle=False)
        for name, (level, part, dtype) in LEXICAL_ARRAYS.items():
            np.save(tmp / name, np.ascontiguousarray(getattr(lex.counts(level), part),
                                                     dtype=dtype), allow_pickle=False)
    counts = getattr(idx, "extract_counts", None)
    if isinstance(counts, CountsFile):  # a loaded index's, unchanged: its bytes copied
        raw = counts.data()
        if raw is not None:
            (tmp / EXTRACT_COUNTS).write_bytes(raw)
    elif counts:
        _write_json(tmp / EXTRACT_COUNTS, counts)
    pe = getattr(idx, "passage_embeddings", None)
    if pe is not None:
        np.save(tmp / PASSAGE_EMBEDDINGS_FILE, np.ascontiguousarray(pe, dtype=np.float32),
                allow_pickle=False)
    if s is None:
        s = SearchStructures()
    if s.codes is not None:
        np.save(tmp / CODES_FILE, np.ascontiguousarray(s.codes, dtype=np.int8),
                allow_pickle=False)
        np.save(tmp / SCALE_FILE, np.ascontiguousarray(s.code_scale, dtype=np.float32),
                allow_pickle=False)
    if s.hnsw is not None:
        write_hnsw(s.hnsw, tmp / HNSW_FILE)
        if s.hnsw_ids is not None:
            np.save(tmp / HNSW_IDS_FILE, np.ascontiguousarray(s.hnsw_ids, dtype=np.int64),
                    allow_pickle=False)
    files = {}
    for f in sorted(tmp.iterdir()):
        files[f.name] = {"sha256": file_sha256(f), "bytes": f.stat().st_size}
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "evireform_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "embedder": idx.embedder_name,
        "dim": idx.dim,
        "counts": {"passages": idx.n_passages, "propositions": idx.n_props,
                   "entities": idx.n_entities, "incidence_nnz": idx.graph.nnz,
                   "shared_metadata": len(metadata.shared)},
        "meta": idx.meta,
        "files": files,
    }
    if lex is not None:  # the rules its counts were made by (read back by _load_lexical)
        from ..extract.tokens import LEXICAL_TOKENIZER
        manifest["lexical_tokenizer"] = LEXICAL_TOKENIZER
    # the manifest is written last and renamed into place: a directory with a manifest is whole
    _write_json(tmp / (MANIFEST + ".part"), manifest, indent=1)
    _fsync(tmp / (MANIFEST + ".part"))
    os.replace(tmp / (MANIFEST + ".part"), tmp / MANIFEST)
    write_stamp(tmp, list(files), "save")  # renaming the directory keeps inodes and mtimes


def _fail(path: StrPath, msg: str) -> None:
    raise IndexFormatError(f"{path}: {msg}")


def _digest(f: Path, size: int) -> str:
    """blake2b of the first and last 64 KiB and the size: binds a file's content cheaply."""
    h = hashlib.blake2b(str(size).encode(), digest_size=16)
    with open(f, "rb") as fh:
        h.update(fh.read(1 << 16))
        if size > 1 << 17:
            fh.seek(size - (1 << 16))
        h.update(fh.read(1 << 16))
    return h.hexdigest()


def _seen(f: Path) -> list[Any]:
    st = os.stat(f)
    return [st.st_size, st.st_mtime_ns, st.st_ino, _digest(f, st.st_size)]


def write_stamp(path: Path, names: Sequence[str], tier: str) -> bool:
    """Write ``verified.json`` binding the files ``names`` and the manifest as they are now
    (:func:`stamp_matches` compares); False when the directory is not writable."""
    try:
        stamp = {"format": FORMAT, "verified": tier,
                 "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                 "files": {n: _seen(path / n) for n in sorted({MANIFEST, *names})}}
        tmp = path / (STAMP + f".{uuid.uuid4().hex}.part")
        _write_json(tmp, stamp)
        os.replace(tmp, path / STAMP)
        return True
    except OSError:
        return False


def stamp_matches(path: Path, names: Sequence[str]) -> bool:
    """True when ``verified.json`` names exactly the manifest and ``names`` and each still
    has the size, modification time, inode and edge digest it had when verified."""
    try:
        stamp = _json_loads((path / STAMP).read_text(encoding="utf-8"))
        files = stamp["files"]
        if not isinstance(files, dict) or set(files) != {MANIFEST, *names}:
            return False
        return all(files[n] == _seen(path / n) for n in files)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def looks_like_index(path: Path) -> bool:
    try:
        man = _json_loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(man, dict) and man.get("format") == FORMAT


def index_files(path: Path) -> set[str] | None:
    """The files an evireform index directory at ``path`` consists of, or None if it is not one."""
    try:
        man = _json_loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(man, dict) or man.get("format") != FORMAT \
            or not isinstance(man.get("files"), dict):
        return None
    return {MANIFEST, STAMP, JOURNAL, *map(str, man["files"])}


def check_target(path: StrPath, *, overwrite: bool = False) -> Path:
    """Raise :class:`UnsafeTargetError` unless an index may be written at ``path``.

    Allowed: a path that does not exist, an empty directory, or an evireform index directory
    holding nothing but its own files.  ``overwrite=True`` also allows any other directory.
    Never allowed: a file, a symlink, the current directory or one of its parents.
    Returns the absolute target path.
    """
    path = Path(path).absolute()
    cwd = Path.cwd().resolve()
    if path.is_symlink():
        raise UnsafeTargetError(f"{path} is a symbolic link; give the index directory itself")
    real = path.resolve()
    if real == cwd or real in cwd.parents:
        raise UnsafeTargetError(f"{path} is the current directory or one of its parents; an "
                                "index is written as a directory of its own, e.g. "
                                f"{path / 'my.idx'}")
    if not path.exists():
        return path
    if not path.is_dir():
        raise UnsafeTargetError(f"{path} exists and is a file, not an index directory; "
                                "choose a new directory name")
    entries = sorted(p.name for p in path.iterdir())
    if not entries:
        return path
    own = index_files(path)
    if own is not None and set(entries) <= own:
        return path
    if overwrite:
        return path
    why = ("is not an evireform index" if own is None else
           "is an evireform index that also holds other files")
    extra = [e for e in entries if own is None or e not in own]
    shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
    raise UnsafeTargetError(f"{path} {why} ({shown}); refusing to replace it. Choose a new "
                            "directory, or pass overwrite=True (CLI: --force) to replace it "
                            "and everything in it")


# --------------------------------------------------------------------------- hnsw.bin
#: hnswlib's saveIndex header: six size_t, int maxlevel, uint32 entry point, three size_t,
#: double mult, size_t ef_construction
_HNSW_HEADER = np.dtype([("offset_level0", "<u8"), ("max_elements", "<u8"), ("count", "<u8"),
                         ("size_per_element", "<u8"), ("label_offset", "<u8"),
                         ("offset_data", "<u8"), ("maxlevel", "<i4"), ("entry", "<u4"),
                         ("maxM", "<u8"), ("maxM0", "<u8"), ("M", "<u8"), ("mult", "<f8"),
                         ("ef_construction", "<u8")])


def _library_writes_lengths() -> bool:
    """True when the installed ``hnswlib`` module is Chroma's fork (its files carry the
    lengths block)."""
    import hnswlib
    return hasattr(hnswlib.Index, "persist_dirty")


def write_hnsw(h: Any, f: StrPath) -> None:
    """Save the graph ``h`` to ``f`` (``save_index``), the fork's lengths block zeroed (an
    inner-product graph never fills it: the bytes would be the heap's)."""
    f = Path(f)
    h.save_index(str(f))
    if not _library_writes_lengths():
        return
    count = int(h.element_count)
    with open(f, "r+b") as fh:
        hd = np.frombuffer(fh.read(_HNSW_HEADER.itemsize), _HNSW_HEADER)[0]
        fh.seek(_HNSW_HEADER.itemsize + count * int(hd["size_per_element"]))
        fh.write(bytes(4 * count))
