"""Answers from the retrieved passages (issue 82, item 1): ``evireform ask``, ``query
--answer`` and ``/query``'s ``answer``: an LLM's answer citing passage ids, "not found in
these documents", the extractive answer without an LLM, and the LLM-free confidence."""
import asyncio
import json

import pytest

from evireform import Passage, PropositionIndex
from evireform.answer import (FOUND_COVERAGE, FOUND_SIMILARITY, NOT_FOUND, Answer,
                              answer_question, coverage, extractive_answer)
from evireform.cli import main
from evireform.embed import HashingEmbedder

EMB = HashingEmbedder(64)

NOTES = [Passage("farm", "Build farm", "The build farm restarts every night. It is run by "
                 "Orla Quist from the Tarn office. Its disks were replaced in May."),
         Passage("cafe", "Cafe", "The cafe opens at eight. It sells bread and soup."),
         Passage("lib", "Library", "The library lends books for three weeks.")]


class _Ranked:
    def __init__(self, passages):
        self.passages = passages


def test_coverage_counts_the_questions_content_words():
    assert coverage("Who runs the build farm?", ["The build farm is run by Orla."]) == 1.0
    assert coverage("Who runs the build farm?", ["The farm."]) == pytest.approx(1 / 3)
    assert coverage("who is it?", ["nothing"]) == 1.0  # no content words
    assert coverage("Where is Zanzibar?", ["The cafe opens at eight."]) == 0.0


def test_the_extractive_answer_is_the_best_sentence_and_says_not_found():
    got = extractive_answer("Who runs the build farm from the Tarn office?", NOTES)
    assert got.kind == "extractive" and got.found and got.confidence >= FOUND_COVERAGE
    assert got.text == "It is run by Orla Quist from the Tarn office."
    assert got.cites == [{"id": "farm", "title": "Build farm", "sentence": got.text}]
    miss = extractive_answer("What is the capital of Mongolia?", NOTES)
    assert not miss.found and miss.text == NOT_FOUND and miss.confidence < FOUND_COVERAGE
    assert len(miss.cites) == 1  # the closest sentence is still shown
    # a question in other words than the passages': found when its dense hit is close
    near = extractive_answer("What is the capital of Mongolia?", NOTES,
                             similarity=FOUND_SIMILARITY)
    assert near.found and near.similarity == FOUND_SIMILARITY
    assert not extractive_answer("What is the capital of Mongolia?", NOTES,
                                 similarity=FOUND_SIMILARITY - 0.01).found
    assert extractive_answer("anything?", []).text == NOT_FOUND
    rec = got.to_dict()
    assert set(rec) == {"text", "found", "kind", "confidence", "similarity", "cites", "events"}


def _llm(replies):
    from scripted_server import Script, serve
    return serve(Script([{"content": json.dumps(r) if not isinstance(r, str) else r}
                         for r in replies]))


def _client(url):
    from evireform.llm import LLMClient, LLMConfig
    return LLMClient(LLMConfig(base_url=url, model="m", api_key_env="NO_SUCH_KEY_ENV",
                               max_retries=1, breaker_failures=100))


def test_an_llms_answer_cites_passage_ids_or_says_not_found(monkeypatch):
    pytest.importorskip("openai")
    monkeypatch.setenv("NO_SUCH_KEY_ENV", "x")
    srv, url = _llm([{"found": True, "answer": "Orla Quist", "cites": [1, 1]},
                     {"found": False},
                     "not json", "still not json"])
    try:
        llm = _client(url)
        ok = answer_question("Who runs the build farm?", _Ranked(NOTES), llm)
        assert (ok.kind, ok.found, ok.text) == ("llm", True, "Orla Quist")
        assert ok.cites == [{"id": "farm", "title": "Build farm",
                             "sentence": "It is run by Orla Quist from the Tarn office."}]
        no = answer_question("What is the capital of Mongolia?", _Ranked(NOTES), llm)
        assert (no.kind, no.found, no.text, no.cites) == ("llm", False, NOT_FOUND, [])
        # a reply that breaks the contract twice: the extractive answer, said so
        fb = answer_question("Who runs the build farm from the Tarn office?",
                             _Ranked(NOTES), llm)
        assert fb.kind == "extractive" and fb.found
        assert any(e.startswith("answer:fallback:") for e in fb.events)
    finally:
        srv.shutdown()


