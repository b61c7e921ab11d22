"""Where a one-shot `evireform query` spends its time: the stages of a fresh process, with
the kernels warming up on a thread as the CLI does.

    python scripts/cold_query_stages.py INDEX_DIR ["question"]
"""
import time

T0 = time.perf_counter()
import sys  # noqa: E402
import threading  # noqa: E402


def stage(what):
    print(f"{time.perf_counter() - T0:6.3f} s  {what}", file=sys.stderr)


import numpy  # noqa: E402,F401
stage("numpy imported")
import evireform.cli  # noqa: E402,F401
stage("evireform imported")
from evireform.kernels import warm_up  # noqa: E402
warm = threading.Thread(target=warm_up, args=(False,))
warm.start()
from evireform.embed import embedder_from_spec  # noqa: E402
from evireform.index import PropositionIndex  # noqa: E402
from evireform.retriever import EviReform  # noqa: E402

idx = PropositionIndex.load(sys.argv[1])
stage("index loaded")
emb = embedder_from_spec(idx.meta.get("embedder_spec") or idx.embedder_name)
getattr(emb, "query_encoder", lambda: None)()
stage("query encoder ready")
r = EviReform(idx, embedder=emb)
warm.join()
stage("kernels warm (thread joined)")
r.retrieve(sys.argv[2] if len(sys.argv) > 2 else
           "In what county is the city where Harris W. Fawell was born?", 10)
stage("first question answered")
print("torch imported:", "torch" in sys.modules, file=sys.stderr)
