"""Index growth: MuSiQue questions over the MuSiQue corpus while 2WikiMultiHopQA passages are
added as distractors in steps (paper Appendix A.7)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pathlib import Path

from ..corpus import load_corpus
from ..index import subset_index
from ..retriever import EviReform, EviReformConfig
from .analyses import growth_steps
from .data import load_questions
from .metrics import metrics

if TYPE_CHECKING:  # annotations only
    from ..embed import Embedder
    from ..types import StrPath


def index_growth(data: Path, embedder: Embedder, *, out_png=None, n_steps: int = 4, n=None,
                 show: bool = True, cache_dir: StrPath | None=None,
                 config: EviReformConfig | None = None) -> list[dict]:
    """Build (or reuse) one index over MuSiQue + every 2Wiki passage, then evaluate on
    subsets holding MuSiQue plus the first s distractors for each step s.  Prints a Markdown
    table and writes a plot when ``out_png`` is given."""
    import hashlib
    import json
    import tempfile

    from ..cache import cached_index, default_cache_dir
    mus = load_corpus(data / "musique/musique_corpus.json")
    wiki = load_corpus(data / "2wikimultihopqa/2wikimultihopqa_corpus.json")
    combined = [{"title": p.title, "text": p.text} for p in mus + wiki]
    blob = json.dumps(combined, ensure_ascii=False).encode()
    cdir = Path(cache_dir or default_cache_dir()) / "corpora"
    cdir.mkdir(parents=True, exist_ok=True)
    cfile = cdir / f"musique+2wiki-{hashlib.sha256(blob).hexdigest()[:12]}.json"
    if not cfile.exists():
        with tempfile.NamedTemporaryFile(dir=cdir, delete=False) as fh:
            fh.write(blob)
        Path(fh.name).replace(cfile)
    full, _, _ = cached_index(cfile, embedder, show_progress=show, cache_dir=cache_dir)
    qs = load_questions(data / "musique/musique.json", full.passages[: len(mus)])[:n]
    rows = []
    for s in growth_steps(len(wiki), n_steps):
        idx = subset_index(full, range(len(mus) + s)) if s < len(wiki) else full
        res = EviReform(idx, config or EviReformConfig(), embedder=embedder).retrieve_many(
            [q.question for q in qs], 20)
        m = metrics([[p.index for p in r.passages] for r in res], qs)
        rows.append({"distractors": s, "passages": idx.n_passages, **m})
    print("| passages | distractors | R@1 | R@5 | R@10 | R@20 |\n|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['passages']:,} | {r['distractors']:,} | {r['recall@1']:.2f} | "
              f"{r['recall@5']:.2f} | {r['recall@10']:.2f} | {r['recall@20']:.2f} |")
    if out_png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        for K in (1, 5, 10, 20):
            ax.plot([r["passages"] for r in rows], [r[f"recall@{K}"] for r in rows], marker="o",
                    label=f"R@{K}")
        ax.set_xlabel("passages in the index (MuSiQue + 2WikiMultiHopQA distractors)")
        ax.set_ylabel("recall (%)")
        ax.set_title(f"EviReform (LLM-free) on MuSiQue, {embedder.name}")
        ax.grid(alpha=0.3)
        ax.legend()
        Path(out_png).parent.mkdir(parents=True, exist_ok=True)
        fig.tight_layout()
        fig.savefig(out_png, dpi=110)
        print(f"wrote {out_png}")
    return rows
