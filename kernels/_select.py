"""Top-k selection of the GPU search: the CUDA kernels of ``select.cu`` and their emulation.

A score tile (queries x rows, float32 or float16, as the GEMM wrote it) is cut into slices of
``L`` scores per query row; one thread block per (row, slice) turns its scores into 64-bit keys
(the score's order-preserving bits above, ``0xFFFFFFFF - id`` below: unique keys, and at equal
scores the lower id has the larger key) held in shared memory, finds its k largest keys by a
radix select (8 bits a pass, a 256-bin histogram, early exit once the digit's keys fill the
remaining places) and writes them to k fixed slots (key 0: empty).  Candidate lists are
reduced by the same block select over keys, and only the final k keys of a query are sorted.
Nothing in a search synchronises with the host; nothing wider than the tile is allocated.

On the CPU (CI, the numpy namespace) :func:`emulate_block_select` runs the same algorithm
block by block with numpy: the same slices, the same passes, the same early exit, the same
threshold, the same slots filled (in a shuffled order when asked, as the kernel's shared
counter may give them).  The tests compare it with the array-namespace reference
(:func:`evireform.kernels._gpu.topk_rows`).
"""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

from pathlib import Path

import numpy as np

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike

#: scores (keys) one selection block holds in shared memory: 8 bytes each, so 32 KiB at most
MAX_SLICE = 4096
#: the smallest slice; a slice is at least 4 k so that each pass of a reduction shrinks 4x
MIN_SLICE = 2048
#: threads of a selection block
THREADS = 256
#: the largest grid dimension y (query rows a launch)
_MAX_GRID_Y = 65535

_ID_MASK = np.uint64(0xFFFFFFFF)
_RAW: dict[str, Any] = {}


def slice_length(k: int) -> int | None:
    """Scores a selection block takes for top-``k``: a power of two >= max(MIN_SLICE, 4 k),
    or None when that exceeds :data:`MAX_SLICE` (k > 1024: the caller uses the reference)."""
    L = MIN_SLICE
    while L < 4 * int(k):
        L *= 2
    return L if L <= MAX_SLICE else None


# --------------------------------------------------------------------------- keys
def score_keys(S, lo: int = 0, positive_only: bool = True) -> np.ndarray:
    """The kernels' keys of a score tile ``S`` (B, n) float32 or float16 (host arrays), the
    scores of column c belonging to id ``lo + c``; 0 where a score is not a candidate
    (positive_only: <= 0 or NaN; else NaN only)."""
    S = np.ascontiguousarray(S)
    if S.dtype == np.float16:
        u = S.view(np.uint16).astype(np.uint64)
        sign, full = np.uint64(0x8000), np.uint64(0xFFFF)
        nan = (u & np.uint64(0x7FFF)) > np.uint64(0x7C00)
        positive = ((u & sign) == 0) & (u != 0) & ~nan
    elif S.dtype == np.float32:
        ids = lo + np.arange(S.shape[1], dtype=np.int64)[None, :]
        return value_keys(np, S, ids, (S > 0) if positive_only else ~np.isnan(S))
    else:
        raise TypeError(f"score tiles are float32 or float16; got {S.dtype}")
    o = np.where((u & sign) != 0, ~u & full, u | sign)
    ids = np.uint64(lo) + np.arange(S.shape[1], dtype=np.uint64)
    key = (o << np.uint64(32)) | (_ID_MASK - ids)[None, :]
    take = positive if positive_only else ~nan
    return np.where(take, key, np.uint64(0))


def value_keys(xp, vals: ArrayLike, ids: Any, take):
    """Keys of float32 values with their ids (any shape, in namespace ``xp``): the same keys
    as the kernels make of a float32 tile; 0 where ``take`` is False."""
    u = xp.ascontiguousarray(vals, dtype=xp.float32).view(xp.uint32).astype(xp.uint64)
    sign = xp.uint64(0x80000000)
    o = xp.where((u & sign) != 0, ~u & xp.uint64(0xFFFFFFFF), u | sign)
    key = (o << xp.uint64(32)) | (xp.uint64(0xFFFFFFFF) - xp.asarray(ids).astype(xp.uint64))
    return xp.where(take, key, xp.uint64(0))


