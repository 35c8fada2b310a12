"""Helpers every embedding source shares: input validation, row normalisation and a lazy loader that
does not remember a failure forever."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from memroute.errors import EmbeddingError, ValidationError

__all__ = ["LazyLoader", "fallback_vector", "normalize_rows", "validate_texts"]

T = TypeVar("T")


def validate_texts(texts: object) -> list[str]:
    """``texts`` as a list of ``str``, or :class:`ValidationError` naming the first bad item.

    A bare ``str`` is refused (it is a sequence of characters, almost always a caller's mistake)."""
    if isinstance(texts, (str, bytes)):
        raise ValidationError("embed_batch expects a sequence of strings, got a single "
                              f"{type(texts).__name__}; wrap it in a list")
    if not isinstance(texts, Sequence):
        raise ValidationError(f"embed_batch expects a sequence of strings, got {type(texts).__name__}")
    out = list(texts)
    for index, text in enumerate(out):
        if not isinstance(text, str):
            raise ValidationError(f"texts[{index}]: expected str, got {type(text).__name__}",
                                  [(f"texts[{index}]", "not a string")])
    return out


def fallback_vector(dimensions: int) -> np.ndarray:
    """The unit vector used for a text with no content (empty or only whitespace / unknown tokens): every
    component equal. It is deterministic and has the same, unremarkable similarity to everything, so
    an empty memory never ranks high and never breaks a cosine index (a zero vector would)."""
    return np.full(dimensions, 1.0 / np.sqrt(dimensions), dtype=np.float32)


def normalize_rows(matrix: Any) -> np.ndarray:
    """``matrix`` as C-contiguous float32 with unit-L2 rows; an all-zero (or non-finite) row becomes
    :func:`fallback_vector`."""
    array = np.array(matrix, dtype=np.float32, order="C", copy=True)  # never modify the caller's array
    if array.ndim != 2:
        raise EmbeddingError(f"expected a 2-D array of embeddings, got shape {array.shape}")
    if array.shape[0] == 1:
        # One text (a search's query): the same float64 norm (np.linalg.norm's sum of squares along the row)
        # and the same float32 division, in a third of the array operations.
        row = array[0]
        wide = row.astype(np.float64)
        norm = float(np.sqrt(np.add.reduce(wide * wide)))
        if math.isfinite(norm) and norm > 1e-12:
            row /= np.float32(norm)
            return array
    norms = np.linalg.norm(array.astype(np.float64), axis=1)
    good = np.isfinite(norms) & (norms > 1e-12)
    if good.all():
        array /= norms[:, None].astype(np.float32)
        return array
    array[good] /= norms[good, None].astype(np.float32)
    if array.shape[1]:
        array[~good] = fallback_vector(array.shape[1])
    return array


class LazyLoader(Generic[T]):
    """Loads something expensive (a model) on first use, once, thread-safely.

    Unlike the reference system (which cached a rejected load promise until restart), a failed load is
    not kept: the next call tries again (or, with ``retry_after_s`` > 0, the first call after that many
    seconds, so a broken model file is not re-read on every request of a busy server). The error of the
    last attempt is kept for status reports."""

    def __init__(self, load: Callable[[], T], *, retry_after_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._load = load
        self._value: T | None = None
        self._lock = threading.Lock()
        self._retry_after_s = retry_after_s
        self._clock = clock
        self._failed_at: float | None = None
        self.last_error: BaseException | None = None
        self.attempts = 0

    @property
    def loaded(self) -> bool:
        return self._value is not None

    def get(self) -> T:
        value = self._value
        if value is not None:
            return value
        with self._lock:
            if self._value is not None:
                return self._value
            if (self._failed_at is not None and self.last_error is not None
                    and self._clock() - self._failed_at < self._retry_after_s):
                raise self.last_error
            self.attempts += 1
            try:
                loaded = self._load()
            except BaseException as exc:
                self._failed_at = self._clock()
                self.last_error = exc
                raise
            self._value = loaded
            self._failed_at = None
            self.last_error = None
            return loaded

    def reset(self) -> None:
        """Drop the loaded value (the next call loads again)."""
        with self._lock:
            self._value = None
