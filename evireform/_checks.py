"""Argument checks shared by the public API: one place for what a list, a count or a JSON
document must be, so every entry point refuses the same bad input with the same words."""
from __future__ import annotations

from typing import Any

import json
import math
import numbers

def as_list(items: Any, what: str) -> list[Any]:
    """``items`` as a list; a bare string (or bytes) is refused instead of being read as a
    sequence of characters (``delete("12")`` must not delete passages '1' and '2')."""
    if isinstance(items, (str, bytes, bytearray)):
        raise TypeError(f"{what} must be a list, not a single {type(items).__name__} "
                        f"({items!r:.60}); wrap it: [{items!r:.60}]")
    if items is None:
        raise TypeError(f"{what} must be a list, not None")
    try:
        return list(items)
    except TypeError:
        raise TypeError(f"{what} must be a list; got {type(items).__name__}") from None


def int_at_least(value, low: int, what: str) -> int:
    """``value`` as an int >= ``low``.  Booleans, floats (even 2.0) and strings are refused:
    ``k=2.5`` is not silently 2, ``k=True`` is not 1."""
    if type(value) is int and value >= low:  # the common case, without the ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        kind = {1: "a positive integer", 0: "a non-negative integer"}.get(
            low, f"an integer >= {low}")
        raise ValueError(f"{what} must be {kind}; got {value!r:.60}")
    return int(value)


def positive_int(value, what: str) -> int:
    """``value`` as an int >= 1 (:func:`int_at_least`)."""
    return int_at_least(value, 1, what)


def loads(text, where: str = "input"):
    """``json.loads`` that raises ``ValueError`` naming ``where`` (never ``RecursionError``)
    for a document nested deeper than the parser's stack allows; other malformed JSON raises
    ``json.JSONDecodeError`` (a ``ValueError``) as usual."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply to read") from None


def check_text(s: str, where: str) -> str:
    """``s`` if it is valid Unicode text; ``ValueError`` naming ``where`` for a lone surrogate
    (``"\\ud800"``: a JSON string cut inside an emoji, a file name decoded with
    ``surrogateescape``), which no UTF-8 file can hold.  Such text is refused, never stored
    altered."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{where}: not valid Unicode text (a lone surrogate "
                         f"{s[exc.start]!r} at character {exc.start}); fix the input "
                         "(a truncated emoji or a file name that is not UTF-8)") from None
    return s


#: how deeply metadata values may nest
MAX_JSON_DEPTH = 64


def check_json_value(v, where: str, depth: int = 0) -> None:
    """``ValueError`` naming ``where`` unless ``v`` is plain JSON that the index can store
    and filters can compare exactly: valid Unicode strings (keys too), finite numbers,
    integers within int64, nested at most :data:`MAX_JSON_DEPTH` levels."""
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"{where}: metadata nested more than {MAX_JSON_DEPTH} levels deep")
    if isinstance(v, str):
        check_text(v, where)
    elif isinstance(v, bool) or v is None:
        return
    elif isinstance(v, int):
        if abs(v) > 2 ** 63 - 1:
            raise ValueError(f"{where}: the integer {str(v)[:20]}... ({len(str(abs(v)))} "
                             "digits) is beyond the 64-bit range (|n| <= 2**63 - 1)")
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{where}: the number {v} is not finite")
    elif isinstance(v, (list, tuple)):
        for x in v:
            check_json_value(x, where, depth + 1)
    elif isinstance(v, dict):
        for key, x in v.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: metadata keys must be strings; got {key!r:.80}")
            check_text(key, where)
            check_json_value(x, where, depth + 1)
    else:
        raise ValueError(f"{where}: metadata must be plain JSON; got a {type(v).__name__}")


def check_passage(p, where: str):
    """A :class:`~evireform.types.Passage` whose id, title, text and metadata an index can
    store (:func:`check_text`, :func:`check_json_value`); returns it."""
    check_text(p.id, f"{where} (its id)")
    check_text(p.title, f"{where} (its title)")
    check_text(p.text, f"{where} (its text)")
    if p.metadata:
        check_json_value(p.metadata, f"{where} (its metadata)")
    return p


# --------------------------------------------------------------------------- JSON values
def json_kind(v):
    """The comparison class of a JSON value: bool, number, string, null, list, object."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if v is None:
        return "null"
    if isinstance(v, (list, tuple)):
        return "list"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def canonical_value(v):
    """A hashable form of a JSON value under JSON equality (``1 == 1.0``; ``true`` is not
    ``1``; object key order ignored)."""
    k = json_kind(v)
    if k == "list":
        return ("l", tuple(canonical_value(x) for x in v))
    if k == "object":
        return ("o", tuple(sorted((str(a), canonical_value(b)) for a, b in v.items())))
    if k == "number":
        return ("n", v)  # hash(1) == hash(1.0) and they compare equal
    return (k, v)


def metadata_json(md: dict[str, Any]) -> str:
    """A passage's metadata as the batch column (and the index's string table) hold it:
    compact JSON, ``""`` for none."""
    return json.dumps(md, ensure_ascii=False, separators=(",", ":")) if md else ""
