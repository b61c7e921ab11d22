"""numba CPU kernels.

Every kernel here is private: the public wrappers in :mod:`evireform.kernels` validate the
input, own the workspaces and choose the backend.  Conventions shared by all kernels:

* a top-k order is best-first, where "worse" means a lower score, or an equal score and a
  higher id (ties by lower id); the readout keeps a heap with the worst kept item at its root,
  the exact search a flat candidate buffer (see "top-k buffers");
* variable-length data is one flat array plus offsets (CSR);
* parallel loops give every thread its own output rows and its own scratch, so results are
  deterministic and no atomics are needed.
"""
from __future__ import annotations

from typing import Any
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from . import config

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike

_JIT = dict(cache=config.NUMBA_CACHE, nogil=True, fastmath=False)


# --------------------------------------------------------------------------- top-k heap
@njit(inline="always", **_JIT)
def _worse(va, ia, vb, ib) -> bool:
    return va < vb or (va == vb and ia > ib)


@njit(**_JIT)
def _sift_down(vals: ArrayLike, ids: Any, n, pos) -> None:
    while True:
        c = 2 * pos + 1
        if c >= n:
            return
        r = c + 1
        if r < n and _worse(vals[r], ids[r], vals[c], ids[c]):
            c = r
        if _worse(vals[c], ids[c], vals[pos], ids[pos]):
            vals[c], vals[pos] = vals[pos], vals[c]
            ids[c], ids[pos] = ids[pos], ids[c]
            pos = c
        else:
            return


@njit(**_JIT)
def _heap_offer(vals: ArrayLike, ids: Any, n, k, v, i: Any):
    """Offer (v, i) to a heap holding n <= k items; return the new n."""
    if n < k:
        vals[n] = v
        ids[n] = i
        pos = n
        while pos > 0:
            p = (pos - 1) // 2
            if _worse(vals[pos], ids[pos], vals[p], ids[p]):
                vals[p], vals[pos] = vals[pos], vals[p]
                ids[p], ids[pos] = ids[pos], ids[p]
                pos = p
            else:
                break
        return n + 1
    if _worse(vals[0], ids[0], v, i):
        vals[0] = v
        ids[0] = i
        _sift_down(vals, ids, n, 0)
    return n


@njit(**_JIT)
def _heap_sort(vals: ArrayLike, ids: Any, n) -> None:
    """Sort a heap in place, best first."""
    for end in range(n - 1, 0, -1):
        vals[0], vals[end] = vals[end], vals[0]
        ids[0], ids[end] = ids[end], ids[0]
        _sift_down(vals, ids, end, 0)


# --------------------------------------------------------------------------- vector tiles
# Dot-product tiles written as LLVM vector code, with their order of summation spelled out.
#
# The plain loops below (``_rows8_loop``, ``_rows2q4``) are compiled with reassociation allowed,
# so LLVM picks their order of summation for the machine.  On the x86-64 machine these kernels
# were measured on, it keeps sixteen running sums (two 8-lane registers): lane ``l`` adds
# ``h[t] * q[t]`` for ``t = l, l + 16, l + 32, ...`` with a fused multiply-add, then the lanes
# are added as ``(l, l + 8)``, then ``(l, l + 4)``, then ``(0 + 2) + (1 + 3)``.  The tiles write
# that order out (``python scripts/tile_order_check.py`` compares loops and tiles on a
# machine), so it is the same on every machine and in every tile shape: an ``R`` rows x ``NQ``
# queries tile keeps ``R * NQ`` independent 16-lane sums, enough to keep the FMA units busy,
# where the loop's two rows x four queries could not.  A dimension that is not a multiple of
# 16 keeps the loops (LLVM adds a remainder there, in a machine-dependent order).
#
# A tile is an ``@intrinsic``: ``tile(H, r, Q, b, S, o)`` sets ``S[b + j, o + i] = H[r + i] .
# Q[b + j]`` for ``i < R``, ``j < NQ`` (``Q`` and ``S`` may be 1-D when ``NQ == 1``: then
# ``S[o + i] = H[r + i] . Q``).  The caller guarantees the bounds, rows with unit stride, and
# ``d % 16 == 0``.
LANES = 16
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_F32 = ir.FloatType()
_VEC = ir.VectorType(_F32, LANES)
_BYTES = ir.IntType(8).as_pointer()


def _mask(idx: Any):
    return ir.Constant(ir.VectorType(_I32, len(idx)), [ir.Constant(_I32, x) for x in idx])


def _reduce(builder, v):
    """The lanes of ``v`` added in the loops' order: (l, l+8), then (l, l+4), then
    (0 + 2) + (1 + 3)."""
    v8 = builder.fadd(builder.shuffle_vector(v, v, _mask(range(8))),
                      builder.shuffle_vector(v, v, _mask(range(8, 16))))
    v4 = builder.fadd(builder.shuffle_vector(v8, v8, _mask(range(4))),
                      builder.shuffle_vector(v8, v8, _mask(range(4, 8))))
    e = [builder.extract_element(v4, ir.Constant(_I32, x)) for x in range(4)]
    return builder.fadd(builder.fadd(e[0], e[2]), builder.fadd(e[1], e[3]))


def make_tile(R: int, NQ: int, split: bool = False):
    """The ``R`` x ``NQ`` dot-product tile (see the module docstring).

    ``split``: the sixteen running sums of each pair are kept as two 8-lane halves, summed in
    two passes over the row (lanes 0-7, then lanes 8-15), so a tile holds ``R * NQ`` 8-lane
    registers instead of twice as many.  The first step of the lanes' reduction adds lane
    ``l`` to lane ``l + 8``, which is the two halves added, so every score is bit for bit the
    one-pass tile's; it is for machines whose vectors are 8 lanes wide (AVX2: 16 registers),
    where a one-pass tile of more than three pairs spills."""
    W = LANES // 2 if split else LANES
    vec = ir.VectorType(_F32, W)

    @intrinsic
    def tile(typingctx, H: ArrayLike, r, Q: ArrayLike, b, S, o):
        sig = types.void(H, r, Q, b, S, o)

        def codegen(context, builder, signature, args: Any):
            Hv, rv, Qv, bv, Sv, ov = args
            _, _, Qt, _, St, _ = signature.args
            c = lambda v: ir.Constant(_I64, v)  # noqa: E731
            Ha = context.make_array(signature.args[0])(context, builder, Hv)
            Qa = context.make_array(Qt)(context, builder, Qv)
            Sa = context.make_array(St)(context, builder, Sv)
            d = cgutils.unpack_tuple(builder, Ha.shape, 2)[1]
            hs0 = cgutils.unpack_tuple(builder, Ha.strides, 2)[0]
            hb = builder.bitcast(Ha.data, _BYTES)
            qb = builder.bitcast(Qa.data, _BYTES)
            sb = builder.bitcast(Sa.data, _BYTES)
            hrow = [builder.gep(hb, [builder.mul(builder.add(rv, c(i)), hs0)])
                    for i in range(R)]
            if Qt.ndim == 2:
                qs0 = cgutils.unpack_tuple(builder, Qa.strides, 2)[0]
                qrow = [builder.gep(qb, [builder.mul(builder.add(bv, c(j)), qs0)])
                        for j in range(NQ)]
            else:
                qrow = [qb]
            if St.ndim == 2:
                ss0, ss1 = cgutils.unpack_tuple(builder, Sa.strides, 2)
            else:
                ss0, ss1 = c(0), cgutils.unpack_tuple(builder, Sa.strides, 1)[0]
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vec, [vec] * 3), f"llvm.fma.v{W}f32")
            zero = ir.Constant(vec, None)
            n16 = builder.sdiv(d, c(LANES))

            def sums(first):
                """One pass over the row: the running sums of the lanes from ``first`` on
                (``W`` of them) for every pair."""
                pre = builder.basic_block
                loop = builder.append_basic_block("tile.loop")
                done = builder.append_basic_block("tile.done")
                builder.cbranch(builder.icmp_signed(">", n16, c(0)), loop, done)
                builder.position_at_end(loop)
                t = builder.phi(_I64)
                acc = [[builder.phi(vec) for _ in range(NQ)] for _ in range(R)]
                off = builder.add(builder.mul(t, c(4 * LANES)), c(4 * first))
                load = lambda base: builder.load(  # noqa: E731
                    builder.bitcast(builder.gep(base, [off]), vec.as_pointer()), align=4)
                hv = [load(p) for p in hrow]
                qv = [load(p) for p in qrow]
                new = [[builder.call(fma, [hv[i], qv[j], acc[i][j]]) for j in range(NQ)]
                       for i in range(R)]
                t1 = builder.add(t, c(1))
                end = builder.basic_block
                t.add_incoming(c(0), pre)
                t.add_incoming(t1, end)
                for i in range(R):
                    for j in range(NQ):
                        acc[i][j].add_incoming(zero, pre)
                        acc[i][j].add_incoming(new[i][j], end)
                builder.cbranch(builder.icmp_signed("<", t1, n16), loop, done)
                builder.position_at_end(done)
                fin = [[builder.phi(vec) for _ in range(NQ)] for _ in range(R)]
                for i in range(R):
                    for j in range(NQ):
                        fin[i][j].add_incoming(zero, pre)
                        fin[i][j].add_incoming(new[i][j], end)
                return fin

            if split:
                lo = sums(0)
                hi = sums(W)
                full = [[builder.shuffle_vector(lo[i][j], hi[i][j], _mask(range(LANES)))
                         for j in range(NQ)] for i in range(R)]
            else:
                full = sums(0)
            for i in range(R):
                for j in range(NQ):
                    at = builder.add(builder.mul(builder.add(bv, c(j)), ss0),
                                     builder.mul(builder.add(ov, c(i)), ss1))
                    builder.store(_reduce(builder, full[i][j]),
                                  builder.bitcast(builder.gep(sb, [at]), _F32.as_pointer()))
            return context.get_dummy_value()

        return sig, codegen

    return tile


