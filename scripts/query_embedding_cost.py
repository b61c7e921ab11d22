"""What embedding questions costs on the query path, with the ONNX Runtime encoder.

    python scripts/query_embedding_cost.py INDEX_DIR [--data ../shared/data] [-n 200]

Prints: ONNX session creation from the exported graph against from the graph optimised for
this machine; embedding MuSiQue questions one at a time and in batches of 4, 8, 16, 32 and 64
(sorted by length); the fp32 and the int8 model one question at a time; and a retrieval's p50 split into its two encoder calls (the question,
then its residual queries) and the rest (search, kernels, roles).
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("index_dir")
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("-n", type=int, default=200)
    a = ap.parse_args()
    from evireform import EviReform, PropositionIndex
    from evireform.embed import embedder_from_spec
    from evireform.onnx_encoder import _session
    qs = [q["question"] for q in json.loads(
        (Path(a.data) / "musique" / "musique.json").read_text())][:a.n]
    idx = PropositionIndex.load(a.index_dir)
    emb = embedder_from_spec(idx.meta.get("embedder_spec") or idx.embedder_name,
                             encoder="onnx")
    enc = emb.query_encoder()
    for opt in enc.path.parent.glob(f"{enc.path.stem}.opt-*.onnx"):
        opt.unlink()  # the first session optimises and saves the graph, the second loads it
    for what in ("optimising the exported graph", "loading the graph optimised before"):
        t = time.perf_counter()
        _session(enc.path, 2)
        print(f"ONNX session, {what}: {time.perf_counter() - t:.2f} s")
    enc.encode(qs[:4])
    for bs in (1, 4, 8, 16, 32, 64):
        t = time.perf_counter()
        enc.encode(qs, batch_size=bs)
        print(f"embedding {len(qs)} questions in batches of {bs:>2}: "
              f"{(time.perf_counter() - t) / len(qs) * 1e3:.1f} ms a question")
    int8 = embedder_from_spec(idx.meta.get("embedder_spec") or idx.embedder_name,
                              encoder="onnx-int8").query_encoder()
    for name, e in (("fp32", enc), ("int8", int8)):
        e.encode(qs[:4])
        t = time.perf_counter()
        for q in qs:
            e.encode([q])
        print(f"{name} model, one question at a time: "
              f"{(time.perf_counter() - t) / len(qs) * 1e3:.1f} ms a question")
    r = EviReform(idx, embedder=emb)
    r.retrieve_many(qs[:8], 10)
    calls, total = [], []
    real = r._embed

    def timed(texts):
        t = time.perf_counter()
        out = real(texts)
        calls.append((len(texts), time.perf_counter() - t))
        return out
    r._embed = timed
    for q in qs:
        t = time.perf_counter()
        r.retrieve(q, 10)
        total.append(time.perf_counter() - t)
    first = [s for i, (_, s) in enumerate(calls) if i % 2 == 0]
    second = [s for i, (_, s) in enumerate(calls) if i % 2 == 1]
    nres = [n for i, (n, _) in enumerate(calls) if i % 2 == 1]
    p50 = np.percentile(total, 50) * 1e3
    print(f"retrieve() p50 {p50:.1f} ms: question embedding p50 "
          f"{np.percentile(first, 50) * 1e3:.1f} ms, residual queries (mean "
          f"{np.mean(nres):.1f}) p50 {np.percentile(second, 50) * 1e3:.1f} ms, the rest p50 "
          f"{np.percentile(np.asarray(total) - np.asarray(first) - np.asarray(second), 50) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