def test_cites_outside_the_passages_shown_are_refused(monkeypatch):
    pytest.importorskip("openai")
    monkeypatch.setenv("NO_SUCH_KEY_ENV", "x")
    srv, url = _llm([{"found": True, "answer": "x", "cites": [9]},
                     {"found": True, "answer": "Orla", "cites": []}])
    try:
        got = answer_question("Who runs the build farm?", _Ranked(NOTES), _client(url))
        assert got.kind == "extractive" and got.events
    finally:
        srv.shutdown()


def test_ask_on_the_command_line(tmp_path, capsys, monkeypatch):
    """A new user's `evireform ask notes.idx "..."`: with a local OpenAI-compatible server
    the answer cites passage ids, an unanswerable question says "not found", and without
    an LLM the extractive answer is marked as such; --json carries the answer record."""
    pytest.importorskip("openai")
    ix = PropositionIndex.build(NOTES, EMB, show_progress=False).save(tmp_path / "ix")
    monkeypatch.delenv("EVIREFORM_LLM_BASE_URL", raising=False)
    q = "Who runs the build farm from the Tarn office?"
    assert main(["ask", str(ix), q]) == 0
    out = capsys.readouterr().out
    assert "A: It is run by Orla Quist from the Tarn office." in out
    assert "extractive" in out and "cites [farm] Build farm" in out
    assert out.index("A: ") < out.index("  1. ")  # the answer before the passages
    assert main(["query", str(ix), q, "--answer", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["answer"]["kind"] == "extractive" and rec["answer"]["cites"][0]["id"] == "farm"
    assert main(["query", str(ix), q, "--json"]) == 0
    assert "answer" not in json.loads(capsys.readouterr().out)
    monkeypatch.setenv("NO_SUCH_KEY_ENV", "x")
    srv, url = _llm([{"found": True, "answer": "Orla Quist", "cites": [1]},
                     {"found": False}])
    try:
        llm = ["--llm-base-url", url, "--llm-model", "m", "--llm-key-env", "NO_SUCH_KEY_ENV"]
        assert main(["ask", str(ix), "Who runs the build farm?", "--json", *llm]) == 0
        rec = json.loads(capsys.readouterr().out)
        assert rec["answer"]["text"] == "Orla Quist" and rec["answer"]["kind"] == "llm"
        assert [c["id"] for c in rec["answer"]["cites"]] == [rec["passages"][0]["id"]]
        assert main(["ask", str(ix), "What is the capital of Mongolia?", *llm]) == 0
        assert f"A: {NOT_FOUND}" in capsys.readouterr().out
    finally:
        srv.shutdown()
    assert main(["ask", str(ix), "--questions", str(tmp_path / "q.txt")]) == 2


def test_the_service_answers_when_asked(tmp_path):
    pytest.importorskip("fastapi")
    import httpx
    from evireform.service import RetrievalService, create_app
    ix = PropositionIndex.build(NOTES, EMB, show_progress=False).save(tmp_path / "ix")
    svc = RetrievalService(ix, EMB)
    app = create_app(svc)
    q = "Who runs the build farm from the Tarn office?"

    async def run():
        await svc.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://t") as c:
                return (await c.post("/query", json={"question": q, "answer": True}),
                        await c.post("/query", json={"question": q}),
                        await c.post("/query", json={"question": q, "answer": "yes"}))
        finally:
            await svc.stop()
    yes, no, bad = asyncio.run(run())
    assert yes.status_code == 200 and no.status_code == 200 and bad.status_code == 422
    a = yes.json()["answer"]
    assert a["kind"] == "extractive" and a["text"].startswith("It is run by Orla Quist")
    assert "answer" not in no.json()
    assert isinstance(Answer(**{**a, "cites": a["cites"]}), Answer)