def decode_keys(xp, keys, half: bool = False):
    """(ids int64, scores float32) of keys: id -1 and score 0 where the key is 0."""
    hi = (keys >> xp.uint64(32)).astype(xp.uint32)
    if half:
        h = (hi & xp.uint32(0xFFFF)).astype(xp.uint16)
        bits = xp.where(h & xp.uint16(0x8000), h & xp.uint16(0x7FFF), ~h)
        vals = bits.view(xp.float16).astype(xp.float32)
    else:
        bits = xp.where(hi & xp.uint32(0x80000000), hi & xp.uint32(0x7FFFFFFF), ~hi)
        vals = bits.view(xp.float32)
    ids = (xp.uint64(0xFFFFFFFF) - (keys & xp.uint64(0xFFFFFFFF))).astype(xp.int64)
    empty = keys == 0
    return xp.where(empty, -1, ids), xp.where(empty, xp.float32(0), vals)


# --------------------------------------------------------------------------- the emulation
def emulate_block_select(blocks: np.ndarray, k: int, rng: np.random.Generator | None=None) -> np.ndarray:
    """What ``block_select`` of select.cu writes, for each row of ``blocks`` (G, L) uint64
    (one block's shared keys; 0 = no candidate): its k largest nonzero keys in k slots, the
    rest 0.  Vectorised over blocks, pass for pass as the kernel: a 256-bin histogram of the
    live keys' digit, the digit reaching the k-th place found from the top, the prefix and the
    places still needed carried, a block done once its digit's keys fill the rest.  ``rng``:
    the selected keys are shuffled within their slots (the kernel's slot order is not
    defined; callers must not depend on it)."""
    blocks = np.asarray(blocks, dtype=np.uint64)
    G, L = blocks.shape
    out = np.zeros((G, k), dtype=np.uint64)
    if G == 0 or k == 0:
        return out
    nonzero = blocks != 0
    prefix = np.zeros(G, dtype=np.uint64)
    need = np.full(G, int(k), dtype=np.int64)
    done = np.zeros(G, dtype=bool)
    mask = np.uint64(0)
    base = np.arange(G, dtype=np.int64)[:, None] * 256
    g = np.arange(G)
    for shift in range(56, -8, -8):
        if done.all():
            break
        sh = np.uint64(shift)
        live = nonzero & ((blocks & mask) == prefix[:, None]) & ~done[:, None]
        digit = ((blocks >> sh) & np.uint64(0xFF)).astype(np.int64)
        hist = np.bincount((base + digit)[live], minlength=G * 256).reshape(G, 256)
        ge = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1]    # ge[:, d]: live keys with digit >= d
        d = (ge >= need[:, None]).sum(axis=1) - 1          # the largest digit reaching need
        above = np.where(d < 255, ge[g, np.minimum(d + 1, 255)], 0)
        act = ~done
        short = act & (d < 0)          # fewer live keys than places: all taken, prefix 0
        go = act & (d >= 0)
        prefix = np.where(go, prefix | (np.maximum(d, 0).astype(np.uint64) << sh), prefix)
        need = np.where(go, need - above, need)
        filled = go & (hist[g, np.maximum(d, 0)] == need)
        done = done | short | filled
        mask = mask | (np.uint64(0xFF) << sh)
    sel = nonzero & (blocks >= prefix[:, None])
    count = sel.sum(axis=1)
    if np.any(count > k):  # cannot happen: keys are unique (a broken invariant, not input)
        raise AssertionError("block select took more than k keys")
    slot = np.cumsum(sel, axis=1) - 1
    r, c = np.nonzero(sel)
    out[r, slot[r, c]] = blocks[r, c]
    if rng is not None:
        for i in np.flatnonzero(count > 1):
            out[i, :count[i]] = rng.permutation(out[i, :count[i]])
    return out


