"""An offline look at a sufficiency judgment (issue 85) before building one into the
retriever: from one ``run_eval`` of a set, EviReform's ranking with places reserved for the
question's own evidence, single-hop and two-hop Answer@5 apart, beside ``base_dense_fill``
(EviReform's question-only base), BM25, the hybrid and EviReform as it is.

A rule reserves the first ``r`` places for the base's top ``r`` passages (in the base's
order; the rest of EviReform's ranking follows, without them) when the question's evidence
is judged strong: ``always``; ``agree`` when the base's top passage is also the top of
dense passage retrieval or of BM25 (the question's two signals agree on it); ``agree-both``
when it is the top of both.  A second kind of rule gives the question's own search half
the places: EviReform's ranking interleaved with a one-search ranking (EviReform's first,
that ranking's first, EviReform's second, ..., each passage once): the eval's ``hybrid``
(RRF of BM25 and *passage* embeddings, which an index does not hold), the library's
``hybrid`` (:class:`~evireform.strategies.Search`: RRF of the index's BM25 and the
question's top-100 propositions read out per passage), ``maxsim`` (RRF of the index's
BM25 and every passage's best proposition cosine) and ``centroid`` (RRF of the index's BM25
and the cosine of each passage's mean proposition direction).  The rules change
``evireform_no_own``, EviReform without the question's own search; ``evireform`` is the
library's default, whose own search (issue 85) interleaves with the index's passage
embeddings where it holds them; on such an index, rows ``with the own search placed
PATTERN`` place that search's passages (the index's BM25 and dense passages, RRF) other ways
(``abab``: the library's alternation, ``abaa``: its first passage second, ``aabab``: after
EviReform's first two).  Nothing here changes a ranking the
library returns: it measures what a rule would do, on the same rankings, so that the one
built next is chosen by its figures.

    python scripts/sufficiency_probe.py --dataset pydoc-user [--data ../shared/data]
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from evireform import load_corpus  # noqa: E402
from evireform.embed import get_embedder  # noqa: E402
from evireform.evaluation import DATASETS, run_eval  # noqa: E402
from evireform.evaluation.metrics import per_question  # noqa: E402

METHODS = ["dense", "bm25", "hybrid", "base_dense_fill", "evireform", "evireform_no_own"]
#: the ranking the rules change: EviReform without the question's own search (the library's
#: own interleave, issue 85, is ``evireform`` itself)
PAPER = "evireform_no_own"


def reserved(evi, base, r):
    """``evi`` with its first ``r`` places given to ``base``'s top ``r`` (base order)."""
    head = [int(j) for j in list(base)[:r]]
    return head + [int(j) for j in evi if int(j) not in set(head)]


def interleave(a, b, n=10):
    """``a`` and ``b`` alternating from ``a``'s first, each passage once, to ``n``
    places; then the rest of ``a``."""
    out: list[int] = []
    ia = ib = 0
    while len(out) < n and (ia < len(a) or ib < len(b)):
        for src, which in ((a, "a"), (b, "b")):
            i = ia if which == "a" else ib
            while i < len(src) and int(src[i]) in out:
                i += 1
            if i < len(src) and len(out) < n:
                out.append(int(src[i]))
                i += 1
            if which == "a":
                ia = i
            else:
                ib = i
    return out + [int(j) for j in a if int(j) not in set(out)]


def placed(a, b, pat, n=10):
    """``a``'s and ``b``'s items placed by ``pat`` ("abaa": a's first, b's first, then a's),
    each once, ``a``'s after the pattern ends; to ``n`` places, then the rest of ``a``."""
    out: list[int] = []
    at = {"a": 0, "b": 0}
    for c in pat + "a" * n:
        if len(out) >= n:
            break
        src = a if c == "a" else b
        i = at[c]
        while i < len(src) and int(src[i]) in out:
            i += 1
        if i < len(src):
            out.append(int(src[i]))
            i += 1
        at[c] = i
    return out + [int(j) for j in a if int(j) not in set(out)]


def rrf(lists, k=60, n=100):
    score: dict[int, float] = {}
    for lst in lists:
        for r, j in enumerate(list(lst)[:n]):
            score[int(j)] = score.get(int(j), 0.0) + 1.0 / (k + r + 1)
    return sorted(score, key=lambda j: -score[j])


