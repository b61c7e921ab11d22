"""numba CPU kernels.

Every kernel here is private: the public wrappers in :mod:`evireform.kernels` validate the
input, own the workspaces and choose the backend.  Conventions shared by all kernels:

* a top-k "heap" keeps the *worst* kept item at its root, where "worse" means a lower score,
  or an equal score and a higher id; the final order is best-first, ties by lower id;
* variable-length data is one flat array plus offsets (CSR);
* parallel loops give every thread its own output rows and its own scratch, so results are
  deterministic and no atomics are needed.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import config

_JIT = dict(cache=config.NUMBA_CACHE, nogil=True, fastmath=False)


# --------------------------------------------------------------------------- top-k heap
@njit(inline="always", **_JIT)
def _worse(va, ia, vb, ib):
    return va < vb or (va == vb and ia > ib)


@njit(**_JIT)
def _sift_down(vals, ids, n, pos):
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
def _heap_offer(vals, ids, n, k, v, i):
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
def _heap_sort(vals, ids, n):
    """Sort a heap in place, best first."""
    for end in range(n - 1, 0, -1):
        vals[0], vals[end] = vals[end], vals[0]
        ids[0], ids[end] = ids[end], ids[0]
        _sift_down(vals, ids, end, 0)


# --------------------------------------------------------------------------- cosine top-k
@njit(parallel=True, cache=config.NUMBA_CACHE, nogil=True, fastmath={"reassoc", "contract"})
def dot_scores(H, r0, r1, Q, S):
    """S[b, r - r0] = H[r] . Q[b] for rows r0 <= r < r1; Q has a multiple of 4 rows.

    Queries are processed four at a time (each row of H is loaded once per group of four)
    and every dot product is computed by the same loop whatever the batch size, so a query's
    scores are bitwise identical alone or in a batch (BLAS gives no such guarantee).
    """
    B, d = Q.shape
    for r in prange(r0, r1):
        h = H[r]
        for b in range(0, B, 4):
            q0 = Q[b]
            q1 = Q[b + 1]
            q2 = Q[b + 2]
            q3 = Q[b + 3]
            a0 = np.float32(0.0)
            a1 = np.float32(0.0)
            a2 = np.float32(0.0)
            a3 = np.float32(0.0)
            for t in range(d):
                x = h[t]
                a0 += x * q0[t]
                a1 += x * q1[t]
                a2 += x * q2[t]
                a3 += x * q3[t]
            S[b, r - r0] = a0
            S[b + 1, r - r0] = a1
            S[b + 2, r - r0] = a2
            S[b + 3, r - r0] = a3


@njit(parallel=True, **_JIT)
def topk_positive(scores, k, n_chunks):
    """Top-k positive entries of ``scores`` (ties by lower index); returns (ids, vals, count)."""
    M = scores.shape[0]
    cand_v = np.empty(n_chunks * k, dtype=scores.dtype)
    cand_i = np.empty(n_chunks * k, dtype=np.int64)
    cand_n = np.zeros(n_chunks, dtype=np.int64)
    step = (M + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        lo = c * step
        hi = min(M, lo + step)
        v = cand_v[c * k:(c + 1) * k]
        ix = cand_i[c * k:(c + 1) * k]
        n = 0
        for i in range(lo, hi):
            s = scores[i]
            if s > 0:
                if n < k or s >= v[0]:
                    n = _heap_offer(v, ix, n, k, s, i)
        cand_n[c] = n
    out_v = np.empty(k, dtype=scores.dtype)
    out_i = np.empty(k, dtype=np.int64)
    n = 0
    for c in range(n_chunks):
        for j in range(cand_n[c]):
            n = _heap_offer(out_v, out_i, n, k, cand_v[c * k + j], cand_i[c * k + j])
    _heap_sort(out_v, out_i, n)
    return out_i, out_v, n


@njit(parallel=True, **_JIT)
def topk_block_update(S, row0, k, heap_v, heap_i, heap_n):
    """Fold a block of scores S (B x rows, rows starting at id ``row0``) into per-query heaps."""
    B, R = S.shape
    for b in prange(B):
        v = heap_v[b]
        ix = heap_i[b]
        n = heap_n[b]
        row = S[b]
        for r in range(R):
            s = row[r]
            if s > 0:
                if n < k or s >= v[0]:
                    n = _heap_offer(v, ix, n, k, s, row0 + r)
        heap_n[b] = n


@njit(parallel=True, **_JIT)
def heaps_finish(heap_v, heap_i, heap_n):
    B = heap_v.shape[0]
    for b in prange(B):
        _heap_sort(heap_v[b], heap_i[b], heap_n[b])
        for j in range(heap_n[b], heap_v.shape[1]):
            heap_v[b, j] = 0
            heap_i[b, j] = -1


# --------------------------------------------------------------------------- propagation
@njit(**_JIT)
def check_seed(ids, vals, M):
    """0 when every id lies in [0, M) and every value is finite; 1 bad id; 2 bad value."""
    for t in range(ids.shape[0]):
        if ids[t] < 0 or ids[t] >= M:
            return 1
        if not np.isfinite(vals[t]):
            return 2
    return 0


@njit(**_JIT)
def _propagate_into(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w,
                    seed_ids, seed_vals, alpha, acc, sbuf, mark, yent, emark,
                    touched, ents):
    """One seed through the incidence lists.

    ``acc``/``sbuf``/``yent`` are zero and ``mark``/``emark`` False on entry and are restored
    on exit, except that ``acc`` holds z at the returned ``touched[:n]`` positions (the caller
    copies and clears them).  Returns n, the number of distinct touched propositions.
    """
    n = 0
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
            if not emark[e]:
                emark[e] = True
                ents[ne] = e
                ne += 1
            yent[e] += x * inv_deg[e]
    # 3. (A y)_j for every proposition j of a touched entity
    for t in range(ne):
        e = ents[t]
        y = yent[e]
        for p in range(at_indptr[e], at_indptr[e + 1]):
            j = at_indices[p]
            if not mark[j]:
                mark[j] = True
                touched[n] = j
                n += 1
            acc[j] += y
        yent[e] = 0.0
        emark[e] = False
    # 4. z = alpha s + (1 - alpha) (A y - diag x); W >= 0, so rounding residue is clamped
    beta = 1.0 - alpha
    for t in range(n):
        j = touched[t]
        s = sbuf[j]
        ws = acc[j] - diag[j] * s * inv_w[j]
        if ws < 0.0:
            ws = 0.0
        acc[j] = alpha * s + beta * ws
        sbuf[j] = 0.0
        mark[j] = False
    return n


@njit(**_JIT)
def propagate_one(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w,
                  seed_ids, seed_vals, alpha, acc, sbuf, mark, yent, emark, touched, ents):
    code = check_seed(seed_ids, seed_vals, a_indptr.shape[0] - 1)
    if code != 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float64), code
    n = _propagate_into(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w,
                        seed_ids, seed_vals, alpha, acc, sbuf, mark, yent, emark, touched, ents)
    ids = touched[:n].copy()
    vals = np.empty(n, dtype=np.float64)
    for t in range(n):
        vals[t] = acc[ids[t]]
        acc[ids[t]] = 0.0
    return ids, vals, 0


@njit(**_JIT)
def _propagate_range(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w,
                     seed_indptr, seed_ids, seed_vals, alpha, b0, b1, counts, offsets,
                     out_ids, out_vals):
    """Seeds b0 <= b < b1 with scratch of their own: record each row's size in ``counts``,
    or, when ``offsets`` is non-empty, write the rows at those offsets."""
    M = a_indptr.shape[0] - 1
    Ne = at_indptr.shape[0] - 1
    acc = np.zeros(M, dtype=np.float64)
    sbuf = np.zeros(M, dtype=np.float64)
    mark = np.zeros(M, dtype=np.bool_)
    yent = np.zeros(Ne, dtype=np.float64)
    emark = np.zeros(Ne, dtype=np.bool_)
    touched = np.empty(M, dtype=np.int64)
    ents = np.empty(Ne, dtype=np.int64)
    write = offsets.shape[0] > 0
    for b in range(b0, b1):
        lo, hi = seed_indptr[b], seed_indptr[b + 1]
        n = _propagate_into(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w,
                            seed_ids[lo:hi], seed_vals[lo:hi], alpha, acc, sbuf, mark, yent,
                            emark, touched, ents)
        counts[b] = n
        for t in range(n):
            j = touched[t]
            if write:
                out_ids[offsets[b] + t] = j
                out_vals[offsets[b] + t] = acc[j]
            acc[j] = 0.0


@njit(parallel=True, **_JIT)
def propagate_many(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w,
                   seed_indptr, seed_ids, seed_vals, alpha, n_chunks):
    """Batched propagation; returns z as CSR (indptr, ids, vals), one row per seed.

    Two passes over the seeds (row sizes, then values), each thread owning a range of rows.
    """
    B = seed_indptr.shape[0] - 1
    counts = np.zeros(B, dtype=np.int64)
    step = (B + n_chunks - 1) // n_chunks
    none_i = np.zeros(0, dtype=np.int64)
    none_v = np.zeros(0, dtype=np.float64)
    for c in prange(n_chunks):
        _propagate_range(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w,
                         seed_indptr, seed_ids, seed_vals, alpha, c * step,
                         min(B, (c + 1) * step), counts, none_i, none_i, none_v)
    indptr = np.zeros(B + 1, dtype=np.int64)
    for b in range(B):
        indptr[b + 1] = indptr[b] + counts[b]
    out_ids = np.empty(indptr[B], dtype=np.int64)
    out_vals = np.empty(indptr[B], dtype=np.float64)
    for c in prange(n_chunks):
        _propagate_range(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w,
                         seed_indptr, seed_ids, seed_vals, alpha, c * step,
                         min(B, (c + 1) * step), counts, indptr, out_ids, out_vals)
    return indptr, out_ids, out_vals


# --------------------------------------------------------------------------- readout
@njit(**_JIT)
def _readout_into(owner, inv_sqrt, z_ids, z_vals, k, pacc, pmark, ptouched, out_i, out_v):
    """Segment-sum z into passages, then top-k (ties by passage order; zero-score fill)."""
    N = inv_sqrt.shape[0]
    m = 0
    for t in range(z_ids.shape[0]):
        j = owner[z_ids[t]]
        if not pmark[j]:
            pmark[j] = True
            ptouched[m] = j
            m += 1
        pacc[j] += z_vals[t]
    n = 0
    for t in range(m):
        j = ptouched[t]
        sc = pacc[j] * inv_sqrt[j]
        if sc > 0:
            n = _heap_offer(out_v, out_i, n, k, sc, j)
    _heap_sort(out_v, out_i, n)
    # fill with zero-score passages in stored order; a passage is "taken" iff it scored > 0
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
        j = ptouched[t]
        pacc[j] = 0.0
        pmark[j] = False
    return n


@njit(**_JIT)
def readout_one(owner, inv_sqrt, z_ids, z_vals, k, pacc, pmark, ptouched):
    code = check_seed(z_ids, z_vals, owner.shape[0])
    if code != 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float64), code
    out_i = np.empty(k, dtype=np.int64)
    out_v = np.empty(k, dtype=np.float64)
    n = _readout_into(owner, inv_sqrt, z_ids, z_vals, k, pacc, pmark, ptouched, out_i, out_v)
    return out_i[:n], out_v[:n], 0


@njit(parallel=True, **_JIT)
def readout_many(owner, inv_sqrt, z_indptr, z_ids, z_vals, k, n_chunks):
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
