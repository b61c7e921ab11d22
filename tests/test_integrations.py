"""The LangChain and LlamaIndex adapters against the real libraries, on a small real index."""
import subprocess
import sys

import pytest

from evireform import EviReform, EviReformConfig, Passage, PropositionIndex
from evireform.embed import HashingEmbedder

QUESTIONS = ["Who founded the company that made the first commercial jet airliner?",
             "In which country is the river that flows through the capital of Hungary?",
             "What language is spoken where Haymo of Faversham was born?"]
META = {"passage_id", "title", "rank", "score", "from_question", "from_residual",
        "from_propagation", "residual_queries"}


@pytest.fixture(scope="module")
def small_index(tmp_path_factory, data_dir):
    from evireform import load_corpus
    passages = load_corpus(data_dir / "hotpotqa" / "hotpotqa_corpus.json")[:300]
    emb = HashingEmbedder(128)
    idx = PropositionIndex.build(passages, emb, show_progress=False)
    path = tmp_path_factory.mktemp("ix") / "hot.idx"
    idx.save(path)
    return idx, emb, path


def _want(idx, emb, k, cfg=None):
    r = EviReform(idx, cfg, embedder=emb)
    return [r.retrieve(q, k) for q in QUESTIONS]


def test_langchain_retriever(small_index):
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document
    from evireform.integrations.langchain import EviReformRetriever
    idx, emb, path = small_index
    cfg = EviReformConfig(beta=0.75)
    lc = EviReformRetriever.from_index(idx, emb, k=5, config=cfg)
    want = _want(idx, emb, 5, cfg)
    for q, w in zip(QUESTIONS, want):
        docs = lc.invoke(q)
        assert all(isinstance(d, Document) for d in docs)
        assert [d.metadata["passage_id"] for d in docs] == w.ids
        assert [d.metadata["score"] for d in docs] == [p.score for p in w.passages]
        assert all(set(d.metadata) == META for d in docs)  # the corpus has no metadata
        assert docs[0].metadata["residual_queries"] == w.trace.residual_queries
        assert docs[0].page_content == idx.passages[w.passages[0].index].text
    batch = lc.batch(QUESTIONS)
    assert [[d.metadata["passage_id"] for d in ds] for ds in batch] == [w.ids for w in want]
    assert [[d.page_content for d in ds] for ds in batch] == \
        [[d.page_content for d in lc.invoke(q)] for q in QUESTIONS]
    # from a saved directory, embedder rebuilt from the manifest's name
    again = EviReformRetriever.from_index_dir(path, k=5, config=cfg)
    assert [d.metadata["passage_id"] for d in again.invoke(QUESTIONS[0])] == want[0].ids


def test_langchain_async(small_index):
    pytest.importorskip("langchain_core")
    import asyncio
    from evireform.integrations.langchain import EviReformRetriever
    idx, emb, _ = small_index
    lc = EviReformRetriever.from_index(idx, emb, k=3)
    docs = asyncio.run(lc.ainvoke(QUESTIONS[1]))
    assert [d.metadata["passage_id"] for d in docs] == _want(idx, emb, 3)[1].ids


def test_llama_index_retriever(small_index, tmp_path):
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import NodeWithScore
    from evireform.integrations.llama_index import EviReformRetriever
    idx, emb, path = small_index
    li = EviReformRetriever.from_defaults(index=idx, embedder=emb, similarity_top_k=4)
    want = _want(idx, emb, 4)
    for q, w in zip(QUESTIONS, want):
        nodes = li.retrieve(q)
        assert all(isinstance(n, NodeWithScore) for n in nodes)
        assert [n.node.node_id for n in nodes] == w.ids
        assert [n.score for n in nodes] == [p.score for p in w.passages]
        # only what does not depend on the question: the same passage, the same node hash
        assert all(set(n.node.metadata) == {"passage_id", "title"} for n in nodes)
        assert all(n.node.ref_doc_id == n.node.node_id for n in nodes)
        assert all("passage_id" not in n.node.get_content(metadata_mode="llm") for n in nodes)
    li.persist(tmp_path / "persisted")
    back = EviReformRetriever.from_persist_dir(tmp_path / "persisted")
    assert back.similarity_top_k == 4
    assert [n.node.node_id for n in back.retrieve(QUESTIONS[2])] == want[2].ids
    li2 = EviReformRetriever.from_defaults(index_dir=path, similarity_top_k=2)
    assert [n.node.node_id for n in li2.retrieve(QUESTIONS[0])] == want[0].ids[:2]
    with pytest.raises(ValueError, match="exactly one of index"):
        EviReformRetriever.from_defaults(index=idx, index_dir=path)


