"""The two-tier verified load (:func:`load_index`): the fast tier (what the kernels and
readers trust) and the full tier (checksums, recomputed arrays, norms, texts), chosen by the
stamp; the legacy JSON texts of versions 1-2; the embeddings alone (:func:`load_embeddings`)."""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

import codecs
import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import __version__
from ..strings import TABLES, MetadataColumn, PassageTable, StringTable, release_pages
from ..types import Passage
from .._checks import loads as _json_loads
from ..kernels import EntityGraph, PassageMap
from .atomic import _dir_lock, _siblings, recover
from .format import (CODES_FILE, PASSAGE_EMBEDDINGS_FILE, EXTRACT_COUNTS, CountsFile, LEXICAL_ARRAYS, LEXICAL_FILES, LEXICAL_TERMS, VOCAB_BLOB,
                     VOCAB_FILES, VOCAB_OFFSETS, VOCAB_ORDER, _fail, file_sha256, remember_file, FORMAT, FORMAT_FILES, HNSW_FILE,
                     HNSW_IDS_FILE, IndexFormatError, looks_like_index, MANIFEST, OFFSETS_FILE,
                     READ_VERSIONS, _required_files, SCALE_FILE, SPECS, stamp_matches,
                     SHARED_METADATA_FILE, STRINGS_FILE, TIERS, write_stamp)
from .hnsw_file import _load_hnsw_ids, load_hnsw

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from ..types import StrPath


# =========================================================================== loading
@dataclass
class Loaded:
    """What :func:`load_index` read and checked, ready to become a PropositionIndex."""

    manifest: dict[str, Any]
    graph: EntityGraph
    pmap: PassageMap
    embeddings: np.ndarray
    passages: list[Any]            # Passage objects, or a PassageTable (version 3)
    propositions: list[str]
    entities: list[str]
    hnsw: object | None
    hnsw_ids: np.ndarray | None = None
    codes: np.ndarray | None = None
    code_scale: np.ndarray | None = None
    #: the lexical index (:class:`evireform.search_data.LexicalIndex`), or None
    lexical: Any = None
    #: the extractor's raw counts (:class:`~evireform.store.format.CountsFile`, read when an
    #: update needs them), or None
    extract_counts: Any = None
    #: each passage's embedding (float32 unit rows), or None
    passage_embeddings: np.ndarray | None = None

    @property
    def search(self) -> Any:
        """The search structures the directory holds, as the engine keeps them
        (:class:`evireform.engine.structures.SearchStructures`)."""
        from ..search_data import SearchStructures
        return SearchStructures(hnsw=self.hnsw, hnsw_ids=self.hnsw_ids, codes=self.codes,
                                code_scale=self.code_scale, lexical=self.lexical)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_manifest(mpath: Path, man) -> tuple[dict, dict[str, Any]]:
    """Types of every manifest field the loader reads; returns (counts, files)."""
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        _fail(mpath, "not an evireform index manifest")
    if man.get("format_version") not in READ_VERSIONS:
        _fail(mpath, f"format version {man.get('format_version')!r}, this evireform "
                     f"({__version__}) reads versions {READ_VERSIONS}; rebuild the index")
    if not isinstance(man.get("embedder", ""), str):
        _fail(mpath, f"'embedder' must be a string; got {man.get('embedder')!r:.80}")
    if not _is_int(man.get("dim")) or man["dim"] < 1:
        _fail(mpath, f"'dim' must be a positive integer; got {man.get('dim')!r:.80}")
    if not isinstance(man.get("meta", {}), dict):
        _fail(mpath, f"'meta' must be an object; got {type(man.get('meta')).__name__}")
    counts = man.get("counts")
    if not isinstance(counts, dict):
        _fail(mpath, f"'counts' must be an object; got {type(counts).__name__}")
    keys = ("passages", "propositions", "entities", "incidence_nnz") + \
        (("shared_metadata",) if man["format_version"] >= 4 else ())
    for key in keys:
        v = counts.get(key)
        if not _is_int(v) or v < 0:
            _fail(mpath, f"counts.{key} must be a non-negative integer; got {v!r:.80}")
    files = man.get("files")
    if not isinstance(files, dict):
        _fail(mpath, f"'files' must be an object; got {type(files).__name__}")
    for name, info in files.items():
        if name not in FORMAT_FILES:
            _fail(mpath, f"lists {name!r:.120}, which is not a file of the index format "
                         "(file names are fixed; no paths)")
        if not isinstance(info, dict) or not isinstance(info.get("sha256"), str) \
                or not _is_int(info.get("bytes")):
            _fail(mpath, f"entry for {name} must be {{'sha256': str, 'bytes': int}}")
    for name in sorted(_required_files(man["format_version"])):
        if name not in files:
            _fail(mpath, f"does not list {name}")
    return counts, files


