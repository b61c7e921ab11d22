"""EviReform as a LangChain retriever (``pip install 'evireform[langchain]'``).

>>> from evireform.integrations.langchain import EviReformRetriever
>>> retriever = EviReformRetriever.from_index_dir("hotpot.idx", k=5)
>>> docs = retriever.invoke("Which city hosted ...?")        # list[Document]
>>> many = retriever.batch(["q1", "q2"])                       # one retrieve_many call

Each ``Document`` holds the passage text; its metadata is the passage's own metadata plus
``passage_id``, ``title``, ``rank``, ``score``, the three score parts (``from_question``,
``from_residual``, ``from_propagation``) and the question's ``residual_queries``.

``Document.id`` is the passage id.  Documents go in with their metadata
(:func:`passages_from_documents`), and ``filter`` (a where clause over it, or passage ids:
:mod:`evireform.filters`) restricts every query:

>>> idx = PropositionIndex.build(passages_from_documents(docs), embedder)
>>> EviReformRetriever.from_index(idx, k=5, filter={"source": "handbook.md"})

Per call, ``invoke(q, k=3)`` and ``invoke(q, filter=...)`` override the retriever's ``k`` and
``filter`` (any other keyword is refused); ``ainvoke`` runs the retrieval on a worker thread
(the kernels release the GIL), so an event loop is never blocked.
"""
from __future__ import annotations

import asyncio
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:  # annotations only
    from ..embed import Embedder
    from ..index import PropositionIndex
    from ..types import FilterSpec, StrPath

try:
    from langchain_core.callbacks import (AsyncCallbackManagerForRetrieverRun,
                                          CallbackManagerForRetrieverRun)
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, field_validator
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError("evireform.integrations.langchain needs LangChain: "
                      "pip install 'evireform[langchain]'") from exc

from .._checks import positive_int
from ..filters import compile_filter
from ._common import document_passages, make_retriever, passage_metadata, passage_text


#: "no per-call value": the retriever's own k / filter apply (None is a filter: none)
_UNSET: Any = object()


def passages_from_documents(documents) -> list[Any]:
    """:class:`~evireform.Passage` objects from LangChain ``Document`` objects, metadata
    kept (``id``: the document's ``id`` when set, else derived from its content; ``title``:
    ``metadata["title"]`` when a string)."""
    return document_passages(((d.page_content, d.metadata, getattr(d, "id", None))
                              for d in documents), "documents")


class EviReformRetriever(BaseRetriever):
    """LangChain ``BaseRetriever`` over an EviReform retriever; ``invoke``, ``ainvoke`` and
    ``batch`` come from the base class, ``batch`` overridden to run one ``retrieve_many``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    #: the wrapped :class:`evireform.EviReform`
    retriever: Any
    #: passages returned per question
    k: int = 10
    #: a where clause over passage metadata or a list of passage ids (evireform.filters);
    #: None: no filter
    filter: Any = None

    @field_validator("filter", mode="before")
    @classmethod
    def _check_filter(cls, v):
        compile_filter(v)  # malformed filters fail here, not at the first question
        return v

    @field_validator("k", mode="before")
    @classmethod
    def _check_k(cls, v):
        return positive_int(v, "k")

    @classmethod
    def from_index(cls, index: PropositionIndex, embedder: Embedder | None=None, *, k: int = 10, config: Any=None, filter: FilterSpec=None,
                   **roles: Any) -> "EviReformRetriever":
        """From a :class:`~evireform.PropositionIndex` (and the embedder it was built with;
        default: the one its manifest names).  ``roles``: ``selector``, ``reformulator``,
        ``controller`` (e.g. the LLM roles), ``max_workers``, ``backend``."""
        return cls(retriever=make_retriever(index, None, embedder, config, **roles), k=k,
                   filter=filter)

    @classmethod
    def from_index_dir(cls, path: StrPath, embedder: Embedder | None=None, *, k: int = 10, config: Any=None, filter: FilterSpec=None,
                       **roles: Any) -> "EviReformRetriever":
        """From an index directory saved by ``evireform index`` or ``PropositionIndex.save``."""
        return cls(retriever=make_retriever(None, path, embedder, config, **roles), k=k,
                   filter=filter)

    def _documents(self, result) -> list[Document]:
        return [Document(page_content=passage_text(self.retriever, p),
                         metadata=passage_metadata(result, r, p), id=p.id)
                for r, p in enumerate(result.passages, 1)]

    def _call_args(self, k, filter: FilterSpec, kwargs: Any) -> tuple[int, Any]:
        """(k, filter) for one call: the given ones, else the retriever's."""
        if kwargs:
            raise TypeError(f"EviReformRetriever takes k= and filter= per call; got "
                            f"{sorted(kwargs)}")
        if filter is not _UNSET:
            compile_filter(filter)
        return (self.k if k is None else positive_int(k, "k"),
                self.filter if filter is _UNSET else filter)

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun, k=None,
                                filter: Any = _UNSET, **kwargs: Any) -> list[Document]:
        k, flt = self._call_args(k, filter, kwargs)
        return self._documents(self.retriever.retrieve(query, k, filter=flt))

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k=None, filter: Any = _UNSET,
                                       **kwargs: Any) -> list[Document]:
        k, flt = self._call_args(k, filter, kwargs)
        result = await asyncio.to_thread(self.retriever.retrieve, query, k, filter=flt)
        return self._documents(result)

    def batch(self, inputs, config: Any=None, *, return_exceptions: bool = False, **kwargs: Any):
        """All questions through one :meth:`EviReform.retrieve_many` (batched search and
        kernels), with LangChain's batch contract: each input's run reported to its
        config's callbacks (``on_retriever_start`` / ``_end`` / ``_error``, tags, metadata,
        run names), and with ``return_exceptions`` a failing input answered by its exception
        while the others get their documents (the batch is then answered input by input).
        Per-call keywords (``k=``, ``filter=``) go through the base class."""
        inputs = list(inputs)
        if kwargs or not inputs:
            return super().batch(inputs, config, return_exceptions=return_exceptions, **kwargs)
        from langchain_core.callbacks import CallbackManager
        from langchain_core.runnables.config import get_config_list
        configs = get_config_list(config, len(inputs))
        runs = []
        for q, cfg in zip(inputs, configs):
            cm = CallbackManager.configure(
                cfg.get("callbacks"), None, verbose=bool(getattr(self, "verbose", False)),
                inheritable_tags=cfg.get("tags"), local_tags=self.tags,
                inheritable_metadata=cfg.get("metadata"), local_metadata=self.metadata)
            runs.append(cm.on_retriever_start(None, q, name=cfg.get("run_name")
                                              or self.get_name(), run_id=cfg.get("run_id")))
        try:
            results = self.retriever.retrieve_many(inputs, self.k, filter=self.filter)
        except Exception as exc:
            if return_exceptions:  # which input failed: each one on its own
                out = []
                for q, run in zip(inputs, runs):
                    try:
                        docs = self._documents(self.retriever.retrieve(q, self.k,
                                                                       filter=self.filter))
                    except Exception as one:
                        run.on_retriever_error(one)
                        out.append(one)
                    else:
                        run.on_retriever_end(docs)
                        out.append(docs)
                return out
            for run in runs:
                run.on_retriever_error(exc)
            raise
        out = [self._documents(r) for r in results]
        for run, docs in zip(runs, out):
            run.on_retriever_end(docs)
        return out
