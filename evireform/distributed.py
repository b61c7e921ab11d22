"""Index builds on Ray Data and proposition search over shards in Ray actors (extra ``ray``).

``pip install 'evireform[ray]'``.  The build runs the batch steps of :mod:`evireform.build`
in a Ray Data pipeline::

    read passages -> map_batches(extract)                  (tasks, CPUs)
                  -> map_batches(_EmbedWriter)             (an actor pool; num_gpus per actor)
                  -> content-addressed shards on disk      (props-<sha256>.npz, one per batch)
    driver: read the shards -> PropositionIndex.from_batches -> save

Each shard is named by the SHA-256 of its rows and embeddings, written atomically, and read
back without pickle.  The reduce orders rows by (passage position, proposition position), so
the Ray build equals the local build array for array whatever order the batches finish in
(tested on MuSiQue with the hashing embedder).  On a multi-node cluster ``shard_dir`` must be
a filesystem every node and the driver can read (NFS, a mounted bucket).

LLM extraction runs through the same extract step: pass ``extractor=LLMExtractorFactory(...)``
(or ``evireform index ... --ray --extractor llm``); every worker builds its own client with
its own reply cache (``<cache>.worker-<pid>``), and ``evireform llm-cache export/import``
merges them afterwards.

Sharded search: :class:`RayShardedSearcher` keeps each shard (see :mod:`evireform.engine.shards`) in
a Ray actor; the retriever takes it as ``EviReform(index, searcher=...)``.
"""
from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

import hashlib
import json
import logging
import os
import tempfile
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ._checks import positive_int
from ._checks import metadata_json
from .build import embed_batch, extract_batch
from .corpus import as_passages, load_corpus
from .embed import embedder_from_spec, spec_of
from .extract import make_extractor
from .llm import LLMClient, LLMExtractor, extractor_name
from .engine.hnsw import check_queries, merge_topk
from .engine.shards import Shard, load_shard, read_shard_manifest, shard_bounds
from .store import check_target, load_embeddings

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from .embed import Embedder
    from .extract import Extractor
    from .index import PropositionIndex
    from .types import StrPath

__all__ = ["build_ray", "build_index_ray", "LLMExtractorFactory", "RayShardedSearcher",
           "read_shard", "write_shard", "ensure_ray"]


def _ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("the Ray build and Ray sharded search need Ray Data: "
                          "pip install 'evireform[ray]'") from e
    return ray


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect to Ray (``address='auto'`` for a running cluster; None starts a local
    instance with ``num_cpus``) unless already connected; True when this call started it."""
    ray = _ray()
    if ray.is_initialized():
        return False
    kw = dict(include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
              logging_level=logging.WARNING)
    if address:
        ray.init(address=address, **kw)
    else:
        ray.init(num_cpus=num_cpus, **kw)
    return True


# --------------------------------------------------------------------------- shards on disk
def _digest(rows: dict[str, Any]) -> str:
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(rows["pos"], np.int64).tobytes())
    h.update(np.ascontiguousarray(rows["ord"], np.int64).tobytes())
    h.update(json.dumps([list(map(str, rows["text"])), list(map(str, rows["entities"]))],
                        ensure_ascii=False).encode())
    h.update(np.ascontiguousarray(rows["embedding"], np.float32).tobytes())
    return h.hexdigest()


def write_shard(rows: dict[str, Any], shard_dir: StrPath) -> str:
    """Write an embedded proposition batch as ``props-<sha256>.npz`` (atomic; an existing
    shard of the same name holds the same rows and is kept); returns the file name."""
    name = f"props-{_digest(rows)}.npz"
    path = Path(shard_dir) / name
    if path.exists():
        return name
    strings = json.dumps({"text": list(map(str, rows["text"])),
                          "entities": list(map(str, rows["entities"]))}, ensure_ascii=False)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=shard_dir)
    os.close(fd)
    try:
        np.savez(tmp, pos=np.asarray(rows["pos"], np.int64),
                 ord=np.asarray(rows["ord"], np.int64),
                 embedding=np.asarray(rows["embedding"], np.float32),
                 strings=np.frombuffer(strings.encode(), np.uint8))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return name


def read_shard(path: StrPath) -> dict[str, Any]:
    """Read a shard written by :func:`write_shard`; its name is checked against its content."""
    path = Path(path)
    with np.load(path, allow_pickle=False) as z:
        strings = json.loads(z["strings"].tobytes().decode())
        rows = {"pos": z["pos"], "ord": z["ord"], "text": strings["text"],
                "entities": strings["entities"], "embedding": z["embedding"]}
    if path.name != f"props-{_digest(rows)}.npz":
        raise ValueError(f"shard {path} does not hold the rows its name says (corrupt or "
                         "edited); delete it and build again")
    return rows


# --------------------------------------------------------------------------- the steps as Ray callables
@dataclass
class LLMExtractorFactory:
    """Builds an :class:`~evireform.llm.LLMExtractor` inside each Ray worker, with the
    worker's own reply cache ``<cache_path>.worker-<pid>`` (merge them with
    ``evireform llm-cache export/import``)."""

    config: object  # evireform.llm.LLMConfig
    max_workers: int = 4

    @property
    def name(self) -> str:
        """The extractor's name, without building a client."""
        return extractor_name(self.config.model)

    def __call__(self):
        cfg = self.config
        if getattr(cfg, "cache_path", None):
            cfg = replace(cfg, cache_path=f"{cfg.cache_path}.worker-{os.getpid()}")
        return LLMExtractor(LLMClient(cfg), max_workers=self.max_workers)


