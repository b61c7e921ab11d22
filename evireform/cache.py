"""On-disk cache of built indexes, keyed by corpus checksum, extractor and embedder."""
from __future__ import annotations

from typing import TYPE_CHECKING

import os
from pathlib import Path

from .corpus import load_corpus
from .embed import Embedder
from .extract import Extractor, make_extractor
from .index import IndexFormatError, PropositionIndex, wants_passage_vectors
from .store import file_sha256

if TYPE_CHECKING:  # annotations only
    from .types import StrPath


def default_cache_dir() -> Path:
    """``$EVIREFORM_CACHE`` if set, else ``~/.cache/evireform``."""
    env = os.environ.get("EVIREFORM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "evireform"


def cached_index(corpus_path: StrPath, embedder: Embedder, *, extractor: Extractor | str | None = None,
                 openie_path: StrPath | None=None, cache_dir: StrPath | None=None, show_progress: bool = True,
                 openie_plain: bool = False):
    """Load the index for this corpus/extractor/embedder from the cache, or build and save it.

    ``extractor``: as :meth:`PropositionIndex.build` takes it (None: ``"auto"``, chosen for
    the corpus; the cache key names the chosen extractor, so ``"auto"`` on a cased corpus
    finds the index an explicit ``"heuristic"`` built).  Returns ``(index, path, built)``.
    A cached directory that fails verification is rebuilt.
    """
    corpus_path = Path(corpus_path)
    passages = None
    if openie_path is not None:
        # "openie-": the plain triples (the key of indexes cached before the conventions)
        ex_key = ("openie-" if openie_plain else "openie2-") + file_sha256(openie_path)[:12]
    else:
        if extractor is None or isinstance(extractor, str):  # "auto" measures the corpus
            passages = load_corpus(corpus_path)
            extractor = make_extractor(extractor or "auto", passages=passages)
        ex_key = extractor.name
    key = f"{corpus_path.stem}-{file_sha256(corpus_path)[:12]}-{ex_key}-{embedder.name}"
    path = Path(cache_dir or default_cache_dir()) / "indexes" / key
    if (path / "manifest.json").exists():
        try:
            idx = PropositionIndex.load(path)
            if idx.passage_embeddings is None and openie_path is None \
                    and wants_passage_vectors(idx.meta.get("extractor")):
                # cached before indexes held passage embeddings: the passages embedded
                # now (the propositions' are kept) and the index saved again
                idx = idx.with_passage_vectors(embedder, show_progress=show_progress)
                idx.save(path, overwrite=True)
            return idx, path, False
        except IndexFormatError:
            pass  # rebuilt below and replaced atomically
    if passages is None:
        passages = load_corpus(corpus_path)
    if openie_path is not None:
        idx = PropositionIndex.from_openie(openie_path, passages, embedder,
                                           show_progress=show_progress, plain=openie_plain)
    else:
        idx = PropositionIndex.build(passages, embedder, extractor=extractor,
                                     show_progress=show_progress)
    idx.save(path)
    return idx, path, True