def library_searches(cf, questions, emb):
    """Per question, the library's ``hybrid`` ranking and ``maxsim`` (RRF of the index's
    BM25 and each passage's best proposition cosine), on the index ``eval`` uses."""
    from evireform.cache import cached_index
    from evireform.embed import encode_queries
    from evireform.strategies import Search
    idx, _, _ = cached_index(cf, emb, show_progress=False)
    hyb = Search(idx, emb, kind="hybrid")
    bm = Search(idx, emb, kind="bm25")
    E, own = np.asarray(idx.embeddings, np.float32), np.asarray(idx.owner)
    Q = encode_queries(emb, [q.question for q in questions])
    cen = np.zeros((idx.n_passages, E.shape[1]), np.float32)
    np.add.at(cen, own, E)  # each passage's propositions' mean direction
    cen /= np.maximum(np.linalg.norm(cen, axis=1, keepdims=True), 1e-12)
    lib, maxsim, centroid, mine = [], [], [], []
    pe = None if idx.passage_embeddings is None else np.asarray(idx.passage_embeddings)
    for qi, q in enumerate(questions):
        lib.append([int(p.index) for p in hyb.retrieve(q.question, 20).passages])
        best = np.full(idx.n_passages, -1.0, np.float32)
        np.maximum.at(best, own, E @ Q[qi])
        lex = [int(p.index) for p in bm.retrieve(q.question, 100).passages]
        maxsim.append(rrf([list(np.argsort(-best)[:100]), lex]))
        centroid.append(rrf([list(np.argsort(-(cen @ Q[qi]))[:100]), lex]))
        if pe is not None:  # the library's own search (issue 85): dense and BM25 passages
            cos = pe @ Q[qi]
            dense = [int(j) for j in np.argsort(-cos, kind="stable")[:100] if cos[j] > 0]
            mine.append(rrf([dense, lex]))
    return lib, maxsim, centroid, mine, idx.meta.get("extractor")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="pydoc-user")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    a = ap.parse_args(argv)
    qf, cf = (Path(a.data) / x for x in DATASETS[a.dataset])
    rep = run_eval(qf, cf, METHODS, embedder=get_embedder("minilm"), dataset=a.dataset,
                   show_progress=False, answer_recall=True)
    texts = [p.title + "\n" + p.text for p in load_corpus(cf)]
    two = [i for i, q in enumerate(rep.questions) if q.type.startswith("bridge")]
    one = [i for i in range(len(rep.questions)) if i not in set(two)]
    R = rep.rankings
    top = {m: [int(list(x)[0]) if len(x) else -1 for x in R[m]] for m in METHODS}
    rules = {
        "always": lambda i: True,
        "agree": lambda i: top["base_dense_fill"][i] in (top["dense"][i], top["bm25"][i]),
        "agree-both": lambda i: top["base_dense_fill"][i] == top["dense"][i] == top["bm25"][i],
    }
    rows = {m: R[m] for m in METHODS}
    fired = {}
    lib, maxsim, centroid, own, extractor = library_searches(cf, rep.questions, get_embedder("minilm"))
    for name, other in (("hybrid (passage embeddings)", R["hybrid"]),
                        ("library hybrid", lib), ("maxsim", maxsim),
                        ("centroid", centroid)):
        rows[f"{PAPER} interleaved with {name}"] = [
            interleave(list(e), list(o)) for e, o in zip(R[PAPER], other)]
    for pat in ("abab", "abaa", "aabab") if own else ():  # the own search's placements
        rows[f"{PAPER} with the own search placed {pat}"] = [
            placed(list(e), o, pat) for e, o in zip(R[PAPER], own)]
    for name, rule in rules.items():
        for r in (1, 2):
            hit = [rule(i) for i in range(len(rep.questions))]
            fired[f"{PAPER}, {name}, r={r}"] = sum(hit)
            rows[f"{PAPER}, {name}, r={r}"] = [
                reserved(e, b, r) if h else list(e)
                for e, b, h in zip(R[PAPER], R["base_dense_fill"], hit)]

    def a5(rk, sel):
        if not sel:
            return float("nan")
        return 100 * float(np.mean(per_question(rk, rep.questions, (5,), texts)["answer@5"][sel]))

    def r5(rk, sel):
        return 100 * float(np.mean(per_question(rk, rep.questions, (5,))["recall@5"][sel]))

    def c5(rk, sel):
        return 100 * float(np.mean(per_question(rk, rep.questions, (5,))["chain@5"][sel])) \
            if sel else float("nan")
    print(f"{a.dataset}: {len(rep.questions)} questions ({len(one)} single-hop, {len(two)} "
          f"two-hop), embedder {rep.embedder}, extractor {extractor}")
    print()
    print("| ranking | A@5 | single-hop A@5 | two-hop A@5 | R@5 | C@5 | two-hop C@5 | "
          "rule fired |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    everyone = list(range(len(rep.questions)))
    for name, rk in rows.items():
        print(f"| {name} | {a5(rk, everyone):.2f} | {a5(rk, one):.2f} | {a5(rk, two):.2f} | "
              f"{r5(rk, everyone):.2f} | {c5(rk, everyone):.2f} | {c5(rk, two):.2f} | "
              f"{fired.get(name, '–')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