_WORKER_EXTRACTORS: dict[str, Any] = {}  # one extractor per factory in each worker process


def _check_extractor(extractor: Extractor) -> str:
    """The extractor's name; ``TypeError`` unless it is an Extractor or a factory."""
    if not callable(getattr(extractor, "extract_many", None)) and not callable(extractor):
        raise TypeError("extractor must be an Extractor or a zero-argument factory of one")
    return getattr(extractor, "name", None) or extractor().name


def _make_extractor(extractor: Extractor):
    """In a worker: the extractor itself, or the one this process built from the factory."""
    if callable(getattr(extractor, "extract_many", None)):
        return extractor
    key = repr(extractor)
    if key not in _WORKER_EXTRACTORS:
        _WORKER_EXTRACTORS[key] = extractor()
    return _WORKER_EXTRACTORS[key]


def _extract(batch: dict[str, Any], extractor: Extractor) -> dict[str, Any]:
    return extract_batch(batch, _make_extractor(extractor))


class _EmbedWriter:
    def __init__(self, embedder_spec, shard_dir: str, batch_size: int, device: str | None) -> None:
        self.embedder = embedder_from_spec(embedder_spec, device=device, allow_remote=True)
        self.shard_dir, self.batch_size = shard_dir, batch_size

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        rows = embed_batch(batch, self.embedder, batch_size=self.batch_size)
        n = len(rows["pos"])
        name = write_shard(rows, self.shard_dir) if n else ""
        return {"shard": [name], "rows": np.asarray([n], np.int64)}


