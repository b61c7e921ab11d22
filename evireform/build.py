"""Index builds as pure batch steps over plain columnar batches.

A build is three steps, each a function from a batch (a ``dict`` of equal-length columns:
lists or numpy arrays) to a batch, so that one process, a thread pool or a Ray Data pipeline
(:mod:`evireform.distributed`) can run them and get the same index:

1. :func:`extract_batch` - passages ``{pos, id, title, text}`` (and optionally ``metadata``,
   compact JSON per row, for extractors that read it: the phrases extractor's namespaces)
   to propositions
   ``{pos, ord, text, entities}`` (``pos``: the passage's position in the corpus, ``ord``: the
   proposition's position within its passage, ``entities``: a JSON list of mentions per row);
2. :func:`embed_batch` - adds ``embedding``, float32 rows, one per proposition;
3. :func:`reduce_records` - on one machine: sorts the rows by ``(pos, ord)``, folds entity
   mentions to canonical entities and builds the incidence, degrees, passage map and
   (optionally) HNSW with :meth:`PropositionIndex.from_propositions`.

Because the reduce sorts by ``(pos, ord)``, batches may arrive in any order and be cut
anywhere: the index only depends on the rows.  :meth:`PropositionIndex.build` is these three
steps in one process.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Sequence, TYPE_CHECKING

import numpy as np

from ._checks import metadata_json
from .types import Passage, Proposition

if TYPE_CHECKING:  # annotations only
    from .embed import Embedder
    from .extract import Extractor

__all__ = ["PASSAGE_COLUMNS", "PROPOSITION_COLUMNS", "passage_batch", "extract_batch",
           "embed_batch", "proposition_batch", "concat_batches", "reduce_records",
           "embedded_propositions", "EmbeddingShapeError"]

PASSAGE_COLUMNS = ("pos", "id", "title", "text")
PROPOSITION_COLUMNS = ("pos", "ord", "text", "entities")


class EmbeddingShapeError(ValueError):
    """An embedder returned other than one row of its dimension per text."""


def _strs(col) -> list[str]:
    return [str(x) for x in (col.tolist() if isinstance(col, np.ndarray) else col)]


def passage_batch(passages: Sequence[Passage], start: int = 0) -> dict[str, Any]:
    """The passage batch of ``passages`` (positions from ``start``)."""
    return {"pos": np.arange(start, start + len(passages), dtype=np.int64),
            "id": [p.id for p in passages], "title": [p.title for p in passages],
            "text": [p.text for p in passages],
            "metadata": [metadata_json(p.metadata) for p in passages]}


def _check(batch: dict[str, Any], cols: Sequence[str], step: str) -> int:
    missing = [c for c in cols if c not in batch]
    if missing:
        raise ValueError(f"{step}: the batch lacks column(s) {missing}; it has {list(batch)}")
    n = {len(batch[c]) for c in cols}
    if len(n) > 1:
        raise ValueError(f"{step}: columns of unequal length {sorted(n)}")
    return n.pop() if n else 0


def extract_batch(batch: dict[str, Any], extractor: Extractor, *, show_progress: bool = False) -> dict[str, Any]:
    """Propositions of a passage batch: ``{pos, ord, text, entities}``."""
    n = _check(batch, PASSAGE_COLUMNS, "extract_batch")
    ids, titles, texts = _strs(batch["id"]), _strs(batch["title"]), _strs(batch["text"])
    pos = np.asarray(batch["pos"], dtype=np.int64)
    mds = [json.loads(m) if m else {} for m in _strs(batch["metadata"])] \
        if "metadata" in batch else [{}] * n
    passages = [Passage(ids[i], titles[i], texts[i], mds[i]) for i in range(n)]
    found = extractor.extract_many(passages, show_progress=show_progress)
    if len(found) != n:
        raise ValueError(f"{type(extractor).__name__}.extract_many returned {len(found)} "
                         f"lists for {n} passages")
    out_pos, out_ord, out_text, out_ent = [], [], [], []
    for i, props in enumerate(found):
        for o, pr in enumerate(props):
            out_pos.append(pos[i])
            out_ord.append(o)
            out_text.append(pr.text)
            out_ent.append(json.dumps(list(pr.entities), ensure_ascii=False))
    return {"pos": np.asarray(out_pos, dtype=np.int64),
            "ord": np.asarray(out_ord, dtype=np.int64), "text": out_text,
            "entities": out_ent}


def embed_batch(batch: dict[str, Any], embedder: Embedder, *, batch_size: int = 64,
                show_progress: bool = False) -> dict[str, Any]:
    """The proposition batch with ``embedding`` added (float32, one row per proposition)."""
    n = _check(batch, PROPOSITION_COLUMNS, "embed_batch")
    out = {c: batch[c] for c in PROPOSITION_COLUMNS}
    if n == 0:
        out["embedding"] = np.zeros((0, int(embedder.dim)), np.float32)
        return out
    emb = np.asarray(embedder.encode(_strs(batch["text"]), batch_size=batch_size,
                                     show_progress=show_progress))
    dim = int(embedder.dim)
    if emb.shape != (n, dim):  # never reshaped into other rows
        raise EmbeddingShapeError(f"embedder {getattr(embedder, 'name', embedder)!r} returned "
                         f"embeddings of shape {emb.shape} for {n} propositions; expected "
                         f"({n}, {dim})")
    out["embedding"] = np.ascontiguousarray(emb, dtype=np.float32)
    return out


def proposition_batch(propositions: Sequence[Proposition], passages: Sequence[Passage],
                      start: int = 0) -> dict[str, Any]:
    """The proposition batch ``{pos, ord, text, entities}`` of propositions extracted
    elsewhere (an OpenIE file, the user's own), over ``passages`` at positions ``start``..;
    ``ord`` counts each passage's propositions in the order given."""
    where = {p.id: start + i for i, p in enumerate(passages)}
    seen: dict[int, int] = {}
    pos, ordv = [], []
    for i, pr in enumerate(propositions):
        try:
            j = where[pr.passage]
        except KeyError:
            raise ValueError(f"proposition {i} names unknown passage id {pr.passage!r}") \
                from None
        pos.append(j)
        ordv.append(seen.get(j, 0))
        seen[j] = ordv[-1] + 1
    return {"pos": np.asarray(pos, np.int64), "ord": np.asarray(ordv, np.int64),
            "text": [pr.text for pr in propositions],
            "entities": [json.dumps(list(pr.entities), ensure_ascii=False)
                         for pr in propositions]}


def embedded_propositions(passages: Sequence[Passage], extractor: Extractor, embedder: Embedder, *,
                          batch_size: int = 64, show_progress: bool = False):
    """The three steps in one process over ``passages``: ``(propositions, embeddings)``
    (float32, one row per proposition, in passage then extraction order).  What a build,
    :meth:`~evireform.index.PropositionIndex.add` and ``upsert`` extract and embed with."""
    props = extract_batch(passage_batch(passages), extractor, show_progress=show_progress)
    rows = embed_batch(props, embedder, batch_size=batch_size, show_progress=show_progress)
    return reduce_records(passages, [rows], int(embedder.dim))


def concat_batches(batches: Iterable[dict], dim: int) -> dict[str, Any]:
    """One embedded proposition batch from many, rows in ``(pos, ord)`` order."""
    batches = list(batches)
    if not batches:
        return {"pos": np.zeros(0, np.int64), "ord": np.zeros(0, np.int64), "text": [],
                "entities": [], "embedding": np.zeros((0, dim), np.float32)}
    pos = np.concatenate([np.asarray(b["pos"], np.int64) for b in batches])
    ordv = np.concatenate([np.asarray(b["ord"], np.int64) for b in batches])
    text = [t for b in batches for t in _strs(b["text"])]
    ents = [e for b in batches for e in _strs(b["entities"])]
    emb = np.concatenate([np.asarray(b["embedding"], np.float32).reshape(-1, dim)
                          for b in batches])
    o = np.lexsort((ordv, pos))
    key = np.stack([pos[o], ordv[o]], axis=1)
    if len(key) > 1 and np.any(np.all(key[1:] == key[:-1], axis=1)):
        raise ValueError("two rows share (pos, ord): a batch was processed twice")
    return {"pos": pos[o], "ord": ordv[o], "text": [text[i] for i in o],
            "entities": [ents[i] for i in o], "embedding": emb[o]}


def reduce_records(passages: Sequence[Passage], batches: Iterable[dict], dim: int):
    """The reduce step as plain records: ``(propositions, embeddings)`` from embedded
    proposition batches (any order, any cut) over ``passages``, sorted by (passage position,
    order in the passage) as one extraction pass would give them.
    :meth:`evireform.index.PropositionIndex.from_batches` makes the index of them."""
    rows = concat_batches(batches, dim)
    n = len(passages)
    if len(rows["pos"]) and (rows["pos"].min() < 0 or rows["pos"].max() >= n):
        raise ValueError(f"a proposition names passage position {int(rows['pos'].max())}, "
                         f"outside the {n} passages")
    props = [Proposition(t, passages[int(p)].id, tuple(json.loads(e)))
             for p, t, e in zip(rows["pos"], rows["text"], rows["entities"])]
    return props, rows["embedding"]
