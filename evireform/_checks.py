"""Argument checks shared by the public API: one place for what a list, a count or a JSON
document must be, so every entry point refuses the same bad input with the same words."""
from __future__ import annotations

import json
import numbers

def as_list(items, what: str) -> list:
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