@intrinsic
def _compress16(typingctx, sc, lo, lim, v, ix, n, base):
    """Append the scores ``sc[lo:lo + 16]`` above ``lim`` to ``v[n:]`` and their ids (``base +
    j``) to ``ix[n:]``, in order, by two masked compress-stores; returns the new ``n``.  The
    caller guarantees unit strides and room for 16 more."""
    sig = types.int64(sc, lo, lim, v, ix, n, base)

    def codegen(context, builder, signature, args: Any):
        scv, lov, limv, vv, ixv, nv, basev = args
        st, _, _, vt, it, _, _ = signature.args
        sa = context.make_array(st)(context, builder, scv)
        va = context.make_array(vt)(context, builder, vv)
        ia = context.make_array(it)(context, builder, ixv)
        i1 = ir.IntType(1)
        mvec = ir.VectorType(i1, LANES)
        ivec = ir.VectorType(_I64, LANES)
        x = builder.load(builder.bitcast(builder.gep(sa.data, [lov]), _VEC.as_pointer()),
                         align=4)
        bar = builder.insert_element(ir.Constant(_VEC, ir.Undefined), limv,
                                     ir.Constant(_I32, 0))
        bar = builder.shuffle_vector(bar, bar, ir.Constant(ir.VectorType(_I32, LANES),
                                                           [ir.Constant(_I32, 0)] * LANES))
        mask = builder.fcmp_ordered(">", x, bar)
        store_f = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [_VEC, _F32.as_pointer(), mvec]),
            "llvm.masked.compressstore.v16f32")
        store_i = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [ivec, _I64.as_pointer(), mvec]),
            "llvm.masked.compressstore.v16i64")
        builder.call(store_f, [x, builder.gep(va.data, [nv]), mask])
        b = builder.insert_element(ir.Constant(ivec, ir.Undefined), basev, ir.Constant(_I32, 0))
        b = builder.shuffle_vector(b, b, ir.Constant(ir.VectorType(_I32, LANES),
                                                     [ir.Constant(_I32, 0)] * LANES))
        ids = builder.add(b, ir.Constant(ivec, [ir.Constant(_I64, j) for j in range(LANES)]))
        builder.call(store_i, [ids, builder.gep(ia.data, [nv]), mask])
        bits = builder.bitcast(mask, ir.IntType(LANES))
        pop = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.IntType(LANES), [ir.IntType(LANES)]),
            f"llvm.ctpop.i{LANES}")
        return builder.add(nv, builder.zext(builder.call(pop, [bits]), _I64))

    return sig, codegen


# --------------------------------------------------------------------------- prefetch
# Propagation and readout read arrays of the index's size (acc, mark, owner, pacc) at the ids
# the graph hands them, in no order: each read is a cache miss once z reaches thousands of
# propositions, and the loop waits on it.  A loop that knows the id it will read PF_AHEAD
# steps later asks for that line now (a hint: no fault, no change to any value or order, so
# every result stays bit for bit).  Measured on an AMD EPYC, the commit before and after side
# by side (`evireform bench --only propagate --only propagate_batch --only readout --only hnsw
# --only retrieve_core`): propagate/synthetic (1M) 1.77 to 0.97 ms, readout/100k 139 to 93 us.
# Below PF_MIN_ROWS propositions the arrays sit in the caches and the hints would be pure
# overhead (MuSiQue's and 2Wiki's indexes run the loops without them).
PF_AHEAD = 16
PF_MIN_ROWS = 1 << 16


@intrinsic
def _prefetch(typingctx, arr, i):
    """Hint the CPU to bring ``arr[i]``'s cache line in for a read (``llvm.prefetch``); no
    bounds check is needed (a prefetch never faults) and nothing is returned."""
    sig = types.void(arr, i)

    def codegen(context, builder, signature, args: Any):
        av, iv = args
        a = context.make_array(signature.args[0])(context, builder, av)
        i8p = ir.IntType(8).as_pointer()
        ptr = builder.bitcast(builder.gep(a.data, [iv]), i8p)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, _I32, _I32, _I32]),
            "llvm.prefetch.p0")
        # read, keep in every cache level, data cache
        builder.call(fn, [ptr, ir.Constant(_I32, 0), ir.Constant(_I32, 3), ir.Constant(_I32, 1)])
        return context.get_dummy_value()

    return sig, codegen


# --------------------------------------------------------------------------- cosine top-k
# A query's scores do not depend on the kernel or the batch it is searched in (BLAS gives no
# such guarantee): for a dimension that is a multiple of 16, the vector tiles above (one order
# on every machine, whichever tiles the machine's vector width picks, below); for any other
# dimension, the plain loops below (eight rows x one query, two rows x four queries), which
# LLVM compiles to one order for both shapes on a given machine.
# tests/test_kernels.py checks single against batch on several shapes, and the tiles against
# the written-out order, so a compiler that reorders either fails the suite.
#
# Which tiles a scan uses depends on the machine's vector width (the sums do not): with
# 16-lane registers (AVX-512: 32 of them) eight rows x one query and six rows x four queries
# fit in registers; with 8-lane ones (AVX2: 16 of them) those tiles spill, so a single query
# is scored a row at a time (one stream through memory, which the prefetcher follows best)
# and a batch by split tiles of two rows x four queries (two rows divide the batch block, so
# no row takes the one-row tile).  Measured on an AMD EPYC (Zen, AVX2) with ``python
# scripts/profile_kernels.py --tiles``: one query 675 us a 10k scan against 1,032 us by the
# eight-row tile and 842 us by numpy's matvec; 48 queries 6.7 ms against 24.0 ms by the
# six-by-four tile and 7.1 ms by numpy's matmul.


def wide_vectors() -> bool:
    """True when numba compiles for a CPU with 16-lane float registers (AVX-512F): the host's,
    or the one ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` name (a named CPU without features
    counts as narrow; either family of tiles gives the same scores)."""
    from numba.core import config as nconfig
    feats = nconfig.CPU_FEATURES
    if feats:
        return "+avx512f" in feats.split(",")
    if nconfig.CPU_NAME and nconfig.CPU_NAME != "host":
        return False
    import llvmlite.binding as llvm
    return bool(llvm.get_host_cpu_features().get("avx512f", False))


