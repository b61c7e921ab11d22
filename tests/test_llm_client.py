"""The LLM client (evireform.llm.client): retries, Retry-After, timeouts, the response
format stepped down once, context overflows."""

import json

import pytest
from llm_common import CANDS, PASSAGES, endpoint  # noqa: F401
from scripted_server import Script, serve

from evireform.llm import (
    LLMClient,
    LLMConfig,
    LLMReformulator,
    LLMSelector,
)


class _NoSchemaScript(Script):
    """A server that refuses response_format json_schema, like many local ones (400 or 422;
    llama-cpp-python's answers 500)."""

    status = 400

    def next(self, body):
        if (body.get("response_format") or {}).get("type") == "json_schema":
            with self.lock:
                self.requests.append(body)
            return {"status": self.status,
                    "content": "response_format.type: Input should be 'text' or 'json_object'"}
        return super().next(body)


def test_429_with_retry_after_then_success(endpoint):
    client, script = endpoint([{"status": 429, "headers": {"retry-after": "0"}},
                               {"content": json.dumps({"queries": ["Paris country"]})}])
    out = LLMReformulator(client).reformulate("Which country?", PASSAGES, 3)
    assert list(out) == ["Paris country"] and len(script.requests) == 2


def test_500s_exhaust_retries_then_fallback(endpoint):
    client, script = endpoint([{"status": 500}] * 3, max_retries=2)
    out = LLMReformulator(client).reformulate("Which country does Alice live in?", PASSAGES, 3)
    assert out.fallback == "InternalServerError" and len(script.requests) == 3
    assert all(isinstance(q, str) for q in out)


def test_timeout_falls_back(endpoint):
    client, _ = endpoint([{"delay": 1.5, "content": "{}"}] * 2, timeout=0.3, max_retries=1)
    out = LLMReformulator(client).reformulate("q about Alice", PASSAGES, 3)
    assert out.fallback == "APITimeoutError"


@pytest.mark.parametrize("status", [400, 422, 500])
def test_response_format_steps_down_once(status):
    script = _NoSchemaScript(default={"content": json.dumps({"selected": [1]})})
    script.status = status
    srv, url = serve(script)
    try:
        client = LLMClient(LLMConfig(base_url=url, model="scripted", timeout=5, max_retries=0))
        first = LLMSelector(client).select("q", CANDS, 2)
        assert list(first) == [10] and first.fallback is None
        assert list(LLMSelector(client).select("q2", CANDS, 2)) == [10]
        kinds = [(r.get("response_format") or {}).get("type") for r in script.requests]
        assert kinds == ["json_schema", "json_object", "json_object"]  # detected once
        assert client.response_format == "json_object"
    finally:
        srv.shutdown()


def test_context_errors_do_not_change_the_format(endpoint):
    client, _ = endpoint([{"status": 400, "content": "prompt exceeds the context size"}] * 3,
                         max_retries=0)
    out = LLMSelector(client).select("q", CANDS, 2)
    assert out.fallback == "BadRequestError" and client.response_format == "json_schema"


def test_context_overflow_teaches_the_token_rate_and_retries_smaller(endpoint):
    """A server whose tokenizer counts more tokens than the estimate: its overflow reply
    states the real count; the client learns the rate and the selector retries, smaller."""
    from evireform.roles import Candidate
    many = [Candidate(100 + i, 1 - i / 1000, "word " * 60, i) for i in range(200)]
    overflow = {"status": 400, "content": "This model's maximum context length is 2048 tokens. "
                "However, you requested 2600 tokens (2344 in the messages, 256 in the "
                "completion)."}
    client, script = endpoint([overflow, {"content": json.dumps({"selected": [1]})}],
                              context_tokens=2048, max_tokens=256, max_retries=0)
    out = LLMSelector(client).select("q", many, 12)
    assert list(out) == [100] and out.fallback is None
    first = script.requests[0]["messages"][1]["content"].count("[")
    second = script.requests[1]["messages"][1]["content"].count("[")
    assert second < first and client.token_scale > 1.2
    assert out.events() == [f"select:cut:{200 - second}"]
