"""``evireform bench --serve``: the service against in-process retrieval, side by side.

For each query encoder (ONNX Runtime and torch): in-process ``retrieve()`` latency and
``retrieve_many`` cost per question on the same questions, then ``evireform serve`` started
in a subprocess (time until ``/health`` answers) and driven by an asyncio httpx client at
each concurrency (every client sends its next question when the last one returns), with
p50/p95/p99 latency and throughput.  The client runs on the same machine as the service, so
on a small machine it takes CPU from it; the in-process figures are measured in this process
before the service starts.
"""
from typing import Any
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def _port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def _pct(lat) -> dict[str, Any]:
    a = np.asarray(lat) * 1e3
    return {"p50_ms": round(float(np.percentile(a, 50)), 2),
            "p95_ms": round(float(np.percentile(a, 95)), 2),
            "p99_ms": round(float(np.percentile(a, 99)), 2)}


def in_process(index_dir, questions, encoder: str, k: int = 10, batch: int = 64) -> dict[str, Any]:
    """p50 of ``retrieve()`` one question at a time, and ``retrieve_many`` ms per question in
    batches of ``batch``, with the index's own embedder on ``encoder``."""
    from ..application import index_embedder
    from ..index import PropositionIndex
    from ..retriever import EviReform
    idx = PropositionIndex.load(index_dir)
    emb = index_embedder(idx, encoder=encoder)
    r = EviReform(idx, embedder=emb)
    r.retrieve_many(questions[:8], k)  # warm: model load, kernels compiled
    lat = []
    for q in questions:
        t = time.perf_counter()
        r.retrieve(q, k)
        lat.append(time.perf_counter() - t)
    t = time.perf_counter()
    for lo in range(0, len(questions), batch):
        r.retrieve_many(questions[lo:lo + batch], k)
    many = (time.perf_counter() - t) / len(questions)
    enc = getattr(emb, "query_encoder", lambda: None)()
    return {"encoder": "onnx" if enc is not None else "torch", "retrieve": _pct(lat),
            "retrieve_many_ms_per_question": round(many * 1e3, 2),
            "throughput_retrieve_many_qps": round(1 / many, 1)}


async def _drive(url: str, questions, concurrency: int, per_client: int, k: int):
    import httpx
    lat, failed = [], 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as c:
        async def client(n):
            nonlocal failed
            for i in range(per_client):
                q = questions[(n * per_client + i) % len(questions)]
                t = time.perf_counter()
                r = await c.post("/query", json={"question": q, "k": k})
                lat.append(time.perf_counter() - t)
                failed += r.status_code != 200
        await asyncio.gather(*(client(n) for n in range(2)))  # warm the connections
        lat.clear()
        t0 = time.perf_counter()
        await asyncio.gather(*(client(n) for n in range(concurrency)))
        wall = time.perf_counter() - t0
    return lat, failed, wall


def service(index_dir, questions, encoder: str, concurrencies=(1, 8, 32), k: int = 10,
            requests: int = 256) -> dict[str, Any]:
    """Start ``evireform serve`` on ``encoder``; ready time, then each concurrency."""
    import httpx
    port = _port()
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "evireform", "serve", str(index_dir),
                             "--port", str(port), "--encoder", encoder],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"evireform serve failed: {proc.stderr.read().decode()}")
            time.sleep(0.02)
        ready = time.monotonic() - t0
        out = {"ready_s": round(ready, 2), "by_concurrency": {}}
        for c in concurrencies:
            per = max(2, requests // c)
            lat, failed, wall = asyncio.run(_drive(url, questions, c, per, k))
            out["by_concurrency"][str(c)] = {**_pct(lat), "requests": len(lat),
                                             "failed": failed,
                                             "throughput_qps": round(len(lat) / wall, 1)}
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def cold_query(index_dir, question: str, encoder: str, repeats: int = 3) -> float:
    """Median wall seconds of ``evireform query INDEX QUESTION`` as a fresh process."""
    walls = []
    for _ in range(repeats):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "evireform", "query", str(index_dir),
                            question, "--encoder", encoder], capture_output=True, text=True)
        walls.append(time.perf_counter() - t)
        if r.returncode != 0:
            raise RuntimeError(r.stderr)
    return round(float(np.median(walls)), 2)


def run(index_dir, questions_file, *, n: int = 200, encoders=("onnx", "torch"),
        concurrencies=(1, 8, 32), log=print) -> dict[str, Any]:
    qs = [q["question"] for q in json.loads(Path(questions_file).read_text())][:n]
    report = {"index": str(index_dir), "questions": len(qs), "cpus": os.cpu_count(),
              "encoders": {}}
    for enc in encoders:
        log(f"[{enc}] in-process")
        ip = in_process(index_dir, qs, enc)
        log(f"[{enc}] service")
        sv = service(index_dir, qs, enc, concurrencies)
        log(f"[{enc}] cold query")
        report["encoders"][enc] = {"in_process": ip, "service": sv,
                                   "cold_query_s": cold_query(index_dir, qs[0], enc)}
    return report