WIDE = wide_vectors()
_T8x1 = make_tile(8, 1)
_T1x1 = make_tile(1, 1)
_T1x4 = make_tile(1, 4)
BATCH_TILE = (6, 4) if WIDE else (2, 4)  # rows x queries of the batch tile (queries divide 4)
_TB = make_tile(*BATCH_TILE, split=not WIDE)
_BR = BATCH_TILE[0]
_BQ = BATCH_TILE[1]


@njit(inline="always", **_JIT)
def _tiled(H: ArrayLike, Q: ArrayLike) -> bool:
    """True when the vector tiles apply: d a multiple of 16, rows contiguous."""
    d = H.shape[1]
    return (d >= LANES and d % LANES == 0 and H.strides[1] == 4
            and Q.strides[Q.ndim - 1] == 4)


_DOT = dict(cache=config.NUMBA_CACHE, nogil=True, fastmath={"reassoc", "contract"})


@njit(**_DOT)
def _rows8(H: ArrayLike, r, q: ArrayLike, S, o) -> None:
    """S[o + i] = H[r + i] . q for i < 8: the vector tile when it applies, else the loop."""
    if _tiled(H, q):
        if WIDE:
            _T8x1(H, r, q, 0, S, o)
        else:
            for i in range(8):
                _T1x1(H, r + i, q, 0, S, o + i)
    else:
        _rows8_loop(H, r, q, S, o)


@njit(**_DOT)
def _rows8_loop(H: ArrayLike, r, q: ArrayLike, S, o) -> None:
    """S[o + i] = H[r + i] . q for i < 8, as a loop."""
    d = q.shape[0]
    h0 = H[r]
    h1 = H[r + 1]
    h2 = H[r + 2]
    h3 = H[r + 3]
    h4 = H[r + 4]
    h5 = H[r + 5]
    h6 = H[r + 6]
    h7 = H[r + 7]
    a0 = np.float32(0.0)
    a1 = np.float32(0.0)
    a2 = np.float32(0.0)
    a3 = np.float32(0.0)
    a4 = np.float32(0.0)
    a5 = np.float32(0.0)
    a6 = np.float32(0.0)
    a7 = np.float32(0.0)
    for t in range(d):
        x = q[t]
        a0 += x * h0[t]
        a1 += x * h1[t]
        a2 += x * h2[t]
        a3 += x * h3[t]
        a4 += x * h4[t]
        a5 += x * h5[t]
        a6 += x * h6[t]
        a7 += x * h7[t]
    S[o] = a0
    S[o + 1] = a1
    S[o + 2] = a2
    S[o + 3] = a3
    S[o + 4] = a4
    S[o + 5] = a5
    S[o + 6] = a6
    S[o + 7] = a7


@njit(**_DOT)
def _rows2q4(H: ArrayLike, r, Q: ArrayLike, b, S, o) -> None:
    """S[b + j, o + i] = H[r + i] . Q[b + j] for i < 2, j < 4."""
    d = Q.shape[1]
    h = H[r]
    g = H[r + 1]
    q0 = Q[b]
    q1 = Q[b + 1]
    q2 = Q[b + 2]
    q3 = Q[b + 3]
    a0 = np.float32(0.0)
    a1 = np.float32(0.0)
    a2 = np.float32(0.0)
    a3 = np.float32(0.0)
    c0 = np.float32(0.0)
    c1 = np.float32(0.0)
    c2 = np.float32(0.0)
    c3 = np.float32(0.0)
    for t in range(d):
        x = h[t]
        y = g[t]
        u0 = q0[t]
        u1 = q1[t]
        u2 = q2[t]
        u3 = q3[t]
        a0 += x * u0
        a1 += x * u1
        a2 += x * u2
        a3 += x * u3
        c0 += y * u0
        c1 += y * u1
        c2 += y * u2
        c3 += y * u3
    S[b, o] = a0
    S[b + 1, o] = a1
    S[b + 2, o] = a2
    S[b + 3, o] = a3
    S[b, o + 1] = c0
    S[b + 1, o + 1] = c1
    S[b + 2, o + 1] = c2
    S[b + 3, o + 1] = c3


@njit(parallel=True, **_DOT)
def dot_one(H: ArrayLike, q: ArrayLike, S) -> None:
    """S[r] = H[r] . q for every row (eight rows at a time; the last < 8 via a padded copy)."""
    M, d = H.shape
    n8 = M // 8
    for c in prange(n8):
        _rows8(H, 8 * c, q, S, 8 * c)
    tail = M - 8 * n8
    if tail > 0:
        T = np.zeros((8, d), dtype=np.float32)
        T[:tail] = H[8 * n8:]
        out = np.empty(8, dtype=np.float32)
        _rows8(T, 0, q, out, 0)
        S[8 * n8:] = out[:tail]


# --------------------------------------------------------------------------- top-k buffers
# The exact top-k scans keep their candidates in a flat buffer instead of a heap: a score above
# the bar is appended (one store), and a full buffer is cut back to its best k, whose k-th
# score becomes the new bar.  Rows arrive in increasing id order, so the buffer stays in id
# order, ties at the bar keep their lowest ids, and a later row with a score equal to the bar
# (a higher id) is rightly refused: the kept set is exactly the heap's.  A heap pays a sift
# of log k branchy steps for each of the ~k(1 + ln(n/k)) rows that beat its root; the buffer
# pays a store, plus one linear cut per (capacity - k) appends.


@njit(inline="always", **_JIT)
def _buf_cap(k):
    """Candidate-buffer capacity for top-``k``: room for k and a whole score block (at most
    256 scores) after a cut."""
    return 2 * k + 256


@njit(**_JIT)
def _kth_largest(a, n, k):
    """The k-th largest of ``a[:n]`` (no NaN; 1 <= k <= n), by quickselect on a copy (two to
    three times numba's ``np.partition`` on a few hundred values)."""
    w = a[:n].copy()
    want = n - k  # its position in ascending order
    lo = 0
    hi = n - 1
    while lo < hi:
        x = w[lo]
        y = w[(lo + hi) >> 1]
        z = w[hi]
        if x > y:
            x, y = y, x
        if y > z:
            y = z
        if x > y:
            y = x
        p = y  # median of three
        i = lo
        j = hi
        while i <= j:
            while w[i] < p:
                i += 1
            while w[j] > p:
                j -= 1
            if i <= j:
                w[i], w[j] = w[j], w[i]
                i += 1
                j -= 1
        if want <= j:
            hi = j
        elif want >= i:
            lo = i
        else:
            return w[want]
    return w[want]


@njit(**_JIT)
def _buf_keep(bv, bi, n, k):
    """Cut ``bv[:n]``/``bi[:n]`` (n > k, ids increasing) to its best ``k`` in place, keeping
    their order (ties at the k-th score keep the lowest ids); returns the k-th score."""
    tau = _kth_largest(bv, n, k)
    above = 0
    for j in range(n):
        if bv[j] > tau:
            above += 1
    ties = k - above
    m = 0
    for j in range(n):  # without data-dependent branches: every entry written, m moves on a keep
        v = bv[j]
        i = bi[j]
        eq = v == tau
        keep = (v > tau) | (eq & (ties > 0))
        bv[m] = v
        bi[m] = i
        m += keep
        ties -= eq & keep
    return tau


@njit(**_JIT)
def _buf_sort(bv, bi, n) -> None:
    """Sort ``bv[:n]``/``bi[:n]`` (ids increasing) best first, ties by lower id (stable)."""
    if n < 2:
        return
    order = np.argsort(-bv[:n], kind="mergesort")
    v = bv[:n].copy()
    i = bi[:n].copy()
    for j in range(n):
        bv[j] = v[order[j]]
        bi[j] = i[order[j]]


@njit(inline="always", **_JIT)
def _buf_fold(sc, lo, m, base, v, ix, n, lim, k):
    """Append the scores ``sc[lo:lo + m]`` above the bar ``lim`` (ids ``base + j``, increasing)
    to the candidates ``v[:n]``/``ix[:n]``; returns the new ``(n, lim, start)``, ``start``
    where this block's entries begin.  A block with none
    above the bar costs one vectorised count; otherwise the scores above it are appended
    sixteen at a time by :func:`_compress16` (the rest one by one, the count advancing by the
    comparison), so no branch depends on the data.  The buffer is cut to its best ``k`` first
    when the block might not fit."""
    c = 0
    for j in range(m):
        c += sc[lo + j] > lim
    if c == 0:
        return n, lim, n
    if n + m > v.shape[0]:
        lim = _buf_keep(v, ix, n, k)
        n = k
    start = n
    j = 0
    if sc.strides[0] == 4 and v.strides[0] == 4 and ix.strides[0] == 8:
        while j + LANES <= m:
            n = _compress16(sc, lo + j, lim, v, ix, n, base + j)
            j += LANES
    while j < m:
        x = sc[lo + j]
        v[n] = x
        ix[n] = base + j
        n += x > lim
        j += 1
    return n, lim, start


