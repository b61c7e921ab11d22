"""Hi-Q's query trees for some MuSiQue questions, with the recorded LLM replies replayed.

    python scripts/hiq_trees.py INDEX_DIR [--questions 1,6,17] [--k-read 2]
        [--replies ../shared/llm-replies/hiq-bgr-musique20.jsonl]

Prints each tree (status, query, answer, top passages) and the role events; works on older
evireform versions too (without ``k_read``), for before/after comparisons.
"""
import argparse
import json
from pathlib import Path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("index_dir")
    ap.add_argument("--questions", default="1,6,17")
    ap.add_argument("--k-read", type=int, default=2)
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--replies", default="../shared/llm-replies/hiq-bgr-musique20.jsonl")
    a = ap.parse_args()
    from evireform import PropositionIndex
    from evireform.embed import MiniLMEmbedder
    from evireform.llm import LLMClient, LLMConfig
    from evireform.strategies import HiQ
    idx = PropositionIndex.load(a.index_dir)
    client = LLMClient(LLMConfig(model="strong-llm", offline=True, replay_paths=(a.replies,)))
    try:
        hiq = HiQ(idx, MiniLMEmbedder(), llm=client, k_read=a.k_read)
    except TypeError:  # an evireform without k_read
        hiq = HiQ(idx, MiniLMEmbedder(), llm=client)
    qs = json.loads((Path(a.data) / "musique" / "musique.json").read_text())
    for n in (int(x) for x in a.questions.split(",")):
        q = qs[n]
        res = hiq.retrieve(q["question"], 5)
        print(f"Q{n}: {q['question']}  (gold answer: {q['answer']!r})")
        print(res.trace.tree.format(lambda j: idx.passages[j].title))
        print(f"  answer: {res.trace.tree.answer!r}; role events: "
              f"{', '.join(sorted(set(res.trace.role_events))) or 'none'}\n")
    u = client.usage
    print("replies used:", sum(x.cache_hits + x.content_hits for x in u.values()),
          "missed:", sum(x.misses for x in u.values()))


if __name__ == "__main__":
    main()
