"""LangChain's own standard retriever suite (langchain-tests' RetrieversIntegrationTests) run
against EviReformRetriever: what LangChain checks of every retriever (k in the constructor
and per call, Documents returned, ainvoke)."""
import pytest

pytest.importorskip("langchain_core")
standard = pytest.importorskip("langchain_tests.integration_tests")

from evireform import EviReform, PropositionIndex  # noqa: E402
from evireform.embed import HashingEmbedder  # noqa: E402
from evireform.integrations.langchain import EviReformRetriever  # noqa: E402

EMB = HashingEmbedder(64)
_NAMES = ["Alpha", "Beta", "Delta", "Gamma Ray", "Omega"]
_INDEX = PropositionIndex.build(
    [{"title": f"{_NAMES[i % 4]} {i}",
      "text": f"{_NAMES[i % 4]} {i} met {_NAMES[(i + 1) % 5]} in {1900 + i}."}
     for i in range(30)], EMB, show_progress=False)


class TestEviReformRetrieverStandard(standard.RetrieversIntegrationTests):
    @property
    def retriever_constructor(self):
        return EviReformRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"retriever": EviReform(_INDEX, embedder=EMB), "k": 4}

    @property
    def retriever_query_example(self) -> str:
        return "Who did Alpha 3 meet?"
