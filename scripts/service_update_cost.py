"""What one small passage added through the service costs (issue 84: "<= 50 ms plus its
encoding"): a :class:`~evireform.service.RetrievalService` on a copy of the index, warmed,
then ``update`` of one new two-sentence passage ``--n`` times, each timed, beside the
encoding of that passage's propositions by the service's embedder (measured apart), and
where an update's time goes (the load under the lock, the add, the save, the new
generation's load), from the update's own log lines.

    python scripts/service_update_cost.py INDEX_DIR [--n 5]
"""
import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evireform.application import index_embedder  # noqa: E402
from evireform.index import PropositionIndex  # noqa: E402
from evireform.service import RetrievalService  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("index_dir")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--no-journal", action="store_true",
                    help="every update saved in full (the service's journal off)")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="evireform-svc-update-"))
    try:
        ix = work / "ix"
        shutil.copytree(a.index_dir, ix)
        idx = PropositionIndex.load(ix)
        emb = index_embedder(idx)
        texts = [f"The build farm {i} is run by Orla Quist{i}. It restarts at {i} am."
                 for i in range(a.n + 1)]
        t = time.perf_counter()
        for s in texts:
            emb.encode([s, s.split(". ")[0]], batch_size=64)
        enc = (time.perf_counter() - t) / len(texts) * 1e3
        svc = RetrievalService(ix, emb, journal=not a.no_journal)

        async def run():
            await svc.start()
            try:
                await svc.query("who runs the build farm?", 5)  # warm
                walls, asks = [], []
                for i, s in enumerate(texts):
                    t = time.perf_counter()
                    await svc.update([{"id": f"note{i}", "title": "Note", "text": s}])
                    walls.append((time.perf_counter() - t) * 1e3)
                    t = time.perf_counter()  # the question right after: the new generation's
                    await svc.query(f"who runs the build farm {i}?", 5)
                    asks.append((time.perf_counter() - t) * 1e3)
                return walls[1:], asks[1:]  # the first pays the update path's imports
            finally:
                await svc.stop()
        walls, asks = asyncio.run(run())
        print(f"{idx.n_passages:,} passages, {idx.n_props:,} propositions ({idx.embedder_name})")
        print(f"service update of one passage: p50 {statistics.median(walls):.1f} ms "
              f"(each: {', '.join(f'{w:.1f}' for w in walls)}); its encoding alone "
              f"{enc:.1f} ms; target 50 ms + encoding = {50 + enc:.1f} ms")
        print(f"the question right after each update: p50 {statistics.median(asks):.1f} ms "
              f"(each: {', '.join(f'{w:.1f}' for w in asks)})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
