"""Reading corpora in the formats of ``shared/data`` (the HippoRAG file formats).

* a JSON list of ``{"title", "text"}`` records (MuSiQue, 2WikiMultiHopQA; ``"id"``/``"idx"``
  and ``"paragraph_text"`` are accepted too);
* a JSON object mapping each title to its list of sentences (HotpotQA), or to a text.

Passage ids are the record's ``id`` (or ``idx``) when present, the title for title-keyed
objects, and otherwise the position in the file.
"""
from __future__ import annotations

import json
from pathlib import Path

from .types import Passage


def _text(value) -> str:
    if isinstance(value, list):
        return "".join(str(s) for s in value).strip()
    return str(value).strip()


def passages_from_json(obj) -> list[Passage]:
    """Convert a parsed corpus (list of records or title -> sentences object) to passages."""
    out: list[Passage] = []
    if isinstance(obj, dict):
        for title, value in obj.items():
            out.append(Passage(id=str(title), title=str(title), text=_text(value)))
    elif isinstance(obj, list):
        for pos, rec in enumerate(obj):
            if not isinstance(rec, dict):
                raise ValueError(f"corpus record {pos} is a {type(rec).__name__}, "
                                 "expected an object with 'title' and 'text'")
            text = rec.get("text", rec.get("paragraph_text"))
            if text is None:
                raise ValueError(f"corpus record {pos} has no 'text' field")
            pid = rec.get("id", rec.get("idx", pos))
            out.append(Passage(id=str(pid), title=str(rec.get("title", "")), text=_text(text)))
    else:
        raise ValueError("a corpus must be a JSON list of {title, text} records or an object "
                         f"mapping titles to sentences; got {type(obj).__name__}")
    ids = [p.id for p in out]
    if len(set(ids)) != len(ids):
        raise ValueError("passage ids in the corpus are not unique")
    return out


def load_corpus(path) -> list[Passage]:
    """Read a corpus file; raises ``ValueError`` for an empty or malformed corpus."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"corpus {path} is not valid JSON: {exc}") from None
    passages = passages_from_json(obj)
    if not passages:
        raise ValueError(f"corpus {path} is empty")
    return passages
