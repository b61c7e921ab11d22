"""Checks on real data with the default embedder (all-MiniLM-L6-v2)."""
import json

import numpy as np
import pytest

from evireform import PropositionIndex, load_corpus
from evireform.embed import MiniLMEmbedder
from evireform.extract import HeuristicExtractor
from evireform.engine import search_index
from helpers import search_one

pytest.importorskip("sentence_transformers")


@pytest.fixture(scope="module")
def real(data_dir):
    passages = load_corpus(data_dir / "musique/musique_corpus.json")[:900]
    emb = MiniLMEmbedder()
    idx = PropositionIndex.build(passages, emb, extractor=HeuristicExtractor(),
                                 show_progress=False, hnsw=True)
    questions = [q["question"] for q in json.loads((data_dir / "musique/musique.json").read_text())]
    return idx, emb.encode(questions)


def test_minilm_embeddings_are_unit_float32(real):
    idx, Q = real
    assert idx.embeddings.dtype == np.float32 and idx.dim == 384
    np.testing.assert_allclose(np.linalg.norm(idx.embeddings, axis=1), 1, atol=1e-5)
    assert idx.n_props >= 2500  # "a few thousand" real embeddings


def test_hnsw_recall_at_100(real):
    idx, Q = real
    exact, _ = search_index(idx, Q, 100, exact=True)
    approx, _ = search_index(idx, Q, 100)
    recall = np.mean([len(set(e[e >= 0]) & set(a[a >= 0])) / max(1, np.sum(e >= 0))
                      for e, a in zip(exact, approx)])
    assert recall >= 0.98, recall


def test_exact_batch_equals_single(real):
    idx, Q = real
    bi, bs = search_index(idx, Q[:10], 20, exact=True)
    for b in range(10):
        i, s = search_one(idx, Q[b], 20, exact=True)
        np.testing.assert_array_equal(i, bi[b][: len(i)])
        np.testing.assert_allclose(s, bs[b][: len(s)], rtol=1e-5)
