"""The client's limits: token estimates, usage counters, and requests and tokens per minute."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from .contract import DeadlineExceeded


log: logging.Logger = logging.getLogger("evireform.llm")


@dataclass
class Usage:
    calls: int = 0
    cache_hits: int = 0
    #: offline: requests with no cached reply (answered by the LLM-free role)
    misses: int = 0
    #: replay: requests answered by a recorded reply matched by content, not by key
    content_hits: int = 0
    repairs: int = 0
    #: malformed JSON fixed locally (json-repair) instead of spending a repair turn
    local_repairs: int = 0
    failures: int = 0
    #: calls skipped because the circuit breaker was open
    breaker_skips: int = 0
    tokens_in: int = 0
    tokens_out: int = 0


def estimate_tokens(text: str) -> int:
    """A tokenizer-free upper estimate: the larger of 4 characters and 0.75 words a token."""
    return max(len(text) // 4, int(len(text.split()) / 0.75)) + 1


class RateLimiter:
    """Requests and tokens per minute over a sliding 60 s window; thread-safe.  ``clock`` and
    ``sleep`` are injectable for tests."""

    def __init__(self, rpm: int = 0, tpm: int = 0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] = time.sleep) -> None:
        self.rpm: int = int(rpm)
        self.tpm: int = int(tpm)
        self.clock: Callable[[], float] = clock
        self.sleep: Callable[[float], Any] = sleep
        self._events: list[tuple[float, int]] = []
        self._lock = threading.Lock()

    def wait(self, tokens: int, until: float | None = None) -> float:
        """Block until a request of ``tokens`` fits both limits; returns seconds waited.
        Raises :class:`DeadlineExceeded` when the wait would pass ``until``."""
        if not self.rpm and not self.tpm:
            return 0.0
        waited = 0.0
        while True:
            with self._lock:
                now = self.clock()
                self._events = [(t, n) for t, n in self._events if t > now - 60.0]
                used_r = len(self._events)
                used_t = sum(n for _, n in self._events)
                ok_r = not self.rpm or used_r < self.rpm
                ok_t = not self.tpm or used_t + tokens <= self.tpm or not self._events
                if ok_r and ok_t:
                    self._events.append((now, tokens))
                    return waited
                pause = max(0.01, self._events[0][0] + 60.0 - now)
            if until is not None and self.clock() + pause > until:
                raise DeadlineExceeded("rate limit: the next slot is past the deadline")
            self.sleep(pause)
            waited += pause


#: JSON schemas of the roles' replies (``response_format`` json_schema)
