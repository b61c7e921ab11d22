"""LLM-free EviReform with and without capital letters: R@5 (Chain@5 for EviReform) of dense,
hipporag_ppr and EviReform with both LLM-free reformulators (``evireform_spans``: capitalised
name spans of the observed text, the default before graph bridges; ``evireform``: bridges from
the index's entities, the default) on HotpotQA and MuSiQue, cased and lower-cased, with the
extractor ``--extractor auto`` picks and with the heuristic one, and on HippoRAG's OpenIE graph
(read with the built-in extractors' title and name conventions, the default, and as plain
triples, ``--openie-plain``).

Usage: ``python scripts/case_table.py [--data ../shared/data] [-n N]``; prints a markdown
table (docs/results.md, "Text without capital letters", regenerates it through
scripts/update_readme.py).  Indexes come from the eval cache (built on first use).
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evireform.embed import get_embedder  # noqa: E402
from evireform.evaluation import DATASETS, run_eval  # noqa: E402

METHODS = ["dense", "hipporag_ppr", "evireform_spans", "evireform"]
OPENIE = "musique/musique_openie_gpt-3.5-turbo-1106.json"


def settings():
    """(dataset, label, run_eval keywords) per row."""
    for ds in ("hotpotqa", "musique"):
        yield ds, "cased", {}
        yield ds, "lower-cased", {"lowercase": True}
        yield ds, "lower-cased", {"lowercase": True, "extractor": "heuristic"}
        if ds == "musique":
            yield ds, "cased", {"openie": True}
            yield ds, "cased", {"openie": True, "openie_plain": True}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("-n", type=int, default=None, help="only the first N questions")
    args = ap.parse_args(argv)
    data = Path(args.data)
    emb = get_embedder("minilm")
    print("| data | text | extractor | dense | hipporag_ppr | EviReform, span bridges "
          "(before) | EviReform, graph bridges (default) |")
    print("|---|---|---|---:|---:|---:|---:|")
    for ds, label, kw in settings():
        qrel, crel = DATASETS[ds]
        extra = dict(kw)
        if extra.pop("openie", False):
            extra["openie_path"] = data / OPENIE
        rep = run_eval(data / qrel, data / crel, METHODS, embedder=emb, n=args.n,
                       show_progress=False, dataset=ds, **extra)
        m = rep.methods
        ex = ("openie, plain triples" if extra.get("openie_plain") else "openie") \
            if "openie_path" in extra else (
            f"{kw.get('extractor', 'auto')} ({rep.extractor})")

        def both(name):
            return f"{m[name]['recall@5']:.2f} / {m[name]['chain@5']:.2f}"
        print(f"| {ds} | {label} | {ex} | {m['dense']['recall@5']:.2f} | "
              f"{m['hipporag_ppr']['recall@5']:.2f} | {both('evireform_spans')} | "
              f"{both('evireform')} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
