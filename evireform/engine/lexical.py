"""The lexical index, owned by the engine beside the int8 codes and the HNSW graph.

For every proposition (its text) and every passage (title, newline, text) the terms of
:func:`evireform.extract.tokens.lexical_tokens` are counted once (:class:`LexicalIndex`); the eager
BM25 weights (:func:`evireform.kernels.bm25_weights`) are made from those counts when first
needed, over the whole index or, for a filter's restriction, recounted over the matching
documents alone (so a filtered query scores as an index of those passages would).  A
query's scores are then a sum of a few rows (:func:`evireform.kernels.lexical_topk_batch`).

The counts travel with the index's search structures (:mod:`evireform.engine.structures`):
an index made by ``add`` tokenizes only the new texts, one made by ``delete`` or a subset
keeps its documents' rows; the weights, which depend on the whole collection (IDF, mean
length), are recomputed from the counts, so an updated index scores exactly as a rebuilt
one.  Query terms are scored in the order the query names them, so the sums do not depend
on how the vocabulary is numbered.
"""
from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

import numpy as np

from ..kernels import lexical_topk_batch
# the counts themselves are data, below the store and the engine (evireform.search_data)
from ..search_data import LEVELS, LexicalIndex, passage_text

if TYPE_CHECKING:  # annotations only
    from ..index import PropositionIndex

__all__ = ["LexicalIndex", "LEVELS", "lexical_search", "passage_text"]

def lexical_search(lex: LexicalIndex, texts: Sequence[str], k: int, level: str = "props",
                   restriction: Any = None, backend: str = "cpu"
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The BM25 top-``k`` of ``level`` for each text: (ids, scores), (batch, k') padded with
    -1 / 0 (k' = min(k, the level's size)).  Under a restriction only matching documents
    score (the statistics recounted over them)."""
    M = lex.weights(level, restriction)
    indptr, terms, w = lex.query(texts)
    return lexical_topk_batch(M, indptr, terms, w, k, backend=backend)
