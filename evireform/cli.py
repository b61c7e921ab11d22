"""The ``evireform`` command line."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _cmd_index(args) -> int:
    from .corpus import load_corpus
    from .embed import get_embedder
    from .index import PropositionIndex, arrays_equal, disk_bytes

    t0 = time.perf_counter()
    passages = load_corpus(args.corpus)
    embedder = get_embedder(args.embedder)
    hnsw = {"auto": None, "on": True, "off": False}[args.hnsw]
    show = not args.quiet and not args.json
    if args.extractor == "heuristic":
        idx = PropositionIndex.build(passages, embedder, batch_size=args.batch_size,
                                     show_progress=show, hnsw=hnsw)
    else:
        openie = Path(args.extractor)
        if not openie.is_file():
            raise SystemExit(f"evireform index: --extractor must be 'heuristic' or an OpenIE "
                             f"JSON file; {openie} does not exist")
        idx = PropositionIndex.from_openie(openie, passages, embedder,
                                           batch_size=args.batch_size, show_progress=show,
                                           hnsw=hnsw)
    out = idx.save(args.out_dir)
    reloaded = PropositionIndex.load(out)
    same = arrays_equal(idx, reloaded)
    stats = idx.stats()
    stats.update({"extractor": idx.meta.get("extractor"), "bytes_on_disk": disk_bytes(out),
                  "path": str(out), "reload_identical": same,
                  "seconds": round(time.perf_counter() - t0, 2)})
    if args.json:
        print(json.dumps(stats, indent=1))
    else:
        width = max(len(k) for k in stats)
        for k, v in stats.items():
            print(f"{k:<{width}}  {v:,}" if isinstance(v, int) and not isinstance(v, bool)
                  else f"{k:<{width}}  {v}")
    return 0 if same else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evireform", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    ix = sub.add_parser("index", help="build, save and verify an index over a corpus file")
    ix.add_argument("corpus", help="corpus JSON: a list of {title, text} or title -> sentences")
    ix.add_argument("out_dir", help="index directory to write (replaced atomically)")
    ix.add_argument("--extractor", default="heuristic",
                    help="'heuristic' (LLM-free sentence/entity extractor) or the path of a "
                         "HippoRAG OpenIE JSON file (one triple = one proposition)")
    ix.add_argument("--embedder", default="all-MiniLM-L6-v2",
                    help="'all-MiniLM-L6-v2' (default) or 'hashing-<dim>'")
    ix.add_argument("--batch-size", type=int, default=64, help="embedding batch size")
    ix.add_argument("--hnsw", choices=("auto", "on", "off"), default="auto",
                    help="build HNSW: auto = at or above kernels.config.EXACT_SEARCH_MAX")
    ix.add_argument("--json", action="store_true", help="print the statistics as JSON")
    ix.add_argument("--quiet", action="store_true", help="no progress bars")
    ix.set_defaults(func=_cmd_index)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"evireform {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
