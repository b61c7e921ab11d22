"""Fill docs/scaling.md's measured tables from the JSON the measuring commands wrote:

    evireform bench --scale --json benchmarks/results/scale-cpu.json
    python scripts/shard_recall.py --n 200000 --shards 1,4,8 --queries 200 \
        --json benchmarks/results/shard-recall.json
    python scripts/ray_build_time.py CORPUS --embedder minilm --json benchmarks/results/ray-build-2wiki.json
    python scripts/ray_build_time.py CORPUS --embedder hashing-384 \
        --json benchmarks/results/ray-build-2wiki-hashing.json
    python scripts/scaling_doc.py
"""
import json
from pathlib import Path

from evireform.bench.scale import scale_table

ROOT = Path(__file__).resolve().parents[1]
RES = ROOT / "benchmarks" / "results"


def shard_table(r: dict) -> str:
    k = r["k"]
    lines = [f"{r['n']:,} rows, {r['queries']} queries; unsharded exact search "
             f"{r['unsharded_exact_ms_per_query']:.2f} ms a query (batched)", "",
             f"| shards | exact = unsharded | exact ms/query | HNSW build | HNSW ms/query "
             f"| HNSW recall@{k} |", "|---:|---|---:|---:|---:|---:|"]
    for x in r["rows"]:
        lines.append(f"| {x['shards']} | {'yes' if x['exact_equal'] else 'NO'} "
                     f"| {x['exact_ms_per_query']:.2f} | {x['hnsw_build_s']:.0f} s "
                     f"| {x['hnsw_ms_per_query']:.2f} | {100 * x[f'hnsw_recall@{k}']:.2f}% |")
    return "\n".join(lines)


def ray_table(rows) -> str:
    lines = ["| embedder | local build | Ray build (2 workers) | Ray start | graph, texts equal "
             "| embeddings equal | max embedding difference |", "|---|---:|---:|---:|---|---|---:|"]
    for r in rows:
        lines.append(f"| {r['embedder']} | {r['local_s']:.1f} s | {r['ray_build_s']:.1f} s "
                     f"| {r['ray_init_s']:.1f} s | {'yes' if r['same_except_embeddings'] else 'NO'} "
                     f"| {'yes' if r['equal'] else 'no'} | {r['max_abs_embedding_diff']:.1e} |")
    return "\n".join(lines)


def put(text: str, name: str, body: str) -> str:
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    a, rest = text.split(begin, 1)
    _, b = rest.split(end, 1)
    return f"{a}{begin}\n{body.strip()}\n{end}{b}"


def main():
    doc = ROOT / "docs" / "scaling.md"
    text = doc.read_text()
    scale = json.loads((RES / "scale-cpu.json").read_text())["scale"]
    text = put(text, "scale", scale_table(scale))
    text = put(text, "shard-recall", shard_table(json.loads((RES / "shard-recall.json")
                                                            .read_text())))
    rows = [json.loads((RES / f).read_text()) for f in ("ray-build-2wiki.json",
                                                         "ray-build-2wiki-hashing.json")
            if (RES / f).exists()]
    text = put(text, "ray-build", ray_table(rows))
    doc.write_text(text)
    print(f"updated {doc}")


if __name__ == "__main__":
    main()
