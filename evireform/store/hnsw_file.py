"""The hnswlib binary file, parsed and checked before hnswlib reads it (:func:`check_hnsw_file`,
:func:`load_hnsw`): header, levels, neighbour lists and labels, and (full tier) the stored
vectors against the embeddings.  The scan of the upper levels is a numba kernel
(:func:`evireform.kernels._cpu.hnsw_upper_scan`).

Two layouts of the file exist: hnswlib's (header, level-0 data, upper levels) and that of
Chroma's maintained fork ``chroma-hnswlib`` (the binary wheels this package installs), which
writes a block of ``count`` float32 vector lengths between the level-0 data and the upper
levels.  The checks read either; :func:`load_hnsw` hands the installed library its own
layout (a file of the other is converted into a temporary copy first, so indexes saved with
either library load with both).  :func:`write_hnsw` saves a graph with that block zeroed:
for an inner-product graph the fork never fills it, and would otherwise write whatever the
heap held there into the index."""
from __future__ import annotations

from typing import Any
from typing import TYPE_CHECKING

import os
import tempfile
from pathlib import Path

import numpy as np

from .. import kernels as K
from ..kernels import config as kconfig
from .format import _HNSW_HEADER, _fail, _library_writes_lengths, write_hnsw  # noqa: F401

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike


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
def check_hnsw_file(f: Path, n: int, dim: int, embeddings: ArrayLike | None=None, label_ids: ArrayLike | None=None) -> None:
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
    code, where = 0, -1
    for lengths in _layouts(_library_writes_lengths()):
        levels[:] = 0
        starts[:] = 0
        got = _hnsw_upper(raw, body + 4 * count * lengths, count, 4 + 4 * maxM, maxM,
                          levels, starts)
        if got[0] == 0:
            code, where = got
            break
        if (code, where) == (0, -1):
            code, where = got  # the installed library's layout: its failure is reported
    messages = {1: "truncated upper-level data", 2: "bad upper-level link block size",
                3: "an upper-level neighbour list is longer than maxM",
                4: "an upper-level neighbour is out of range or lacks that level",
                5: "bytes after the last element"}
    if code:
        _fail(f, f"element {where}: {messages[code]}" if code != 5 else messages[code])
    if entry >= count or levels[entry] != maxlevel or int(levels.max()) != maxlevel:
        _fail(f, "the entry point or the top level is inconsistent")


def _check_hnsw_items(f, lvl0, labels, links0, dim, embeddings: ArrayLike, label_ids: ArrayLike) -> None:
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


def _hnsw_upper(raw, pos, count: Any, per_level, maxM, levels, starts):
    """Scan the upper-level link blocks (:func:`evireform.kernels._cpu.hnsw_upper_scan`,
    compiled on first use)."""
    return K._kernels().hnsw_upper_scan(raw, pos, count, per_level, maxM, levels, starts)


def _layouts(first: bool):
    """The layouts to try (1 = with the lengths block), the installed library's first."""
    return (int(first), 1 - int(first))


def file_layout(f: Path) -> int:
    """1 when the (checked) file at ``f`` has the lengths block, 0 when not."""
    raw = np.memmap(f, dtype=np.uint8, mode="r")
    hd = raw[:_HNSW_HEADER.itemsize].view(_HNSW_HEADER)[0]
    count, spe, maxM = int(hd["count"]), int(hd["size_per_element"]), int(hd["maxM"])
    body = _HNSW_HEADER.itemsize + count * spe
    for lengths in _layouts(_library_writes_lengths()):
        levels = np.zeros(count, np.int64)
        starts = np.zeros(count, np.int64)
        if _hnsw_upper(raw, body + 4 * count * lengths, count, 4 + 4 * maxM, maxM, levels,
                       starts)[0] == 0:
            return lengths
    _fail(f, "neither hnswlib layout reads it")
    return 0


def _convert(f: Path, to_lengths: int, out: Any) -> None:
    """Write ``f`` in the other layout to the open binary file ``out``: the lengths block
    inserted (zeros) or dropped."""
    raw = np.memmap(f, dtype=np.uint8, mode="r")
    hd = raw[:_HNSW_HEADER.itemsize].view(_HNSW_HEADER)[0]
    count = int(hd["count"])
    body = _HNSW_HEADER.itemsize + count * int(hd["size_per_element"])
    out.write(memoryview(raw[:body]))
    if to_lengths:
        out.write(bytes(4 * count))
        out.write(memoryview(raw[body:]))
    else:
        out.write(memoryview(raw[body + 4 * count:]))


def load_hnsw(f: Path, n: int, dim: int, embeddings: ArrayLike | None=None, label_ids: ArrayLike | None=None):
    """An hnswlib graph from ``f`` after :func:`check_hnsw_file` (with ``embeddings`` and
    ``label_ids`` when given), in either layout (see the module docstring); raises
    IndexFormatError."""
    check_hnsw_file(f, n, dim, embeddings, label_ids)
    import hnswlib
    h = hnswlib.Index(space="ip", dim=dim)
    want = int(_library_writes_lengths())
    tmp = None
    try:
        src = f
        if n and file_layout(f) != want:  # the other library's layout: a converted copy
            fd, tmp = tempfile.mkstemp(prefix="evireform-hnsw-", suffix=".bin")
            with os.fdopen(fd, "wb") as out:
                _convert(f, want, out)
            src = Path(tmp)
        h.load_index(str(src), max_elements=max(n, 1))
    except Exception as exc:
        _fail(f, f"hnswlib cannot load it ({exc})")
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    h.set_ef(kconfig.HNSW_EF_SEARCH)
    return h
