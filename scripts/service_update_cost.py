"""What one small passage added through the service costs (issue 84: "<= 50 ms plus its
encoding"): a :class:`~evireform.service.RetrievalService` on a copy of the index, warmed,
then ``update`` of one new two-sentence passage ``--n`` times, each timed whole and its
encoding apart (:func:`evireform.bench.serve.service_update_cost`), with the question asked
right after each; ``--both`` runs the journal (the default) and the full save side by side.

    python scripts/service_update_cost.py INDEX_DIR [--n 5] [--no-journal | --both]
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evireform.bench.serve import service_update_cost  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("index_dir")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--no-journal", action="store_true",
                    help="every update saved in full (the service's journal off)")
    ap.add_argument("--both", action="store_true", help="the journal and the full save")
    a = ap.parse_args(argv)
    modes = [True, False] if a.both else [not a.no_journal]
    for journal in modes:
        r = service_update_cost(a.index_dir, a.n, journal)
        print(f"{r['passages']:,} passages, {r['propositions']:,} propositions "
              f"({r['embedder']}), {'journal' if journal else 'full save'}: "
              f"update p50 {r['update_p50_ms']:.1f} ms, of it beyond the encoding "
              f"{r['beyond_encoding_p50_ms']:.1f} ms (each: "
              f"{', '.join(f'{x:.1f}' for x in r['beyond_encoding_ms'])}; target 50); "
              f"the question right after p50 {r['question_after_p50_ms']:.1f} ms"
              + (f"; the journal's full save afterwards {r['compaction_ms']:.0f} ms"
                 if journal else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
