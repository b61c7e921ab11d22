"""An answer from the retrieved passages, with the passages it stands on (issue 82).

:func:`answer_question` turns a :class:`~evireform.retriever.RetrievalResult` into an
:class:`Answer`:

* with an LLM (:class:`~evireform.llm.LLMAnswerer`, any OpenAI-compatible endpoint): a
  short answer grounded in the numbered passages, the numbers it cites mapped back to
  passage ids and each cited passage's sentence that best matches the question and the
  answer, or "not found in these documents" when the LLM says the passages do not hold it;
  a reply that breaks the contract twice falls back to the extractive answer (the event
  says so);
* without one: the **extractive** answer, marked as such: the sentence of the top passages
  that shares the most content words with the question.

Either way the answer carries the LLM-free signal of whether the passages hold an answer:
:attr:`Answer.confidence`, the share of the question's content words (the lexical index's
tokens: lower-cased, stemmed, function words left out) that the top :data:`COVERED_BY`
passages hold between them, and :attr:`Answer.similarity`, the cosine of the question's
best dense hit (from the trace of a method that searches densely; None otherwise).  The
extractive answer says "not found in these documents" when both are low: the confidence
below :data:`FOUND_COVERAGE` and the similarity below :data:`FOUND_SIMILARITY` (chosen on
MuSiQue's corpus asked its own and HotpotQA's questions, held out on three others: precision
and recall in ``docs/results.md``, ``python scripts/not_found_probe.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from .text import lexical_tokens, sentences

__all__ = ["Answer", "answer_question", "extractive_answer", "coverage", "similarity",
           "NOT_FOUND", "FOUND_COVERAGE", "FOUND_SIMILARITY", "COVERED_BY"]

#: what an answer says when the passages do not hold one
NOT_FOUND = "not found in these documents"

#: the top passages whose words the confidence counts
COVERED_BY = 3

#: the extractive answer says :data:`NOT_FOUND` when the confidence is below this and the
#: similarity below :data:`FOUND_SIMILARITY` (both chosen on MuSiQue's corpus, its own
#: questions against HotpotQA's: ``scripts/not_found_probe.py``)
FOUND_COVERAGE = 0.7
#: see :data:`FOUND_COVERAGE`
FOUND_SIMILARITY = 0.5

#: passages an answer is drawn from (the LLM sees them numbered; the extractive answer
#: picks its sentence among them)
ANSWER_PASSAGES = 5


@dataclass
class Answer:
    """An answer and what it stands on."""

    #: the answer, or :data:`NOT_FOUND`
    text: str
    #: whether the passages hold an answer (the LLM's judgment; for the extractive answer,
    #: the confidence or the similarity at its threshold)
    found: bool
    #: "llm" (an LLM's answer) or "extractive" (the best-matching sentence, as it stands)
    kind: str
    #: the share of the question's content words the top passages hold (0..1; LLM-free)
    confidence: float
    #: the passages the answer cites: ``{"id", "title", "sentence"}``, best first
    cites: list[dict[str, str]] = field(default_factory=list)
    #: the cosine of the question's best dense hit (None when the method's trace has none)
    similarity: float | None = None
    #: what happened on the way ("answer:fallback:ContractError", ...)
    events: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The answer's record (:class:`evireform.records.AnswerRecord`)."""
        return {"text": self.text, "found": self.found, "kind": self.kind,
                "confidence": round(float(self.confidence), 4),
                "similarity": None if self.similarity is None
                else round(float(self.similarity), 4),
                "cites": [dict(c) for c in self.cites], "events": list(self.events)}


def _content(text: str) -> set[str]:
    """The content words of ``text``: the lexical index's tokens (lower-cased, stemmed,
    function words left out), so "runs" meets "run"."""
    return set(lexical_tokens(text))


def coverage(question: str, texts: Sequence[str]) -> float:
    """The share of ``question``'s content words found in ``texts`` together (1.0 for a
    question without content words)."""
    want = _content(question)
    if not want:
        return 1.0
    have: set[str] = set()
    for t in texts:
        have |= _content(t)
    return len(want & have) / len(want)


def similarity(result: Any) -> float | None:
    """The cosine of the question's best dense hit, from ``result``'s trace (EviReform's
    ``hits``: the question's first); None when the trace holds none."""
    hits = getattr(getattr(result, "trace", None), "hits", None) or []
    dense = hits[0].get("dense") if hits and isinstance(hits[0], dict) else None
    return float(dense[0]["score"]) if dense else None


def _passage_text(p: Any) -> str:
    return f"{p.title}\n{p.text}"


def best_sentence(text: str, words: set[str]) -> tuple[int, str]:
    """The sentence of ``text`` sharing the most of ``words`` (the first of equals), with
    that count."""
    best, got = -1, ""
    for s in sentences(text) or [" ".join(text.split())]:
        n = len(words & _content(s))
        if n > best:
            best, got = n, " ".join(s.split())
    return best, got


def extractive_answer(question: str, passages: Sequence[Any],
                      similarity: float | None = None) -> Answer:
    """The LLM-free answer: the sentence of the first :data:`ANSWER_PASSAGES` passages
    sharing the most content words with the question (an earlier passage first among
    equals), or :data:`NOT_FOUND` when the confidence is below :data:`FOUND_COVERAGE` and
    ``similarity`` (the question's best dense cosine, when known) below
    :data:`FOUND_SIMILARITY` (the closest sentence is still cited)."""
    top = list(passages)[:ANSWER_PASSAGES]
    conf = coverage(question, [_passage_text(p) for p in top[:COVERED_BY]])
    if not top:
        return Answer(NOT_FOUND, False, "extractive", 0.0, similarity=similarity)
    want = _content(question)
    best = (-1, "", None)
    for p in top:
        n, s = best_sentence(p.text, want)
        if n > best[0]:
            best = (n, s, p)
    _, sent, p = best
    cite = [{"id": p.id, "title": p.title, "sentence": sent}]
    found = conf >= FOUND_COVERAGE or (similarity is not None
                                       and similarity >= FOUND_SIMILARITY)
    return Answer(sent if found else NOT_FOUND, found, "extractive", conf, cite,
                  similarity=similarity)


def answer_question(question: str, result: Any, llm: Any = None) -> Answer:
    """The :class:`Answer` to ``question`` from ``result``'s passages (a
    :class:`~evireform.retriever.RetrievalResult`): an LLM's (``llm``: an
    :class:`~evireform.llm.LLMClient`) or the extractive one."""
    passages = list(result.passages)
    sim = similarity(result)
    if llm is None:
        return extractive_answer(question, passages, sim)
    from .llm import LLMAnswerer
    top = passages[:ANSWER_PASSAGES]
    conf = coverage(question, [_passage_text(p) for p in top[:COVERED_BY]])
    got, events = LLMAnswerer(llm).answer(question, top)
    if got is None:  # the contract broken twice, the endpoint down: the LLM-free answer
        out = extractive_answer(question, passages, sim)
        out.events = events
        return out
    found, text, cited = got
    if not found:
        return Answer(NOT_FOUND, False, "llm", conf, [], events=events, similarity=sim)
    words = _content(question) | _content(text)
    cites = [{"id": top[i].id, "title": top[i].title,
              "sentence": best_sentence(top[i].text, words)[1]} for i in cited]
    return Answer(text, True, "llm", conf, cites, events=events, similarity=sim)
