"""The on-disk index format: manifest, checksums, atomic save, verified load.

An index is a directory::

    manifest.json        format, version, embedder, dim, counts, meta, sha256 + size per file
    <array>.npy          one per array field of EntityGraph and PassageMap, plus embeddings
    strings.utf8         every string, UTF-8, back to back: passage ids, titles, texts,
                         metadata (JSON, "" when empty), proposition texts, entity names
    string_offsets.npy   int64, string i = strings.utf8[offsets[i]:offsets[i + 1]]
    hnsw.bin             hnswlib graph (only when HNSW was built)
    verified.json        the stamp: what the last full verification saw of every file

Versions 1 and 2 held passages.json, propositions.json and entities.json instead of the two
string files; they load as before (version 1 without passage metadata).  Version 3 maps the
strings and decodes one when it is read (:mod:`evireform.strings`).

The array names, dtypes and shapes are declared once, on the dataclass fields of
:class:`~evireform.kernels.EntityGraph` and :class:`~evireform.kernels.PassageMap`
(:func:`array_specs`); nothing here spells them out again.

**Saving** (:func:`save_index`) refuses a target that exists and is not an evireform index
(unless ``overwrite=True``), and always refuses a file, the current directory or one of its
parents.  It writes a hidden temporary sibling, then swaps it in with two renames under an
advisory lock on the parent directory.  A process killed at any point leaves the previous index
or the new one at the target: when a kill falls between the two renames, the next save or load
puts the previous index back.  Leftover temporaries are removed by the next save.

**Loading** (:func:`load_index`) verifies in two tiers.  Any problem raises
:class:`IndexFormatError` naming the file and the value.

* The **fast** tier, on every load, checks what the kernels and the readers trust, so that no
  file can crash the process or reach outside the directory: manifest field types; file
  names confined to the format's own names (no paths); every file present with the size the
  manifest gives; every array's dtype and shape against the manifest counts; CSR pointers
  monotone and ending at nnz; every index array (entity, proposition, passage ids) within
  bounds; string offsets monotone, starting at 0 and ending at the blob's size; the
  ``hnsw.bin`` header, neighbour lists, levels and labels consistent before hnswlib reads it.
  Each is one vectorised pass over an array; nothing reads the embeddings or the texts.
* The **full** tier adds what costs a pass over the data: every file's sha256; the degree
  terms, the transpose and the passage map equal to a recomputation from the incidence;
  every embedding row finite and of unit norm; the HNSW graph's stored vectors equal to the
  embeddings; every string valid UTF-8, every passage's metadata a JSON object, passage ids
  unique (for the JSON files of versions 1-2: their shapes).  Then it writes the stamp
  ``verified.json``: for every file (the manifest included) its size, modification time,
  inode and a digest of its first and last 64 KiB.

``verify="auto"`` (the default) runs the fast tier when the stamp matches every file and the
full tier otherwise (a copied or downloaded index, an edited or replaced file, no stamp);
``"full"`` and ``"fast"`` force a tier (``evireform verify INDEX`` is the full one).  A save
stamps what it wrote (the data came from this process).  The fast tier trusts the values of
files it knows were verified; when forced on files that were not, it still cannot crash the
process, only return wrong rankings (``tests/test_fuzz.py`` runs the crafted files against it).
"""
from __future__ import annotations

from ._checks import loads as _json_loads

import contextlib
import datetime as _dt
import hashlib
import json
import os
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .kernels import EntityGraph, PassageMap, config as kconfig
from .kernels.graph import array_fields

FORMAT = "evireform-index"
FORMAT_VERSION = 3
#: versions this code reads: 1 (JSON texts, no passage metadata), 2 (JSON texts) and 3
READ_VERSIONS = (1, 2, 3)
MANIFEST = "manifest.json"
JSONS = ("passages.json", "propositions.json", "entities.json")
STRINGS_FILE, OFFSETS_FILE = "strings.utf8", "string_offsets.npy"
STAMP = "verified.json"
#: int8 codes of the embeddings and their per-dimension scale (PropositionIndex.quantize)
CODES_FILE, SCALE_FILE = "codes.npy", "code_scale.npy"
TIERS = ("auto", "fast", "full")
HNSW_FILE = "hnsw.bin"
#: HNSW label -> proposition id after deletions (only then)
HNSW_IDS_FILE = "hnsw_ids.npy"


