"""What the sharded-search and distributed tests share."""

import numpy as np


def _emb(rng, n, d=16):
    H = rng.standard_normal((n, d)).astype(np.float32)
    return H / np.linalg.norm(H, axis=1, keepdims=True)
