"""What the hostile-input suites (tests/test_hostile_*.py) share."""
import os
import subprocess
import sys
from evireform import Passage, PropositionIndex
from evireform.embed import HashingEmbedder

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


EMB = HashingEmbedder(16)


def _run(*args, cwd=REPO, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "evireform", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": REPO, **(env or {})}, **kw)


def _index(tmp_path, passages, name="ix"):
    return PropositionIndex.build(passages, EMB, show_progress=False).save(tmp_path / name)


def _ps(n, md=lambda i: {}):
    return [Passage(f"p{i}", f"Alpha {i}", f"Alpha {i} met Gamma Ray in {1900 + i}.", md(i))
            for i in range(n)]


def _ranks(idx, questions, flt):
    from evireform.retriever import EviReform, EviReformConfig
    r = EviReform(idx, EviReformConfig(n_candidates=8, k_residual=3), embedder=EMB)
    return [[(p.id, round(p.score, 12)) for p in r.retrieve(q, k=10, filter=flt).passages]
            for q in questions]
