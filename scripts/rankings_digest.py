"""A digest of EviReform's rankings, to show that a change moved none of them: for the first
N questions of MuSiQue and HotpotQA, under the default config, two rounds and no propagation,
through ``retrieve_many`` and (the first 15) ``retrieve``, every ranked passage's position and
the bits of its score and of its three parts, and the residual queries.  Run it at two
commits (the same data, embedder and machine) and compare the printed digests.  ``--more``
adds the other modes (dense fill, residual only, the repeated question, the evidence rule,
a filter) in a digest of their own (``more:``; ``all:`` stays the default set's).
``ranks:`` digests the passages' order and the residual queries alone (no score bits), of
every run: ``--engine numpy`` runs the device engine's array code on numpy (what a one-shot
``evireform query`` on a small index runs, make_engine's ``one_shot``), whose scores may
differ from the CPU kernels' in the last bits; its ``ranks:`` must equal the CPU's.

    python scripts/rankings_digest.py [--data ../shared/data] [-n 100] [--more] [--engine numpy]
"""
import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


BASE = ("default", "rounds=2", "propagation=False")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--more", action="store_true", help="also the other modes (own digest)")
    ap.add_argument("--engine", choices=("cpu", "numpy"), default="cpu",
                    help="the CPU kernels, or the device engine's array code on numpy")
    args = ap.parse_args(argv)
    from evireform import EviReform, EviReformConfig
    from evireform.cache import cached_index
    from evireform.embed import get_embedder
    data = Path(args.data)
    emb = get_embedder("minilm")
    total, more, ranks = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
    for ds in ("musique", "hotpotqa"):
        idx, _, _ = cached_index(data / ds / f"{ds}_corpus.json", emb, show_progress=False)
        qs = [q["question"] for q in json.loads((data / ds / f"{ds}.json").read_text())]
        qs = qs[:args.n]
        runs = [("default", EviReformConfig(), None), ("rounds=2", EviReformConfig(rounds=2), None),
                ("propagation=False", EviReformConfig(propagation=False), None)]
        if args.more:
            half = [p.id for p in idx.passages[::2]]
            runs += [("fill=dense", EviReformConfig(fill="dense"), None),
                     ("residual_only", EviReformConfig(mode="residual_only"), None),
                     ("repeat_question", EviReformConfig(mode="repeat_question"), None),
                     ("beta_rule=evidence", EviReformConfig(beta_rule="evidence"), None),
                     ("filter=half", EviReformConfig(), half)]
        for name, cfg, flt in runs:
            if args.engine == "numpy":
                from evireform.engine import to_device
                r = EviReform(idx, cfg, embedder=emb, engine=to_device(idx, "numpy"))
            else:
                r = EviReform(idx, cfg, embedder=emb)
            for how, res in (("retrieve_many", r.retrieve_many(qs, 20, filter=flt)),
                             ("retrieve", [r.retrieve(q, 20, filter=flt) for q in qs[:15]])):
                h = hashlib.sha256()
                for x in res:
                    for p in x.passages:
                        bits = np.array([p.score, p.from_question, p.from_residual,
                                         p.from_propagation], np.float64).view(np.int64)
                        h.update(f"{p.index}:{bits.tolist()};".encode())
                        ranks.update(f"{p.index};".encode())
                    h.update(("|".join(x.trace.residual_queries) + "\n").encode())
                    ranks.update(("|".join(x.trace.residual_queries) + "\n").encode())
                (more if flt is not None or name not in BASE else total).update(h.digest())
                print(f"{ds} {name} {how}: {h.hexdigest()[:16]}")
    print(f"all: {total.hexdigest()[:16]}")
    if args.more:
        print(f"more: {more.hexdigest()[:16]}")
    print(f"ranks: {ranks.hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
