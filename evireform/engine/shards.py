"""Sharded proposition search with an exact merge.

The proposition embeddings may be split into S contiguous shards, each searched on its own
(exactly, or with its own HNSW graph re-scored exactly); :func:`merge_topk` merges the
per-shard top-k lists into the global one.  For exact search the merged result equals the
unsharded search id for id and score for score: every shard returns its own top-k (positive
scores, ties by lower id), the global top-k is contained in their union, and the merge orders
by score, then by lower global id, exactly as the kernels do.  With HNSW each shard's graph is
approximate, so recall is measured (``evireform bench --scale`` and the tests), not assumed.

The entity graph stays one structure: only the searches fan out.  :class:`ShardedSearcher`
runs the shards in this process (optionally in a thread pool);
:class:`evireform.distributed.RayShardedSearcher` puts each shard in a Ray actor.  The
retriever takes either: ``EviReform(index, searcher=...)``.
"""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._checks import loads as _json_loads, positive_int
from ..kernels import cosine_topk_batch
from .hnsw import build_hnsw, check_queries, hnsw_topk_batch, merge_topk, search_rows
from ..store import IndexFormatError, file_sha256, load_hnsw, write_dir_atomically
from ..store.hnsw_file import write_hnsw

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from ..index import PropositionIndex
    from ..types import StrPath

__all__ = ["Shard", "ShardedSearcher", "check_queries", "merge_topk", "shard_bounds",
           "save_shards", "read_shard_manifest", "load_shard"]

SHARDS_FORMAT = "evireform-shards"
SHARDS_VERSION = 1