class IndexFormatError(ValueError):
    """A saved index directory is missing, truncated, edited, inconsistent or of another format
    version."""


class UnsafeTargetError(ValueError):
    """``save`` was pointed at something that is not an index it may replace."""


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
                         [STRINGS_FILE, OFFSETS_FILE, HNSW_FILE, HNSW_IDS_FILE, CODES_FILE,
                          SCALE_FILE])
OPTIONAL_FILES = frozenset([HNSW_FILE, HNSW_IDS_FILE, CODES_FILE, SCALE_FILE])


def _required_files(version: int) -> frozenset:
    texts = set(JSONS) if version in (1, 2) else {STRINGS_FILE, OFFSETS_FILE}
    return frozenset(s.file for s in SPECS) | texts


def file_sha256(path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def disk_bytes(path) -> int:
    """Bytes of the files directly inside ``path``."""
    return sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file())


# =========================================================================== saving
def _write_json(path: Path, obj, indent=None) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, ensure_ascii=False, indent=indent)


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace(src: Path, dst: Path) -> None:
    """``os.replace``; one function so that tests can interrupt a save between its renames."""
    os.replace(src, dst)


_LOCKS: dict = {}
_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def _dir_lock(path: Path):
    """Exclusive lock on the directory ``path`` (its saves, recoveries and read-modify-write
    updates), per directory, not per parent: a per-process re-entrant lock plus an advisory
    flock on a hidden sibling file ``.NAME-lock`` (the directory itself is swapped by a save,
    so the lock cannot live inside it; the empty file is left in place).  Where that file
    cannot be created (a read-only parent) the flock is skipped: nothing can be written
    there anyway.  Re-entrant within a thread, so :func:`index_lock` can hold it across
    load -> modify -> save while the save takes it again."""
    path = Path(path)
    key = os.path.join(os.path.realpath(path.parent), path.name)
    with _LOCKS_GUARD:
        entry = _LOCKS.setdefault(key, [threading.RLock(), 0, None])
    entry[0].acquire()
    try:
        if entry[1] == 0:
            try:
                import fcntl
                fd = os.open(path.parent / f".{path.name}-lock", os.O_RDWR | os.O_CREAT, 0o644)
            except (ImportError, OSError):
                fd = None
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except OSError:
                    os.close(fd)
                    fd = None
            entry[2] = fd
        entry[1] += 1
        try:
            yield
        finally:
            entry[1] -= 1
            if entry[1] == 0 and entry[2] is not None:
                import fcntl
                with contextlib.suppress(OSError):
                    fcntl.flock(entry[2], fcntl.LOCK_UN)
                os.close(entry[2])
                entry[2] = None
    finally:
        entry[0].release()


def index_lock(path):
    """The lock a read-modify-write of the index at ``path`` holds from load to save
    (``evireform update``, the service's updates): concurrent updaters of that index queue
    instead of losing each other's changes; other indexes in the same folder are not
    held up.  Saving takes the same lock, re-entrantly."""
    p = Path(path).absolute()
    p.parent.mkdir(parents=True, exist_ok=True)
    return _dir_lock(p)


def _siblings(path: Path, kind: str) -> list[Path]:
    """Leftover ``.NAME.tmp-*`` / ``.NAME.old-*`` directories of ``path``, newest first."""
    found = [p for p in path.parent.glob(f".{path.name}.{kind}-*") if p.is_dir()]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def _looks_like_index(path: Path) -> bool:
    try:
        man = _json_loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(man, dict) and man.get("format") == FORMAT