def _check_files(path: Path, files: dict[str, Any], verify: bool, streamed=()) -> None:
    """Every listed file present, regular and of its manifest size; with ``verify`` its
    sha256 too, except the ``streamed`` ones (checked while their values are read)."""
    for name, info in files.items():
        f = path / name
        if f.is_symlink() or not f.is_file():
            _fail(f, "missing" if not f.exists() and not f.is_symlink()
                  else "not a regular file")
        size = f.stat().st_size
        if size != info["bytes"]:
            _fail(f, f"{size} bytes, the manifest says {info['bytes']} (truncated or edited)")
        if verify and name not in streamed and file_sha256(f) != info["sha256"]:
            _fail(f, "sha256 does not match the manifest (edited or corrupt)")


def _load_arrays(path: Path, sizes: dict[str, Any], mmap: bool) -> dict[str, np.ndarray]:
    arr = {}
    for s in SPECS:
        f = path / s.file
        try:
            a = np.load(f, allow_pickle=False,
                        mmap_mode="r" if mmap else None)
        except Exception as exc:
            _fail(f, f"unreadable ({exc})")
        if not isinstance(a, np.ndarray):
            _fail(f, "not a single array")
        if isinstance(a, np.memmap):  # which file it maps: a save may copy it in the kernel
            remember_file(a, f)
        if a.dtype != s.dtype:
            _fail(f, f"dtype {a.dtype}, the format stores {s.dtype}")
        want = tuple(sizes[x] for x in s.shape)
        if a.shape != want:
            _fail(f, f"shape {a.shape}, the manifest counts give {want} "
                     f"({', '.join(s.shape)})")
        arr[s.name] = a
    return arr


def _check_ptr(f: Path, ptr: np.ndarray, nnz: int) -> None:
    if len(ptr) and (ptr[0] != 0 or ptr[-1] != nnz):
        _fail(f, f"row pointers must start at 0 and end at nnz = {nnz}; got {ptr[0]} .. {ptr[-1]}")
    if len(ptr) > 1 and np.any(ptr[1:] < ptr[:-1]):
        i = int(np.argmax(ptr[1:] < ptr[:-1]))
        _fail(f, f"row pointers must not decrease; entry {i + 1} is {ptr[i + 1]} after {ptr[i]}")


def _check_range(f: Path, a: np.ndarray, hi: int, what: str) -> None:
    if len(a) == 0:
        return
    lo_v, hi_v = int(a.min()), int(a.max())
    if lo_v < 0 or hi_v >= hi:
        bad = lo_v if lo_v < 0 else hi_v
        i = int(np.argmax(a == bad))
        _fail(f, f"entry {i} is {bad}, outside the {what} range [0, {hi})")


#: stored embedding rows are unit vectors: a row whose L2 norm is further than this from 1 is
#: refused at load (a scaled row would outrank every other passage)
NORM_TOLERANCE = 1e-3


class _RawHash:
    """sha256 of a memory-mapped ``.npy`` file fed as its array's rows are read (header
    first), so checking the values and the checksum reads the file once."""

    def __init__(self, f: Path, arr) -> None:
        self.raw = np.memmap(f, dtype=np.uint8, mode="r")
        self.off: int = int(arr.offset)
        self.row = int(arr.strides[0]) if arr.ndim else 0
        self.h = hashlib.sha256(self.raw[:self.off])
        self.done: int = 0

    def upto(self, hi: int) -> None:
        if hi > self.done:
            self.h.update(self.raw[self.off + self.done * self.row:self.off + hi * self.row])
            self.done = hi

    def hexdigest(self) -> str:
        self.h.update(self.raw[self.off + self.done * self.row:])
        self.done = -1
        return self.h.hexdigest()


def _hashable(arr) -> bool:
    return isinstance(arr, np.memmap) and arr.ndim == 2 and arr.flags.c_contiguous