def shard_bounds(n: int, n_shards: int) -> list[tuple[int, int]]:
    """``n_shards`` contiguous ``[lo, hi)`` row ranges covering ``range(n)``, sizes differing
    by at most one (empty shards when ``n < n_shards``)."""
    positive_int(n_shards, "n_shards")
    cuts = [(n * s) // n_shards for s in range(n_shards + 1)]
    return [(cuts[s], cuts[s + 1]) for s in range(n_shards)]


@dataclass
class Shard:
    """Rows ``[offset, offset + len(embeddings))`` of the index; ``hnsw`` (hnswlib, labels =
    local rows) or None for exact search."""

    embeddings: np.ndarray
    offset: int
    hnsw: object | None = None

    def search_batch(self, Q: ArrayLike, k: int, *, rows: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """This shard's top-``k`` with global ids.  ``rows`` (global positions, strictly
        ascending): only those are candidates (:func:`~evireform.engine.hnsw.search_rows` over the
        ones in this shard)."""
        n = int(self.embeddings.shape[0])
        if n == 0:
            return np.full((len(Q), 0), -1, np.int64), np.zeros((len(Q), 0), np.float32)
        if rows is not None:
            rows = np.asarray(rows, dtype=np.int64)
            lo, hi = np.searchsorted(rows, [self.offset, self.offset + n])
            ids, sc = search_rows(self.embeddings, Q, k, rows[lo:hi] - self.offset,
                                  hnsw=self.hnsw)
        elif self.hnsw is None:
            ids, sc = cosine_topk_batch(self.embeddings, Q, k)
        else:
            ids, sc = hnsw_topk_batch(self.hnsw, self.embeddings, Q, k)
        return np.where(ids >= 0, ids + self.offset, -1), sc

    @classmethod
    def build(cls, embeddings: ArrayLike, offset: int, hnsw: bool = False, *, M: int | None = None,
              ef_construction: int | None = None, ef: int | None = None,
              threads: int | None = None) -> "Shard":
        """A shard over ``embeddings`` (a view is kept, not a copy), with HNSW if asked."""
        h = build_hnsw(embeddings, M=M, ef_construction=ef_construction, ef=ef,
                       threads=threads) if hnsw and len(embeddings) else None
        return cls(embeddings, int(offset), h)


class ShardedSearcher:
    """Proposition search over S shards in this process, merged exactly (:func:`merge_topk`).

    ``max_workers > 1`` searches the shards in a thread pool (the numba kernels and hnswlib
    release the GIL).  The contract is :func:`evireform.engine.structures.search_index`'s.
    """

    dim: int
    n_props: int
    shards: list[Any]

    def __init__(self, shards: Any, *, max_workers: int = 1) -> None:
        self.shards = list(shards)
        if not self.shards:
            raise ValueError("a ShardedSearcher needs at least one shard")
        dims = {int(s.embeddings.shape[1]) for s in self.shards}
        if len(dims) != 1:
            raise ValueError(f"shards of different dimensions {sorted(dims)}")
        self.dim = dims.pop()
        self.n_props = sum(int(s.embeddings.shape[0]) for s in self.shards)
        exp = 0
        for s in self.shards:
            if s.offset != exp:
                raise ValueError(f"shards must cover the rows contiguously: a shard starts at "
                                 f"{s.offset}, expected {exp}")
            exp += int(s.embeddings.shape[0])
        self.max_workers: int = max_workers

    @classmethod
    def from_index(cls, index: PropositionIndex, n_shards: int, *, hnsw: bool = False, max_workers: int = 1,
                   **hnsw_kw: Any) -> "ShardedSearcher":
        """Split ``index.embeddings`` (memory-mapped or not; shards are views) into
        ``n_shards`` contiguous shards, each exact or with its own HNSW graph."""
        emb = index.embeddings
        return cls([Shard.build(emb[lo:hi], lo, hnsw, **hnsw_kw)
                    for lo, hi in shard_bounds(int(emb.shape[0]), n_shards)],
                   max_workers=max_workers)

    def save(self, path: StrPath, *, overwrite: bool = False) -> Path:
        """Save the shard layout and HNSW graphs (:func:`save_shards`); the embeddings stay
        in the index."""
        return save_shards(self.shards, path, overwrite=overwrite)

    @classmethod
    def load(cls, path: StrPath, index: PropositionIndex, *, max_workers: int = 1) -> "ShardedSearcher":
        """The searcher saved at ``path`` over ``index`` (its embeddings, memory-mapped or
        not, are sliced, not copied); everything is checked against the index first."""
        emb = index.embeddings
        entries = read_shard_manifest(path, int(emb.shape[0]), int(emb.shape[1]))
        return cls([load_shard(path, e, emb) for e in entries], max_workers=max_workers)

    def search_batch(self, Q: ArrayLike, k: int, *, rows: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, scores)`` of shape (batch, min(k, n)): the exact merge of every shard's
        top-``k``; ``rows`` (strictly ascending positions): only those are candidates (n:
        their number), each shard searching its own."""
        Q, k = check_queries(Q, k, self.dim)
        k = min(k, self.n_props if rows is None else len(rows))
        if k == 0:
            return np.full((len(Q), 0), -1, np.int64), np.zeros((len(Q), 0), np.float32)
        if self.max_workers > 1 and len(self.shards) > 1:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(self.max_workers) as pool:
                parts = list(pool.map(lambda s: s.search_batch(Q, k, rows=rows), self.shards))
        else:
            parts = [s.search_batch(Q, k, rows=rows) for s in self.shards]
        return merge_topk(parts, k, len(Q))


# --------------------------------------------------------------------------- on disk
def save_shards(shards: Any, path: StrPath, *, overwrite: bool = False) -> Path:
    """Write the shard layout and each shard's HNSW graph to the directory ``path``
    (``shards.json`` + ``shard-<s>.hnsw``; the embeddings stay in the index).  Written to a
    temporary directory and swapped in atomically under the parent's lock
    (:func:`evireform.store.write_dir_atomically`); an existing ``path`` is refused unless
    ``overwrite`` and it is a shard directory."""
    path = Path(path)

    def check() -> None:
        if path.exists():
            if not overwrite:
                raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
            if not (path / "shards.json").is_file():
                raise FileExistsError(f"{path} is not a shard directory (no shards.json); "
                                      "refusing to replace it")

    def write(tmp: Path) -> None:
        entries = []
        for n, sh in enumerate(shards):
            e = {"lo": int(sh.offset), "hi": int(sh.offset + len(sh.embeddings)), "hnsw": None}
            if sh.hnsw is not None:
                name = f"shard-{n}.hnsw"
                write_hnsw(sh.hnsw, tmp / name)
                e["hnsw"] = {"file": name, "sha256": file_sha256(tmp / name)}
            entries.append(e)
        dim = int(shards[0].embeddings.shape[1]) if shards else 0
        (tmp / "shards.json").write_text(json.dumps(
            {"format": SHARDS_FORMAT, "version": SHARDS_VERSION, "dim": dim,
             "n_props": entries[-1]["hi"] if entries else 0, "shards": entries}, indent=1))

    check()
    return write_dir_atomically(path, write, check=check,
                                looks_like=lambda d: (d / "shards.json").is_file()).resolve()


def read_shard_manifest(path: StrPath, n_props: int, dim: int) -> list[dict[str, Any]]:
    """The checked shard entries of a saved shard directory for an index of ``n_props``
    propositions of ``dim`` floats (``IndexFormatError`` naming what is wrong)."""
    f = Path(path) / "shards.json"
    try:
        man = _json_loads(f.read_text())
    except (OSError, ValueError) as exc:
        raise IndexFormatError(f"{f}: cannot read the shard manifest ({exc})") from None
    if not isinstance(man, dict) or man.get("format") != SHARDS_FORMAT \
            or man.get("version") != SHARDS_VERSION:
        raise IndexFormatError(f"{f}: not an evireform shard manifest of version "
                               f"{SHARDS_VERSION}")
    if man.get("dim") != dim or man.get("n_props") != n_props:
        raise IndexFormatError(f"{f}: made for {man.get('n_props')} propositions of dim "
                               f"{man.get('dim')}; the index has {n_props} of dim {dim}")
    entries, exp = man.get("shards"), 0
    if not isinstance(entries, list) or not entries:
        raise IndexFormatError(f"{f}: 'shards' must be a non-empty list")
    for n, e in enumerate(entries):
        ok = isinstance(e, dict) and isinstance(e.get("lo"), int) \
            and isinstance(e.get("hi"), int) and e["lo"] == exp and e["hi"] >= e["lo"]
        h = e.get("hnsw") if isinstance(e, dict) else None
        ok = ok and (h is None or (isinstance(h, dict) and h.get("file") == f"shard-{n}.hnsw"
                                   and isinstance(h.get("sha256"), str)))
        if not ok:
            raise IndexFormatError(f"{f}: shard {n} is malformed or not contiguous")
        exp = e["hi"]
    if exp != n_props:
        raise IndexFormatError(f"{f}: the shards cover {exp} propositions, not {n_props}")
    return entries


def load_shard(path: StrPath, entry: dict[str, Any], embeddings: ArrayLike) -> Shard:
    """One shard of a saved shard directory over the index's ``embeddings`` (a view of its
    rows); its HNSW file is checked (digest, header, links, labels) before hnswlib reads it."""
    lo, hi = entry["lo"], entry["hi"]
    h = None
    if entry.get("hnsw"):
        f = Path(path) / entry["hnsw"]["file"]
        if not f.is_file() or file_sha256(f) != entry["hnsw"]["sha256"]:
            raise IndexFormatError(f"{f}: missing, or its SHA-256 differs from shards.json")
        h = load_hnsw(f, hi - lo, int(embeddings.shape[1]), embeddings[lo:hi])
    return Shard(embeddings[lo:hi], lo, h)
