"""The replies' contract (evireform.llm.contract): JSON parsed, repaired locally first, then
once by asking, then the fallback."""

import pytest
from llm_common import CANDS, endpoint  # noqa: F401

from evireform.llm import (
    LLMSelector,
    parse_json,
)


def test_non_json_gets_one_repair(endpoint):
    client, script = endpoint([{"content": "Sure! I pick the first one."},
                               {"content": "```json\n{\"selected\": [1]}\n```"}])
    out = LLMSelector(client).select("q", CANDS, 12)
    assert list(out) == [10] and out.repaired and out.events() == ["select:repaired"]
    assert len(script.requests) == 2 and script.requests[1]["messages"][-1]["role"] == "user"


def test_wrong_schema_twice_falls_back(endpoint):
    client, _ = endpoint([{"content": "{\"picked\": [1]}"}, {"content": "{\"nope\": 1}"}])
    out = LLMSelector(client).select("q", CANDS, 2)
    assert list(out) == [10, 11]  # the LLM-free selector's answer
    assert out.fallback == "ContractError" and client.usage["select"].failures == 1
    assert out.events() == ["select:repaired", "select:fallback:ContractError"]


def test_parse_json_recovers_from_text():
    assert parse_json('Here: {"a": 1} done') == {"a": 1}
    assert parse_json('```json\n{"a": 2}\n```') == {"a": 2}


def test_malformed_json_is_repaired_locally_first(endpoint):
    pytest.importorskip("json_repair")
    client, script = endpoint([{"content": 'Sure: {"selected": [2, 1'}])
    out = LLMSelector(client).select("q", CANDS, 12)
    assert list(out) == [11, 10] and not out.repaired and len(script.requests) == 1
    assert client.usage["select"].local_repairs == 1 and client.usage["select"].repairs == 0
