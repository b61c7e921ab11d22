import json

import pytest

from evireform import Passage
from evireform.evaluation.qa import best_scores, exact_match, f1_score, qa_metrics
from evireform.llm import context_within_budget


def test_normalisation_and_scores():
    assert exact_match("The Eiffel Tower!", "eiffel tower") == 1.0
    assert f1_score("the big red dog", "a red dog") == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
    assert f1_score("Paris", "London") == 0.0


def test_special_answers():
    assert f1_score("yes", "no") == 0.0
    assert f1_score("no answer", "noanswer") == 0.0  # "no answer" normalises to two tokens
    assert f1_score("yes it is", "yes") == 0.0        # mismatched special answer: zero F1
    assert f1_score("yes", "yes") == 1.0
    assert exact_match("unknown", "Paris") == 0.0     # an ordinary incorrect answer


def test_aliases_and_means():
    assert best_scores("NYC", ["New York City", "NYC"]) == (1.0, 1.0)
    assert qa_metrics(["Paris", "x"], [["Paris"], ["y"]]) == {"f1": 50.0, "em": 50.0}


def test_context_budget_cuts():
    ps = [Passage(str(i), f"T{i}", "word " * 300) for i in range(20)]
    ctx = context_within_budget(ps, 1000)
    words = sum(len(f"{t}: {x}".split()) for t, x in ctx)
    assert words <= 1000 * 0.75 + 5 and 1 < len(ctx) < 20


def test_llm_reader_through_scripted_server():
    pytest.importorskip("openai")
    from evireform.llm import LLMClient, LLMConfig, LLMReader
    from scripted_server import Script, serve
    script = Script([{"content": json.dumps({"answer": "Paris"})},
                     {"content": "no json"}, {"content": "{\"ans\": 1}"}])
    srv, url = serve(script)
    try:
        reader = LLMReader(LLMClient(LLMConfig(base_url=url, model="m", max_retries=0)))
        ps = [Passage("a", "Alice", "Alice lives in Paris.")]
        assert reader.answer("Where does Alice live?", ps) == ("Paris", [])
        ans, events = reader.answer("Where?", ps)
        assert ans == "noanswer" and events == ["reader:repaired", "reader:fallback:ContractError"]
    finally:
        srv.shutdown()