@njit(**_JIT)
def _merge_chunks(cand_v, cand_i, cand_n, k):
    """The best ``k`` of the chunks' candidates (``cand_n[c]`` entries each, chunk ranges in
    increasing id order): (ids, vals, count), best first, ties by lower id."""
    total = 0
    for c in range(cand_v.shape[0]):
        total += cand_n[c]
    all_v = np.empty(max(total, k), dtype=np.float32)
    all_i = np.empty(max(total, k), dtype=np.int64)
    n = 0
    for c in range(cand_v.shape[0]):
        for j in range(cand_n[c]):
            all_v[n] = cand_v[c, j]
            all_i[n] = cand_i[c, j]
            n += 1
    if n > k:
        _buf_keep(all_v, all_i, n, k)
        n = k
    _buf_sort(all_v, all_i, n)
    return all_i[:k].copy(), all_v[:k].copy(), n


@njit(parallel=True, **_DOT)
def topk_one(H: ArrayLike, q: ArrayLike, k, n_chunks):
    """Fused exact top-k positive scores of one query: each of ``n_chunks`` row ranges is scored
    eight rows at a time (as in :func:`dot_one`) straight into its own candidate buffer; the
    buffers are merged at the end.  Returns (ids, vals, count), best first, ties by lower id;
    count -1 (nothing scanned) when ``q`` holds a NaN or inf: the query's check costs no call
    of its own (numpy's after a scan run with cold caches)."""
    M, d = H.shape
    for t in range(d):
        if not np.isfinite(q[t]):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32), -1
    cap = _buf_cap(k)
    cand_v = np.empty((n_chunks, cap), dtype=np.float32)
    cand_i = np.empty((n_chunks, cap), dtype=np.int64)
    cand_n = np.zeros(n_chunks, dtype=np.int64)
    step = (M + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        lo = min(M, c * step)
        hi = min(M, lo + step)
        v = cand_v[c]
        ix = cand_i[c]
        buf = np.empty(256, dtype=np.float32)
        T = np.zeros((8, d), dtype=np.float32)
        n = 0
        lim = np.float32(0.0)  # only positive scores; once cut, only strictly better ones
        for b0 in range(lo, hi, 256):
            b1 = min(hi, b0 + 256)
            m8 = (b1 - b0) // 8
            for g in range(m8):
                _rows8(H, b0 + 8 * g, q, buf, 8 * g)
            m = b1 - b0 - 8 * m8
            if m > 0:
                T[:m] = H[b0 + 8 * m8:b1]
                _rows8(T, 0, q, buf, 8 * m8)
            n, lim, _ = _buf_fold(buf, 0, b1 - b0, b0, v, ix, n, lim, k)
        cand_n[c] = n
    return _merge_chunks(cand_v, cand_i, cand_n, k)


@njit(**_DOT)
def _topk_rows_range(H: ArrayLike, rows: Any, q: ArrayLike, lo, hi, k, v, ix):
    """The candidates ``(v, ix)`` (capacity ``_buf_cap(k)``; a superset of the top ``k``) of
    the positive scores of ``rows[lo:hi]``: each group of eight rows is copied into a scratch
    block and scored by the eight-row dot product of :func:`topk_one` (so every score equals
    bitwise the one a matrix of just those rows gets); returns their number, ids increasing."""
    d = H.shape[1]
    buf = np.empty(8, dtype=np.float32)
    T = np.zeros((8, d), dtype=np.float32)
    n = 0
    lim = np.float32(0.0)
    for g0 in range(lo, hi, 8):
        m = min(hi, g0 + 8) - g0
        for j in range(m):
            r = rows[g0 + j]
            for t in range(d):  # an explicit loop: a slice copy is a call per row
                T[j, t] = H[r, t]
        _rows8(T, 0, q, buf, 0)
        n, lim, start = _buf_fold(buf, 0, m, 0, v, ix, n, lim, k)
        for p in range(start, n):  # the block's offsets to row ids (still increasing)
            ix[p] = rows[g0 + ix[p]]
    return n


@njit(parallel=True, **_DOT)
def topk_rows(H: ArrayLike, rows: Any, q: ArrayLike, k, n_chunks):
    """:func:`topk_one` over the rows ``rows`` of ``H`` only (ascending positions), one
    range of them per thread (:func:`_topk_rows_range`); ids are positions in ``H``.
    Nothing proportional to ``rows`` is allocated."""
    R = rows.shape[0]
    cap = _buf_cap(k)
    cand_v = np.empty((n_chunks, cap), dtype=np.float32)
    cand_i = np.empty((n_chunks, cap), dtype=np.int64)
    cand_n = np.zeros(n_chunks, dtype=np.int64)
    step = (R + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        lo = min(R, c * step)
        cand_n[c] = _topk_rows_range(H, rows, q, lo, min(R, lo + step), k, cand_v[c],
                                      cand_i[c])
    return _merge_chunks(cand_v, cand_i, cand_n, k)


@njit(**_DOT)
def topk_rows_serial(H: ArrayLike, rows: Any, q: ArrayLike, k):
    """:func:`topk_rows` in one range on the calling thread: for few rows, where waking the
    thread pool would cost more than the scan (and, on a loaded machine, wait for a core)."""
    cap = _buf_cap(k)
    v = np.empty((1, cap), dtype=np.float32)
    ix = np.empty((1, cap), dtype=np.int64)
    n = np.zeros(1, dtype=np.int64)
    n[0] = _topk_rows_range(H, rows, q, 0, rows.shape[0], k, v[0], ix[0])
    return _merge_chunks(v, ix, n, k)


@njit(**_DOT)
def _dot_block(H: ArrayLike, lo, hi, Q: ArrayLike, S, T) -> None:
    """S[:, r - lo] = Q . H[r] for lo <= r < hi; Q has a multiple of 4 rows, S at least
    hi - lo + 1 columns (with the loops, an odd last row goes through the 2-row scratch T)."""
    B = Q.shape[0]
    n = hi - lo
    if _tiled(H, Q):
        nt = n // _BR
        for p in range(nt):
            for b in range(0, B, _BQ):
                _TB(H, lo + _BR * p, Q, b, S, _BR * p)
        for i in range(_BR * nt, n):
            for b in range(0, B, 4):
                _T1x4(H, lo + i, Q, b, S, i)
        return
    for p in range(n // 2):
        for b in range(0, B, 4):
            _rows2q4(H, lo + 2 * p, Q, b, S, 2 * p)
    if n % 2 == 1:
        T[0] = H[hi - 1]
        for b in range(0, B, 4):
            _rows2q4(T, 0, Q, b, S, n - 1)


@njit(parallel=True, **_DOT)
def dot_scores(H: ArrayLike, Q: ArrayLike, S, block) -> None:
    """S[b, r] = H[r] . Q[b] for all rows; Q has a multiple of 4 rows (zero-padded)."""
    M, d = H.shape
    nb = (M + block - 1) // block
    for c in prange(nb):
        lo = c * block
        hi = min(M, lo + block)
        Sl = np.empty((Q.shape[0], block + 1), dtype=np.float32)
        T = np.zeros((2, d), dtype=np.float32)
        _dot_block(H, lo, hi, Q, Sl, T)
        S[:, lo:hi] = Sl[:, :hi - lo]


@njit(parallel=True, **_DOT)
def topk_batch(H: ArrayLike, Q: ArrayLike, B, k, n_chunks, block):
    """Fused exact top-k for queries Q[:B] (Q zero-padded to a multiple of 4 rows).

    Each of ``n_chunks`` row ranges is scored ``block`` rows at a time into a small per-thread
    score block that is folded at once into per-query candidate buffers; the chunks'
    candidates are merged at the end.  Returns (ids, scores) of shape (B, k), best first,
    padded with -1 / 0.
    """
    M, d = H.shape
    Bq = Q.shape[0]
    cap = _buf_cap(k) + max(0, block - 256)  # a cut leaves room for a whole block
    cv = np.empty((n_chunks, B, cap), dtype=np.float32)
    ci = np.empty((n_chunks, B, cap), dtype=np.int64)
    cn = np.zeros((n_chunks, B), dtype=np.int64)
    cl = np.zeros((n_chunks, B), dtype=np.float32)  # each buffer's bar
    step = (M + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        lo = c * step
        hi = min(M, lo + step)
        S = np.empty((Bq, block + 1), dtype=np.float32)
        T = np.zeros((2, d), dtype=np.float32)
        for s0 in range(lo, hi, block):
            s1 = min(hi, s0 + block)
            _dot_block(H, s0, s1, Q, S, T)
            for b in range(B):
                v = cv[c, b]
                ix = ci[c, b]
                n = cn[c, b]
                # only positive scores enter; rows arrive in increasing id order, so once the
                # buffer has been cut only a strictly higher score can (an equal one has a
                # higher id)
                lim = cl[c, b]
                n, lim, _ = _buf_fold(S[b], 0, s1 - s0, s0, v, ix, n, lim, k)
                cn[c, b] = n
                cl[c, b] = lim
    out_v = np.zeros((B, k), dtype=np.float32)
    out_i = np.full((B, k), -1, dtype=np.int64)
    for b in prange(B):
        ids, vals, n = _merge_chunks(cv[:, b, :], ci[:, b, :], cn[:, b], k)
        out_i[b, :n] = ids[:n]
        out_v[b, :n] = vals[:n]
    return out_i, out_v


# --------------------------------------------------------------------------- propagation
@njit(**_JIT)
def check_seed(ids: Any, vals: ArrayLike, M) -> int:
    """0 when every id lies in [0, M) and every value is finite; 1 bad id; 2 bad value."""
    for t in range(ids.shape[0]):
        if ids[t] < 0 or ids[t] >= M:
            return 1
        if not np.isfinite(vals[t]):
            return 2
    return 0


@njit(**_JIT)
def check_csr(indptr: Any, ids: Any, vals: ArrayLike, M) -> int:
    """:func:`check_seed` of ``(ids, vals)``, then 3 unless ``indptr`` starts at 0, never
    decreases and ends at ``len(ids)``: a batch's whole check in one call."""
    code = check_seed(ids, vals, M)
    if code:
        return code
    n = indptr.shape[0]
    if n < 1 or indptr[0] != 0 or indptr[n - 1] != ids.shape[0]:
        return 3
    for t in range(1, n):
        if indptr[t] < indptr[t - 1]:
            return 3
    return 0


@njit(inline="always", **_JIT)
def _note_entity(e, emark, ents, ne):
    """Entity ``e`` appended to the list ``ents[:ne]`` of a seed's distinct entities unless
    ``emark`` has it already (then marked); returns the list's new length.  Shared by
    propagation (:func:`_spread`) and the bound on its output (:func:`expansion_bounds`)."""
    if not emark[e]:
        emark[e] = True
        ents[ne] = e
        ne += 1
    return ne


@njit(**_JIT)
def _spread(a_indptr, a_indices, at_indptr, at_indices, inv_deg, inv_w, seed_ids: ArrayLike, seed_vals: ArrayLike,
            acc, sbuf, mark, yent, emark, touched, ents):
    """Steps 1-3 of one seed: s into ``sbuf``, (A De+ A^T Dw+ s) into ``acc``.

    ``acc``/``sbuf``/``yent`` are zero and ``mark``/``emark`` False on entry; on exit ``yent``
    and ``emark`` are restored and ``touched[:n]`` lists the propositions reached, the seed's
    own ``n_seed`` first.  :func:`_finish` then writes z and restores the rest.
    Returns (n, n_seed).
    """
    n = 0
    far = acc.shape[0] >= PF_MIN_ROWS  # prefetch hints only where the arrays are large
    # 1. the seed s (repeated ids summed)
    for t in range(seed_ids.shape[0]):
        i = seed_ids[t]
        if not mark[i]:
            mark[i] = True
            touched[n] = i
            n += 1
        sbuf[i] += seed_vals[t]
    n_seed = n
    # 2. y_e = (1/d_e) sum_{j in e} x_j with x = Dw+ s, over the seed's entities only
    ne = 0
    for t in range(n_seed):
        i = touched[t]
        x = sbuf[i] * inv_w[i]
        if x == 0.0:
            continue
        for p in range(a_indptr[i], a_indptr[i + 1]):
            e = a_indices[p]
            ne = _note_entity(e, emark, ents, ne)
            yent[e] += x * inv_deg[e]
    # 3. (A y)_j for every proposition j of a touched entity
    for t in range(ne):
        e = ents[t]
        y = yent[e]
        hi = at_indptr[e + 1]
        for p in range(at_indptr[e], hi):
            if far and p + PF_AHEAD < hi:  # a hub's propositions lie anywhere in acc and mark
                f = at_indices[p + PF_AHEAD]
                _prefetch(acc, f)
                _prefetch(mark, f)
            j = at_indices[p]
            if not mark[j]:
                mark[j] = True
                touched[n] = j
                n += 1
            acc[j] += y
        yent[e] = 0.0
        emark[e] = False
    return n, n_seed


@njit(**_JIT)
def _finish(diag, inv_w, alpha, n, n_seed, acc, sbuf, mark, touched, out_i, out_v, off) -> None:
    """Step 4: z = alpha s + (1 - alpha) (A y - diag x) into out_i/out_v[off:off + n], and
    ``acc``/``sbuf``/``mark`` back to zero.  Only the seed's own propositions have s != 0, so
    the rest read just ``acc``.  W >= 0, so rounding residue below zero is clamped."""
    beta = 1.0 - alpha
    for t in range(n_seed):
        j = touched[t]
        s = sbuf[j]
        ws = acc[j] - diag[j] * s * inv_w[j]
        if ws < 0.0:
            ws = 0.0
        out_i[off + t] = j
        out_v[off + t] = alpha * s + beta * ws
        acc[j] = 0.0
        sbuf[j] = 0.0
        mark[j] = False
    far = acc.shape[0] >= PF_MIN_ROWS
    for t in range(n_seed, n):
        if far and t + PF_AHEAD < n:
            f = touched[t + PF_AHEAD]
            _prefetch(acc, f)
            _prefetch(mark, f)
        j = touched[t]
        ws = acc[j]
        if ws < 0.0:
            ws = 0.0
        out_i[off + t] = j
        out_v[off + t] = beta * ws
        acc[j] = 0.0
        mark[j] = False


@njit(**_JIT)
def ws_views(wf, wb, wi, M):
    """The named views of a propagation workspace packed into three arrays (three arguments
    to unbox per kernel call instead of nine); the one place that knows the layout:

    * wf (float64, 3M + Ne) = acc | sbuf | out_vals (M each) | yent (Ne)
    * wb (bool, M + Ne)     = mark (M) | emark (Ne)
    * wi (int64, 2M + Ne)   = touched | out_ids (M each) | ents (Ne)

    Contract: every kernel leaves acc, sbuf, yent at 0 and mark, emark False when it returns
    (it resets exactly what it touched); touched and ents are scratch; out_ids/out_vals hold
    the last single-seed result.  ``tests/test_kernels.py`` checks the contract."""
    return (wf[:M], wf[M:2 * M], wf[2 * M:3 * M], wf[3 * M:], wb[:M], wb[M:],
            wi[:M], wi[M:2 * M], wi[2 * M:])


@njit(**_JIT)
def propagate_one(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w,
                  seed_ids: ArrayLike, seed_vals: ArrayLike, alpha, wf, wb, wi):
    """One seed with a reused packed workspace (:func:`ws_views`).  Returns n >= 0 (z is
    out_ids[:n], out_vals[:n]) or -code for bad input."""
    M = a_indptr.shape[0] - 1
    code = check_seed(seed_ids, seed_vals, M)
    if code != 0:
        return -code
    acc, sbuf, out_vals, yent, mark, emark, touched, out_ids, ents = ws_views(wf, wb, wi, M)
    n, n_seed = _spread(a_indptr, a_indices, at_indptr, at_indices, inv_deg, inv_w, seed_ids,
                        seed_vals, acc, sbuf, mark, yent, emark, touched, ents)
    _finish(diag, inv_w, alpha, n, n_seed, acc, sbuf, mark, touched, out_ids, out_vals, 0)
    return n


@njit(**_JIT)
def expansion_bounds(a_indptr, a_indices, at_indptr, seed_indptr, seed_ids: ArrayLike, emark, ents):
    """Row offsets for batched propagation: row b may hold at most its distinct seeds plus
    the propositions of its distinct entities (with repeats across entities); returns the
    (B + 1) prefix sums of those bounds.  ``emark`` (False, Ne) is restored; ``ents`` is
    scratch."""
    B = seed_indptr.shape[0] - 1
    out = np.zeros(B + 1, dtype=np.int64)
    for b in range(B):
        s = seed_indptr[b + 1] - seed_indptr[b]
        ne = 0
        for t in range(seed_indptr[b], seed_indptr[b + 1]):
            i = seed_ids[t]
            for p in range(a_indptr[i], a_indptr[i + 1]):
                e = a_indices[p]
                if not emark[e]:
                    ne = _note_entity(e, emark, ents, ne)
                    s += at_indptr[e + 1] - at_indptr[e]
        for t in range(ne):
            emark[ents[t]] = False
        out[b + 1] = out[b] + s
    return out


@njit(**_JIT)
def propagate_into(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w,
                   seed_indptr, seed_ids: ArrayLike, seed_vals: ArrayLike, alpha, b0, b1, offs, out_i, out_v, counts,
                   wf, wb, wi) -> None:
    """Seeds b0 <= b < b1 with a reused workspace (:func:`ws_views`), row b written straight
    into its own slots ``out_*[offs[b]:]`` (``counts[b]`` entries; ``offs`` from
    :func:`expansion_bounds`): rows of different ranges never share output slots, so ranges
    run side by side, and nothing is copied or regrown.  Each row is what
    :func:`propagate_one` gives its seed, bitwise and in the same order.  Releases the GIL.
    The caller has checked the seeds."""
    M = a_indptr.shape[0] - 1
    acc, sbuf, _, yent, mark, emark, touched, _, ents = ws_views(wf, wb, wi, M)
    for b in range(b0, b1):
        lo, hi = seed_indptr[b], seed_indptr[b + 1]
        n, n_seed = _spread(a_indptr, a_indices, at_indptr, at_indices, inv_deg, inv_w,
                            seed_ids[lo:hi], seed_vals[lo:hi], acc, sbuf, mark, yent,
                            emark, touched, ents)
        _finish(diag, inv_w, alpha, n, n_seed, acc, sbuf, mark, touched, out_i, out_v, offs[b])
        counts[b] = n


@njit(**_JIT)
def compact_rows(offs, counts, out_i, out_v):
    """Rows written at ``offs`` (``counts[b]`` entries each) moved down to be contiguous, in
    place; returns the total."""
    m = 0
    for b in range(counts.shape[0]):
        o = offs[b]
        n = counts[b]
        if o != m:
            for t in range(n):
                out_i[m + t] = out_i[o + t]
                out_v[m + t] = out_v[o + t]
        m += n
    return m


# --------------------------------------------------------------------------- readout
@njit(**_JIT)
def _readout_into(owner: ArrayLike, inv_sqrt, z_ids, z_vals, k, pacc, pmark, ptouched, out_i, out_v):
    """Segment-sum z into passages, then top-k (ties by passage order; zero-score fill)."""
    N = inv_sqrt.shape[0]
    m = 0
    nz = z_ids.shape[0]
    far = owner.shape[0] >= PF_MIN_ROWS  # prefetch hints only where the arrays are large
    for t in range(nz):
        # two steps ahead: the owner of a proposition 2 * PF_AHEAD on, then the passage
        # slots of one PF_AHEAD on (its owner fetched by then)
        if far and t + 2 * PF_AHEAD < nz:
            _prefetch(owner, z_ids[t + 2 * PF_AHEAD])
        if far and t + PF_AHEAD < nz:
            f = owner[z_ids[t + PF_AHEAD]]
            _prefetch(pacc, f)
            _prefetch(pmark, f)
        j = owner[z_ids[t]]
        if not pmark[j]:
            pmark[j] = True
            ptouched[m] = j
            m += 1
        pacc[j] += z_vals[t]
    n = 0
    for t in range(m):
        if far and t + PF_AHEAD < m:
            _prefetch(inv_sqrt, ptouched[t + PF_AHEAD])
        j = ptouched[t]
        sc = pacc[j] * inv_sqrt[j]
        # the full heap's root rejects most passages here, without the call (whose array
        # arguments cost more than the comparison: 76 against 12 us for 2,356 passages)
        if sc > 0 and (n < k or _worse(out_v[0], out_i[0], sc, j)):
            n = _heap_offer(out_v, out_i, n, k, sc, j)
    _heap_sort(out_v, out_i, n)
    if n < k:
        # fill with zero-score passages in stored order; a passage is "taken" iff it scored
        # > 0 (a full heap needs no fill, so this pass over the touched passages is skipped)
        for t in range(m):
            j = ptouched[t]
            if not pacc[j] * inv_sqrt[j] > 0:
                pmark[j] = False
        j = 0
        while n < k and j < N:
            if not pmark[j]:
                out_i[n] = j
                out_v[n] = 0.0
                n += 1
            j += 1
    for t in range(m):
        if far and t + PF_AHEAD < m:
            f = ptouched[t + PF_AHEAD]
            _prefetch(pacc, f)
            _prefetch(pmark, f)
        j = ptouched[t]
        pacc[j] = 0.0
        pmark[j] = False
    return n


@njit(**_JIT)
def readout_one(owner: ArrayLike, inv_sqrt, z_ids, z_vals, pacc, pmark, ptouched, out_i, out_v):
    """One z into ``out_i``/``out_v`` (length k); returns the count written, or -code."""
    code = check_seed(z_ids, z_vals, owner.shape[0])
    if code != 0:
        return -code
    return _readout_into(owner, inv_sqrt, z_ids, z_vals, out_i.shape[0], pacc, pmark,
                         ptouched, out_i, out_v)


@njit(**_JIT)
def rank_rows(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w, owner: ArrayLike,
              inv_sqrt, seed_indptr, seed_ids: ArrayLike, seed_vals: ArrayLike, alpha, b0, b1, wf, wb, wi, pacc,
              pmark, ptouched, out_i, out_v, check, split, out_q, out_r) -> int:
    """Rows b0 <= b < b1: each seed propagated (as :func:`propagate_one`) and z read out
    (as :func:`readout_many`) at once, z never leaving the workspace; ``out_i[b]`` /
    ``out_v[b]`` (k each, -1 / 0 where a row has fewer passages) get row b's passages.
    Bitwise the same as the two kernels one after the other.  Releases the GIL.  With
    ``check`` the whole batch is checked first (:func:`check_csr`: its status, nothing
    ranked unless 0); without, the caller has checked the seeds.  ``out_q`` / ``out_r``
    (each as ``out_i``, or with no columns for none) get each ranked passage's score parts
    as :func:`score_parts` gives them for ``split`` (one entry per row), row by row while the
    row's seed is still in cache.  Returns the status."""
    M = a_indptr.shape[0] - 1
    if check:
        code = check_csr(seed_indptr, seed_ids, seed_vals, M)
        if code:
            return code
    k = out_i.shape[1]
    acc, sbuf, z_vals, yent, mark, emark, touched, z_ids, ents = ws_views(wf, wb, wi, M)
    for b in range(b0, b1):
        lo, hi = seed_indptr[b], seed_indptr[b + 1]
        n, n_seed = _spread(a_indptr, a_indices, at_indptr, at_indices, inv_deg, inv_w,
                            seed_ids[lo:hi], seed_vals[lo:hi], acc, sbuf, mark, yent,
                            emark, touched, ents)
        _finish(diag, inv_w, alpha, n, n_seed, acc, sbuf, mark, touched, z_ids, z_vals, 0)
        _readout_into(owner, inv_sqrt, z_ids[:n], z_vals[:n], k, pacc, pmark, ptouched,
                      out_i[b], out_v[b])
        if out_q.shape[1]:
            _parts_row(owner, inv_sqrt, seed_ids, seed_vals, lo, hi, split[b], alpha,
                       out_i[b], out_q[b], out_r[b])
    return 0


@njit(inline="always", **_JIT)
def _parts_row(owner: ArrayLike, inv_sqrt, seed_ids: ArrayLike, seed_vals: ArrayLike, lo, hi,
               split, alpha, P, out_q, out_r) -> None:
    """One row of :func:`score_parts`: the seed entries ``lo:hi``, the first ``split`` of
    them the question's, read out over the passages ``P`` (checked: -1 or in the map)."""
    mid = lo + min(max(split, 0), hi - lo)
    for t in range(P.shape[0]):
        j = P[t]
        fq = 0.0
        fr = 0.0
        if j >= 0:
            for e in range(lo, mid):
                if owner[seed_ids[e]] == j:
                    fq = fq + alpha * seed_vals[e]
            for e in range(mid, hi):
                if owner[seed_ids[e]] == j:
                    fr = fr + alpha * seed_vals[e]
            fq = fq * inv_sqrt[j]
            fr = fr * inv_sqrt[j]
        out_q[t] = fq
        out_r[t] = fr


@njit(**_JIT)
def score_parts(owner: ArrayLike, inv_sqrt, seed_indptr, seed_ids: ArrayLike,
                seed_vals: ArrayLike, split, alpha, P, out_q, out_r) -> int:
    """The question's and the residual queries' parts of each ranked passage's score: for
    row b and passage j = ``P[b, t]`` (none for j < 0), ``out_q[b, t]`` = ``inv_sqrt[j]`` times
    the sum, in seed order from 0.0, of ``alpha * v`` over the first ``split[b]`` entries of
    the row's seed owned by j, and ``out_r[b, t]`` the same over the rest (float64 sums, no
    reassociation: bitwise the reference's).  Returns 0; else nothing is written and the
    status is :func:`check_csr`'s for the seeds (1-3) or 4 for a passage outside the map."""
    M = owner.shape[0]
    N = inv_sqrt.shape[0]
    code = check_csr(seed_indptr, seed_ids, seed_vals, M)
    if code:
        return code
    for b in range(P.shape[0]):
        for t in range(P.shape[1]):
            if P[b, t] >= N or P[b, t] < -1:
                return 4
    for b in range(P.shape[0]):
        _parts_row(owner, inv_sqrt, seed_ids, seed_vals, seed_indptr[b], seed_indptr[b + 1],
                   split[b], alpha, P[b], out_q[b], out_r[b])
    return 0


@njit(parallel=True, **_JIT)
def readout_many(owner: ArrayLike, inv_sqrt, z_indptr, z_ids, z_vals, k, n_chunks):
    N = inv_sqrt.shape[0]
    B = z_indptr.shape[0] - 1
    out_i = np.full((B, k), -1, dtype=np.int64)
    out_v = np.zeros((B, k), dtype=np.float64)
    step = (B + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        pacc = np.zeros(N, dtype=np.float64)
        pmark = np.zeros(N, dtype=np.bool_)
        ptouched = np.empty(N, dtype=np.int64)
        for b in range(c * step, min(B, (c + 1) * step)):
            lo, hi = z_indptr[b], z_indptr[b + 1]
            _readout_into(owner, inv_sqrt, z_ids[lo:hi], z_vals[lo:hi], k, pacc, pmark,
                          ptouched, out_i[b], out_v[b])
    return out_i, out_v


# --------------------------------------------------------------------------- index statistics
@njit(parallel=True, **_JIT)
def w_row_nnz(a_indptr, a_indices, at_indptr, at_indices, n_chunks):
    """Nonzeros per row of W (distinct other propositions sharing an entity), never forming W."""
    M = a_indptr.shape[0] - 1
    out = np.zeros(M, dtype=np.int64)
    step = (M + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        stamp = np.full(M, -1, dtype=np.int64)
        for i in range(c * step, min(M, (c + 1) * step)):
            cnt = 0
            stamp[i] = i
            for p in range(a_indptr[i], a_indptr[i + 1]):
                e = a_indices[p]
                for q in range(at_indptr[e], at_indptr[e + 1]):
                    j = at_indices[q]
                    if stamp[j] != i:
                        stamp[j] = i
                        cnt += 1
            out[i] = cnt
    return out


# --------------------------------------------------------------------------- int8 scan
_APPROX = dict(cache=config.NUMBA_CACHE, nogil=True, fastmath=True)


@njit(parallel=True, **_APPROX)
def scores_i8(C, qi, n_chunks):
    """S[r] = sum_d C[r, d] qi[d] for int8 codes ``C`` and an int16 query ``qi``: exact int32
    sums (the caller keeps |qi| small enough), so any summation order, vectorised, gives
    the same result.  One row range per chunk."""
    M, d = C.shape
    S = np.empty(M, dtype=np.int32)
    step = (M + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        for r in range(c * step, min(M, (c + 1) * step)):
            acc = np.int32(0)
            row = C[r]
            for j in range(d):
                acc += np.int32(row[j]) * np.int32(qi[j])
            S[r] = acc
    return S


@njit(**_JIT)
def hnsw_upper_scan(raw, pos, count: Any, per_level, maxM, levels, starts):
    """Check the upper-level link blocks of an hnswlib file (``raw``: its bytes from the
    first block at ``pos``): each block's size a multiple of ``per_level``, every neighbour
    count at most ``maxM``, every neighbour an item of that level, nothing left over.
    Fills ``levels`` and ``starts``; returns ``(code, item)``: 0 when all hold, else which
    check failed (1 size cut, 2 block size, 3 count, 4 neighbour, 5 trailing bytes) and at
    which item (-1: none)."""
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


# --------------------------------------------------------------------------- serial twins
def _serial_twin(kernel, opts):
    """The same Python source compiled without threads (``prange`` runs as ``range``): the
    same chunks, the same merges, so bitwise the same results, and no wake-up of the thread
    pool, which costs more than small inputs take.  Its own name keeps numba's on-disk cache
    apart from the parallel kernel's."""
    import types
    f = kernel.py_func
    twin = types.FunctionType(f.__code__, f.__globals__, f.__name__ + "_serial",
                              f.__defaults__, f.__closure__)
    twin.__qualname__ = f.__qualname__ + "_serial"
    twin.__doc__ = f"{f.__name__} without threads (see _serial_twin)."
    return njit(**opts)(twin)


topk_one_serial = _serial_twin(topk_one, _DOT)
scores_i8_serial = _serial_twin(scores_i8, _APPROX)
topk_batch_serial = _serial_twin(topk_batch, _DOT)
readout_many_serial = _serial_twin(readout_many, _JIT)



# --------------------------------------------------------------------------- graph walks
@njit(**_JIT)
def mentions_outside(indptr: ArrayLike, indices: ArrayLike, owner: ArrayLike, rows: Any, excluded, allowed: ArrayLike, limit):
    """See :func:`evireform.kernels.mentions_outside` (``allowed`` empty: every owner is
    allowed; nonempty: an owner past its end is not).  Two passes over the rows: sizes, then
    entries.  The first pass checks what it reads (a row's bounds within ``indices``, an
    entry within ``owner``, an owner >= 0): returns ``(empty, counts, code)``, code 0 when
    all is well, else 1 (a row's bounds) or 2 (an entry or its owner), nothing written."""
    counts = np.zeros(rows.shape[0], dtype=np.int64)
    check = allowed.shape[0] > 0
    n_ind, n_own = indices.shape[0], owner.shape[0]
    for pass_ in range(2):
        total = 0
        for t in range(rows.shape[0]):
            total += counts[t]
        got = np.empty(total if pass_ == 1 else 0, dtype=np.int64)
        n = 0
        for t in range(rows.shape[0]):
            r = rows[t]
            c = 0
            lo, hi = indptr[r], indptr[r + 1]
            if pass_ == 0 and (lo < 0 or hi < lo or hi > n_ind):
                return got, counts, 1
            for p in range(lo, hi):
                if c >= limit:
                    break
                i = indices[p]
                if pass_ == 0 and (i < 0 or i >= n_own or owner[i] < 0):
                    return got, counts, 2
                o = owner[i]
                skip = check and (o >= allowed.shape[0] or not allowed[o])
                for x in range(excluded.shape[0]):
                    if excluded[x] == o:
                        skip = True
                        break
                if skip:
                    continue
                if pass_ == 1:
                    got[n] = i
                    n += 1
                c += 1
            counts[t] = c
    return got, counts, 0


# --------------------------------------------------------------------------- lexical (BM25)
@njit(**_JIT)
def check_terms(indptr: Any, terms: Any, weights: ArrayLike, n_terms, w_indptr: Any) -> int:
    """A batch of queries' whole check in one call: the number of postings its terms read
    (>= 0; ``w_indptr``: the weights' term rows) when ``indptr`` starts at 0, never
    decreases and ends at ``len(terms)``, every term id lies in [0, n_terms) and every
    weight is positive and finite; else -3 (the indptr), -1 (an id) or -2 (a weight)."""
    n = indptr.shape[0]
    if n < 1 or indptr[0] != 0 or indptr[n - 1] != terms.shape[0]:
        return -3
    for r in range(1, n):
        if indptr[r] < indptr[r - 1]:
            return -3
    postings = 0
    for p in range(terms.shape[0]):
        t = terms[p]
        if t < 0 or t >= n_terms:
            return -1
        if not (np.isfinite(weights[p]) and weights[p] > 0.0):
            return -2
        postings += w_indptr[t + 1] - w_indptr[t]
    return postings


@njit(**_JIT)
def _bm25_rows(w_indptr, w_indices, w_data, q_indptr, q_terms, q_weights, k, lo, hi, acc,
               touched, hv, hix, out_i, out_v) -> None:
    """Queries ``lo:hi``: each query's weighted rows of the (terms x documents) weights added
    into ``acc`` in the query's term order (float64), then the positive documents offered to
    a k-heap; ``acc`` is left zero again (only touched entries are reset)."""
    for r in range(lo, hi):
        nt = 0
        for p in range(q_indptr[r], q_indptr[r + 1]):
            t = q_terms[p]
            qw = q_weights[p]
            for e in range(w_indptr[t], w_indptr[t + 1]):
                j = w_indices[e]
                if acc[j] == 0.0:  # weights and query weights are positive: first touch
                    touched[nt] = j
                    nt += 1
                acc[j] = acc[j] + qw * np.float64(w_data[e])
        n = 0
        for u in range(nt):
            j = touched[u]
            v = acc[j]
            acc[j] = 0.0
            if v > 0.0:
                n = _heap_offer(hv, hix, n, k, v, j)
        _heap_sort(hv, hix, n)
        for u in range(n):
            out_i[r, u] = hix[u]
            out_v[r, u] = hv[u]


@njit(parallel=True, **_JIT)
def bm25_topk_batch(w_indptr, w_indices, w_data, n_docs, q_indptr, q_terms, q_weights, k,
                    n_chunks, out_i, out_v) -> None:
    """BM25 top-k of a batch of queries (CSR rows of term ids and positive weights) over
    eager weights (CSR terms x documents): ``out_i`` / ``out_v`` (batch, k) are filled best
    first, ties by lower id; they arrive holding -1 / 0.  Queries are split into
    ``n_chunks`` contiguous ranges, each with its own accumulator."""
    B = len(q_indptr) - 1
    for c in prange(n_chunks):
        lo = c * B // n_chunks
        hi = (c + 1) * B // n_chunks
        if lo == hi:
            continue
        acc = np.zeros(n_docs, np.float64)
        touched = np.empty(n_docs, np.int64)
        hv = np.empty(max(k, 1), np.float64)
        hix = np.empty(max(k, 1), np.int64)
        _bm25_rows(w_indptr, w_indices, w_data, q_indptr, q_terms, q_weights, k, lo, hi,
                   acc, touched, hv, hix, out_i, out_v)


@njit(**_JIT)
def bm25_topk_serial(w_indptr, w_indices, w_data, n_docs, q_indptr, q_terms, q_weights, k,
                     out_i, out_v) -> None:
    """:func:`bm25_topk_batch` on the calling thread (one or a few queries)."""
    acc = np.zeros(n_docs, np.float64)
    touched = np.empty(n_docs, np.int64)
    hv = np.empty(max(k, 1), np.float64)
    hix = np.empty(max(k, 1), np.int64)
    _bm25_rows(w_indptr, w_indices, w_data, q_indptr, q_terms, q_weights, k, 0,
               len(q_indptr) - 1, acc, touched, hv, hix, out_i, out_v)


# --------------------------------------------------------------------------- vocabulary
@njit(inline="always", **_JIT)
def _bytes_cmp(a, alo, ahi, b, blo, bhi) -> int:
    """-1, 0 or 1: ``a[alo:ahi]`` before, equal to or after ``b[blo:bhi]`` (bytes order,
    which for UTF-8 is code point order)."""
    la, lb = ahi - alo, bhi - blo
    n = la if la < lb else lb
    for i in range(n):
        x, y = a[alo + i], b[blo + i]
        if x != y:
            return -1 if x < y else 1
    if la == lb:
        return 0
    return -1 if la < lb else 1


@njit(**_JIT)
def vocab_search(blob, offsets, order, q_blob, q_offsets, out_pos, out_id) -> None:
    """Each query string's lower bound among the terms in byte order (``order[i]``: the
    term id of the ``i``-th smallest; term ``t`` is ``blob[offsets[t]:offsets[t + 1]]``)
    into ``out_pos``, and its term id, or -1, into ``out_id``."""
    n = order.shape[0]
    for j in range(q_offsets.shape[0] - 1):
        qlo, qhi = q_offsets[j], q_offsets[j + 1]
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) >> 1
            t = order[mid]
            if _bytes_cmp(blob, offsets[t], offsets[t + 1], q_blob, qlo, qhi) < 0:
                lo = mid + 1
            else:
                hi = mid
        out_pos[j] = lo
        out_id[j] = -1
        if lo < n:
            t = order[lo]
            if _bytes_cmp(blob, offsets[t], offsets[t + 1], q_blob, qlo, qhi) == 0:
                out_id[j] = t


@njit(**_JIT)
def first_unsorted(blob, offsets, order) -> int:
    """The first position ``i`` whose term is not after the term at ``i - 1`` (a repeat or
    out of order), or -1 when the terms ascend strictly."""
    for i in range(1, order.shape[0]):
        a, b = order[i - 1], order[i]
        if _bytes_cmp(blob, offsets[a], offsets[a + 1], blob, offsets[b], offsets[b + 1]) >= 0:
            return i
    return -1


# --------------------------------------------------------------------------- BM25 weights
@njit(**_JIT)
def doc_lengths(indptr, counts, out) -> None:
    """Each row's sum of counts (float64, added in stored order) into ``out``."""
    for j in range(indptr.shape[0] - 1):
        s = 0.0
        for p in range(indptr[j], indptr[j + 1]):
            s += np.float64(counts[p])
        out[j] = s


@njit(**_JIT)
def bm25_fill(indptr, terms, counts, keep, idf, dl, avgdl, k1, b, out_indptr, out_docs,
              out_w) -> None:
    """The (terms x documents) CSR of BM25 weights of the kept documents, by a counting
    sort on the term (documents ascending within a term's row): ``out_indptr`` holds the
    rows' starts on entry (the document frequencies' prefix sums) and is left as it was."""
    n_terms = out_indptr.shape[0] - 1
    fill = np.empty(n_terms, np.int64)
    for t in range(n_terms):
        fill[t] = out_indptr[t]
    for j in range(indptr.shape[0] - 1):
        if not keep[j]:
            continue
        norm = k1 * (1.0 - b + b * dl[j] / avgdl)
        for p in range(indptr[j], indptr[j + 1]):
            t = terms[p]
            tf = np.float64(counts[p])
            q = fill[t]
            out_docs[q] = j
            out_w[q] = np.float32(idf[t] * tf / (tf + norm))
            fill[t] = q + 1
