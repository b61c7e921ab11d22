"""Build time of the local build vs the Ray Data build (2 workers) on one corpus, and whether
the two indexes are equal array for array.

    python scripts/ray_build_time.py ../shared/data/2wikimultihopqa/2wikimultihopqa_corpus.json \
        --embedder minilm --workers 2
"""
import argparse
import json
import time

from evireform.corpus import load_corpus
from evireform.distributed import build_ray, ensure_ray
from evireform.embed import get_embedder
from evireform.index import PropositionIndex, arrays_equal


def same_but_embeddings(a, b) -> bool:
    """Texts, entities, graph and passage map equal (a transformer's embeddings may differ in
    the last bits with the batch they were encoded in)."""
    import numpy as np
    from evireform.store import index_arrays
    x, y = index_arrays(a), index_arrays(b)
    return (a.prop_texts == b.prop_texts and a.entity_names == b.entity_names
            and all(np.array_equal(x[k], y[k]) for k in x if k != "embeddings"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--embedder", default="minilm")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    ps = load_corpus(a.corpus)
    emb = get_embedder(a.embedder)
    emb.encode(["warm-up"])  # load the model before the clock starts
    t = time.perf_counter()
    local = PropositionIndex.build(ps, emb, show_progress=False, hnsw=False)
    t_local = time.perf_counter() - t
    t = time.perf_counter()
    ensure_ray(num_cpus=a.workers)
    t_init = time.perf_counter() - t
    t = time.perf_counter()
    ray_idx = build_ray(ps, a.embedder, concurrency=a.workers, show_progress=False, hnsw=False)
    t_ray = time.perf_counter() - t
    out = {"corpus": a.corpus, "passages": local.n_passages, "propositions": local.n_props,
           "embedder": emb.name, "workers": a.workers, "local_s": round(t_local, 2),
           "ray_init_s": round(t_init, 2), "ray_build_s": round(t_ray, 2),
           "equal": arrays_equal(local, ray_idx),
           "same_except_embeddings": same_but_embeddings(local, ray_idx),
           "max_abs_embedding_diff": float(abs(local.embeddings - ray_idx.embeddings).max())}
    print(json.dumps(out, indent=1))
    if a.json:
        open(a.json, "w").write(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
