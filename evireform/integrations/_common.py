"""What both adapters share: building the retriever and the metadata of a result passage."""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

from pathlib import Path

from ..application import index_embedder
from ..corpus import as_passages
from ..index import PropositionIndex
from ..retriever import EviReform

if TYPE_CHECKING:  # annotations only
    from ..embed import Embedder
    from ..roles import Controller, Reformulator, Selector
    from ..index import PropositionIndex
    from ..types import StrPath


def make_retriever(index: PropositionIndex | None=None, index_dir: StrPath | None=None, embedder: Embedder | None=None, config: Any=None, *, selector: Selector | None=None,
                   reformulator: Reformulator | None=None, controller: Controller | None=None, max_workers: int = 1, backend: Any="auto"):
    """An :class:`~evireform.retriever.EviReform` over ``index`` (a PropositionIndex) or the
    index saved at ``index_dir``; without ``embedder`` the one named in the index is used."""
    if (index is None) == (index_dir is None):
        raise ValueError("give exactly one of index (a PropositionIndex) and index_dir")
    if index is None:
        index = PropositionIndex.load(Path(index_dir))
    if embedder is None:
        embedder = index_embedder(index)
    roles = {k: v for k, v in dict(selector=selector, reformulator=reformulator,
                                   controller=controller).items() if v is not None}
    return EviReform(index, config, embedder=embedder, max_workers=max_workers, backend=backend,
                     **roles)


def passage_metadata(result, rank: int, passage) -> dict[str, Any]:
    """Metadata of one ranked passage: the passage's own metadata, then ids, title, score
    and its three parts, the question's residual queries, and ``duplicates`` (the ids of
    the passages with the same text it stands for) when there are any (JSON-serialisable;
    these keys win over the passage's own of the same name)."""
    twins = list(getattr(passage, "duplicates", ()))
    return {
        **passage.metadata,
        "passage_id": passage.id,
        "title": passage.title,
        "rank": rank,
        "score": float(passage.score),
        "from_question": float(passage.from_question),
        "from_residual": float(passage.from_residual),
        "from_propagation": float(passage.from_propagation),
        "residual_queries": list(result.trace.residual_queries),
        **({"duplicates": twins} if twins else {}),
    }


def passage_text(retriever, passage) -> str:
    return retriever.index.passages[passage.index].text


def document_passages(items: Any, what: str):
    """:class:`~evireform.Passage` objects from framework documents: ``(text, metadata,
    id)`` triples; the id is the document's own (``None``: derived from its content), the
    title ``metadata["title"]`` when it is a string, and the metadata kept whole."""
    recs = []
    for n, (text, metadata, pid) in enumerate(items):
        md = dict(metadata or {})
        rec = {"text": text, "metadata": md, "title": md.get("title")
               if isinstance(md.get("title"), str) else ""}
        if pid is not None:
            rec["id"] = str(pid)
        recs.append(rec)
    if not recs:
        raise ValueError(f"no {what} given")
    return as_passages(recs, what)
