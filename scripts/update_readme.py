"""Regenerate the documentation's results from the commands that make them.

Each block between ``<!-- BEGIN name -->`` and ``<!-- END name -->`` in README.md or a page of
docs/ is replaced by the output of its command below, so every figure in those blocks comes
from a rerunnable command.  Usage: ``python scripts/update_readme.py [name ...]`` (default:
all blocks).
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EV = [sys.executable, "-m", "evireform"]
BLOCKS = {
    "eval-hotpotqa": EV + ["eval", "--dataset", "hotpotqa", "--methods", "all", "--markdown", "--quiet"],
    "eval-musique": EV + ["eval", "--dataset", "musique", "--methods", "all", "--markdown", "--quiet"],
    # the paper's analyses study its dense-only method (--no-lexical; issue 67)
    "ablation-hotpotqa": EV + ["analyze", "ablation", "--dataset", "hotpotqa", "--no-lexical", "--quiet"],
    "ablation-musique": EV + ["analyze", "ablation", "--dataset", "musique", "--no-lexical", "--quiet"],
    "coverage-hotpotqa": EV + ["analyze", "coverage", "--dataset", "hotpotqa", "--no-lexical", "--quiet"],
    "coverage-musique": EV + ["analyze", "coverage", "--dataset", "musique", "--no-lexical", "--quiet"],
    "types-hotpotqa": EV + ["analyze", "types", "--dataset", "hotpotqa", "--no-lexical", "--quiet"],
    "types-musique": EV + ["analyze", "types", "--dataset", "musique", "--no-lexical", "--quiet"],
    "sensitivity-hotpotqa": EV + ["analyze", "sensitivity", "--dataset", "hotpotqa", "--no-lexical", "--quiet"],
    "sensitivity-musique": EV + ["analyze", "sensitivity", "--dataset", "musique", "--no-lexical", "--quiet"],
    "growth": EV + ["analyze", "growth", "--png", "docs/index_growth.png", "--no-lexical",
                    "--quiet"],
}
# the full method with a strong LLM: its recorded replies replayed offline (shared/llm-replies)
REPLAY_METHODS = ("dense,bm25,dense_prop,hipporag_ppr,evireform,reform_only,prop_only,base,"
                  "residual_only,repeat_question")
BLOCKS["selector-study"] = EV + ["analyze", "selector", "--no-lexical", "--quiet"]
# the seeds' two related systems beside EviReform, with the evidence-graph metrics
BLOCKS["graphs-musique"] = EV + ["eval", "--dataset", "musique", "--methods",
                                 "dense,hipporag_ppr,evireform,bgr,bgr_union,hiq", "--graph-metrics",
                                 "--markdown", "--quiet"]
# why BGR's intersected graphs rarely have the gold structure: its two chains beside the gold
# graph (LLM-free, and with the recorded LLM replies on the 20 questions they cover)
BLOCKS["bgr-diagnosis"] = [sys.executable, "scripts/bgr_diagnosis.py"]
BLOCKS["bgr-diagnosis-llm"] = [sys.executable, "scripts/bgr_diagnosis.py", "-n", "20",
                               "--llm-replay", "../shared/llm-replies/hiq-bgr-musique20.jsonl"]
# Hi-Q's two rankings with its recorded replies (the 20 MuSiQue questions they cover), BGR beside
BLOCKS["hiq-ranking"] = EV + ["eval", "--dataset", "musique", "--methods",
                              "bgr,hiq,hiq_resolved_first", "-n", "20", "--reader",
                              "--llm-replay", "../shared/llm-replies/hiq-bgr-musique20.jsonl",
                              "--llm-replay", "../shared/llm-replies/hiq-rewrite-musique20.jsonl",
                              "--markdown", "--quiet"]
# the service beside in-process retrieval, both query encoders (about 5 minutes)
BLOCKS["serve"] = EV + ["bench", "--serve", "--json-only", "--json",
                        "benchmarks/results/serve-cpu.json"]
for _ds in ("hotpotqa", "musique"):
    BLOCKS[f"replay-{_ds}"] = EV + ["eval", "--dataset", _ds, "--methods", REPLAY_METHODS,
                                    "--llm-replay", f"../shared/llm-replies/{_ds}.jsonl",
                                    "--markdown", "--quiet"]

# text without capital letters: both LLM-free reformulators, cased and lower-cased, with the
# extractor auto picks and the heuristic one, and on the OpenIE graph (a summary table), then
# the lower-cased runs in full
BLOCKS["case-table"] = [sys.executable, "scripts/case_table.py"]
# the real-documents development set (issue 52): both extractors, EviReform's variants
BLOCKS["devset-manpages"] = [sys.executable, "scripts/devset_table.py"]
BLOCKS["devset-pydoc"] = [sys.executable, "scripts/devset_table.py", "--dataset", "pydoc"]
BLOCKS["devset-pydoc-user"] = [sys.executable, "scripts/devset_table.py", "--dataset",
                               "pydoc-user"]
BLOCKS["devset-readmes"] = [sys.executable, "scripts/devset_table.py", "--dataset", "readmes"]
BLOCKS["devset-readmes-plain"] = [sys.executable, "scripts/devset_table.py", "--dataset",
                                  "readmes-plain"]
BLOCKS["devset-nodejs"] = [sys.executable, "scripts/devset_table.py", "--dataset", "nodejs"]
BLOCKS["probe-nodejs"] = [sys.executable, "scripts/sufficiency_probe.py", "--dataset", "nodejs"]
BLOCKS["lexical-fusions"] = [sys.executable, "scripts/lexical_fusions.py"]
BLOCKS["lexical-fusions-llm"] = [sys.executable, "scripts/lexical_fusions.py", "--llm"]
BLOCKS["devset-rule"] = [sys.executable, "scripts/devset_table.py", "--rule-only",
                         "--dataset", "hotpotqa"]
BLOCKS["devset-rule-musique"] = [sys.executable, "scripts/devset_table.py", "--rule-only",
                                 "--dataset", "musique"]
for _ds in ("hotpotqa", "musique"):
    BLOCKS[f"case-{_ds}-lower"] = EV + [
        "eval", "--dataset", _ds, "--methods", "dense,hipporag_ppr,evireform_spans,evireform",
        "--lowercase", "--markdown", "--quiet"]
BLOCKS["bench-filter"] = EV + ["bench", "--only", "filter"]
# a retrieval's clock besides the encoder, on MuSiQue (a quiet machine)
BLOCKS["orchestration"] = [sys.executable, "scripts/orchestration_cost.py"]
# HippoRAG 2's retrieval (hipporag2) on its own OpenIE graph and on the heuristic graph, and
# MuSiQue with the other two corpora as distractors (9,002 passages)
_H2 = ["eval", "--dataset", "musique", "--methods", "dense,hipporag_ppr,hipporag2,evireform"]
BLOCKS["hipporag2-openie"] = EV + _H2 + [
    "--openie", "../shared/data/musique/musique_openie_gpt-3.5-turbo-1106.json", "--markdown",
    "--quiet"]
BLOCKS["hipporag2-heuristic"] = EV + _H2 + ["--markdown", "--quiet"]
BLOCKS["distractors-musique"] = EV + _H2 + [
    "--extra-corpus", "../shared/data/2wikimultihopqa/2wikimultihopqa_corpus.json",
    "--extra-corpus", "../shared/data/hotpotqa/hotpotqa_corpus.json", "--markdown", "--quiet"]
# the site's home page: the headline comparison and its recall@K figure
BLOCKS["glance-musique"] = EV + ["eval", "--dataset", "musique", "--methods",
                                 "dense,bm25,hipporag_ppr,evireform", "--plot",
                                 "docs/recall_musique.png", "--markdown", "--quiet"]
# the full CPU run, every case at full size (about 10 minutes with the 1M HNSW graph cached
# under ~/.cache/evireform/bench; a first build of it adds about 7), its JSON kept
BLOCKS["bench-full"] = EV + ["bench", "--json", "benchmarks/results/bench-cpu.json"]
# building an index beside its encoder (2,000 2Wiki passages; 100k synthetic ones), about
# 3 minutes on 2 cores: kept apart from the full run
BLOCKS["bench-build"] = EV + ["bench", "--only", "build_encoder", "--json",
                              "benchmarks/results/bench-build.json"]
# the performance targets beside the full run's ratios (after bench-full and bench-build)
BLOCKS["bench-targets"] = EV + ["bench", "--targets", "benchmarks/results/bench-cpu.json",
                                "--targets", "benchmarks/results/bench-build.json"]
# the same targets on an AVX2 machine, from a full run and a build run kept from there
# (`evireform bench --json benchmarks/results/bench-cpu-avx2.json` and `evireform bench
# --only build_encoder --json benchmarks/results/bench-build-avx2.json` on an AMD EPYC)
BLOCKS["bench-targets-avx2"] = EV + ["bench", "--targets",
                                     "benchmarks/results/bench-cpu-avx2.json",
                                     "--targets", "benchmarks/results/bench-build-avx2.json"]
# every case's ratio as a figure (quick sizes: about a minute)
BLOCKS["bench-quick-plot"] = EV + ["bench", "--quick", "--plot", "docs/bench_quick.png"]


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def main(names):
    texts = {p: p.read_text() for p in _pages()}
    for name in names or BLOCKS:
        begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
        page = next((p for p, t in texts.items() if begin in t), None)
        if page is None:
            print(f"skip {name}: no marker in README.md or docs/")
            continue
        print(f"running {name} ({page.relative_to(ROOT)}): {' '.join(BLOCKS[name][1:])}",
              flush=True)
        out = subprocess.run(BLOCKS[name], cwd=ROOT, capture_output=True, text=True, check=True)
        body = "\n".join(l for l in out.stdout.splitlines() if not l.startswith("wrote "))
        cmd = ("python " + " ".join(BLOCKS[name][1:]) if BLOCKS[name][1].endswith(".py")
               else "evireform " + " ".join(BLOCKS[name][3:]))
        if name.startswith("bench-") and not name.startswith("bench-targets"):  # a plain-text table
            body = f"```\n{body.strip()}\n```"
        a, rest = texts[page].split(begin, 1)
        _, b = rest.split(end, 1)
        texts[page] = f"{a}{begin}\n`{cmd}`\n\n{body.strip()}\n{end}{b}"
        page.write_text(texts[page])


if __name__ == "__main__":
    main(sys.argv[1:])
