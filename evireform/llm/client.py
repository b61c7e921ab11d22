"""One client for every LLM role: the endpoint, its settings (:class:`LLMConfig`), the
reply contract, repairs, the cache and the limits."""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from .._checks import loads as _json_loads
from .cache import ReplayIndex, ReplyCache
from .contract import (
    CircuitOpen, ContextOverflow, ContractError, DeadlineExceeded, OfflineMiss, local_repair,
    parse_json)
from .limits import RateLimiter, Usage, estimate_tokens


log: logging.Logger = logging.getLogger("evireform.llm")


PROMPT_VERSION = "v1"

#: Default wall-clock seconds for one role call (every request, retry, backoff and slow
#: body included); after it the role's LLM-free implementation answers.
DEFAULT_DEADLINE = 120.0


@dataclass
class LLMConfig:
    """Endpoint settings; ``from_env`` reads EVIREFORM_LLM_BASE_URL, EVIREFORM_LLM_MODEL and
    EVIREFORM_LLM_KEY_ENV (the name of the variable holding the key, default OPENAI_API_KEY)."""

    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    #: seconds per HTTP read (connect, first byte, each chunk); a slow-drip body can stay under
    #: it forever, which is what ``deadline`` is for
    timeout: float = 60.0
    max_retries: int = 3
    #: wall-clock seconds for one role call, retries and repair turn included (None: the
    #: default, :data:`DEFAULT_DEADLINE`)
    deadline: float | None = None
    #: cap on generated tokens per reply (small models can otherwise run to the context end)
    max_tokens: int = 512
    cache_path: str | None = None
    #: ask for JSON: ``response_format`` json_schema with the role's schema where the server
    #: takes it, else json_object, else plain text (detected once per client)
    json_mode: bool = True
    #: the model's context window in tokens: prompts are cut to fit it with ``max_tokens`` to
    #: spare (the selector shows the best candidates that fit, the reformulator the first
    #: passages), and the trace says how many were cut.  8,192 suits small local models.
    context_tokens: int = 8192
    #: optional client-side rate limits (0 = none): requests and prompt tokens per minute
    requests_per_minute: int = 0
    tokens_per_minute: int = 0
    #: answer from the cache only; each miss is appended to ``pending_path`` (JSONL) and the
    #: role's LLM-free implementation answers it
    offline: bool = False
    pending_path: str | None = None
    #: recorded replies ({key, role, messages, reply} JSONL) answering requests offline: by
    #: key, else by content (:class:`ReplayIndex`)
    replay_paths: tuple[Any, ...] = ()
    #: circuit breaker: after this many consecutive failed calls (errors or deadlines) the
    #: endpoint is skipped for ``breaker_cooldown`` seconds and the LLM-free roles answer at
    #: once (traced as ``ROLE:fallback:CircuitOpen``); then one call probes it again
    breaker_failures: int = 3
    breaker_cooldown: float = 30.0

    @classmethod
    def from_env(cls, **over: Any) -> "LLMConfig":
        cfg = cls(base_url=os.environ.get("EVIREFORM_LLM_BASE_URL"),
                  model=os.environ.get("EVIREFORM_LLM_MODEL", cls.model),
                  api_key_env=os.environ.get("EVIREFORM_LLM_KEY_ENV", cls.api_key_env))
        for k, v in over.items():
            setattr(cfg, k, v)
        return cfg


