"""Why BGR's intersected evidence graph so rarely has MuSiQue's gold structure.

    python scripts/bgr_diagnosis.py [--data ../shared/data] [-n 100] [--method bgr|bgr_last]
        [--llm-replay FILE ...]

For each question, BGR's forward chain (question -> bridge queries) and backward chain (the
question's last hop -> neighbours sharing an entity) are compared with the gold graph (the
``#k`` dependencies of MuSiQue's decomposition, prerequisite -> dependent): how often each
chain is non-empty, starts on a gold passage (the backward chain on the gold sink, the
passage that answers the last hop), holds a gold edge in either direction, and how often
the two chains share a node or an edge (the paper keeps only the shared edges).  With
``--llm-replay`` the forward step is the recorded LLM reformulator (offline replay, as
``evireform eval --llm-replay``); the backward chain has no LLM step.
"""
import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("-n", type=int, default=None)
    ap.add_argument("--method", choices=("bgr", "bgr_last"), default="bgr")
    ap.add_argument("--llm-replay", action="append", default=[])
    args = ap.parse_args(argv)
    from evireform.cache import cached_index
    from evireform.embed import get_embedder
    from evireform.evaluation.data import load_questions
    from evireform.strategies import make_strategy
    data = Path(args.data)
    emb = get_embedder("minilm")
    idx, _, _ = cached_index(data / "musique/musique_corpus.json", emb, show_progress=False)
    qs = load_questions(data / "musique/musique.json", idx.passages)[:args.n]
    llm = None
    if args.llm_replay:
        from evireform.llm import LLMClient, LLMConfig
        llm = LLMClient(LLMConfig.from_env(replay_paths=tuple(args.llm_replay), offline=True,
                                           model="strong-llm"))
    strat = make_strategy(args.method, idx, emb, llm)
    c: Counter = Counter()
    shapes: Counter = Counter()
    for q, res in zip(qs, strat.retrieve_many([q.question for q in qs], 20)):
        t = res.trace
        gold = set(q.gold_edges or ())
        sinks = {d for _, d in gold} - {s for s, _ in gold}
        fwd = set(zip(t.forward, t.forward[1:]))
        bwd = {(t.backward[i + 1], t.backward[i]) for i in range(len(t.backward) - 1)}
        flip = lambda es: {(b, a) for a, b in es}  # noqa: E731
        row = {
            "forward chain has an edge": bool(fwd),
            "backward chain has an edge": bool(bwd),
            "forward starts on a gold passage": bool(t.forward) and t.forward[0] in q.gold,
            "backward starts on the gold sink": bool(t.backward) and t.backward[0] in sinks,
            "backward starts on a gold passage": bool(t.backward) and t.backward[0] in q.gold,
            "forward holds a gold edge": bool(fwd & gold),
            "forward holds a gold edge reversed": bool(flip(fwd) & gold),
            "backward holds a gold edge": bool(bwd & gold),
            "the chains share a node": bool(set(t.forward) & set(t.backward)),
            "the chains share an edge (the intersection)": bool(t.intersection),
            "the intersection holds a gold edge": bool(set(map(tuple, t.intersection)) & gold),
        }
        c.update(k for k, v in row.items() if v)
        shapes[len(gold)] += 1
    n = len(qs)
    print(f"{args.method} on MuSiQue, {n} questions"
          f"{' (LLM replay)' if llm else ' (LLM-free)'}; gold graphs by edge count: "
          + ", ".join(f"{e} edges: {m}" for e, m in sorted(shapes.items())) + "\n")
    print("| what | questions | % |\n|---|---:|---:|")
    for k in row:
        print(f"| {k} | {c[k]} | {100 * c[k] / n:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
