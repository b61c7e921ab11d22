"""What an LLM reply must be: the errors a role call can end with, and the JSON read out of
a reply (parsed, or repaired locally)."""
from __future__ import annotations

import json
import logging
import re
from typing import Any

from .._checks import loads as _json_loads


log: logging.Logger = logging.getLogger("evireform.llm")


class ContractError(ValueError):
    """A reply that does not follow its role's output contract."""


class DeadlineExceeded(TimeoutError):
    """A role call did not get a usable reply within ``LLMConfig.deadline`` seconds."""


class ContextOverflow(ValueError):
    """The server refused a prompt longer than the model's context."""


class OfflineMiss(RuntimeError):
    """Offline mode and no cached reply: the request was written to the pending file."""


class CircuitOpen(RuntimeError):
    """The endpoint failed ``LLMConfig.breaker_failures`` times in a row: calls are skipped
    (the LLM-free role answers at once) until ``breaker_cooldown`` seconds have passed."""


_JSON_BLOCK = re.compile(r"\{.*\}", re.DOTALL)


def parse_json(text: str) -> Any:
    """The JSON object in a reply: the whole text, a fenced block, or the outermost braces."""
    text = (text or "").strip()
    for candidate in (text, re.sub(r"^```(?:json)?|```$", "", text, flags=re.M).strip()):
        try:
            return _json_loads(candidate)
        except (json.JSONDecodeError, TypeError):
            pass
    m = _JSON_BLOCK.search(text)
    if m:
        try:
            return _json_loads(m.group(0))
        except json.JSONDecodeError:
            pass
    raise ContractError("the reply is not JSON")


def local_repair(text: str) -> Any:
    """The JSON object in a malformed reply, repaired locally by ``json-repair`` (unclosed
    brackets, unquoted keys, trailing commas, prose around it), or None."""
    try:
        import json_repair
    except ImportError:
        return None
    try:
        obj = json_repair.loads(text or "")
    except Exception:
        return None
    return obj if isinstance(obj, dict) and obj else None