def _slices(a: np.ndarray, L: int) -> np.ndarray:
    """Rows of ``a`` (B, n) cut into slices of L, zero-padded: (B * ceil(n / L), L)."""
    B, n = a.shape
    m = -(-n // L)
    pad = np.zeros((B, m * L), dtype=np.uint64)
    pad[:, :n] = a
    return pad.reshape(B * m, L)


# --------------------------------------------------------------------------- the kernels
def _kernels(xp):
    """select.cu compiled once per process (device only)."""
    if "mod" not in _RAW:
        src = Path(__file__).with_name("select.cu").read_text()
        _RAW["mod"] = xp.RawModule(code=src, options=("-std=c++14",))
    return _RAW["mod"]


def _launch(xp, name: str, src, B: int, n: int, L: int, k: int, args: tuple[Any, ...]):
    """One launch per block of at most 65,535 rows; out (B, ceil(n / L) * k) uint64."""
    m = -(-n // L)
    out = xp.empty((B, m * k), dtype=xp.uint64)
    f = _kernels(xp).get_function(name)
    for r0 in range(0, B, _MAX_GRID_Y):
        r1 = min(B, r0 + _MAX_GRID_Y)
        f((m, r1 - r0), (THREADS,), (src[r0:r1], np.int64(n)) + args + (out[r0:r1],),
          shared_mem=L * 8)
    return out


def select_scores(ns, S, lo: int, k: int, L: int, *, positive_only: bool = True,
                  rng: np.random.Generator | None=None):
    """Candidate keys of a score tile ``S`` (B, n) float32 or float16: each slice of L
    scores of a row gives its k best keys; (B, ceil(n / L) * k) uint64 in the namespace."""
    xp = ns.xp
    B, n = S.shape
    if B == 0 or n == 0:
        return xp.zeros((B, 0), dtype=xp.uint64)
    if ns.on_device:
        S = xp.ascontiguousarray(S)
        half = S.dtype == xp.float16
        src = S.view(xp.uint16) if half else S.astype(xp.float32, copy=False)
        return _launch(xp, "select_f16" if half else "select_f32", src, B, n, L, k,
                       (np.int64(lo), np.int32(L), np.int32(k), np.int32(positive_only)))
    keys = score_keys(S, lo, positive_only)
    return xp.asarray(emulate_block_select(_slices(keys, L), k, rng).reshape(B, -1))


def select_keys(ns, keys, k: int, L: int, *, rng: np.random.Generator | None=None):
    """Each slice of L candidate keys of a row reduced to its k largest: (B, ceil(n/L) k)."""
    xp = ns.xp
    B, n = keys.shape
    if ns.on_device:
        keys = xp.ascontiguousarray(keys)
        return _launch(xp, "select_keys", keys, B, n, L, k, (np.int32(L), np.int32(k)))
    keys = np.asarray(keys, dtype=np.uint64)
    return xp.asarray(emulate_block_select(_slices(keys, L), k, rng).reshape(B, -1))


def reduce_keys(ns, keys, k: int, L: int, *, limit: int | None = None, rng: np.random.Generator | None=None):
    """Candidate keys (B, n) reduced by block selects until a row holds at most ``limit``
    keys (default k: the final k, in no defined order)."""
    limit = k if limit is None else max(int(limit), k)
    while keys.shape[1] > limit:
        keys = select_keys(ns, keys, k, L, rng=rng)
    return keys


def _pow2(k: int) -> int:
    p = 1
    while p < k:
        p *= 2
    return p


def emulate_sort_rows_desc(keys: np.ndarray) -> np.ndarray:
    """What ``sort_rows_desc`` of select.cu leaves in each row of ``keys`` (B, k): the same
    bitonic network, stage by stage, vectorised over rows (the padding to a power of two
    with 0 keys, then the first k)."""
    keys = np.asarray(keys, dtype=np.uint64)
    B, k = keys.shape
    P = _pow2(k)
    s = np.zeros((B, P), dtype=np.uint64)
    s[:, :k] = keys
    i = np.arange(P)
    size = 2
    while size <= P:
        stride = size // 2
        while stride > 0:
            j = i ^ stride
            lo = i[j > i]
            hi = lo ^ stride
            down = (lo & size) == 0
            a, b = s[:, lo], s[:, hi]
            swap = (a < b) == down[None, :]
            s[:, lo] = np.where(swap, b, a)
            s[:, hi] = np.where(swap, a, b)
            stride //= 2
        size *= 2
    return s[:, :k]


def sort_keys(ns, keys):
    """The k keys of each row, largest first (the one sort of a search: k a row): the
    bitonic kernel on a device (no library sort, which may synchronise), its emulation
    here."""
    xp = ns.xp
    B, k = keys.shape
    if B == 0 or k <= 1:
        return keys
    if _pow2(k) > MAX_SLICE:  # too long for shared memory (an fp16 re-rank's widened
        return xp.sort(keys, axis=1)[:, ::-1]  # margin): the library sort
    if ns.on_device:
        keys = xp.ascontiguousarray(keys)
        _kernels(xp).get_function("sort_rows_desc")(
            (B,), (THREADS,), (keys, np.int32(k), np.int32(_pow2(k))),
            shared_mem=_pow2(k) * 8)
        return keys
    return xp.asarray(emulate_sort_rows_desc(np.asarray(keys)))


__all__ = ["slice_length", "score_keys", "value_keys", "decode_keys", "emulate_block_select",
           "select_scores", "select_keys", "reduce_keys", "sort_keys", "emulate_sort_rows_desc", "MAX_SLICE",
           "MIN_SLICE", "THREADS"]
