"""An exact, brute-force vector store on numpy: the reference for recall measurements and the baseline the
benchmark compares against. In memory only; fine for tests and small stores."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from memroute.errors import VectorStoreError
from memroute.interfaces import EmbeddingSignature, VectorHit, VectorItem, VectorStore
from memroute.models import SearchQuery

__all__ = ["NumpyVectorStore"]


class NumpyVectorStore(VectorStore):
    store_name = "numpy"

    def __init__(self) -> None:
        self._signature: str | None = None
        self._dim: int | None = None
        self._items: dict[str, VectorItem] = {}
        self._lock = threading.Lock()

    def bind(self, signature: EmbeddingSignature) -> bool:
        with self._lock:
            if self._signature == str(signature):
                return True
            had = self._signature is not None
            self._signature, self._dim = str(signature), signature.dimensions
            self._items.clear()
            return not had

    def signature(self) -> str | None:
        return self._signature

    def upsert(self, items: Sequence[VectorItem]) -> None:
        with self._lock:
            for item in items:
                vector = np.asarray(item.vector, dtype=np.float32)
                if vector.shape != (self._dim,):
                    raise VectorStoreError(f"vector of shape {vector.shape} does not match dimension {self._dim}")
                self._items[item.memory_id] = item

    def delete(self, memory_ids: Sequence[str]) -> None:
        with self._lock:
            for memory_id in memory_ids:
                self._items.pop(memory_id, None)

    def query(self, vector: Any, query: SearchQuery, k: int) -> list[VectorHit]:
        cutoff = query.created_after
        with self._lock:
            candidates = [
                item for item in self._items.values()
                if item.api_key_id == query.api_key_id
                and (query.session_id is None or item.session_id == query.session_id)
                and (item.expires_at is None or item.expires_at > query.now)
                and (cutoff is None or item.created_at >= cutoff)
            ]
        if not candidates:
            return []
        matrix = np.stack([np.asarray(item.vector, dtype=np.float32) for item in candidates])
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        top = np.argsort(-scores)[:k]
        return [VectorHit(memory_id=candidates[i].memory_id, score=float(scores[i])) for i in top]

    def count(self, api_key_id: str | None = None) -> int:
        with self._lock:
            return sum(1 for item in self._items.values() if api_key_id is None or item.api_key_id == api_key_id)

    def ids(self, api_key_id: str | None = None) -> set[str]:
        with self._lock:
            return {i for i, item in self._items.items() if api_key_id is None or item.api_key_id == api_key_id}
