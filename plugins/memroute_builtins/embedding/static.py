"""The ``static`` embedding source: model2vec's potion-base-8M (256-d, MIT), shipped inside this package.

A static model is a lookup table of token vectors averaged per text: no torch, no GPU, thousands of texts
per second on one core. The weights live in ``models/potion-base-8M/`` (float16, see its PROVENANCE.md);
nothing is downloaded, ever: the model directory is checked before model2vec sees it (model2vec falls back
to the Hugging Face hub for a path that does not exist) and ``HF_HUB_OFFLINE`` is set for good measure.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

import memroute
from memroute.embedding import LazyLoader, normalize_rows, validate_texts
from memroute.errors import EmbeddingError
from memroute.interfaces import ComponentContext, EmbeddingSource
from memroute.specs import Availability, EmbeddingSourceSpec

__all__ = ["BUNDLED_MODEL_DIR", "StaticEmbeddingSource", "StaticSettings"]

BUNDLED_MODEL_DIR = Path(__file__).parent / "models" / "potion-base-8M"
BUNDLED_MODEL_NAME = "minishlab/potion-base-8M"
_REQUIRED_FILES = ("model.safetensors", "tokenizer.json", "config.json")
_SMALL_BATCH = 16


def _positive(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value!r}")


@attrs.frozen(kw_only=True)
class StaticSettings:
    """``[embedding.static]`` options."""

    model_dir: str | None = None
    """A model2vec model directory to use instead of the bundled potion-base-8M (must exist locally)."""
    model: str | None = None
    """The model label in the embedding signature (default: ``minishlab/potion-base-8M``, or the
    directory's name for ``model_dir``)."""
    batch_size: int = attrs.field(default=1024, validator=_positive)
    max_tokens: int | None = attrs.field(default=512, validator=_positive)
    """Tokens per text that count; the rest is ignored (``None``: no limit)."""
    query_content_words: bool = True
    """Embed a search query's content words only (a static model averages token vectors, so question words
    pull the query toward every chat turn that has them): measured on the quality benchmark's dev split
    with 2,000 chat turns per tenant, R@5 of the vector leg 0.63 -> 0.68 (docs/retrieval.md)."""


class StaticEmbeddingSource(EmbeddingSource):
    """model2vec static embeddings from a local directory. Loads on first use; a failed load is retried
    on the next call."""

    in_process = True  # a local model (tokenizer + numpy)

    source = "static"
    fusion_keyword_weight = 1.25
    """Calibrated on the quality benchmark's dev split (``memroute bench --quality``) for potion-base-8M with
    centred-query ranking, and kept on the held-out sets (docs/retrieval.md, "Ranking refinements")."""
    relevance_calibration = (-2.41, 9.3, 2.32, 0.0)
    """The relevance model for potion-base-8M (:mod:`memroute.retrieval.relevance`), fitted on the quality
    benchmark's dev split with and without 2,000 chat turns per tenant."""

    def __init__(self, settings: StaticSettings | None = None) -> None:
        self.settings = settings or StaticSettings()
        self.model_dir = Path(self.settings.model_dir).expanduser() if self.settings.model_dir else BUNDLED_MODEL_DIR
        if self.settings.model:
            self.model = self.settings.model
        elif self.settings.model_dir:
            self.model = self.model_dir.name
        else:
            self.model = BUNDLED_MODEL_NAME
        self.dimensions = 256 if not self.settings.model_dir else None
        self.query_content_words = self.settings.query_content_words
        self._loader: LazyLoader[Any] = LazyLoader(self._load)
        self._lock = threading.Lock()

    def _load(self) -> Any:
        missing = [name for name in _REQUIRED_FILES if not (self.model_dir / name).is_file()]
        if missing:
            # Never hand model2vec a path that does not exist: it would treat it as a hub id and download.
            raise EmbeddingError(
                f"static embedding model not found: {self.model_dir} lacks {', '.join(missing)}"
                + ("" if self.settings.model_dir else " (the memroute package is incomplete; reinstall it)"),
                reason="model_load_failed", source=self.source,
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from model2vec import StaticModel
        except ImportError as exc:
            raise EmbeddingError(f"model2vec is not installed ({exc}): pip install memroute",
                                 reason="model_load_failed", source=self.source) from exc
        try:
            model = StaticModel.from_pretrained(str(self.model_dir), force_download=False)
        except Exception as exc:
            raise EmbeddingError(f"static embedding model failed to load from {self.model_dir}: {exc}",
                                 reason="model_load_failed", source=self.source) from exc
        # The bundled matrix is float16 on disk; compute in float32.
        if model.embedding.dtype != np.float32:
            model.embedding = np.ascontiguousarray(model.embedding, dtype=np.float32)
        # encode() sets the tokenizer's truncation on every call; set the same once here for the fast path.
        if self.settings.max_tokens is None:
            model.tokenizer.no_truncation()
        else:
            model.tokenizer.enable_truncation(self.settings.max_tokens)
        self.dimensions = int(model.dim)
        return model

    def load(self) -> None:
        """Load the model now instead of on the first ``embed_batch``."""
        self._loader.get()

    @property
    def loaded(self) -> bool:
        return self._loader.loaded

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        items = validate_texts(texts)
        model = self._loader.get()
        assert self.dimensions is not None
        if not items:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        try:
            if len(items) <= _SMALL_BATCH and model.weights is None and model.token_mapping is None:
                vectors = self._encode_small(model, items)
            else:
                vectors = model.encode(items, batch_size=self.settings.batch_size,
                                       max_length=self.settings.max_tokens, show_progress_bar=False,
                                       use_multiprocessing=False)
        except Exception as exc:
            raise EmbeddingError(f"static embedding failed: {exc}", reason="unknown", source=self.source) from exc
        return normalize_rows(vectors)

    @staticmethod
    def _encode_small(model: Any, items: list[str]) -> np.ndarray:
        """model2vec's mean-of-token-vectors for a few texts without ``encode``'s per-call set-up (a single
        query or memory embeds ~1.7x faster); the same result, checked by a test."""
        encodings = model.tokenizer.encode_batch_fast(items, add_special_tokens=False)
        unk = model.unk_token_id
        if len(encodings) == 1:
            # One text (a search's query): ``mean(axis=0)``'s own two steps (the float32 sum, then the division
            # by the count as an intp) without its set-up, the zeroed matrix and the copy into it.
            ids = [token for token in encodings[0].ids if token != unk] if unk is not None else encodings[0].ids
            if not ids:
                return np.zeros((1, model.dim), dtype=np.float32)
            total = np.add.reduce(model.embedding[ids], axis=0)
            return np.true_divide(total, np.intp(len(ids)), out=total, casting="unsafe")[None]
        out = np.zeros((len(items), model.dim), dtype=np.float32)
        for row, encoding in enumerate(encodings):
            ids = [token for token in encoding.ids if token != unk] if unk is not None else encoding.ids
            if ids:
                out[row] = model.embedding[ids].mean(axis=0)
        return out

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "model": self.model, "dimensions": self.dimensions,
                "model_dir": str(self.model_dir), "loaded": self.loaded,
                "last_error": str(self._loader.last_error) if self._loader.last_error else None}


def _factory(settings: StaticSettings, context: ComponentContext) -> StaticEmbeddingSource:
    return StaticEmbeddingSource(settings)


def _enabled(options: Mapping[str, Any], section: Any) -> Availability:
    if getattr(section, "static_enabled", True):
        return Availability(ok=True, reason="static enabled (bundled potion-base-8M)")
    return Availability(ok=False, reason="static_enabled = false", mention=False)


@memroute.hookimpl
def memroute_embedding_sources() -> Any:
    yield EmbeddingSourceSpec(
        name="static", factory=_factory, settings_class=StaticSettings,
        description="model2vec potion-base-8M static embeddings (256-d, bundled, offline)",
        auto_priority=200, auto_check=_enabled,
    )
