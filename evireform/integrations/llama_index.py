"""EviReform as a LlamaIndex retriever (``pip install 'evireform[llamaindex]'``).

>>> from evireform.integrations.llama_index import EviReformRetriever
>>> retriever = EviReformRetriever.from_defaults(index_dir="hotpot.idx", similarity_top_k=5)
>>> nodes = retriever.retrieve("Which city hosted ...?")      # list[NodeWithScore]
>>> retriever.persist("evireform_retriever")                  # index + settings
>>> again = EviReformRetriever.from_persist_dir("evireform_retriever")

Each node is a ``TextNode`` with the passage text, ``id_`` the passage id, and metadata: the
passage's own plus ``passage_id`` and ``title``: nothing that depends on the question, so the
same passage is the same node (the same ``hash``) in every result list, as
``QueryFusionRetriever`` and deduplicating postprocessors need; ``passage_id`` is kept out of
the LLM prompt and the embedded text.  ``NodeWithScore.score`` is the EviReform score; a
node's ``ref_doc_id`` is its ``source`` metadata (the file a chunk came from) or the passage
id.  The score parts and residual queries of a question are on the EviReform result
(``retriever.evireform.retrieve(q)``).  ``aretrieve`` runs on a worker thread.  Nodes go in
with their metadata (:func:`passages_from_nodes`); ``filter`` (a where clause or passage
ids: :mod:`evireform.filters`) restricts every query.
"""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

from .._checks import loads as _json_loads, positive_int

import dataclasses
import json
from pathlib import Path

if TYPE_CHECKING:  # annotations only
    from ..embed import Embedder
    from ..roles import Controller, Reformulator, Selector
    from ..index import PropositionIndex
    from ..types import FilterSpec, StrPath

try:
    from llama_index.core.callbacks.base import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import (NodeRelationship, NodeWithScore, QueryBundle,
                                         RelatedNodeInfo, TextNode)
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError("evireform.integrations.llama_index needs LlamaIndex: "
                      "pip install 'evireform[llamaindex]'") from exc

from ._common import document_passages, make_retriever, passage_text
import asyncio
from ..filters import compile_filter
from ..retriever import EviReformConfig


def passages_from_nodes(nodes) -> list[Any]:
    """:class:`~evireform.Passage` objects from LlamaIndex nodes or documents (their text,
    ``id_`` and metadata)."""
    return document_passages(((n.get_content(), n.metadata, getattr(n, "id_", None))
                              for n in nodes), "nodes")

_SETTINGS = "evireform_retriever.json"


class EviReformRetriever(BaseRetriever):
    """LlamaIndex ``BaseRetriever`` over an EviReform retriever, with the conventions of
    LlamaIndex's own BM25 retriever: ``similarity_top_k``, ``from_defaults``, ``persist`` /
    ``from_persist_dir``."""

    similarity_top_k: int

    def __init__(self, retriever, similarity_top_k: int = 10,
                 callback_manager: CallbackManager | None = None, verbose: bool = False,
                 filter: FilterSpec=None) -> None:
        self._evireform = retriever
        self.similarity_top_k = positive_int(similarity_top_k, "similarity_top_k")
        compile_filter(filter)  # malformed filters fail here
        #: a where clause over passage metadata or passage ids (evireform.filters)
        self.filter: FilterSpec = filter
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def evireform(self):
        """The wrapped :class:`evireform.EviReform` (its results carry the score parts and
        residual queries)."""
        return self._evireform

    @classmethod
    def from_defaults(cls, index: PropositionIndex | None=None, index_dir: StrPath | None=None, embedder: Embedder | None=None, *,
                      similarity_top_k: int = 10, config: Any=None, selector: Selector | None=None, reformulator: Reformulator | None=None,
                      controller: Controller | None=None, max_workers: int = 1, backend: Any="auto",
                      callback_manager: CallbackManager | None = None,
                      verbose: bool = False, filter: FilterSpec=None) -> "EviReformRetriever":
        """From a :class:`~evireform.PropositionIndex` or an index directory; the embedder
        defaults to the one the index names, the roles to the LLM-free ones."""
        r = make_retriever(index, index_dir, embedder, config, selector=selector,
                           reformulator=reformulator, controller=controller,
                           max_workers=max_workers, backend=backend)
        return cls(r, similarity_top_k, callback_manager, verbose, filter)

    def _nodes(self, result) -> list[NodeWithScore]:
        out = []
        for p in result.passages:
            md = {**p.metadata, "passage_id": p.id, "title": p.title}
            src = p.metadata.get("source")
            node = TextNode(text=passage_text(self._evireform, p), id_=p.id, metadata=md,
                            excluded_llm_metadata_keys=["passage_id"],
                            excluded_embed_metadata_keys=["passage_id"],
                            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(
                                node_id=src if isinstance(src, str) and src else p.id)})
            out.append(NodeWithScore(node=node, score=float(p.score)))
        return out

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(self._evireform.retrieve(query_bundle.query_str,
                                                    self.similarity_top_k, filter=self.filter))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = await asyncio.to_thread(self._evireform.retrieve, query_bundle.query_str,
                                         self.similarity_top_k, filter=self.filter)
        return self._nodes(result)

    def persist(self, path: StrPath) -> None:
        """Save the index (``path/index``, atomically) and the settings (top-k, config)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._evireform.index.save(path / "index")
        (path / _SETTINGS).write_text(json.dumps({
            "similarity_top_k": self.similarity_top_k, "filter": self.filter,
            "config": dataclasses.asdict(self._evireform.config)}, indent=1))

    @classmethod
    def from_persist_dir(cls, path: StrPath, embedder: Embedder | None=None, **roles: Any) -> "EviReformRetriever":
        """Load what :meth:`persist` saved (LLM roles, if any, are passed again here)."""
        path = Path(path)
        f = path / _SETTINGS
        try:
            settings = _json_loads(f.read_text(encoding="utf-8"), str(f))
            if not isinstance(settings, dict) or not isinstance(settings.get("config"), dict):
                raise ValueError("expected {\"similarity_top_k\": int, \"config\": {...}}")
            top_k = positive_int(settings.get("similarity_top_k"), "similarity_top_k")
            config = EviReformConfig(**settings["config"])
        except OSError as exc:
            raise ValueError(f"{f}: cannot read the retriever settings ({exc.strerror or exc})"
                             ) from None
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{f}: damaged retriever settings ({exc})") from None
        return cls.from_defaults(index_dir=path / "index", embedder=embedder,
                                 similarity_top_k=top_k, config=config,
                                 filter=roles.pop("filter", settings.get("filter")), **roles)