SCHEMAS: dict[str, dict[str, Any]] = {
    "select": {"type": "object", "required": ["selected"],
               "properties": {"selected": {"type": "array", "items": {"type": "integer"}}}},
    "reformulate": {"type": "object", "required": ["queries"],
                    "properties": {"queries": {"type": "array", "items": {"type": "string"}}}},
    "controller": {"type": "object", "required": ["sufficient"], "properties": {
        "sufficient": {"type": "boolean"},
        "gaps": {"type": "array", "items": {"type": "object", "properties": {
            "missing": {"type": "string"}, "query": {"type": "string"}}}}}},
    "hipporag2-filter": {"type": "object", "required": ["facts"],
                         "properties": {"facts": {"type": "array",
                                                  "items": {"type": "integer"}}}},
    "hiq-rewrite": {"type": "object", "required": ["query"],
                    "properties": {"query": {"type": "string"}}},
    "reader": {"type": "object", "required": ["answer"],
               "properties": {"answer": {"type": "string"}}},
    "answer": {"type": "object", "required": ["found"], "properties": {
        "found": {"type": "boolean"}, "answer": {"type": "string"},
        "cites": {"type": "array", "items": {"type": "integer"}}}},
    "extract": {"type": "object", "required": ["propositions"], "properties": {
        "propositions": {"type": "array", "items": {"type": "object", "required": ["text"],
                         "properties": {"text": {"type": "string"},
                                        "entities": {"type": "array",
                                                     "items": {"type": "string"}}}}}}},
}
_FORMATS = ("json_schema", "json_object", "text")


def _refuses_format(exc) -> bool:
    """An error reply whose message is about the response format, not e.g. the context:
    400 or 422 from most servers, 500 from llama-cpp-python's (a request validation error)."""
    if getattr(exc, "status_code", None) not in (400, 422, 500):
        return False
    msg = (str(exc) + " " + str(getattr(exc, "body", ""))).lower()
    return any(w in msg for w in ("response_format", "json_schema", "schema", "json_object"))


