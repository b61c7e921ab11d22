"""What a user's typed program does with evireform (checked by mypy in tests/test_typing.py):
every annotation below must agree with the library's own."""
from __future__ import annotations

import numpy as np

from evireform import EviReform, EviReformConfig, Passage, PropositionIndex, RetrievalResult
from evireform.application import METHODS, make_method
from evireform.embed import HashingEmbedder
from evireform.engine import make_engine
from evireform.filters import Filter, compile_filter
from evireform.records import ResultRecord
from evireform.kernels import cosine_topk_batch
from evireform.retriever import RankedPassage

emb = HashingEmbedder(32)
idx: PropositionIndex = PropositionIndex.build(
    [Passage("a", "A", "Alpha met Beta."), "Beta met Gamma."], emb, show_progress=False)
n: int = idx.n_passages + idx.n_props + idx.dim
engine = make_engine(idx, "cpu", precision="float32")
retriever = EviReform(idx, EviReformConfig(n_candidates=8), embedder=emb, engine=engine)
res: RetrievalResult = retriever.retrieve("Who met Beta?", k=2)
many: list[RetrievalResult] = retriever.retrieve_many(["q1", "q2"], 3)
top: RankedPassage = res.passages[0]
score: float = top.score + top.from_question + top.from_residual + top.from_propagation
ids: list[str] = res.ids
record: ResultRecord = res.to_dict(graph=True, id="q1")
method_ran: str = record["trace"]["method"]
flt: Filter | None = compile_filter({"lang": {"$in": ["de"]}})
names: tuple[str, ...] = METHODS
bgr = make_method("bgr", idx, emb)
found, scores = cosine_topk_batch(np.zeros((4, 32), np.float32), np.zeros((1, 32), np.float32), 2)
saved = idx.save("/tmp/never-written-by-mypy")
