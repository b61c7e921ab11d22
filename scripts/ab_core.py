"""The bench's retrieve_core/musique case at an earlier commit and at the working tree, side by
side in one process: a question's work outside its scans, and the scans, in alternating rounds.

Run: ``.venv/bin/python scripts/ab_core.py REV [--rounds 15] [--data ../shared/data]``
(about a minute).  A change that moves that work by a few microseconds is lost in the drift
between two runs of ``evireform bench`` (the same case measured 0.645x to 0.711x within an
hour on one machine); alternating the two versions round by round in one process puts them
under the same conditions.  ``REV`` is exported with ``git archive`` into a temporary folder
and imported as the package ``evireform_old`` (the package imports itself relatively); both
versions must rank every question alike, with the same score parts (checked first).  Prints
each version's median time outside the scans and in them (microseconds a question), and in
how many rounds the working tree was faster.
"""
from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def export(rev: str, into: Path) -> Path:
    """``rev``'s package as ``into/evireform_old`` (kernels/ inside it, as it ships); the
    folder to put on ``sys.path``."""
    tar = into / "src.tar"
    with open(tar, "wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev], stdout=f, check=True)
    src = into / "src"
    with tarfile.open(tar) as t:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+ (Debian 12's 3.11.2 lacks it)
            t.extractall(src, filter="data")
        else:  # a git archive of this repository: regular files and folders only
            t.extractall(src)
    pkg = into / "pkg" / "evireform_old"
    shutil.copytree(src / "evireform", pkg)
    shutil.rmtree(pkg / "kernels", ignore_errors=True)
    shutil.copytree(src / "kernels", pkg / "kernels")
    return into / "pkg"


def compare(runs: dict[str, tuple[Any, Callable[[], list], int]], rounds: int) -> dict:
    """``runs``: name -> (its bench.cases module, its core_questions run, questions).  The
    rankings and score parts must agree; then ``rounds`` rounds, each version's
    ``core_parts`` in turn (the order swapped every round).  Returns name -> medians
    (``rest_us``, ``scans_us``) and ``faster``: the rounds the last version was faster in."""
    def ranked(run):
        return [[(p.id, p.score, p.from_question, p.from_residual, p.from_propagation)
                 for p in r.passages] for r in run()]
    (a, (_, run_a, _)), (b, (_, run_b, _)) = runs.items()
    if ranked(run_a) != ranked(run_b):
        raise AssertionError(f"{a} and {b} rank the questions differently")
    seen: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    order = list(runs.items())
    for rnd in range(rounds):
        for name, (cases, run, n) in (order if rnd % 2 == 0 else order[::-1]):
            run()
            parts = cases.core_parts(run, n, 3)
            seen[name].append((sum(parts.values()) - parts.get("search", 0.0),
                               parts.get("search", 0.0)))
    out: dict[str, Any] = {}
    for name, rows in seen.items():
        r = np.array(rows) * 1e3
        out[name] = {"rest_us": float(np.median(r[:, 0])), "scans_us": float(np.median(r[:, 1]))}
    out["faster"] = int(sum(x[0] < y[0] for x, y in zip(seen[b], seen[a])))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev", help="the earlier commit (anything git archive takes)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, str(export(args.rev, Path(tmp))))
        runs = {}
        for name, pkg in ((args.rev, "evireform_old"), ("working tree", "evireform")):
            cases = importlib.import_module(f"{pkg}.bench.cases")
            inp = cases.Inputs(False, Path(args.data), lambda m: None)
            real = cases.musique_core_inputs(inp)
            if real is None:
                print(f"no MuSiQue data under {args.data}")
                return 1
            runs[name] = (cases, cases.core_questions(*real), len(real[1]))
        got = compare(runs, args.rounds)
    for name in runs:
        g = got[name]
        print(f"{name}: outside the scans {g['rest_us']:.1f} us, scans {g['scans_us']:.1f} us "
              f"a question (medians of {args.rounds} rounds)")
    print(f"the working tree was faster outside the scans in {got['faster']} of "
          f"{args.rounds} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
