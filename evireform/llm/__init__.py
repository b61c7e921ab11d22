"""LLM roles through any OpenAI-compatible endpoint.

:class:`LLMClient` wraps ``openai.OpenAI(base_url=..., api_key=..., timeout=...,
max_retries=...)`` (the openai client retries 429, 5xx, connection errors and timeouts with
backoff and honours ``retry-after``), asks for JSON at temperature 0, recovers JSON from text
when the endpoint ignores ``response_format``, validates every reply against its role's
contract, gives a malformed reply one repair attempt, and caches validated replies in SQLite.
When a call still fails, the role answers with its LLM-free implementation; repairs and
fallbacks are reported in the retrieval trace (``Trace.role_events``).

Every role call has a wall-clock deadline (``LLMConfig.deadline``) covering retries, the
repair turn and bodies that trickle in; past it the LLM-free role answers and the trace says
``<role>:fallback:DeadlineExceeded``.

Implemented here: selection (Listing 12), reformulation (Listing 13), the sufficiency
controller (Listing 16), proposition extraction (Listing 11), the QA reader (Listing 4), and
an offline mode that answers from the reply cache and collects misses for later replay.

The package, one subject per module: :mod:`~evireform.llm.client` (the client, its settings
and the reply contract it enforces), :mod:`~evireform.llm.limits` (token estimates, usage,
rate limits), :mod:`~evireform.llm.cache` (the reply cache, replies files and replay),
:mod:`~evireform.llm.contract` (the errors and the JSON read out of a reply) and
:mod:`~evireform.llm.roles` (every role with its prompt).
"""
from __future__ import annotations

from .contract import (  # noqa: F401
    CircuitOpen, ContextOverflow, ContractError, DeadlineExceeded, OfflineMiss,
    local_repair, parse_json)
from .limits import (  # noqa: F401
    RateLimiter, Usage, estimate_tokens)
from .cache import (  # noqa: F401
    ReplayIndex, ReplyCache, read_reply_records)
from .client import (  # noqa: F401
    DEFAULT_DEADLINE, LLMClient, LLMConfig, PROMPT_VERSION, SCHEMAS)
from .roles import (  # noqa: F401
    LLMAnswerer, LLMController, LLMExtractor, LLMFactFilter, LLMReader, LLMReformulator,
    LLMRewriter, LLMSelector, LLMSplitter, context_within_budget, extractor_name)

__all__ = [
    "CircuitOpen", "ContextOverflow", "ContractError", "DeadlineExceeded", "OfflineMiss",
    "local_repair", "parse_json", "RateLimiter", "Usage", "estimate_tokens", "ReplayIndex",
    "ReplyCache", "read_reply_records", "DEFAULT_DEADLINE", "LLMClient", "LLMConfig",
    "PROMPT_VERSION", "SCHEMAS", "LLMAnswerer", "LLMController", "LLMExtractor", "LLMFactFilter",
    "LLMReader", "LLMReformulator", "LLMRewriter", "LLMSelector", "LLMSplitter",
    "context_within_budget", "extractor_name"]