# --------------------------------------------------------------------------- the build
def build_ray(passages: Sequence[Any], embedder: Embedder, *, extractor: Extractor | None=None, passages_per_batch: int = 256,
              embed_batch_size: int = 64, concurrency: int = 2, num_gpus: float = 0,
              shard_dir: StrPath | None=None, hnsw: bool | None = None, ray_address: str | None = None,
              num_cpus: int | None = None, show_progress: bool = True):
    """Build a :class:`~evireform.index.PropositionIndex` with a Ray Data pipeline.

    ``embedder`` is an embedder or its spec (``"minilm"``, ``"hashing-256"``, a
    :func:`~evireform.embed.spec_of` dict); workers rebuild it from the spec (on ``cuda``
    when ``num_gpus > 0``).  ``extractor``: an Extractor (fitted to the corpus here when it
    learns from it, then pickled to the workers), a zero-argument factory (e.g.
    :class:`LLMExtractorFactory`), an LLM-free extractor's name, or ``"auto"`` / None (the
    default: chosen for the corpus's letter case, as :meth:`PropositionIndex.build` does).
    ``concurrency`` embedding actors, each with ``num_gpus`` GPUs; a local Ray instance
    started here gets ``num_cpus`` logical CPUs (default: the machine's, at least
    ``concurrency + 1`` so that extraction tasks run beside the actors).  Shards go to
    ``shard_dir`` (default: a temporary directory, removed afterwards; on a cluster give a
    shared path).  Equal to :meth:`PropositionIndex.build` for the same inputs.
    """
    ray = _ray()
    passages = as_passages(passages)
    if not passages:
        raise ValueError("passages is empty: an index needs at least one passage")
    spec = embedder if isinstance(embedder, (str, dict)) else spec_of(embedder)
    # validates the spec and gives name/dim on the driver; the caller named this embedder
    local = embedder_from_spec(spec, allow_remote=True)
    for name, v in (("passages_per_batch", passages_per_batch),
                    ("embed_batch_size", embed_batch_size), ("concurrency", concurrency)):
        positive_int(v, name)
    if extractor is None or isinstance(extractor, str):  # "auto" measures the corpus
        extractor = make_extractor(extractor or "auto", passages=passages)
    choice = getattr(extractor, "choice", None)
    fit = getattr(extractor, "fit", None)
    if callable(fit):  # corpus statistics (PhraseExtractor) on the driver, then pickled
        fit(passages)
    ext_name = _check_extractor(extractor)
    cpus = os.cpu_count() or 1
    if ray_address is None and num_cpus is None and not num_gpus and concurrency > cpus:
        warnings.warn(f"{concurrency} embedding actors on a machine with {cpus} CPUs: capped "
                      f"at {cpus} (each actor holds its own model)", stacklevel=2)
        concurrency = cpus
    if num_cpus is None:  # a local instance: room for every actor plus extraction tasks
        num_cpus = max(cpus, concurrency + 1)
    started = ensure_ray(ray_address, num_cpus)
    total = int(ray.cluster_resources().get("CPU", 0))
    if not num_gpus and total and concurrency > total:
        warnings.warn(f"{concurrency} embedding actors on a Ray cluster with {total} CPUs: "
                      f"capped at {total}", stacklevel=2)
        concurrency = total
    have = ray.cluster_resources().get("GPU", 0)
    if num_gpus and have < num_gpus * concurrency:
        if started:
            ray.shutdown()
        raise ValueError(f"num_gpus={num_gpus} for each of {concurrency} embedding actors needs "
                         f"{num_gpus * concurrency:g} GPUs; the Ray cluster has {have:g} (Ray "
                         "would wait for them forever)")
    tmp = None
    if shard_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="evireform-shards-")
        shard_dir = tmp.name
    Path(shard_dir).mkdir(parents=True, exist_ok=True)
    ctx = ray.data.DataContext.get_current()
    bars = ctx.enable_progress_bars
    ctx.enable_progress_bars = bool(show_progress)
    try:
        items = [{"pos": i, "id": p.id, "title": p.title, "text": p.text,
                  "metadata": metadata_json(p.metadata)} for i, p in enumerate(passages)]
        n_blocks = max(1, min(len(items), -(-len(items) // passages_per_batch)))
        ds = ray.data.from_items(items, override_num_blocks=n_blocks)
        ds = ds.map_batches(_extract, fn_kwargs={"extractor": extractor},
                            batch_size=passages_per_batch, batch_format="numpy")
        ds = ds.map_batches(_EmbedWriter,
                            fn_constructor_kwargs={
                                "embedder_spec": spec, "shard_dir": str(shard_dir),
                                "batch_size": embed_batch_size,
                                "device": "cuda" if num_gpus else None},
                            batch_size=None, batch_format="numpy",
                            compute=ray.data.ActorPoolStrategy(size=concurrency),
                            num_gpus=num_gpus or None)
        out = ds.take_all()
        names = sorted({r["shard"] for r in out if r["shard"]})
        batches = [read_shard(Path(shard_dir) / n) for n in names]
        if sum(len(b["pos"]) for b in batches) != sum(int(r["rows"]) for r in out):
            raise RuntimeError("the shards hold a different number of rows than the pipeline "
                               "produced; a worker failed midway - build again")
        from .index import PropositionIndex, wants_passage_vectors
        idx = PropositionIndex.from_batches(
            passages, batches, local.name, int(local.dim), hnsw=hnsw,
            meta={"extractor": ext_name, "embedder_spec": spec_of(local),
                  **({"extractor_choice": dict(choice)} if choice else {})})
        if wants_passage_vectors(ext_name):  # as build() does; on the driver
            idx = idx.with_passage_vectors(local, batch_size=embed_batch_size,
                                           show_progress=show_progress)
        return idx
    finally:
        ctx.enable_progress_bars = bars
        if tmp is not None:
            tmp.cleanup()
        if started:
            ray.shutdown()


def build_index_ray(corpus, embedder: Embedder, out_dir: StrPath, *, overwrite: bool = False, **kw: Any):
    """:func:`build_ray` over a corpus file (or passages), saved to ``out_dir`` (checked
    before any work, as ``evireform index`` does); returns ``(path, index, seconds)``."""
    t0 = time.perf_counter()
    check_target(out_dir, overwrite=overwrite)
    passages = load_corpus(corpus) if isinstance(corpus, (str, os.PathLike)) else corpus
    idx = build_ray(passages, embedder, **kw)
    path = idx.save(out_dir, overwrite=overwrite)
    return path, idx, time.perf_counter() - t0


# --------------------------------------------------------------------------- sharded search
class _ShardActor:
    def __init__(self, embeddings: ArrayLike, offset: int, hnsw: bool, hnsw_kw: dict[str, Any],
                 saved: tuple[Any, ...] | None = None) -> None:
        if saved is not None:  # (shard dir, manifest entry, index dir): read on this node
            from .store import load_embeddings
            shard_dir, entry, index_dir = saved
            self.shard = load_shard(shard_dir, entry, load_embeddings(index_dir))
        else:
            self.shard = Shard.build(np.asarray(embeddings), offset, hnsw, **hnsw_kw)

    def search_batch(self, Q: ArrayLike, k, rows: Any=None):
        return self.shard.search_batch(Q, k, rows=rows)


class RayShardedSearcher:
    """Proposition search over shards held by Ray actors (one shard per actor), merged
    exactly on the caller (:func:`evireform.engine.shards.merge_topk`).  Same contract as
    :meth:`PropositionIndex.search_batch`; pass it as ``EviReform(index, searcher=...)``.

    ``num_cpus`` per actor (default 1; 0 lets more shards than CPUs share a machine).  Call
    :meth:`close` (or use it as a context manager) to free the actors.
    """

    actors: list[Any]
    dim: int
    n_props: int

    def __init__(self, embeddings: ArrayLike, n_shards: int, *, hnsw: bool = False,
                 num_cpus: float = 1, **hnsw_kw: Any) -> None:
        ray = _ray()
        ensure_ray()
        self._ray = ray
        emb = np.asarray(embeddings)
        self.n_props, self.dim = int(emb.shape[0]), int(emb.shape[1])
        Actor = ray.remote(num_cpus=num_cpus)(_ShardActor)
        self.actors = [Actor.remote(ray.put(np.ascontiguousarray(emb[lo:hi])), lo, hnsw,
                                    hnsw_kw)
                       for lo, hi in shard_bounds(self.n_props, n_shards)]

    @classmethod
    def from_index(cls, index: PropositionIndex, n_shards: int, **kw: Any) -> "RayShardedSearcher":
        return cls(index.embeddings, n_shards, **kw)

    @classmethod
    def load(cls, shard_dir: StrPath, index_dir: StrPath, *, num_cpus: float = 1) -> "RayShardedSearcher":
        """Actors that each read their own shard from disk: the index's
        ``embeddings.npy`` memory-mapped and the shard's saved HNSW graph
        (:meth:`ShardedSearcher.save`), checked first.  On a cluster both directories must
        be on a filesystem every node reads; nothing large passes through the driver."""
        ray = _ray()
        ensure_ray()
        emb = load_embeddings(index_dir)
        entries = read_shard_manifest(shard_dir, int(emb.shape[0]), int(emb.shape[1]))
        self = cls.__new__(cls)
        self._ray, self.n_props, self.dim = ray, int(emb.shape[0]), int(emb.shape[1])
        Actor = ray.remote(num_cpus=num_cpus)(_ShardActor)
        self.actors = [Actor.remote(None, e["lo"], False, {},
                                    (str(shard_dir), e, str(index_dir))) for e in entries]
        return self

    def search_batch(self, Q: ArrayLike, k: int, *, rows: Any=None):
        """As :meth:`evireform.engine.shards.ShardedSearcher.search_batch` (``rows``: only those
        candidates, sent to every actor once per call)."""
        Q, k = check_queries(Q, k, self.dim)
        k = min(k, self.n_props if rows is None else len(rows))
        if k == 0:
            return np.full((len(Q), 0), -1, np.int64), np.zeros((len(Q), 0), np.float32)
        ref = self._ray.put(Q)
        rref = None if rows is None else self._ray.put(np.asarray(rows, np.int64))
        parts = self._ray.get([a.search_batch.remote(ref, k, rref) for a in self.actors])
        return merge_topk(parts, k, len(Q))

    def close(self) -> None:
        for a in self.actors:
            self._ray.kill(a)
        self.actors = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
