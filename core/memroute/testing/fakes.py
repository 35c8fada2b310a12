"""Small real components for tests: a deterministic feature-hashing embedding source."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from memroute.interfaces import EmbeddingSource

__all__ = ["HashingEmbeddingSource"]

_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashingEmbeddingSource(EmbeddingSource):
    """Bag-of-words feature hashing, L2-normalised. Texts sharing words get similar vectors; no model, no
    network. Good for testing plumbing, not for retrieval quality."""

    source = "hashing"
    model = "hashing-v1"

    def __init__(self, dimensions: int = 64) -> None:
        self.dimensions = dimensions
        self.calls = 0

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        assert self.dimensions is not None
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in _TOKEN.findall(text.casefold()):
                digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dimensions
                sign = 1.0 if digest[4] & 1 else -1.0
                out[row, bucket] += sign
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
            else:
                out[row, 0] = 1.0
        return out
