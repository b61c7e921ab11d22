"""Plain numpy/scipy references for every kernel.

These are slow, obviously correct implementations used only by the tests (and by the
benchmarks' agreement checks).  They follow the equations literally: W is materialised here,
which the production kernels never do.
"""
from __future__ import annotations

from typing import Any
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike


def _order(scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Indices sorting by descending score, ties by ascending id."""
    return np.lexsort((ids, -scores.astype(np.float64)))


def cosine_topk(H: np.ndarray, q: np.ndarray, k: int, rows: Any=None):
    """Top-k rows of ``H`` by ``H @ q`` with positive score; ties by lower id.  ``rows``:
    only those rows (positions in ``H``) are candidates."""
    cand = np.arange(H.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    scores = (H[cand] @ q).astype(np.float32)
    keep = scores > 0
    ids, vals = cand[keep], scores[keep]
    o = _order(vals, ids)[:k]
    return ids[o].astype(np.int64), vals[o]


def cosine_topk_batch(H: np.ndarray, Q: np.ndarray, k: int, rows: Any=None):
    """Batched :func:`cosine_topk`: shape (batch, min(k, n)), rows padded with id -1, score 0
    (n: the candidate rows)."""
    B = Q.shape[0]
    k = min(k, H.shape[0] if rows is None else len(rows))
    out_ids = np.full((B, k), -1, dtype=np.int64)
    out_vals = np.zeros((B, k), dtype=np.float32)
    for b in range(B):
        ids, vals = cosine_topk(H, Q[b], k, rows)
        out_ids[b, : len(ids)] = ids
        out_vals[b, : len(ids)] = vals
    return out_ids, out_vals


def incidence_matrix(a_indptr, a_indices, n_entities: int) -> sp.csr_matrix:
    M = len(a_indptr) - 1
    data = np.ones(len(a_indices), dtype=np.float64)
    A = sp.csr_matrix((data, a_indices, a_indptr), shape=(M, n_entities))
    A.sum_duplicates()
    A.data[:] = 1.0
    return A


def transition_W(A: sp.csr_matrix) -> sp.csr_matrix:
    """W = A De+ A^T - diag(A De+ A^T), materialised (reference only)."""
    deg = np.asarray(A.sum(axis=0)).ravel()
    inv = np.zeros_like(deg)
    inv[deg > 0] = 1.0 / deg[deg > 0]
    G = (A @ sp.diags(inv) @ A.T).tocsr()
    G = G - sp.diags(G.diagonal())
    G.eliminate_zeros()
    return G.tocsr()


def propagate_dense(A: sp.csr_matrix, s: np.ndarray, alpha: float) -> np.ndarray:
    """z = alpha s + (1 - alpha) W Dw+ s with W materialised."""
    W = transition_W(A)
    w = np.asarray(W.sum(axis=1)).ravel()
    inv_w = np.zeros_like(w)
    inv_w[w > 1e-12] = 1.0 / w[w > 1e-12]
    return alpha * s + (1.0 - alpha) * (W @ (inv_w * s))


def seed_vector(M: int, seed_ids: ArrayLike, seed_vals: ArrayLike) -> np.ndarray:
    s = np.zeros(M, dtype=np.float64)
    np.add.at(s, np.asarray(seed_ids, dtype=np.int64), np.asarray(seed_vals, dtype=np.float64))
    return s


def readout_scores(z: np.ndarray, owner: np.ndarray, n_passages: int) -> np.ndarray:
    """score(d_j) = sum_{i: owner(i) = j} z_i / sqrt(|P_j|); 0 for passages without propositions."""
    sizes = np.bincount(owner, minlength=n_passages).astype(np.float64)
    sums = np.bincount(owner, weights=z, minlength=n_passages)
    out = np.zeros(n_passages, dtype=np.float64)
    nz = sizes > 0
    out[nz] = sums[nz] / np.sqrt(sizes[nz])
    return out


def readout_topk(z: np.ndarray, owner: np.ndarray, n_passages: int, k: int):
    """Top-k passages by :func:`readout_scores`, ties by stored passage order."""
    scores = readout_scores(z, owner, n_passages)
    order = _order(scores, np.arange(n_passages))[:k]
    return order.astype(np.int64), scores[order]


def mentions_outside(indptr: ArrayLike, indices: ArrayLike, owner: ArrayLike, rows: Any, excluded, allowed: ArrayLike, limit: int):
    """For each row r of ``rows``: the first ``limit`` entries i of the CSR row
    ``indices[indptr[r]:indptr[r + 1]]`` (in stored order) whose ``owner[i]`` is not in
    ``excluded`` and, when ``allowed`` is given, is allowed (an owner past its end is not).
    Returns (the entries of all rows concatenated, int64; their count per row, int64)."""
    rows = np.asarray(rows, dtype=np.int64)
    got, counts = [], np.zeros(len(rows), dtype=np.int64)
    bad = set(np.asarray(excluded, dtype=np.int64).tolist())
    for t, r in enumerate(rows.tolist()):
        for i in np.asarray(indices[indptr[r]:indptr[r + 1]]).tolist():
            if counts[t] >= limit:
                break
            o = int(owner[i])
            if o in bad or (allowed is not None and (o >= len(allowed) or not allowed[o])):
                continue
            got.append(i)
            counts[t] += 1
    return np.asarray(got, dtype=np.int64), counts


def score_parts(owner: ArrayLike, inv_sqrt: ArrayLike, seed_indptr: ArrayLike, seed_ids: ArrayLike,
                seed_vals: ArrayLike, split: Any, alpha: float, P: ArrayLike):
    """Each ranked passage's score parts (two (batch, k) float64 arrays): for row b and
    passage j = P[b, t] (nothing for j < 0), inv_sqrt[j] times the sum of alpha * v over the
    row's first split[b] seed entries owned by j (the question's part), and the same over the
    rest (the residual queries' part); sums in seed order, as a dictionary per part adds."""
    P = np.asarray(P, dtype=np.int64)
    out_q, out_r = np.zeros(P.shape), np.zeros(P.shape)
    for b in range(P.shape[0]):
        lo, hi = int(seed_indptr[b]), int(seed_indptr[b + 1])
        mid = lo + min(max(int(split[b]), 0), hi - lo)
        parts = []
        for a, z in ((lo, mid), (mid, hi)):
            acc: dict[int, float] = {}
            for i, v in zip(np.asarray(seed_ids[a:z]).tolist(), np.asarray(seed_vals[a:z]).tolist()):
                j = int(owner[i])
                acc[j] = acc.get(j, 0.0) + alpha * v
            parts.append(acc)
        for t, j in enumerate(P[b].tolist()):
            if j >= 0:
                w = float(inv_sqrt[j])
                out_q[b, t] = parts[0].get(j, 0.0) * w
                out_r[b, t] = parts[1].get(j, 0.0) * w
    return out_q, out_r


def bm25_matrix(doc_indptr, doc_terms, doc_tf, n_terms: int, k1: float = 1.5,
                b: float = 0.75, docs: Any = None) -> sp.csr_matrix:
    """The eager BM25 weights as a (terms x documents) CSR matrix, from term counts per
    document (CSR rows: ``doc_indptr``, ``doc_terms``, ``doc_tf``), written out from the
    formula: ``idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))`` with
    ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`` (Lucene's form, as bm25s uses), ``dl`` a
    document's term count.  ``docs``: only those documents count (N, df and avgdl over them;
    the others get no weights): a restriction's statistics."""
    n_docs = len(doc_indptr) - 1
    keep = np.ones(n_docs, bool) if docs is None else np.isin(np.arange(n_docs), docs)
    rows, cols, vals = [], [], []
    dl = np.array([doc_tf[doc_indptr[j]:doc_indptr[j + 1]].sum() for j in range(n_docs)],
                  dtype=np.float64)
    N = int(keep.sum())
    avgdl = float(dl[keep].sum() / N) if N else 1.0
    df = np.zeros(n_terms, np.int64)
    for j in np.flatnonzero(keep):
        for t in doc_terms[doc_indptr[j]:doc_indptr[j + 1]]:
            df[t] += 1
    for j in np.flatnonzero(keep):
        for t, tf in zip(doc_terms[doc_indptr[j]:doc_indptr[j + 1]],
                         doc_tf[doc_indptr[j]:doc_indptr[j + 1]]):
            idf = np.log(1.0 + (N - df[t] + 0.5) / (df[t] + 0.5))
            norm = k1 * (1.0 - b + b * dl[j] / max(avgdl, 1e-12))
            rows.append(t)
            cols.append(j)
            vals.append(idf * tf / (tf + norm))
    return sp.csr_matrix((np.asarray(vals, np.float32), (rows, cols)),
                         shape=(n_terms, n_docs))


def bm25_topk_batch(W: sp.csr_matrix, q_indptr, q_terms, q_weights, k: int):
    """Per query (CSR rows of term ids and weights over ``W``'s rows): the ``k`` documents
    with the largest positive ``sum_t weight_t * W[t, doc]`` (added in the query's term
    order, in float64), best first, ties by lower id; (ids int64, scores float64) of shape
    (batch, min(k, n_docs)), padded with -1 / 0."""
    B = len(q_indptr) - 1
    n_docs = W.shape[1]
    kk = min(int(k), n_docs)
    out_i = np.full((B, kk), -1, np.int64)
    out_v = np.zeros((B, kk), np.float64)
    for r in range(B):
        acc = np.zeros(n_docs, np.float64)
        for p in range(q_indptr[r], q_indptr[r + 1]):
            row = W.getrow(int(q_terms[p]))
            for j, w in zip(row.indices, row.data):
                acc[j] = acc[j] + float(q_weights[p]) * float(w)
        ids = np.flatnonzero(acc > 0)
        o = _order(acc[ids], ids)[:kk]
        out_i[r, :len(o)] = ids[o]
        out_v[r, :len(o)] = acc[ids[o]]
    return out_i, out_v


def vocab_search(terms: list[bytes], queries: list[bytes]):
    """Each query's lower bound among ``terms`` sorted (bytes order) and its index in
    ``terms`` (-1 when absent): (positions, ids), int64."""
    from bisect import bisect_left
    order = sorted(range(len(terms)), key=terms.__getitem__)
    keys = [terms[i] for i in order]
    pos = np.array([bisect_left(keys, q) for q in queries], np.int64)
    ids = np.array([order[p] if p < len(keys) and keys[p] == q else -1
                    for p, q in zip(pos, queries)], np.int64)
    return pos, ids