def recover(path, looks_like=None) -> bool:
    """Put the previous directory back at ``path`` when a save was killed between its two
    renames (the target missing, the previous directory parked in ``.NAME.old-*``).
    ``looks_like(dir)`` says whether a parked directory is one of the kind being saved
    (default: an evireform index).  Returns True if it did.  Call it with the parent's lock
    held, or accept a race with a concurrent save."""
    path = Path(path)
    looks_like = looks_like or _looks_like_index
    if path.exists() or path.is_symlink():
        return False
    for old in _siblings(path, "old"):
        if looks_like(old):
            try:
                _replace(old, path)
            except OSError:
                return False
            _fsync_dir(path.parent)
            return True
    return False


def _clean_leftovers(path: Path) -> None:
    for kind in ("tmp", "old"):
        for p in _siblings(path, kind):
            shutil.rmtree(p, ignore_errors=True)


def index_files(path: Path) -> set[str] | None:
    """The files an evireform index directory at ``path`` consists of, or None if it is not one."""
    try:
        man = _json_loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(man, dict) or man.get("format") != FORMAT \
            or not isinstance(man.get("files"), dict):
        return None
    return {MANIFEST, STAMP, *map(str, man["files"])}


def check_target(path, *, overwrite: bool = False) -> Path:
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


def write_dir_atomically(path, write, *, check=None, looks_like=None) -> Path:
    """Write a directory at ``path`` with ``write(tmp)`` into a hidden temporary sibling, fsync
    every file in it, and swap it in with two renames under the parent's lock
    (:func:`index_lock`).  A process killed at any point leaves the previous directory or the
    new one: when a kill falls between the renames, the next save or load puts the previous
    one back (:func:`recover`, with ``looks_like`` saying what a parked directory must be).
    ``check()`` runs again under the lock (a target that changed meanwhile is refused).
    Leftover temporaries are removed.  The one directory swap of the package: indexes and
    shard layouts are saved through it."""
    path = Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _dir_lock(path):
        recover(path, looks_like)
        _clean_leftovers(path)
        if check is not None:
            check()
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        try:
            write(tmp)
            for f in tmp.iterdir():
                if f.is_file():
                    _fsync(f)
            _fsync_dir(tmp)
            old = None
            if path.exists():
                old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
                _replace(path, old)
            _replace(tmp, path)
            _fsync_dir(path.parent)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            recover(path, looks_like)
            raise
    return path


def save_index(idx, path, *, overwrite: bool = False) -> Path:
    """Write ``idx`` (a :class:`~evireform.index.PropositionIndex`) as a directory at ``path``
    (:func:`write_dir_atomically`).  See the module docstring for what is refused.  Returns
    the absolute path."""
    path = check_target(path, overwrite=overwrite)
    return write_dir_atomically(path, lambda tmp: _write_files(idx, tmp),
                                check=lambda: check_target(path, overwrite=overwrite))


def index_arrays(idx) -> dict[str, np.ndarray]:
    holders = {"graph": idx.graph, "pmap": idx.pmap, "index": idx}
    return {s.name: np.asarray(getattr(holders[s.owner], s.name)) for s in SPECS}


def _write_files(idx, tmp: Path) -> None:
    from . import __version__
    from .strings import pack
    for name, arr in index_arrays(idx).items():
        np.save(tmp / f"{name}.npy", np.ascontiguousarray(arr), allow_pickle=False)
    with open(tmp / STRINGS_FILE, "wb") as fh:
        offsets = pack(idx.passages, idx.prop_texts, idx.entity_names, fh.write)
    np.save(tmp / OFFSETS_FILE, offsets, allow_pickle=False)
    if getattr(idx, "codes", None) is not None:
        np.save(tmp / CODES_FILE, np.ascontiguousarray(idx.codes, dtype=np.int8),
                allow_pickle=False)
        np.save(tmp / SCALE_FILE, np.ascontiguousarray(idx.code_scale, dtype=np.float32),
                allow_pickle=False)
    if idx.hnsw is not None:
        idx.hnsw.save_index(str(tmp / HNSW_FILE))
        if getattr(idx, "hnsw_ids", None) is not None:
            np.save(tmp / HNSW_IDS_FILE, np.ascontiguousarray(idx.hnsw_ids, dtype=np.int64),
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
                   "entities": idx.n_entities, "incidence_nnz": idx.graph.nnz},
        "meta": idx.meta,
        "files": files,
    }
    # the manifest is written last and renamed into place: a directory with a manifest is whole
    _write_json(tmp / (MANIFEST + ".part"), manifest, indent=1)
    _fsync(tmp / (MANIFEST + ".part"))
    os.replace(tmp / (MANIFEST + ".part"), tmp / MANIFEST)
    write_stamp(tmp, list(files), "save")  # renaming the directory keeps inodes and mtimes


