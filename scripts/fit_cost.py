"""What an update's extractor fit costs as the namespace grows (issue 69): the fitted
extractors learn a namespace's statistics again on every add; prose-v2 and phrases-v3 read
at most ``evireform.extract.FIT_SAMPLE`` of its passages (those whose ids hash lowest),
prose-v1 and phrases-v2 all of them.

    python scripts/fit_cost.py [--sizes 10000,100000]

The passages are the manual-page development set's, repeated under new ids to each size;
each line is one ``fit(old + new, new=new)`` with five new passages, in seconds (this
machine, one process, one thread); the "carried counts" lines are what an update of an
index that carries its extractor's counts does instead (issue 84): the counts read from
their JSON, restored, and grown by the five passages (``restore`` + ``grow``).  Prints
Markdown."""
import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evireform import load_corpus  # noqa: E402
from evireform.extract import FIT_SAMPLE, PhraseExtractor, ProseExtractor  # noqa: E402
from evireform.strings import Concat  # noqa: E402
from evireform.types import Passage  # noqa: E402

KINDS = [("prose-v1 (every passage)", lambda: ProseExtractor(version=1)),
         (f"prose-v2 (at most {FIT_SAMPLE:,})", lambda: ProseExtractor()),
         ("phrases-v2 (every passage)", lambda: PhraseExtractor(fit_sample=None)),
         (f"phrases-v3 (at most {FIT_SAMPLE:,})", lambda: PhraseExtractor(words_only=False))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--sampled-only", action="store_true",
                    help="only the extractors that learn from a bounded sample")
    a = ap.parse_args(argv)
    kinds = [k for k in KINDS if not (a.sampled_only and "every passage" in k[0])]
    base = list(load_corpus(ROOT / "evireform/evaluation/devsets/manpages/corpus.json"))
    sizes = [int(x) for x in a.sizes.split(",")]
    print("| extractor | " + " | ".join(f"{n:,} passages" for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    carried = [("prose-v2, carried counts", lambda: ProseExtractor()),
               ("phrases-v4, carried counts", lambda: PhraseExtractor())]
    cells: dict[str, list[str]] = {name: [] for name, _ in kinds + carried}
    for n in sizes:
        old = [Passage(id=f"p{i}", title=base[i % len(base)].title,
                       text=base[i % len(base)].text) for i in range(n)]
        new = [Passage(id=f"n{i}", title=p.title, text=p.text) for i, p in enumerate(base[:5])]
        for name, make in kinds:
            t = time.perf_counter()
            make().fit(Concat(old, new), new=new)
            cells[name].append(f"{time.perf_counter() - t:.2f} s")
        for name, make in carried:
            saved = json.dumps(make().fit(old).counts())  # what the index carries
            t = time.perf_counter()
            ext = make()
            assert ext.restore(json.loads(saved))
            again = ext.grow(Concat(old, new), new)
            cells[name].append(f"{time.perf_counter() - t:.2f} s"
                               + (" (fitted again)" if again else ""))
    for name, row in cells.items():
        print(f"| {name} | " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