class LLMClient:
    """One client for every role; thread-safe."""

    def __init__(self, config: LLMConfig | None = None, *, client: Any=None) -> None:
        self.config: LLMConfig = config or LLMConfig.from_env()
        self.replay: ReplayIndex | None = ReplayIndex.from_files(self.config.replay_paths) \
            if self.config.replay_paths else None
        if self.config.offline and self.config.replay_paths and not len(self.replay) \
                and not self.config.cache_path:
            raise ValueError(f"the recorded replies {', '.join(map(str, self.config.replay_paths))} "
                             "hold no records: nothing to replay")
        if self.config.offline and not (self.config.cache_path or self.replay):
            raise ValueError("offline mode answers from the reply cache or recorded replies: "
                             "set cache_path or replay_paths")
        if client is None and not self.config.offline:
            try:
                import openai
            except ImportError as exc:
                raise ImportError("the LLM roles need the 'llm' extra: "
                                  "pip install 'evireform[llm]'") from exc
            key = os.environ.get(self.config.api_key_env) or "not-needed"
            # the async client, so that a deadline cancels the request (and closes its socket)
            # instead of abandoning a thread that waits on it
            client = openai.AsyncOpenAI(base_url=self.config.base_url, api_key=key,
                                        timeout=self.config.timeout,
                                        max_retries=self.config.max_retries)
        self._client = client
        self._aloop = None
        #: consecutive failed calls, and the monotonic time until which calls are skipped
        self._failures, self._open_until = 0, 0.0
        self.cache: ReplyCache | None = ReplyCache(self.config.cache_path) \
            if self.config.cache_path else None
        self._lock = threading.Lock()
        self.usage: dict[str, Usage] = {}
        self.limiter: RateLimiter = RateLimiter(self.config.requests_per_minute,
                                   self.config.tokens_per_minute)
        #: the response_format the server takes (json_schema, json_object, text); found by
        #: the first calls and then kept
        self.response_format = _FORMATS[0] if self.config.json_mode else "text"
        #: server tokens per estimated token, learned from context-overflow replies
        self.token_scale: float = 1.0

    def prompt_budget(self) -> int:
        """Tokens (by :func:`estimate_tokens`) a prompt may use: the context window less the
        reply and a margin, divided by the learned ratio of the server's token count to the
        estimate (1 until a context overflow says otherwise)."""
        room = int(self.config.context_tokens) - int(self.config.max_tokens) - 64
        return max(256, int(room / self.token_scale))

    def _learn_overflow(self, exc, messages) -> bool:
        """On a context-overflow reply: raise the token scale from the counts it states
        (e.g. "4303 in the messages"), else by a quarter; True if it was one."""
        msg = (str(exc) + " " + str(getattr(exc, "body", ""))).lower()
        if getattr(exc, "status_code", None) not in (400, 413, 422) or not (
                "context" in msg and ("token" in msg or "length" in msg)):
            return False
        est = sum(estimate_tokens(m["content"]) for m in messages)
        m = re.search(r"(\d+) in the messages", msg)
        ratio = int(m.group(1)) / max(1, est) if m else 1.25
        with self._lock:
            self.token_scale = max(self.token_scale * 1.05, ratio * 1.05)
        return True

    def _count(self, role: str, **inc) -> None:
        with self._lock:
            u = self.usage.setdefault(role, Usage())
            for k, v in inc.items():
                setattr(u, k, getattr(u, k) + v)

    def _key(self, messages) -> str:
        blob = json.dumps({"model": self.config.model, "prompt": PROMPT_VERSION,
                           "messages": messages, "temperature": 0,
                           "max_tokens": self.config.max_tokens,
                           "json": self.config.json_mode}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _write_pending(self, key, role, messages) -> None:
        if not self.config.pending_path:
            return
        with self._lock:
            seen = getattr(self, "_pending_keys", None)
            if seen is None:
                seen = set()
                if os.path.exists(self.config.pending_path):
                    with open(self.config.pending_path, encoding="utf-8") as fh:
                        seen = {_json_loads(l)["key"] for l in fh if l.strip()}
                self._pending_keys = seen
            if key in seen:
                return
            seen.add(key)
            with open(self.config.pending_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"key": key, "role": role, "model": self.config.model,
                                     "temperature": 0, "messages": messages}) + "\n")

    @property
    def deadline(self) -> float:
        d = self.config.deadline
        return DEFAULT_DEADLINE if d is None else float(d)

    def close(self) -> None:
        """Stop this client's event loop (also done when the client is garbage-collected)."""
        with self._lock:
            loop, self._aloop = self._aloop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)

    def _call(self, role: str, messages, until: float) -> str:
        self.limiter.wait(sum(estimate_tokens(m["content"]) for m in messages), until)
        return self._call_once(role, messages, until)

    def _loop(self):
        """This client's event loop, on one daemon thread started on first use and stopped
        when the client is garbage-collected: every request of every role runs on it."""
        with self._lock:
            if self._aloop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, daemon=True,
                                 name="evireform-llm-loop").start()
                weakref.finalize(self, loop.call_soon_threadsafe, loop.stop)
                self._aloop = loop
            return self._aloop

    def _call_once(self, role: str, messages, until: float) -> str:
        """One request (the client's own retries included), cancelled when the monotonic
        clock passes ``until``: the request runs as a task on this client's event loop and
        ``asyncio.wait_for`` cancels it at the deadline, which closes its connection; no
        thread or socket outlives the call."""
        remaining = until - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded(f"{role}: no usable reply within {self.deadline:g} s")

        async def bounded():
            try:
                return await asyncio.wait_for(self._request(role, messages), remaining)
            except asyncio.TimeoutError:
                raise DeadlineExceeded(f"{role}: no usable reply within {self.deadline:g} s "
                                       "(the request was cancelled)") from None

        fut = asyncio.run_coroutine_threadsafe(bounded(), self._loop())
        try:
            return fut.result()
        except DeadlineExceeded:
            self._count(role, calls=1)
            raise

    async def _request(self, role: str, messages) -> str:
        kw = dict(model=self.config.model, messages=messages, temperature=0,
                  max_tokens=self.config.max_tokens)
        create = self._client.chat.completions.create
        while True:
            fmt = self.response_format
            if fmt == "json_schema" and role in SCHEMAS:
                kw["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": role, "schema": SCHEMAS[role], "strict": False}}
            elif fmt in ("json_schema", "json_object"):
                kw["response_format"] = {"type": "json_object"}
            else:
                kw.pop("response_format", None)
            try:
                if hasattr(self._client, "__aenter__"):  # openai.AsyncOpenAI
                    resp = await create(**kw)
                else:  # an injected synchronous client: run it off the loop
                    resp = await asyncio.to_thread(create, **kw)
                break
            except Exception as exc:
                if self._learn_overflow(exc, messages):
                    raise ContextOverflow(str(exc)) from exc
                if fmt == "text" or not _refuses_format(exc):
                    raise
                # the server does not take this response_format: step down, for good
                with self._lock:
                    if self.response_format == fmt:
                        self.response_format = _FORMATS[_FORMATS.index(fmt) + 1]
        u = getattr(resp, "usage", None)
        self._count(role, calls=1, tokens_in=getattr(u, "prompt_tokens", 0) or 0,
                    tokens_out=getattr(u, "completion_tokens", 0) or 0)
        return resp.choices[0].message.content or ""

    def _guarded_call(self, role: str, messages, until: float) -> str:
        """:meth:`_call` behind the circuit breaker: skipped (:class:`CircuitOpen`) while it
        is open; consecutive failures counted, success resets them."""
        with self._lock:
            skipped = time.monotonic() < self._open_until
        if skipped:
            self._count(role, breaker_skips=1)
            raise CircuitOpen(f"{role}: endpoint skipped after {self._failures} consecutive "
                              f"failures (cool-down {self.config.breaker_cooldown:g} s)")
        try:
            text = self._call(role, messages, until)
        except ContextOverflow:
            raise
        except Exception:
            with self._lock:
                self._failures += 1
                if self.config.breaker_failures and \
                        self._failures >= self.config.breaker_failures:
                    self._open_until = time.monotonic() + self.config.breaker_cooldown
            raise
        with self._lock:
            self._failures, self._open_until = 0, 0.0
        return text

    def ask(self, role: str, messages: list[dict[str, Any]], validate: Callable[..., Any]
            ) -> tuple[Any, bool]:
        """Validated reply for ``messages``, or raise.  Returns (value, repaired: bool).

        ``validate(obj)`` returns the value or raises :class:`ContractError`.  A malformed
        reply gets one repair turn; API errors (after the client's own retries) propagate, and
        :class:`DeadlineExceeded` when the whole call outlasts ``deadline`` seconds.
        """
        until = time.monotonic() + self.deadline
        key = self._key(messages)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self._count(role, cache_hits=1)
                return validate(hit), False
        if self.replay is not None:
            hit, how = self.replay.match(key, role, messages)
            if hit is not None:
                self._count(role, **{"cache_hits" if how == "key" else "content_hits": 1})
                return validate(hit), False
        if self.config.offline:
            self._count(role, misses=1)
            self._write_pending(key, role, messages)
            raise OfflineMiss(f"no cached reply for this {role} request (offline)")
        text = self._guarded_call(role, messages, until)
        repaired = False
        try:
            try:
                obj = parse_json(text)
            except ContractError:
                obj = local_repair(text)
                if obj is None:
                    raise
                self._count(role, local_repairs=1)
            value = validate(obj)
        except ContractError as err:
            repaired = True
            self._count(role, repairs=1)
            fix = messages + [{"role": "assistant", "content": text[:4000]},
                              {"role": "user", "content": f"Your reply broke the contract "
                               f"({err}). Reply again with only the JSON object described."}]
            try:
                obj = parse_json(self._guarded_call(role, fix, until))
                value = validate(obj)
            except ContractError as again:
                again.after_repair = True
                raise
        if self.cache is not None:
            self.cache.put(key, role, obj)
        return value, repaired