# =========================================================================== loading
@dataclass
class Loaded:
    """What :func:`load_index` read and checked, ready to become a PropositionIndex."""

    manifest: dict
    graph: EntityGraph
    pmap: PassageMap
    embeddings: np.ndarray
    passages: list            # Passage objects, or a PassageTable (version 3)
    propositions: list[str]
    entities: list[str]
    hnsw: object | None
    hnsw_ids: np.ndarray | None = None
    codes: np.ndarray | None = None
    code_scale: np.ndarray | None = None


def _fail(path, msg: str):
    raise IndexFormatError(f"{path}: {msg}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_manifest(mpath: Path, man) -> tuple[dict, dict]:
    """Types of every manifest field the loader reads; returns (counts, files)."""
    from . import __version__
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
    for key in ("passages", "propositions", "entities", "incidence_nnz"):
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


def _check_files(path: Path, files: dict, verify: bool, streamed=()) -> None:
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


def _load_arrays(path: Path, sizes: dict, mmap: bool) -> dict[str, np.ndarray]:
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

    def __init__(self, f: Path, arr):
        self.raw = np.memmap(f, dtype=np.uint8, mode="r")
        self.off = int(arr.offset)
        self.row = int(arr.strides[0]) if arr.ndim else 0
        self.h = hashlib.sha256(self.raw[:self.off])
        self.done = 0

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


def _check_unit_rows(f: Path, emb, codes=None, scale=None, fc: Path | None = None,
                     sha: dict | None = None) -> None:
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

    def checksums():
        for path, h in hashes.items():
            if h.hexdigest() != sha[path.name]:
                _fail(path, "sha256 does not match the manifest (edited or corrupt)")

    def fail(path, msg):
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


def _check_arrays(path: Path, arr: dict, sizes: dict,
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


def _load_json(path: Path, name: str, n: int, item_ok, what: str) -> list:
    f = path / name
    try:
        obj = _json_loads(f.read_text(encoding="utf-8"), str(f))
    except (ValueError, OSError) as exc:
        _fail(f, f"unreadable ({exc})")
    if not isinstance(obj, list):
        _fail(f, f"must be a JSON list; got {type(obj).__name__}")
    if len(obj) != n:
        _fail(f, f"{len(obj)} entries, the manifest counts give {n}")
    if not item_ok(obj):  # a whole-list check at C speed; the slow scan only names the entry
        for i, x in enumerate(obj):
            if not item_ok([x]):
                _fail(f, f"entry {i} is not {what}: {x!r:.80}")
    return obj


def _strings_ok(xs: list) -> bool:
    return set(map(type, xs)) <= {str}


def _passages_ok(xs: list) -> bool:
    if not set(map(type, xs)) <= {dict}:
        return False
    return all(_strings_ok([x.get(k) for x in xs]) for k in ("id", "title", "text")) \
        and all(isinstance(x.get("metadata", {}), dict) for x in xs)


def _identity(path: Path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def load_index(path, *, mmap: bool = True, verify="auto") -> Loaded:
    """Read and check an index directory (see the module docstring); raises
    :class:`IndexFormatError` naming the file and the value for any problem.  ``verify``:
    ``"auto"`` (fast tier when the stamp matches, else full), ``"fast"``, ``"full"``.

    A read sees one version: saves swap whole directories, so when the directory at ``path``
    is replaced while it is being read (a concurrent ``update``), the read starts again on the
    new one (a few times at most) instead of mixing the two."""
    path = Path(path)
    for attempt in range(5):
        before = _identity(path)
        try:
            got = _load_once(path, mmap, verify)
        except (IndexFormatError, OSError) as exc:
            if before is None or _identity(path) == before or attempt == 4:
                if isinstance(exc, IndexFormatError):
                    raise
                raise IndexFormatError(f"{exc.filename or path}: cannot be read "
                                       f"({exc.strerror or exc})") from None
            continue
        if _identity(path) == before:
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


def _digest(f: Path, size: int) -> str:
    """blake2b of the first and last 64 KiB and the size: binds a file's content cheaply."""
    h = hashlib.blake2b(str(size).encode(), digest_size=16)
    with open(f, "rb") as fh:
        h.update(fh.read(1 << 16))
        if size > 1 << 17:
            fh.seek(size - (1 << 16))
        h.update(fh.read(1 << 16))
    return h.hexdigest()


def _seen(f: Path) -> list:
    st = os.stat(f)
    return [st.st_size, st.st_mtime_ns, st.st_ino, _digest(f, st.st_size)]


def write_stamp(path: Path, names, tier: str) -> bool:
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


def stamp_matches(path: Path, names) -> bool:
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


def _tier(verify) -> str:
    if verify is True:
        return "full"
    if verify is False:
        return "fast"
    if verify not in TIERS:
        raise ValueError(f"verify must be one of {TIERS} (or True = 'full', False = 'fast'); "
                         f"got {verify!r}")
    return verify


def _check_strings(path: Path, sizes: dict, full: bool):
    """The string blob (memory-mapped) and its offsets, checked; ``(blob, offsets)``."""
    from .strings import TABLES
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


def _check_utf8(f: Path, blob, off) -> None:
    """Every string of the blob valid UTF-8, in memory bounded by one 16 MiB step whatever
    the strings' sizes: the blob decodes as one stream, and no string starts with a
    continuation byte (so none ends inside a character)."""
    import codecs
    from .strings import release_pages
    size = len(blob)
    starts = np.asarray(off[:-1])[np.asarray(off[:-1]) < size]
    cont = np.flatnonzero((np.asarray(blob[starts]) & 0xC0) == 0x80) if len(starts) else []
    if len(cont):
        _fail(f, f"not valid UTF-8 at byte {int(starts[cont[0]])} (a string starts inside a "
                 "character)")
    dec = codecs.getincrementaldecoder("utf-8")()
    step = 16 << 20
    for a in range(0, size, step):
        held = len(dec.getstate()[0])  # bytes of a character cut by the previous step
        try:
            dec.decode(bytes(blob[a:a + step]), final=a + step >= size)
        except UnicodeDecodeError as exc:
            _fail(f, f"not valid UTF-8 at byte {a - held + exc.start}")
        release_pages(blob, a, min(a + step, size))


def _string_tables(path: Path, sizes: dict, full: bool):
    """(passages, propositions, entities) of a version-3 index as tables over the blob."""
    from .strings import TABLES, PassageTable, StringTable
    blob, off = _check_strings(path, sizes, full)
    tables, lo = {}, 0
    for name, count in TABLES:
        tables[name] = StringTable(blob, off, lo, lo + sizes[count])
        lo += sizes[count]
    passages = PassageTable(tables["passage_ids"], tables["passage_titles"],
                            tables["passage_texts"], tables["passage_metadata"])
    if full:
        f = path / STRINGS_FILE
        ids = list(tables["passage_ids"])
        if len(set(ids)) != len(ids):
            _fail(f, "passage ids are not unique")
        for i, raw in enumerate(tables["passage_metadata"]):
            if raw:
                try:
                    ok = isinstance(json.loads(raw), dict)
                except ValueError:
                    ok = False
                if not ok:
                    _fail(f, f"passage {i}'s metadata is not a JSON object: {raw!r:.80}")
    return passages, tables["propositions"], tables["entities"]


def _json_tables(path: Path, sizes: dict):
    """(passages, propositions, entities) of a version-1/2 index, from its JSON files."""
    from .types import Passage
    raw = _load_json(path, "passages.json", sizes["N"], _passages_ok,
                     "an object with string id, title and text (and an object metadata)")
    ids = [p["id"] for p in raw]
    if len(set(ids)) != len(ids):
        _fail(path / "passages.json", "passage ids are not unique")
    passages = [Passage(p["id"], p["title"], p["text"], p.get("metadata") or {}) for p in raw]
    props = _load_json(path, "propositions.json", sizes["M"], _strings_ok, "a string")
    ents = _load_json(path, "entities.json", sizes["E"], _strings_ok, "a string")
    return passages, props, ents


def _load_once(path: Path, mmap: bool, verify) -> Loaded:
    if not path.exists() and path.parent.is_dir() and _siblings(path, "old"):
        with _dir_lock(path):  # a save killed between its renames: put the index back
            recover(path)
    man, counts, files = _read_manifest(path)
    tier = _tier(verify)
    _check_files(path, files, False)  # present, regular, the size the manifest gives
    if tier == "auto":
        tier = "fast" if stamp_matches(path, files) else "full"
    full = tier == "full"
    # the embeddings and codes are hashed while their values are checked, when memory-mapped
    streamed = ("embeddings.npy", CODES_FILE) if mmap else ()
    if full:
        _check_files(path, files, True, streamed)
    sizes = {"M": counts["propositions"], "E": counts["entities"], "N": counts["passages"],
             "nnz": counts["incidence_nnz"], "dim": man["dim"]}
    sizes.update({f"{k}+1": v + 1 for k, v in list(sizes.items())})
    arr = _load_arrays(path, sizes, mmap)
    graph, pmap = _check_arrays(path, arr, sizes, full)
    if man["format_version"] in (1, 2):
        passages, props, ents = _json_tables(path, sizes)
    else:
        passages, props, ents = _string_tables(path, sizes, full)
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
    if full:  # one streamed pass: checksums, finite unit rows, codes within half a step
        emb = arr["embeddings"]
        sha = {n: files[n]["sha256"] for n in streamed if n in files}
        ok = _hashable(emb) and (codes is None or _hashable(codes))
        if sha and not ok:  # not memory-mapped as expected: hash the files apart
            _check_files(path, {n: files[n] for n in sha}, True)
            sha = {}
        _check_unit_rows(path / "embeddings.npy", emb, codes, scale, path / CODES_FILE, sha)
        write_stamp(path, files, "full")
    man = dict(man, verified=tier)
    return Loaded(man, graph, pmap, arr["embeddings"], passages, props, ents, hnsw, hnsw_ids,
                  codes, scale)


def _load_codes(path: Path, files: dict, sizes: dict, mmap: bool):
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


def load_embeddings(path, *, mmap: bool = True, verify: bool = True) -> np.ndarray:
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


def _load_hnsw_ids(f: Path, M: int) -> np.ndarray:
    """The label map: int64, one entry per HNSW item, each proposition exactly once, -1 for
    deleted items."""
    try:
        ids = np.load(f, allow_pickle=False)
    except Exception as exc:
        _fail(f, f"unreadable ({exc})")
    if not isinstance(ids, np.ndarray) or ids.dtype != np.int64 or ids.ndim != 1:
        _fail(f, "must be a 1-d int64 array")
    live = ids[ids >= 0]
    once = len(live) == M and (M == 0 or (live.max() < M
                                          and np.all(np.bincount(live, minlength=M) == 1)))
    if np.any(ids < -1) or not once:
        _fail(f, f"must map the HNSW items onto the {M} propositions, each once (-1: deleted)")
    return ids


# --------------------------------------------------------------------------- hnsw.bin
#: hnswlib's saveIndex header: six size_t, int maxlevel, uint32 entry point, three size_t,
#: double mult, size_t ef_construction
_HNSW_HEADER = np.dtype([("offset_level0", "<u8"), ("max_elements", "<u8"), ("count", "<u8"),
                         ("size_per_element", "<u8"), ("label_offset", "<u8"),
                         ("offset_data", "<u8"), ("maxlevel", "<i4"), ("entry", "<u4"),
                         ("maxM", "<u8"), ("maxM0", "<u8"), ("M", "<u8"), ("mult", "<f8"),
                         ("ef_construction", "<u8")])


def check_hnsw_file(f: Path, n: int, dim: int, embeddings=None, label_ids=None) -> None:
    """Check an hnswlib index file for everything its loader and search trust: the header
    against ``n`` elements of ``dim`` floats, every neighbour id and list length, every
    element's level and the entry point; labels unique and in [0, n); a non-empty level-0
    neighbour list for every element of a graph of two or more.  With ``embeddings`` (the
    rows the graph indexes; ``label_ids`` maps labels to rows, -1 = deleted, as saved in
    ``hnsw_ids.npy``): every item's delete flag agrees with the label map (deleted exactly
    when it maps to -1) and every live item's stored vector equals its row bit for bit (all
    rows, read in blocks: a crafted graph cannot rank with vectors of its own).
    Raises IndexFormatError."""
    raw = np.memmap(f, dtype=np.uint8, mode="r") if f.stat().st_size else np.zeros(0, np.uint8)
    h = _HNSW_HEADER.itemsize
    if len(raw) < h:
        _fail(f, "shorter than an hnswlib header")
    hd = raw[:h].view(_HNSW_HEADER)[0]
    count, spe = int(hd["count"]), int(hd["size_per_element"])
    maxM0, maxM = int(hd["maxM0"]), int(hd["maxM"])
    links0 = 4 + 4 * maxM0
    if count != n or int(hd["max_elements"]) < n:
        _fail(f, f"holds {count} elements (max {int(hd['max_elements'])}), the index has {n}")
    if int(hd["offset_level0"]) != 0 or int(hd["offset_data"]) != links0 \
            or int(hd["label_offset"]) != links0 + 4 * dim or spe != links0 + 4 * dim + 8 \
            or not 0 < maxM <= maxM0 <= 4096:
        _fail(f, "header does not describe an inner-product index of this dimension")
    body = h + count * spe
    if len(raw) < body:
        _fail(f, "truncated level-0 data")
    if count == 0:
        return
    lvl0 = raw[h:body].reshape(count, spe)
    head0 = lvl0[:, :4].copy().view("<u4")[:, 0] & 0xFFFF
    if np.any(head0 > maxM0):
        _fail(f, "a level-0 neighbour list is longer than maxM0")
    nb0 = lvl0[:, 4:links0].copy().view("<u4")
    used0 = np.arange(maxM0)[None, :] < head0[:, None]
    if np.any(nb0[used0] >= count):
        _fail(f, "a level-0 neighbour id is out of range")
    labels = lvl0[:, links0 + 4 * dim:].copy().view("<u8")[:, 0]
    if np.any(labels >= n):
        _fail(f, f"a label is outside [0, {n})")
    if np.any(np.bincount(labels.astype(np.int64), minlength=n) != 1):
        _fail(f, "labels are not unique: two items carry the same label")
    if count > 1 and np.any(head0 == 0):
        _fail(f, f"item {int(np.argmax(head0 == 0))} has no level-0 neighbours "
                 "(the graph is cut)")
    if embeddings is not None:
        _check_hnsw_items(f, lvl0, labels, links0, dim, embeddings, label_ids)
    # upper levels: per element a uint32 byte size then that many bytes of link lists
    maxlevel, entry = int(hd["maxlevel"]), int(hd["entry"])
    levels = np.zeros(count, np.int64)
    starts = np.zeros(count, np.int64)
    code, where = _hnsw_upper(raw, body, count, 4 + 4 * maxM, maxM, levels, starts)
    messages = {1: "truncated upper-level data", 2: "bad upper-level link block size",
                3: "an upper-level neighbour list is longer than maxM",
                4: "an upper-level neighbour is out of range or lacks that level",
                5: "bytes after the last element"}
    if code:
        _fail(f, f"element {where}: {messages[code]}" if code != 5 else messages[code])
    if entry >= count or levels[entry] != maxlevel or int(levels.max()) != maxlevel:
        _fail(f, "the entry point or the top level is inconsistent")


def _check_hnsw_items(f, lvl0, labels, links0, dim, embeddings, label_ids) -> None:
    """Delete flags against the label map and stored vectors against the embeddings."""
    rows = labels.astype(np.int64) if label_ids is None else np.asarray(label_ids)[labels]
    deleted = (lvl0[:, 2] & 1).astype(bool)  # hnswlib's DELETE_MARK: bit 0 of byte 2
    if np.any(deleted != (rows < 0)):
        i = int(np.argmax(deleted != (rows < 0)))
        _fail(f, f"item {i}: its delete flag ({bool(deleted[i])}) disagrees with the label "
                 "map (deleted items are exactly the labels hnsw_ids maps to -1)")
    step = max(1, (64 << 20) // max(1, 4 * dim))
    for lo in range(0, len(rows), step):
        r = rows[lo:lo + step]
        live = r >= 0
        if not live.any():
            continue
        vec = lvl0[lo:lo + step, links0:links0 + 4 * dim].copy().view("<f4")[live]
        want = np.asarray(embeddings[r[live]], dtype=np.float32)
        if not np.array_equal(vec, want):
            bad = int(np.flatnonzero(live)[np.argmax(np.any(vec != want, axis=1))]) + lo
            _fail(f, f"item {bad}: its stored vector differs from embeddings row "
                     f"{int(rows[bad])} (the graph does not index these embeddings)")


def _hnsw_upper(raw, pos, count, per_level, maxM, levels, starts):
    """Scan the upper-level link blocks (compiled with numba on first use)."""
    global _HNSW_UPPER
    if _HNSW_UPPER is None:
        import numba

        @numba.njit(cache=True)
        def scan(raw, pos, count, per_level, maxM, levels, starts):
            n = raw.shape[0]
            for i in range(count):
                if pos + 4 > n:
                    return 1, i
                size = (np.int64(raw[pos]) | (np.int64(raw[pos + 1]) << 8)
                        | (np.int64(raw[pos + 2]) << 16) | (np.int64(raw[pos + 3]) << 24))
                pos += 4
                if size:
                    if size % per_level != 0 or pos + size > n:
                        return 2, i
                    levels[i] = size // per_level
                    starts[i] = pos
                    pos += size
            if pos != n:
                return 5, -1
            for i in range(count):
                for lev in range(levels[i]):
                    p = starts[i] + lev * per_level
                    cnt = np.int64(raw[p]) | (np.int64(raw[p + 1]) << 8)
                    if cnt > maxM:
                        return 3, i
                    for t in range(cnt):
                        q = p + 4 + 4 * t
                        nb = (np.int64(raw[q]) | (np.int64(raw[q + 1]) << 8)
                              | (np.int64(raw[q + 2]) << 16) | (np.int64(raw[q + 3]) << 24))
                        if nb >= count or levels[nb] < lev + 1:
                            return 4, i
            return 0, -1
        _HNSW_UPPER = scan
    return _HNSW_UPPER(raw, pos, count, per_level, maxM, levels, starts)


_HNSW_UPPER = None


def load_hnsw(f: Path, n: int, dim: int, embeddings=None, label_ids=None):
    """An hnswlib graph from ``f`` after :func:`check_hnsw_file` (with ``embeddings`` and
    ``label_ids`` when given); raises IndexFormatError."""
    check_hnsw_file(f, n, dim, embeddings, label_ids)
    import hnswlib
    h = hnswlib.Index(space="ip", dim=dim)
    try:
        h.load_index(str(f), max_elements=max(n, 1))
    except Exception as exc:
        _fail(f, f"hnswlib cannot load it ({exc})")
    h.set_ef(kconfig.HNSW_EF_SEARCH)
    return h
