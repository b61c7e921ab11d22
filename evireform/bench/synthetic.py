"""Synthetic indexes for scale measurements (benchmarks), shaped like the real ones.

Entity degrees follow a discrete power law P(d) ~ d^-2.4 capped at 5% of the propositions
(on the heuristic 2WikiMultiHopQA index: 73% of entities have degree 1, the largest hub holds
5.2% of the propositions; here about 62% and 5%), with 4.7 entity mentions per proposition on
average and about 3.5 propositions per passage.  Embeddings are unit vectors around a few
thousand cluster centres, so that approximate search sees structure as in real text.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import EntityGraph, PassageMap


def degree_sequence(rng: np.random.Generator, nnz: int, dmax: int, gamma: float = 2.4) -> np.ndarray:
    out, total = [], 0
    while total < nnz:
        d = np.floor(rng.random(1 << 18) ** (-1.0 / (gamma - 1.0))).astype(np.int64)
        d = d[d <= dmax]
        out.append(d)
        total += int(d.sum())
    d = np.concatenate(out)
    return d[: int(np.searchsorted(np.cumsum(d), nnz)) + 1]


def synthetic_graph(rng: np.random.Generator, M: int, mentions_per_prop: float = 4.7, gamma: float = 2.4,
                    hub_share: float = 0.05) -> EntityGraph:
    """Random incidence with power-law entity degrees (see the module docstring)."""
    nnz = int(mentions_per_prop * M)
    deg = degree_sequence(rng, nnz, max(1, int(hub_share * M)), gamma)
    ents = np.repeat(np.arange(len(deg), dtype=np.int64), deg)[:nnz]
    rng.shuffle(ents)
    # split the shuffled mentions into propositions with Poisson-ish sizes
    cuts = np.sort(rng.choice(np.arange(1, nnz), size=M - 1, replace=False))
    indptr = np.concatenate([[0], cuts, [nnz]]).astype(np.int64)
    return EntityGraph.from_csr(indptr, ents, len(deg))


def synthetic_passages(rng: np.random.Generator, M: int, props_per_passage: float = 3.5) -> PassageMap:
    N = max(1, int(M / props_per_passage))
    owner = np.sort(rng.integers(0, N, size=M)).astype(np.int32)
    return PassageMap.from_owner(owner, N)


def clustered_embeddings(rng: np.random.Generator, M: int, d: int = 384, n_clusters: int = 2048,
                         spread: float = 1.0, intrinsic: int = 32,
                         chunk: int = 65536, out: np.ndarray | None = None) -> np.ndarray:
    """float32 unit rows: a random centre plus Gaussian noise in an ``intrinsic``-dimensional
    subspace, normalised (sentence embeddings have a low intrinsic dimension; isotropic noise
    in all 384 dimensions would make every neighbour search look like a worst case).
    ``out``: an (M, d) float32 array to fill (e.g. a memory map), written chunk by chunk."""
    C = rng.standard_normal((n_clusters, d)).astype(np.float32)
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    basis = rng.standard_normal((intrinsic, d)).astype(np.float32) / np.float32(np.sqrt(d))
    H = np.empty((M, d), dtype=np.float32) if out is None else out
    if H.shape != (M, d):
        raise ValueError(f"out must have shape {(M, d)}; got {H.shape}")
    for lo in range(0, M, chunk):
        hi = min(M, lo + chunk)
        X = C[rng.integers(0, n_clusters, hi - lo)]
        # basis rows have norm ~1, so the noise has norm ~spread
        X += (rng.standard_normal((hi - lo, intrinsic)).astype(np.float32) @ basis) \
            * (spread / np.sqrt(intrinsic))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        H[lo:hi] = X
    return H


_SYLLABLES = ("ka", "lo", "mer", "dan", "vi", "tor", "sel", "bra", "nu", "fen", "ra", "gol",
              "thi", "mas", "pe", "rin", "zo", "cal", "hu", "ber")
_VERBS = ("founded", "described", "visited", "studied", "married", "painted", "ruled",
          "recorded", "designed", "defended")
_NOUNS = ("river", "school", "album", "bridge", "novel", "castle", "company", "festival",
          "museum", "treaty", "village", "theorem")


def synthetic_documents(rng: np.random.Generator, n: int, n_names: int = 20_000,
                        sentences: float = 3.5) -> list[tuple[str, str]]:
    """``n`` (title, text) passages of English-like sentences about made-up people and
    places ("Kalo Merdan founded the school of Vitor Selbra in 1834."): names from
    ``n_names`` two-word capitalised names drawn with Zipf-like frequencies, so that the
    LLM-free extractor finds propositions and a long-tailed entity graph as in real text
    (about ``sentences`` propositions per passage).  For build-time measurements."""
    syl = np.array(_SYLLABLES)
    parts = rng.integers(0, len(syl), size=(n_names, 4))
    names = [f"{syl[a].title()}{syl[b]} {syl[c].title()}{syl[d]}"
             for a, b, c, d in parts.tolist()]
    zipf = 1.0 / np.arange(1, n_names + 1) ** 1.1
    zipf /= zipf.sum()
    counts = np.maximum(1, rng.poisson(sentences, size=n))
    total = int(counts.sum())
    who = rng.choice(n_names, size=(total, 2), p=zipf).tolist()
    verbs = rng.integers(0, len(_VERBS), size=total).tolist()
    nouns = rng.integers(0, len(_NOUNS), size=total).tolist()
    years = rng.integers(1500, 2020, size=total).tolist()
    out, t = [], 0
    for j, c in enumerate(counts.tolist()):
        sents = []
        for _ in range(c):
            a, b = who[t]
            sents.append(f"{names[a]} {_VERBS[verbs[t]]} the {_NOUNS[nouns[t]]} of "
                         f"{names[b]} in {years[t]}.")
            t += 1
        out.append((names[who[t - 1][0]] + f" ({j})", " ".join(sents)))
    return out


class RandomRowsEmbedder:
    """Unit rows from a seeded generator, at almost no cost: a build's steps other than
    encoding, timed without an encoder in the way."""

    name = "random-rows"

    def __init__(self, dim: int = 384, seed: int = 0) -> None:
        self.dim = dim
        self.rng = np.random.default_rng(seed)

    def encode(self, texts: Any, batch_size: int = 64, show_progress: bool = False,
               **kw: Any) -> np.ndarray:
        X = self.rng.standard_normal((len(texts), self.dim), dtype=np.float32)
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        return X


class GivenReformulator:
    """The reformulator's outputs, recorded beforehand (the LLM's part is not timed)."""

    name = "given"

    def __init__(self, by_question) -> None:
        self.by_question = by_question

    def reformulate(self, question: str, observed: Any, max_queries: int):
        return self.by_question.get(question, [])