def table(report) -> str:
    rows = ["| encoder | path | concurrency | p50 ms | p95 ms | p99 ms | questions/s |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for enc, r in report["encoders"].items():
        ip = r["in_process"]
        rows.append(f"| {enc} | in-process retrieve() | 1 | {ip['retrieve']['p50_ms']} | "
                    f"{ip['retrieve']['p95_ms']} | {ip['retrieve']['p99_ms']} | "
                    f"{round(1e3 / ip['retrieve']['p50_ms'], 1)} |")
        rows.append(f"| {enc} | in-process retrieve_many (64) | - | "
                    f"{ip['retrieve_many_ms_per_question']} / question | | | "
                    f"{ip['throughput_retrieve_many_qps']} |")
        for c, s in r["service"]["by_concurrency"].items():
            rows.append(f"| {enc} | service | {c} | {s['p50_ms']} | {s['p95_ms']} | "
                        f"{s['p99_ms']} | {s['throughput_qps']} |")
    lines = ["\n".join(rows), ""]
    for enc, r in report["encoders"].items():
        ip, sv = r["in_process"], r["service"]
        c1, c32 = sv["by_concurrency"].get("1"), sv["by_concurrency"].get("32")
        ratio1 = c1["p50_ms"] / ip["retrieve"]["p50_ms"] if c1 else float("nan")
        ratio32 = c32["throughput_qps"] / ip["throughput_retrieve_many_qps"] if c32 \
            else float("nan")
        fails = sum(s["failed"] for s in sv["by_concurrency"].values())
        lines.append(f"{enc}: ready {sv['ready_s']} s after start; service p50 at "
                     f"concurrency 1 = {ratio1:.2f}x in-process retrieve(); throughput at 32 "
                     f"= {ratio32:.2f}x in-process retrieve_many; failed requests {fails}; "
                     f"cold `evireform query` {r['cold_query_s']} s")
    return "\n".join(lines)


class _TimedEmbedder:
    """An embedder that adds the seconds its ``encode`` takes to ``spent``."""

    def __init__(self, inner: Any):
        self.inner, self.spent = inner, 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def encode(self, *args: Any, **kw: Any):
        t = time.perf_counter()
        try:
            return self.inner.encode(*args, **kw)
        finally:
            self.spent += time.perf_counter() - t


def service_update_cost(index_dir, n: int = 5, journal: bool = True,
                        embedder: Any = None, compact_after: float = 3600.0) -> dict[str, Any]:
    """What one small passage added through a warmed
    :class:`~evireform.service.RetrievalService` costs (issue 84: "<= 50 ms plus its
    encoding"), on a copy of ``index_dir``: ``n`` updates of one new two-sentence passage
    each (after one that pays the update path's imports), each timed whole and its
    encoding apart (the service's embedder timed in place), and the question asked right
    after each (the new generation's first).  ``journal``: the service's journal (False:
    every update saved in full); its full save (the compaction, off the updates' path
    unless one arrives while it runs) is timed once after them (``compaction_ms``)."""
    import shutil
    import tempfile
    from ..application import index_embedder
    from ..index import PropositionIndex
    from ..service import RetrievalService
    work = Path(tempfile.mkdtemp(prefix="evireform-svc-update-"))
    try:
        ix = work / "ix"
        shutil.copytree(index_dir, ix)
        idx = PropositionIndex.load(ix)
        emb = _TimedEmbedder(embedder or index_embedder(idx))
        svc = RetrievalService(ix, emb, journal=journal, compact_after=compact_after)
        walls, encs, asks, compaction = [], [], [], []

        async def go():
            await svc.start()
            try:
                await svc.query("who runs the build farm?", 5)  # warm
                for i in range(n + 1):
                    s = f"The build farm {i} is run by Orla Quist{i}. It restarts at {i} am."
                    emb.spent = 0.0
                    t = time.perf_counter()
                    await svc.update([{"id": f"note{i}", "title": "Note", "text": s}])
                    walls.append(time.perf_counter() - t)
                    encs.append(emb.spent)
                    t = time.perf_counter()
                    await svc.query(f"who runs the build farm {i}?", 5)
                    asks.append(time.perf_counter() - t)
                t = time.perf_counter()
                svc._compact_sync()
                compaction.append(time.perf_counter() - t)
            finally:
                await svc.stop()
        asyncio.run(go())
        w, e, q = (np.asarray(x[1:]) * 1e3 for x in (walls, encs, asks))
        after = PropositionIndex.load(ix)
        return {"passages": idx.n_passages, "propositions": idx.n_props,
                "all_kept": after.n_passages == idx.n_passages + n + 1,
                "embedder": idx.embedder_name, "journal": journal,
                "update_ms": [round(float(x), 2) for x in w],
                "encoding_ms": [round(float(x), 2) for x in e],
                "beyond_encoding_ms": [round(float(x), 2) for x in w - e],
                "question_after_ms": [round(float(x), 2) for x in q],
                "update_p50_ms": float(np.median(w)),
                "beyond_encoding_p50_ms": float(np.median(w - e)),
                "question_after_p50_ms": float(np.median(q)),
                "compaction_ms": round(compaction[0] * 1e3, 1) if journal else None}
    finally:
        shutil.rmtree(work, ignore_errors=True)
