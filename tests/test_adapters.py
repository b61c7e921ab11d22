"""The framework adapters honour each framework's whole runnable contract, checked with the
frameworks' own semantics: LangChain's batch with and without ``return_exceptions``, per-input
configs and callbacks, async batch and streaming; LlamaIndex's retrieve and aretrieve with
its callback manager's retrieve events."""
import asyncio

import pytest

from evireform import EviReform, Passage, PropositionIndex
from evireform.embed import HashingEmbedder

EMB = HashingEmbedder(64)
QS = ["Who met Beta?", "Where does Beta live?", "Which river runs by Rome?"]


@pytest.fixture(scope="module")
def retriever():
    idx = PropositionIndex.build([Passage("a", "Alpha", "Alpha met Beta in Paris."),
                                  Passage("b", "Beta", "Beta lives in Rome."),
                                  Passage("c", "Rome", "The Tiber runs by Rome."),
                                  Passage("d", "Paris", "The Seine runs by Paris.")], EMB,
                                 show_progress=False)
    return EviReform(idx, embedder=EMB)


def _lc(retriever, **kw):
    pytest.importorskip("langchain_core")
    from evireform.integrations.langchain import EviReformRetriever
    return EviReformRetriever(retriever=retriever, k=2, **kw)


def _ids(docs):
    return [d.id for d in docs]


def _recorder():
    from langchain_core.callbacks import BaseCallbackHandler

    class Rec(BaseCallbackHandler):
        def __init__(self):
            self.events = []

        def on_retriever_start(self, serialized, query, **kw):
            self.events.append(("start", query, tuple(kw.get("tags") or ()),
                                (kw.get("metadata") or {}).get("who")))

        def on_retriever_end(self, documents, **kw):
            self.events.append(("end", len(documents)))

        def on_retriever_error(self, error, **kw):
            self.events.append(("error", type(error).__name__))
    return Rec()


def test_langchain_batch_equals_invoke_and_reports_each_run(retriever):
    lc = _lc(retriever)
    want = [_ids(lc.invoke(q)) for q in QS]
    assert [_ids(d) for d in lc.batch(QS)] == want
    rec = _recorder()
    got = lc.batch(QS, {"callbacks": [rec], "tags": ["t"], "metadata": {"who": "me"}})
    assert [_ids(d) for d in got] == want
    starts = [e for e in rec.events if e[0] == "start"]
    assert [e[1] for e in starts] == QS and all(e[2] == ("t",) and e[3] == "me"
                                                for e in starts)
    assert [e for e in rec.events if e[0] == "end"] == [("end", 2)] * 3
    # per-input configs: each input's own callbacks
    recs = [_recorder() for _ in QS]
    lc.batch(QS, [{"callbacks": [r]} for r in recs])
    assert [[e[1] for e in r.events if e[0] == "start"] for r in recs] == [[q] for q in QS]


def test_langchain_batch_with_a_failing_input(retriever):
    lc = _lc(retriever)
    rec = _recorder()
    out = lc.batch([QS[0], "   ", QS[2]], {"callbacks": [rec]}, return_exceptions=True)
    assert _ids(out[0]) == _ids(lc.invoke(QS[0])) and _ids(out[2]) == _ids(lc.invoke(QS[2]))
    assert isinstance(out[1], ValueError)
    assert sorted(e for e in rec.events if e[0] != "start") == \
        [("end", 2), ("end", 2), ("error", "ValueError")]
    with pytest.raises(ValueError):
        lc.batch([QS[0], "   "])


def test_langchain_async_batch_and_stream(retriever):
    lc = _lc(retriever)
    want = [_ids(lc.invoke(q)) for q in QS]
    assert [_ids(d) for d in asyncio.run(lc.abatch(QS))] == want
    out = asyncio.run(lc.abatch([QS[0], ""], return_exceptions=True))
    assert _ids(out[0]) == want[0] and isinstance(out[1], ValueError)
    chunks = list(lc.stream(QS[1]))
    assert len(chunks) == 1 and _ids(chunks[0]) == want[1]

    async def astream():
        return [c async for c in lc.astream(QS[2])]
    assert [_ids(c) for c in asyncio.run(astream())] == [want[2]]
    # per-call k through every entry point
    assert len(lc.invoke(QS[0], k=1)) == 1
    assert [len(d) for d in lc.batch(QS, k=1)] == [1, 1, 1]


def test_llama_index_retrieve_aretrieve_and_callback_events(retriever):
    pytest.importorskip("llama_index.core")
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.callbacks.base_handler import BaseCallbackHandler
    from llama_index.core.callbacks.schema import CBEventType
    from evireform.integrations.llama_index import EviReformRetriever

    class Rec(BaseCallbackHandler):
        def __init__(self):
            super().__init__([], [])
            self.events = []

        def on_event_start(self, event_type, payload=None, event_id="", parent_id="", **kw):
            self.events.append(("start", event_type))
            return event_id

        def on_event_end(self, event_type, payload=None, event_id="", **kw):
            self.events.append(("end", event_type))

        def start_trace(self, trace_id=None):
            pass

        def end_trace(self, trace_id=None, trace_map=None):
            pass
    rec = Rec()
    li = EviReformRetriever(retriever, similarity_top_k=2,
                            callback_manager=CallbackManager([rec]))
    sync = [[n.node.id_ for n in li.retrieve(q)] for q in QS]
    asyn = [[n.node.id_ for n in asyncio.run(li.aretrieve(q))] for q in QS]
    assert sync == asyn == [[p.id for p in retriever.retrieve(q, 2).passages] for q in QS]
    assert rec.events.count(("start", CBEventType.RETRIEVE)) == 6
    assert rec.events.count(("end", CBEventType.RETRIEVE)) == 6
