"""A disk cache of embedding vectors for the benchmarks, so a slow model is paid once.

multilingual-e5-small embeds about 9 texts a second on the two-core reference machine, and one run of the
conversation benchmark embeds more than 16,000 turns: half an hour before the first question is asked. The
benchmarks measure ranking, not embedding, so they read vectors through :class:`DiskCachedEmbeddingSource`,
which keeps every vector it is given in a SQLite file under a directory of the caller's choosing
(``memroute bench --quality --cache-dir``, default :data:`DEFAULT_CACHE_DIR`) and asks the wrapped source only
for texts it has never seen.

A vector is keyed by a hash of the source, its model (the embedding signature's label, which names the weights
and their quantisation), the side of the search the text is on (``query`` or ``passage``: a retrieval model
embeds the two differently) and the text itself: another model, another side or another text never hits.
This is for the benchmarks only; the library's own path keeps its in-memory LRU
(:mod:`memroute.embedding.cache`), and nothing here is used unless a benchmark asks for it.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from memroute.config.settings import MemrouteSettings, load_settings
from memroute.embedding import build_embedding_source, validate_texts
from memroute.embedding.cache import WrappedEmbeddingSource, uncached
from memroute.errors import ConfigError, EmbeddingError
from memroute.interfaces import EmbeddingSource
from memroute.plugins import get_plugin_manager

__all__ = ["DEFAULT_CACHE_DIR", "DiskCachedEmbeddingSource", "VectorCache", "bench_opener", "cached_embedder",
           "vector_key"]

DEFAULT_CACHE_DIR = Path("~/.cache/memroute-bench")
FILE_NAME = "vectors.db"
SIDES = ("query", "passage")


def vector_key(source: str, model: str, side: str, text: str) -> bytes:
    """The cache key of ``text`` embedded by ``source``'s ``model`` as a ``query`` or a ``passage``: a sha256
    over the four, each ended by a NUL (a NUL inside the text cannot make two different tuples collide, since
    the text is last)."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    digest = hashlib.sha256()
    for part in (source, model, side):
        digest.update(part.encode("utf-8"))
        digest.update(b"\x00")
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.digest()


class VectorCache:
    """Vectors on disk, one SQLite file (``vectors.db``) under ``directory``: ``key -> float32 bytes``.
    Several services of one benchmark share one instance (one connection, one lock); several processes may
    share the file (WAL, a busy timeout)."""

    def __init__(self, directory: Path | str = DEFAULT_CACHE_DIR) -> None:
        self.directory = Path(directory).expanduser()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._db = apsw.Connection(str(self.directory / FILE_NAME))
            self._db.set_busy_timeout(30_000)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL) "
                             "WITHOUT ROWID")
        except (OSError, apsw.Error) as exc:
            raise ConfigError(f"cannot open the benchmark's embedding cache in {self.directory}: {exc}",
                              [("cache_dir", "not writable")]) from exc
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """The cached vectors of those ``keys`` that are cached (fresh arrays)."""
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = list(keys[start:start + 500])
                marks = ",".join("?" * len(chunk))
                for key, blob in self._db.execute(f"SELECT key, vector FROM vectors WHERE key IN ({marks})",
                                                  chunk):
                    found[bytes(key)] = np.frombuffer(blob, dtype=np.float32).copy()
            self.hits += len(found)
            self.misses += len(set(keys)) - len(found)
        return found

    def put_many(self, items: Iterable[tuple[bytes, np.ndarray]]) -> None:
        rows = [(key, np.ascontiguousarray(vector, dtype=np.float32).tobytes()) for key, vector in items]
        with self._lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)", rows)

    def __len__(self) -> int:
        with self._lock:
            return int(next(self._db.execute("SELECT count(*) FROM vectors"))[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


class DiskCachedEmbeddingSource(WrappedEmbeddingSource):
    """``inner`` behind a :class:`VectorCache`: memories are embedded as passages, search queries as queries,
    and only texts never seen by this model on that side reach ``inner`` (in one batch). It reports the
    wrapped source's identity and calibrated values, so the engine ranks exactly as it would with ``inner``."""

    def __init__(self, inner: EmbeddingSource, cache: VectorCache, *, query_content_words: bool | None = None) -> None:
        super().__init__(inner)
        self.cache = cache
        self._query_content_words = query_content_words
        """Set: embed a query's content words or the whole query whatever ``inner`` declares (a setting to try
        on the dev split before a source declares it)."""

    @property
    def query_content_words(self) -> bool:  # type: ignore[override]
        if self._query_content_words is not None:
            return self._query_content_words
        return self.inner.query_content_words

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(validate_texts(texts), side="passage")

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed(validate_texts([text]), side="query")[0]

    def _embed(self, items: list[str], *, side: str) -> np.ndarray:
        keys = [vector_key(self.inner.source, self.inner.model, side, text) for text in items]
        found = self.cache.get_many(keys)
        missing: dict[bytes, str] = {key: text for key, text in zip(keys, items, strict=True) if key not in found}
        if missing:
            texts = list(missing.values())
            fresh = (self.inner.embed_batch(texts) if side == "passage"
                     else np.stack([self.inner.embed_query(text) for text in texts]))
            if len(fresh) != len(texts):
                raise EmbeddingError(f"{self.inner.source} returned {len(fresh)} vectors for {len(texts)} texts",
                                     reason="request_failed", source=self.inner.source)
            new = dict(zip(missing, (np.asarray(row, dtype=np.float32) for row in fresh), strict=True))
            self.cache.put_many(new.items())
            found.update(new)
        if not items:
            return np.zeros((0, self.inner.dimensions or 0), dtype=np.float32)
        return np.stack([found[key] for key in keys]).astype(np.float32, copy=False)


def cached_embedder(cache: VectorCache, config: Any = None, *, query_content_words: bool | None = None,
                    **overrides: Any) -> EmbeddingSource | None:
    """The embedding source the settings ``load_settings(config, **overrides)`` name, built as
    :func:`memroute.open` would build it and wrapped in ``cache`` (``None``: the settings ask for none;
    ``query_content_words``: see :class:`DiskCachedEmbeddingSource`). Pass it to ``Memroute.open(...,
    embedder=...)`` with the same settings."""
    settings: MemrouteSettings = load_settings(config, **overrides)
    if settings.embedding.source == "none":
        return None
    inner, _ = build_embedding_source(settings.embedding, get_plugin_manager(), settings.data_path)
    if inner is None:
        return None
    return DiskCachedEmbeddingSource(uncached(inner), cache, query_content_words=query_content_words)


def bench_opener(cache: VectorCache | None, config: Any = None, **fixed: Any) -> Callable[..., Any]:
    """The ``open_service(data_dir, embedding, vector_options=None, memory_options=None)`` the quality
    benchmarks take: a fresh service on ``data_dir`` with settings ``config`` and ``fixed`` overrides, the
    sqlite-vec store (``vector_options`` its options), ``memory_options`` as ``[memory]`` and ``embedding`` as
    ``[embedding]``; its embedding source read through ``cache`` (``None``: no disk cache)."""
    from memroute.service import Memroute

    def open_service(data_dir: Path, embedding: dict[str, Any], vector_options: dict[str, Any] | None = None,
                     memory_options: dict[str, Any] | None = None) -> Any:
        overrides = {**fixed, "data_dir": str(data_dir), "embedding": embedding, "memory": memory_options or {},
                     "vectors": {"store": "sqlite-vec", **(vector_options or {})}}
        embedder = None if cache is None else cached_embedder(cache, config, **overrides)
        return Memroute.open(config, embedder=embedder, **overrides)

    return open_service
