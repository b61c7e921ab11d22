"""Does a TREC run written by ``evireform query --questions --trec`` score the same in ir_measures
(pytrec_eval) as in ``evireform eval``?  Usage: ``python scripts/trec_agreement.py [musique|hotpotqa]``.

Builds (or reuses from the cache) the dataset's LLM-free index with the default embedder, writes
the run of EviReform's top 20 per question, and prints R@5, R@10 and R@20 from ir_measures
beside evireform's own metrics on the JSONL results of the same run.  Needs ``ir_measures`` (the
test extra) and ``../shared/data``.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import ir_measures

from evireform.cache import cached_index
from evireform.embed import get_embedder
from evireform.evaluation import DATASETS
from evireform.evaluation.data import load_questions
from evireform.evaluation.metrics import metrics

ROOT = Path(__file__).resolve().parents[1]
dataset = sys.argv[1] if len(sys.argv) > 1 else "musique"
data = ROOT.parent / "shared" / "data"
qpath, cpath = (data / p for p in DATASETS[dataset])
_, ix, _ = cached_index(cpath, get_embedder("minilm"), show_progress=False)
index_passages = __import__("evireform").PropositionIndex.load(ix).passages
questions = load_questions(qpath, index_passages)
with tempfile.TemporaryDirectory() as d:
    d = Path(d)
    (d / "q.jsonl").write_text("".join(json.dumps({"id": q.id, "question": q.question}) + "\n"
                                       for q in questions))
    subprocess.run([sys.executable, "-m", "evireform", "query", str(ix), "--questions",
                    str(d / "q.jsonl"), "-k", "20", "--out", str(d / "r.jsonl"), "--trec",
                    str(d / "run.trec"), "--quiet"], check=True)
    res = [json.loads(line) for line in (d / "r.jsonl").read_text().splitlines()]
    run = list(ir_measures.read_trec_run(str(d / "run.trec")))
pos = {p.id: j for j, p in enumerate(index_passages)}
rankings = [[pos[p["id"]] for p in r["passages"]] for r in res]
ours = metrics(rankings, questions, ks=(5, 10, 20))
qrels = [ir_measures.Qrel(q.id, index_passages[j].id, 1) for q in questions for j in q.gold]
theirs = ir_measures.calc_aggregate([ir_measures.R @ 5, ir_measures.R @ 10, ir_measures.R @ 20],
                                    qrels, run)
ties = sum(a["score"] == b["score"] for r in res for a, b in zip(r["passages"], r["passages"][1:]))
print(f"{dataset}: {len(questions)} questions, {ties} tied adjacent pairs in the ranking")
print("| K | evireform | ir_measures (pytrec_eval) |\n|---|---:|---:|")
for K in (5, 10, 20):
    print(f"| R@{K} | {ours[f'recall@{K}']:.2f} | {100 * theirs[ir_measures.R @ K]:.2f} |")