def _check_unit_rows(f: Path, emb, codes: ArrayLike | None=None, scale: ArrayLike | None=None, fc: Path | None = None,
                     sha: dict[str, Any] | None = None) -> None:
    """Every row finite and of unit L2 norm within :data:`NORM_TOLERANCE`, and with
    ``codes``, every int8 code within half a scale step of its value (what makes the int8
    search exact): one pass in blocks of 64 MiB, so a memory-mapped file is streamed once,
    not copied.  ``sha`` ({file: expected sha256}) checks the files' checksums in the same
    pass; a checksum mismatch is reported before a value problem, as the separate checks
    would."""
    step = max(1, (64 << 20) // max(1, 4 * (emb.shape[1] if emb.ndim == 2 else 1)))
    half = None if scale is None else scale * np.float32(0.5) + np.float32(1e-6)
    hashes = {}
    for path, arr in ((f, emb), (fc, codes)):
        if sha and path is not None and path.name in sha:
            hashes[path] = _RawHash(path, arr)

    def checksums() -> None:
        for path, h in hashes.items():
            if h.hexdigest() != sha[path.name]:
                _fail(path, "sha256 does not match the manifest (edited or corrupt)")

    def fail(path: StrPath, msg) -> None:
        checksums()  # an edited file is named as such first
        _fail(path, msg)

    for lo in range(0, len(emb), step):
        hi = min(len(emb), lo + step)
        for h in hashes.values():
            h.upto(hi)
        block = np.asarray(emb[lo:hi], dtype=np.float32)
        finite = np.isfinite(block).all(axis=1)
        if not finite.all():
            fail(f, f"row {lo + int(np.argmin(finite))} holds NaN or inf")
        norm = np.sqrt(np.einsum("ij,ij->i", block, block, dtype=np.float64))
        bad = np.abs(norm - 1.0) > NORM_TOLERANCE
        if bad.any():
            i = int(np.argmax(bad))
            fail(f, f"row {lo + i} has L2 norm {norm[i]:.6g}; stored embeddings are unit "
                    f"vectors (tolerance {NORM_TOLERANCE:g})")
        if codes is not None:
            err = np.abs(block - np.asarray(codes[lo:hi], np.float32) * scale)
            wrong = (err > half).any(axis=1)
            if wrong.any():
                fail(fc, f"row {lo + int(np.argmax(wrong))} is not the int8 code of its "
                         "embedding (edited or corrupt)")
    checksums()


def _check_arrays(path: Path, arr: dict[str, Any], sizes: dict[str, Any],
                  full: bool = True) -> tuple[EntityGraph, PassageMap]:
    M, E, N = sizes["M"], sizes["E"], sizes["N"]
    _check_ptr(path / "a_indptr.npy", arr["a_indptr"], sizes["nnz"])
    _check_ptr(path / "at_indptr.npy", arr["at_indptr"], sizes["nnz"])
    _check_range(path / "a_indices.npy", arr["a_indices"], E, "entity id")
    _check_range(path / "at_indices.npy", arr["at_indices"], M, "proposition id")
    _check_range(path / "owner.npy", arr["owner"], N, "passage")
    if not full:  # the values the kernels only read as numbers are trusted in this tier
        graph = EntityGraph(**{s.name: arr[s.name] for s in SPECS if s.owner == "graph"})
        pmap = PassageMap(**{s.name: arr[s.name] for s in SPECS if s.owner == "pmap"})
        return graph, pmap
    # (the embeddings' values are checked later, in one pass with their checksum and the
    # int8 codes: _check_unit_rows from _load_once)
    # the degree terms and the transpose are derived data: they must equal a recomputation,
    # or propagation would silently use edited values
    want_g = EntityGraph.from_csr(arr["a_indptr"], arr["a_indices"], E)
    want_p = PassageMap.from_owner(arr["owner"], N)
    holders = {"graph": want_g, "pmap": want_p}
    for s in SPECS:
        if s.owner == "index":
            continue
        if not np.array_equal(getattr(holders[s.owner], s.name), arr[s.name]):
            what = ("rows not sorted and unique" if s.name == "a_indices" else
                    "does not agree with the incidence it is derived from")
            _fail(path / s.file, f"{what} (edited or corrupt)")
    graph = EntityGraph(**{s.name: arr[s.name] for s in SPECS if s.owner == "graph"})
    pmap = PassageMap(**{s.name: arr[s.name] for s in SPECS if s.owner == "pmap"})
    return graph, pmap


def _load_json(path: Path, name: str, n: int, item_ok, what: str) -> list[Any]:
    f = path / name
    try:
        obj = _json_loads(f.read_text(encoding="utf-8"), str(f))
    except (ValueError, OSError) as exc:
        _fail(f, f"unreadable ({exc})")
    if not isinstance(obj, list):
        _fail(f, f"must be a JSON list; got {type(obj).__name__}")
    if n >= 0 and len(obj) != n:  # n < 0: any length
        _fail(f, f"{len(obj)} entries, the manifest counts give {n}")
    if not item_ok(obj):  # a whole-list check at C speed; the slow scan only names the entry
        for i, x in enumerate(obj):
            if not item_ok([x]):
                _fail(f, f"entry {i} is not {what}: {x!r:.80}")
    return obj


def _strings_ok(xs: list[Any]) -> bool:
    return set(map(type, xs)) <= {str}


def _passages_ok(xs: list[Any]) -> bool:
    if not set(map(type, xs)) <= {dict}:
        return False
    return all(_strings_ok([x.get(k) for x in xs]) for k in ("id", "title", "text")) \
        and all(isinstance(x.get("metadata", {}), dict) for x in xs)


def _identity(path: Path):
    """What a save changes at ``path`` and a load's stamp does not: the directory's device
    and inode and its manifest's inode, size and times (every save writes a new manifest).
    The directory's inode alone is not enough: a freed inode goes to the next new directory
    at once (ext4 here: 199 times in 200 mkdtemp/rmtree), so a read overlapping two saves
    could find the "same" directory and keep a mix of two versions."""
    try:
        d = os.stat(path)
        m = os.stat(path / MANIFEST)
    except OSError:
        return None
    return (d.st_dev, d.st_ino, m.st_ino, m.st_size, m.st_mtime_ns, m.st_ctime_ns)


def load_index(path: StrPath, *, mmap: bool = True, verify: Any="auto",
               stamp: bool = True, recount: bool = False) -> Loaded:
    """Read and check an index directory (see the module docstring); raises
    :class:`IndexFormatError` naming the file and the value for any problem.  ``verify``:
    ``"auto"`` (fast tier when the stamp matches, else full), ``"fast"``, ``"full"``, or
    ``"checksums"`` (auto, the fast tier with every file's sha256 checked too).
    ``stamp=False``: a full verification writes no stamp (a read that must leave the
    directory as it found it, e.g. an update that may yet be refused).  ``recount``: the
    lexical counts are also counted again from the texts and compared (whatever the tier;
    otherwise the full tier checks them by checksum and their values' ranges).

    A read sees one version: saves swap whole directories, so when the directory at ``path``
    is replaced while it is being read (a concurrent ``update``), the read starts again on the
    new one (a few times at most) instead of mixing the two."""
    path = Path(path)
    for attempt in range(5):
        last = attempt == 4
        # the last try holds the directory's lock, which a save holds while it swaps: when
        # saves keep overlapping the lock-free reads, this one sees a single version
        with _dir_lock(path) if last else contextlib.nullcontext():
            before = _identity(path)
            try:
                got = _load_once(path, mmap, verify, stamp, recount)
            except (IndexFormatError, OSError) as exc:
                if before is None or _identity(path) == before or last:
                    if isinstance(exc, IndexFormatError):
                        raise
                    raise IndexFormatError(f"{exc.filename or path}: cannot be read "
                                           f"({exc.strerror or exc})") from None
                continue
            if last or _identity(path) == before:
                return got
    return got


def _read_manifest(path: Path):
    """The checked manifest of the index at ``path``: ``(manifest, counts, files)``."""
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise IndexFormatError(f"{mpath}: missing; {path} is not an evireform index directory")
    try:
        man = _json_loads(mpath.read_text(encoding="utf-8"), str(mpath))
    except (ValueError, OSError) as exc:
        raise IndexFormatError(f"{mpath}: not valid JSON ({exc})") from None
    counts, files = _check_manifest(mpath, man)
    return man, counts, files


def _tier(verify: Any) -> str:
    if verify is True:
        return "full"
    if verify is False:
        return "fast"
    if verify not in TIERS:
        raise ValueError(f"verify must be one of {TIERS} (or True = 'full', False = 'fast'); "
                         f"got {verify!r}")
    return verify


def _check_strings(path: Path, sizes: dict[str, Any], full: bool):
    """The string blob (memory-mapped) and its offsets, checked; ``(blob, offsets)``."""
    f, fo = path / STRINGS_FILE, path / OFFSETS_FILE
    n = sum(sizes[c] for _, c in TABLES)
    try:
        off = np.load(fo, allow_pickle=False, mmap_mode="r")
    except Exception as exc:
        _fail(fo, f"unreadable ({exc})")
    if not isinstance(off, np.ndarray) or off.dtype != np.int64 or off.shape != (n + 1,):
        _fail(fo, f"must be int64 of shape ({n + 1},) (the manifest counts); got "
                  f"{getattr(off, 'dtype', None)} {getattr(off, 'shape', None)}")
    size = f.stat().st_size
    _check_ptr(fo, off, size)
    blob = np.memmap(f, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
    if full:
        _check_utf8(f, blob, off)
    return blob, off


#: the bytes of the strings blob one step of the full tier's UTF-8 check decodes (what bounds
#: its memory, whatever the strings' sizes)
UTF8_STEP = 16 << 20


def _check_utf8(f: Path, blob, off) -> None:
    """Every string of the blob valid UTF-8, in memory bounded by one 16 MiB step whatever
    the strings' sizes: the blob decodes as one stream, and no string starts with a
    continuation byte (so none ends inside a character)."""
    size = len(blob)
    starts = np.asarray(off[:-1])[np.asarray(off[:-1]) < size]
    cont = np.flatnonzero((np.asarray(blob[starts]) & 0xC0) == 0x80) if len(starts) else []
    if len(cont):
        _fail(f, f"not valid UTF-8 at byte {int(starts[cont[0]])} (a string starts inside a "
                 "character)")
    dec = codecs.getincrementaldecoder("utf-8")()
    step = UTF8_STEP
    for a in range(0, size, step):
        held = len(dec.getstate()[0])  # bytes of a character cut by the previous step
        try:
            dec.decode(bytes(blob[a:a + step]), final=a + step >= size)
        except UnicodeDecodeError as exc:
            _fail(f, f"not valid UTF-8 at byte {a - held + exc.start}")
        release_pages(blob, a, min(a + step, size))


def _string_tables(path: Path, sizes: dict[str, Any], full: bool, shared: bool = False):
    """(passages, propositions, entities) of a version-3 or 4 index as tables over the blob
    (``shared``: version 4, its passages' metadata a :class:`MetadataColumn`)."""
    blob, off = _check_strings(path, sizes, full)
    tables, lo = {}, 0
    for name, count in TABLES:
        tables[name] = StringTable(blob, off, lo, lo + sizes[count])
        lo += sizes[count]
    metadata: Any = tables["passage_metadata"]
    fc = path / SHARED_METADATA_FILE
    if shared:  # format version 4 (_check_manifest required the file)
        try:
            codes = np.load(fc, allow_pickle=False)
        except Exception as exc:
            _fail(fc, f"unreadable ({exc})")
        if not isinstance(codes, np.ndarray) or codes.dtype != np.int64 \
                or codes.shape != (sizes["N"],):
            _fail(fc, f"must be int64 of shape ({sizes['N']},) (the manifest counts); got "
                      f"{getattr(codes, 'dtype', None)} {getattr(codes, 'shape', None)}")
        if len(codes) and (codes.min() < -1 or codes.max() >= sizes["S"]):
            _fail(fc, f"holds a code outside -1 .. {sizes['S'] - 1} (the shared metadata "
                      "strings the manifest counts)")
        metadata = MetadataColumn(tables["passage_metadata"], codes, tables["shared_metadata"])
    passages = PassageTable(tables["passage_ids"], tables["passage_titles"],
                            tables["passage_texts"], metadata)
    if full:
        f = path / STRINGS_FILE
        ids = list(tables["passage_ids"])
        if len(set(ids)) != len(ids):
            _fail(f, "passage ids are not unique")
        for i, raw in enumerate(tables["shared_metadata"]):
            if not _json_object(raw, empty=False):
                _fail(f, f"shared metadata {i} is not a JSON object: {raw!r:.80}")
        for i, raw in enumerate(metadata):
            if raw and not _json_object(raw):
                _fail(f, f"passage {i}'s metadata is not a JSON object: {raw!r:.80}")
    return passages, tables["propositions"], tables["entities"]


def _json_object(raw: str, empty: bool = True) -> bool:
    """Whether ``raw`` is a JSON object (with ``empty=False``, one holding a key)."""
    try:
        got = json.loads(raw)
    except ValueError:
        return False
    return isinstance(got, dict) and (empty or bool(got))


def _json_tables(path: Path, sizes: dict[str, Any]):
    """(passages, propositions, entities) of a version-1/2 index, from its JSON files."""
    raw = _load_json(path, "passages.json", sizes["N"], _passages_ok,
                     "an object with string id, title and text (and an object metadata)")
    ids = [p["id"] for p in raw]
    if len(set(ids)) != len(ids):
        _fail(path / "passages.json", "passage ids are not unique")
    passages = [Passage(p["id"], p["title"], p["text"], p.get("metadata") or {}) for p in raw]
    props = _load_json(path, "propositions.json", sizes["M"], _strings_ok, "a string")
    ents = _load_json(path, "entities.json", sizes["E"], _strings_ok, "a string")
    return passages, props, ents


def _load_once(path: Path, mmap: bool, verify: Any, stamp: bool = True,
               recount: bool = False) -> Loaded:
    if not path.exists() and path.parent.is_dir() and _siblings(path, "old"):
        with _dir_lock(path):  # a save killed between its renames: put the index back
            recover(path, looks_like_index)
    man, counts, files = _read_manifest(path)
    tier = _tier(verify)
    _check_files(path, files, False)  # present, regular, the size the manifest gives
    sums = tier == "checksums"  # auto, with every file's sha256 checked when fast
    if tier in ("auto", "checksums"):
        tier = "fast" if stamp_matches(path, files) else "full"
    full = tier == "full"
    if sums and not full:
        _check_files(path, files, True)
    # the embeddings and codes are hashed while their values are checked, when memory-mapped
    streamed = ("embeddings.npy", CODES_FILE) if mmap else ()
    if full:
        _check_files(path, files, True, streamed)
    sizes = {"M": counts["propositions"], "E": counts["entities"], "N": counts["passages"],
             "nnz": counts["incidence_nnz"], "dim": man["dim"],
             "S": counts.get("shared_metadata", 0) if man["format_version"] >= 4 else 0}
    sizes.update({f"{k}+1": v + 1 for k, v in list(sizes.items())})
    arr = _load_arrays(path, sizes, mmap)
    graph, pmap = _check_arrays(path, arr, sizes, full)
    if man["format_version"] in (1, 2):
        passages, props, ents = _json_tables(path, sizes)
    else:
        passages, props, ents = _string_tables(path, sizes, full,
                                               shared=man["format_version"] >= 4)
    hnsw = hnsw_ids = None
    if HNSW_IDS_FILE in files and HNSW_FILE not in files:
        _fail(path / HNSW_IDS_FILE, f"present without {HNSW_FILE}")
    if HNSW_FILE in files:
        n_labels = sizes["M"]
        if HNSW_IDS_FILE in files:
            hnsw_ids = _load_hnsw_ids(path / HNSW_IDS_FILE, sizes["M"])
            n_labels = len(hnsw_ids)
        hnsw = load_hnsw(path / HNSW_FILE, n_labels, sizes["dim"],
                         arr["embeddings"] if full else None, hnsw_ids)
    codes, scale = _load_codes(path, files, sizes, mmap)
    passage_emb = _load_passage_embeddings(path, files, sizes, mmap, full)
    lexical = _load_lexical(path, files, sizes, mmap, full, passages, props,
                            man.get("lexical_tokenizer", 1), recount)
    if full:  # one streamed pass: checksums, finite unit rows, codes within half a step
        emb = arr["embeddings"]
        sha = {n: files[n]["sha256"] for n in streamed if n in files}
        ok = _hashable(emb) and (codes is None or _hashable(codes))
        if sha and not ok:  # not memory-mapped as expected: hash the files apart
            _check_files(path, {n: files[n] for n in sha}, True)
            sha = {}
        _check_unit_rows(path / "embeddings.npy", emb, codes, scale, path / CODES_FILE, sha)
        if stamp:
            write_stamp(path, files, "full")
    man = dict(man, verified=tier)
    return Loaded(man, graph, pmap, arr["embeddings"], passages, props, ents, hnsw, hnsw_ids,
                  codes, scale, lexical,
                  CountsFile(path / EXTRACT_COUNTS, files[EXTRACT_COUNTS]["sha256"])
                  if EXTRACT_COUNTS in files else None, passage_emb)


def _load_passage_embeddings(path: Path, files: dict[str, Any], sizes: dict[str, Any],
                             mmap: bool, full: bool) -> np.ndarray | None:
    """Each passage's embedding, if the index has them: float32 of shape (N, dim); the
    full tier checks finite unit rows (its checksum was checked with the other files')."""
    if PASSAGE_EMBEDDINGS_FILE not in files:
        return None
    f = path / PASSAGE_EMBEDDINGS_FILE
    try:
        pe = np.load(f, allow_pickle=False, mmap_mode="r" if mmap else None)
    except Exception as exc:
        _fail(f, f"unreadable ({exc})")
    if not isinstance(pe, np.ndarray) or pe.dtype != np.float32 \
            or pe.shape != (sizes["N"], sizes["dim"]):
        _fail(f, f"must be float32 of shape ({sizes['N']}, {sizes['dim']}), one row per "
                 "passage")
    if full:
        _check_unit_rows(f, pe)
    return pe


def _load_lexical(path: Path, files: dict[str, Any], sizes: dict[str, Any], mmap: bool,
                  full: bool, passages: Any, props: Any, tokenizer: Any = 1,
                  recount: bool = False) -> Any:
    """The lexical index, if the directory has one (all its files or none): dtypes,
    shapes, row pointers, term ids within the vocabulary, positive finite counts, ascending
    unique terms per row, the vocabulary's arrays (:func:`load_vocabulary`); the full tier
    also checks that the vocabulary's terms ascend strictly; ``recount`` counts the texts'
    terms again and compares (the counts are derived data: a recount tokenizes the corpus,
    so loads leave it to ``evireform verify --full``).  None without the files (an index
    saved before them: counted from its texts when first searched), and None when
    ``tokenizer`` (the manifest's ``lexical_tokenizer``; 1 when it has none) is not this
    code's :data:`~evireform.extract.tokens.LEXICAL_TOKENIZER`: counts made by other rules
    would not match a query's terms, so they are counted again from the texts, as for an
    index without them (saving the index again stores the new counts).  Format versions
    before 5 stored the vocabulary as :data:`LEXICAL_TERMS` (read, into a dict)."""
    from ..extract.tokens import LEXICAL_TOKENIZER
    from ..search_data import LexicalIndex, Vocabulary
    from ..kernels.graph import rows_sorted_unique
    from ..kernels.lexical import TermCounts
    mapped = any(n in files for n in VOCAB_FILES)
    if mapped and LEXICAL_TERMS in files:
        _fail(path / LEXICAL_TERMS, f"present beside {VOCAB_BLOB}: an index holds one "
                                    "vocabulary")
    vocab_files = VOCAB_FILES if mapped else (LEXICAL_TERMS,)
    wanted = (*vocab_files, *LEXICAL_ARRAYS)
    have = [n for n in wanted if n in files]
    if not have:
        return None
    if len(have) != len(wanted):
        missing = [n for n in wanted if n not in files][0]
        _fail(path / missing, f"missing: the lexical index's {len(wanted)} files "
                              "come together")
    if tokenizer != LEXICAL_TOKENIZER:
        return None
    if mapped:
        vocab = Vocabulary(load_vocabulary(path, full))
    else:
        terms = _load_json(path, LEXICAL_TERMS, -1, _strings_ok, "strings")
        if len(set(terms)) != len(terms):
            _fail(path / LEXICAL_TERMS, "repeats a term")
        vocab = Vocabulary(extra=terms)
    n_terms = len(vocab)
    got: dict[str, dict[str, np.ndarray]] = {"props": {}, "passages": {}}
    for name, (level, part, dtype) in LEXICAL_ARRAYS.items():
        f = path / name
        try:
            a = np.load(f, allow_pickle=False, mmap_mode="r" if mmap else None)
        except Exception as exc:
            _fail(f, f"unreadable ({exc})")
        if not isinstance(a, np.ndarray) or a.dtype != dtype or a.ndim != 1:
            _fail(f, f"must be a 1-d {np.dtype(dtype)} array")
        got[level][part] = a
    out = {}
    for level, n in (("props", sizes["M"]), ("passages", sizes["N"])):
        g = got[level]
        f = path / f"lexical_{level}_indptr.npy"
        if len(g["indptr"]) != n + 1:
            _fail(f, f"{len(g['indptr'])} row pointers, the index has {n} rows (+1)")
        if len(g["terms"]) != len(g["counts"]):
            _fail(path / f"lexical_{level}_counts.npy", "not as long as its terms")
        _check_ptr(f, g["indptr"], len(g["terms"]))
        _check_range(path / f"lexical_{level}_terms.npy", g["terms"], n_terms, "term id")
        c = g["counts"]
        if len(c) and not (np.all(np.isfinite(c)) and float(c.min()) > 0):
            _fail(path / f"lexical_{level}_counts.npy", "counts must be positive and finite")
        if not rows_sorted_unique(g["indptr"], g["terms"]):
            _fail(path / f"lexical_{level}_terms.npy", "a row's terms must ascend, each once")
        out[level] = TermCounts(g["indptr"], g["terms"], g["counts"])
    lex = LexicalIndex(vocab, out["props"], out["passages"])
    if recount:
        _check_lexical_counts(path, lex, passages, props)
    return lex


def load_vocabulary(path: Path, full: bool) -> Any:
    """The vocabulary's three files, memory-mapped, as a
    :class:`~evireform.kernels.lexical.SortedTerms` (its arrays checked: dtypes, shapes, the
    offsets within the blob, the order's ids in range); the full tier also checks that the
    order lists each term once, ascending, and that the terms are UTF-8."""
    from ..kernels import vocab_unsorted
    from ..kernels.lexical import SortedTerms
    fb, fo, fr = path / VOCAB_BLOB, path / VOCAB_OFFSETS, path / VOCAB_ORDER
    arrs = []
    for f, dtype in ((fo, np.int64), (fr, np.int32)):
        try:
            a = np.load(f, allow_pickle=False, mmap_mode="r")
        except Exception as exc:
            _fail(f, f"unreadable ({exc})")
        if not isinstance(a, np.ndarray) or a.dtype != dtype or a.ndim != 1:
            _fail(f, f"must be a 1-d {np.dtype(dtype)} array")
        arrs.append(a)
    off, order = arrs
    if len(off) != len(order) + 1:
        _fail(fo, f"{len(off)} offsets for {len(order)} terms in {VOCAB_ORDER} (must be one "
                  "more)")
    size = fb.stat().st_size
    _check_ptr(fo, off, size)
    blob = np.memmap(fb, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
    try:
        vocab = SortedTerms(blob, off, order)
    except ValueError as exc:
        _fail(fr, str(exc))
    if full:
        _check_utf8(fb, blob, off)
        bad = vocab_unsorted(vocab)
        if bad >= 0:
            _fail(fr, f"entry {bad} (term {int(order[bad])}) does not come after the term "
                      "before it: the terms must be listed once each, in byte order")
    return vocab


def _check_lexical_counts(path: Path, lex: Any, passages: Any, props: Any) -> None:
    """The stored counts are the texts' (terms compared by their strings: an updated
    index numbers its vocabulary otherwise than a rebuilt one).  Each text is counted in
    pieces cut at whitespace (:meth:`evireform.strings.StringTable.pieces`; a term never
    spans whitespace), so a long text is checked in bounded memory."""
    from collections import Counter
    from ..extract.tokens import lexical_tokens

    def pieces(table: Any, j: int):
        if isinstance(table, StringTable):
            yield from table.pieces(j)
        else:
            yield table[j]

    if isinstance(passages, PassageTable):
        columns = (passages.titles, passages.texts)
    else:  # a version 1 or 2 index: Passage objects
        columns = ([p.title for p in passages], [p.text for p in passages])
    for level in ("props", "passages"):
        stored = lex.counts(level)
        for j in range(stored.n_docs):
            got: Counter = Counter()
            for table in ((props,) if level == "props" else columns):
                for piece in pieces(table, j):
                    got.update(lexical_tokens(piece))
            lo, hi = int(stored.indptr[j]), int(stored.indptr[j + 1])
            want = {lex.terms[int(t)]: float(c)
                    for t, c in zip(stored.terms[lo:hi], stored.counts[lo:hi])}
            if want != {k: float(v) for k, v in got.items()}:
                _fail(path / f"lexical_{level}_terms.npy",
                      f"row {j} does not hold the terms of its text (edited, or written by "
                      "another tokenizer)")


def _load_codes(path: Path, files: dict[str, Any], sizes: dict[str, Any], mmap: bool):
    """The int8 codes and their scale, if the index has them (dtype, shape, finite positive
    scale); the full tier checks their values against the embeddings
    (:func:`_check_unit_rows`)."""
    if CODES_FILE not in files and SCALE_FILE not in files:
        return None, None
    for name in (CODES_FILE, SCALE_FILE):
        if name not in files:
            _fail(path / name, f"missing: {CODES_FILE} and {SCALE_FILE} come together")
    fc, fs = path / CODES_FILE, path / SCALE_FILE
    try:
        codes = np.load(fc, allow_pickle=False, mmap_mode="r" if mmap else None)
        scale = np.load(fs, allow_pickle=False)
    except Exception as exc:
        _fail(fc, f"unreadable ({exc})")
    if not isinstance(codes, np.ndarray) or codes.dtype != np.int8 \
            or codes.shape != (sizes["M"], sizes["dim"]):
        _fail(fc, f"must be int8 of shape ({sizes['M']}, {sizes['dim']})")
    if not isinstance(scale, np.ndarray) or scale.dtype != np.float32 \
            or scale.shape != (sizes["dim"],) or not np.all(np.isfinite(scale)) \
            or not np.all(scale > 0):
        _fail(fs, f"must be {sizes['dim']} positive finite float32 values")
    return codes, scale


def load_embeddings(path: StrPath, *, mmap: bool = True, verify: bool = True) -> np.ndarray:
    """Only the embeddings of the index at ``path``, with the checks :func:`load_index`
    makes of them: the manifest, the file's size and sha256, dtype and shape against the
    counts, finite unit rows.  What a process that only searches (a Ray shard actor) reads."""
    path = Path(path)
    man, counts, files = _read_manifest(path)
    name = "embeddings.npy"
    _check_files(path, {name: files[name]}, verify)
    spec = next(s for s in SPECS if s.file == name)
    f = path / name
    try:
        a = np.load(f, allow_pickle=False, mmap_mode="r" if mmap else None)
    except Exception as exc:
        _fail(f, f"unreadable ({exc})")
    want = (counts["propositions"], man["dim"])
    if not isinstance(a, np.ndarray) or a.dtype != spec.dtype or a.shape != want:
        _fail(f, f"must be {spec.dtype} of shape {want}")
    _check_unit_rows(f, a)
    return a