@pytest.mark.parametrize("module,lib,extra", [
    ("evireform.integrations.langchain", "langchain_core", "langchain"),
    ("evireform.integrations.llama_index", "llama_index", "llamaindex")])
def test_missing_library_names_the_extra(module, lib, extra):
    code = (f"import sys; sys.modules[{lib!r}] = None\n"
            f"try:\n    import {module}\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert f"pip install 'evireform[{extra}]'" in out


def test_importing_evireform_imports_no_framework():
    code = ("import sys, evireform, evireform.integrations\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('langchain_core', 'llama_index')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def _docs_index(make_docs):
    emb = HashingEmbedder(64)
    docs = make_docs([("Alice Park met Bob Stone in Paris.", {"team": "a", "year": 2001}),
                      ("Bob Stone founded Delta Inc in Lyon.", {"team": "b", "year": 2005}),
                      ("Delta Inc hired Carl Jung in Paris.", {"team": "a", "year": 2010})])
    return emb, docs


def test_langchain_documents_keep_metadata_and_filter():
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document
    from evireform.integrations.langchain import EviReformRetriever, passages_from_documents
    emb, docs = _docs_index(lambda rows: [Document(page_content=t, metadata=m) for t, m in rows])
    passages = passages_from_documents(docs)
    assert [p.metadata for p in passages] == [d.metadata for d in docs]
    idx = PropositionIndex.build(passages, emb, show_progress=False)
    lc = EviReformRetriever.from_index(idx, emb, k=5, filter={"team": "a"})
    got = lc.invoke("Who did Bob Stone meet?")
    assert [d.metadata["team"] for d in got] == ["a", "a"]
    assert all(d.metadata["year"] in (2001, 2010) for d in got)
    assert [[d.metadata["team"] for d in ds] for ds in lc.batch(["Who met Bob?"])] == [["a", "a"]]
    with pytest.raises(ValueError, match="unknown operator"):
        EviReformRetriever.from_index(idx, emb, filter={"team": {"$like": "a"}})


def test_llama_index_nodes_keep_metadata_and_filter(tmp_path):
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import TextNode
    from evireform.integrations.llama_index import EviReformRetriever, passages_from_nodes
    emb, nodes = _docs_index(lambda rows: [TextNode(text=t, metadata=m, id_=f"n{i}")
                                           for i, (t, m) in enumerate(rows)])
    passages = passages_from_nodes(nodes)
    assert [p.id for p in passages] == ["n0", "n1", "n2"]
    idx = PropositionIndex.build(passages, emb, show_progress=False)
    li = EviReformRetriever.from_defaults(index=idx, embedder=emb, similarity_top_k=5,
                                          filter={"year": {"$gte": 2005}})
    got = li.retrieve("Who did Delta Inc hire?")
    assert [n.node.node_id for n in got] and {n.node.node_id for n in got} <= {"n1", "n2"}
    li.persist(tmp_path / "p")
    back = EviReformRetriever.from_persist_dir(tmp_path / "p", embedder=emb)
    assert back.filter == {"year": {"$gte": 2005}}
    assert [n.node.node_id for n in back.retrieve("Who did Delta Inc hire?")] == \
        [n.node.node_id for n in got]


def test_langchain_per_call_k_and_filter_ids_and_native_async():
    """What LangChain's standard retriever suite checks: ``invoke(q, k=1)`` returns one
    document, ``invoke(q, filter=...)`` applies it, ``Document.id`` is set, ``ainvoke`` is
    native (a worker thread); anything else per call is refused, not ignored."""
    pytest.importorskip("langchain_core")
    import asyncio
    from evireform.integrations.langchain import EviReformRetriever
    emb = HashingEmbedder(16)
    ps = [Passage(f"p{i}", f"Alpha {i}", f"Alpha {i} met Gamma Ray.", {"ns": f"t{i % 2}"})
          for i in range(10)]
    idx = PropositionIndex.build(ps, emb, show_progress=False)
    lc = EviReformRetriever.from_index(idx, emb, k=4, filter={"ns": "t0"})
    assert len(lc.invoke("Alpha 3?")) == 4 and len(lc.invoke("Alpha 3?", k=1)) == 1
    assert {d.metadata["ns"] for d in lc.invoke("Alpha 3?")} == {"t0"}
    docs = lc.invoke("Alpha 3?", filter={"ns": "t1"})
    assert {d.metadata["ns"] for d in docs} == {"t1"}
    assert [d.id for d in docs] == [d.metadata["passage_id"] for d in docs]
    assert {d.metadata["ns"] for d in lc.invoke("Alpha 3?", k=10, filter=None)} == {"t0", "t1"}
    got = asyncio.run(lc.ainvoke("Alpha 3?", k=2, filter={"ns": "t1"}))
    assert [d.id for d in got] == [d.id for d in docs[:2]]
    with pytest.raises(TypeError, match="takes k= and filter="):
        lc.invoke("Alpha 3?", kk=1)
    with pytest.raises(ValueError, match="unknown operator"):
        lc.invoke("Alpha 3?", filter={"ns": {"$near": 1}})


def test_llama_index_fusion_counts_a_passage_found_twice_once_per_list(small_index):
    """QueryFusionRetriever (reciprocal rank) keys nodes by hash: a passage two retrievers
    both return must get both lists' shares, and ``aretrieve`` gives what ``retrieve`` does."""
    pytest.importorskip("llama_index.core")
    import asyncio
    from llama_index.core.llms.mock import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever
    from evireform.integrations.llama_index import EviReformRetriever
    idx, emb, _ = small_index
    a = EviReformRetriever.from_defaults(index=idx, embedder=emb, similarity_top_k=3)
    b = EviReformRetriever.from_defaults(index=idx, embedder=emb, similarity_top_k=3,
                                         config=EviReformConfig(alpha=0.9))
    q = QUESTIONS[0]
    fused = QueryFusionRetriever([a, b], llm=MockLLM(), mode="reciprocal_rerank",
                                 num_queries=1, similarity_top_k=3,
                                 use_async=False).retrieve(q)
    top = fused[0]
    in_both = [n.node.hash for n in a.retrieve(q)] + [n.node.hash for n in b.retrieve(q)]
    assert in_both.count(top.node.hash) == 2
    assert top.score == pytest.approx(2 / 61, rel=0.02)  # 1/(rank + 60) from each list
    got = asyncio.run(a.aretrieve(q))
    assert [n.node.node_id for n in got] == [n.node.node_id for n in a.retrieve(q)]


def test_a_passage_standing_for_copies_names_them_in_the_metadata():
    """Issue 68: the frameworks' documents carry ``duplicates`` (the other passages with
    the same text) when the passage stands for any, and no such key otherwise."""
    from evireform import PropositionIndex
    from evireform.embed import HashingEmbedder
    from evireform.integrations._common import passage_metadata
    from evireform.retriever import EviReform
    from evireform.types import Passage
    e = HashingEmbedder(64)
    same = "The tool is released under the MIT licence."
    idx = PropositionIndex.build([Passage("a", "a", same), Passage("b", "b", same),
                                  Passage("c", "c", "Bob likes tea.")], e, show_progress=False)
    res = EviReform(idx, embedder=e).retrieve("Which licence is the tool released under?", 2)
    metas = [passage_metadata(res, n, p) for n, p in enumerate(res.passages)]
    assert metas[0]["duplicates"] == ["b" if metas[0]["passage_id"] == "a" else "a"]
    assert "duplicates" not in metas[1]
