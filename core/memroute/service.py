"""The service object ``memroute.open()`` returns: the Python API every surface (CLI, REST, MCP) wraps.

Data flows one way: surface → this service → MemoryManager → backend plugins. The service validates input,
generates ids and keys, and hands retrieval to the :class:`~memroute.retrieval.RetrievalEngine`.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memroute.components import build_backend
from memroute.errors import ConfigError, MemrouteError, ValidationError
from memroute.interfaces import EmbeddingSource, MemoryBackend, VectorStore
from memroute.limits import InputLimits
from memroute.manager import MemoryManager
from memroute.models import (
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    MemoryType,
    NewMemory,
    SearchQuery,
    SearchResult,
    check_storable,
)
from memroute.plugins import MemroutePluginManager, get_plugin_manager
from memroute.retrieval.build import build_retrieval
from memroute.serialization import memory_from_dict, memory_to_dict
from memroute.settings import MemrouteSettings, load_settings

if TYPE_CHECKING:
    from memroute.keys import KeyStore
    from memroute.pipeline.conversation import Conversation, MaintenanceReport
    from memroute.settings import MemorySettings
    from memroute.state import StateStore

__all__ = ["Memroute", "derive_key"]

_STRATEGY_ALIASES = {"recent": "exact", "exact": "exact", "semantic": "semantic", "hybrid": "hybrid"}
_IMPORT_BATCH = 2000
_PATCHABLE = ("content", "key", "type", "session_id", "metadata", "expires_at")


def derive_key(content: str) -> str:
    """A stable key for content added without one: a readable slug plus a short hash of the normalised
    text, so the same content upserts and different content (in any script) never collides."""
    normalised = " ".join(unicodedata.normalize("NFKC", content).casefold().split())
    slug = re.sub(r"[^\w]+", "_", normalised, flags=re.UNICODE).strip("_")[:40].rstrip("_")
    digest = hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:12]
    return f"note:{slug}:{digest}" if slug else f"note:{digest}"


class Memroute:
    """memroute's Python API. Use as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        settings: MemrouteSettings,
        *,
        plugins: MemroutePluginManager | None = None,
        embedder: EmbeddingSource | None = None,
        vector_store: VectorStore | None = None,
    ) -> None:
        """Prefer :func:`memroute.open`. ``embedder`` / ``vector_store`` replace the configured ones (for
        components built in code rather than named in configuration)."""
        self.settings = settings
        self.plugins = plugins or get_plugin_manager()
        self.data_dir = settings.data_path
        self._limits = InputLimits(settings.limits)
        self._closed = False
        self._lock = threading.RLock()
        self._conversation: Conversation | None = None
        self._state: StateStore | None = None
        backends = settings.backends
        built = []
        try:
            for name in [backends.primary, *backends.fallbacks]:
                built.append(build_backend(self.plugins, name, backends.instances[name], self.data_dir))
            self.state_dir = state_dir_for(self.data_dir, built[0])
            outbox = settings.manager.outbox_path or str(self.state_dir / "outbox.db")
            self.manager = MemoryManager(
                built[0], built[1:], settings=settings.manager, outbox_path=outbox,
                prepare_connection=self.plugins.prepare_connection,
            )
            self.manager.initialize()
        except BaseException:
            for backend in built:
                try:
                    backend.close()
                except Exception:
                    pass
            raise
        try:
            self.retrieval = build_retrieval(
                self.manager, settings, self.plugins, self.state_dir, embedder=embedder, vector_store=vector_store
            )
        except BaseException:
            self.manager.close()
            raise

    @classmethod
    def open(
        cls,
        config: Any = None,
        *,
        plugins: MemroutePluginManager | None = None,
        embedder: EmbeddingSource | None = None,
        vector_store: VectorStore | None = None,
        **overrides: Any,
    ) -> Memroute:
        return cls(load_settings(config, **overrides), plugins=plugins, embedder=embedder, vector_store=vector_store)

    # --- lifecycle -----------------------------------------------------------------------------------
    def __enter__(self) -> Memroute:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._conversation is not None:
                self._conversation.close()  # stored extractions first: they write through the manager
            self.retrieval.close()
        finally:
            try:
                self.manager.close()
            finally:
                if self._state is not None:
                    self._state.close()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for background work (extraction, outbox replication, embedding); True when all of it finished."""
        extracted = self._conversation.flush(timeout) if self._conversation is not None else True
        indexed = self.retrieval.flush(timeout) and extracted
        return self.manager.flush(timeout) and indexed

    # --- deployment state: keys, runtime settings (memroute.state; docs/server.md) -------------------
    @property
    def state(self) -> StateStore:
        """The deployment's shared state store (keys, runtime settings, leases), opened on first use."""
        with self._lock:
            if self._state is None:
                from memroute.state import open_state_store

                self._state = open_state_store(self.plugins, self.manager.backends[0], self.state_dir)
            return self._state

    @property
    def keys(self) -> KeyStore:
        """The deployment's API keys (``memroute keys``, ``/api/keys``)."""
        return self.state.keys

    def memory_settings(self) -> MemorySettings:
        """The ``[memory]`` settings in effect: the configured ones with the runtime overrides stored by
        :meth:`update_memory_settings` (in the shared state store, so every process sees them)."""
        from memroute.state import apply_memory_overrides

        stored = self.state.get_value("settings", "memory") or {}
        return apply_memory_overrides(self.settings.memory, stored)

    def update_memory_settings(self, changes: Mapping[str, Any]) -> MemorySettings:
        """Change runtime memory settings (wire names: ``enabled``, ``maxTokens``, ``retentionDays``,
        ``strategy``, ``typedDecay*``), strictly validated; returns the settings now in effect."""
        from memroute.state import validate_memory_overrides

        checked = validate_memory_overrides(changes, self.settings.memory)
        with self._lock:
            stored = dict(self.state.get_value("settings", "memory") or {})
            stored.update(checked)
            self.state.put_value("settings", "memory", stored)
        return self.memory_settings()

    # --- CRUD ----------------------------------------------------------------------------------------
    def add(
        self,
        *,
        api_key_id: str,
        content: str,
        key: str | None = None,
        type: MemoryType | str = MemoryType.FACTUAL,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        expires_at: datetime | str | None = None,
    ) -> Memory:
        """Store a memory: an upsert on ``(api_key_id, key)``; ``key`` is derived from the content when
        omitted. Returns the stored memory (with its id, kept across upserts)."""
        if not isinstance(content, str):
            raise ValidationError("content: expected a string", [("content", "type")])
        check_storable("content", content)  # before derive_key hashes it
        new = NewMemory(
            api_key_id=api_key_id, key=key if key is not None else derive_key(content), content=content,
            type=type, session_id=session_id, metadata=metadata, expires_at=expires_at,
        )
        self._limits.check(content=new.content, metadata=new.metadata)
        memory = self.manager.create(new)
        self.retrieval.on_written([memory])
        return memory

    def get(self, memory_id: str) -> Memory | None:
        _check_id(memory_id)
        return self.manager.get(memory_id)

    def update(self, memory_id: str, **changes: Any) -> bool:
        """Change some of ``content, key, type, session_id, metadata, expires_at``; False when no such id."""
        _check_id(memory_id)
        unknown = sorted(set(changes) - set(_PATCHABLE))
        if unknown:
            raise ValidationError(
                f"update: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(_PATCHABLE)})",
                [(name, "unknown field") for name in unknown],
            )
        if not changes:
            raise ValidationError("update: nothing to change", [("(root)", "empty")])
        patch = MemoryPatch(**changes)
        self._limits.check(content=changes.get("content"), metadata=patch.metadata or None)
        updated = self.manager.update(memory_id, patch)
        if updated is not None:
            self.retrieval.on_written([updated])
        return updated is not None

    def delete(self, memory_id: str) -> bool:
        _check_id(memory_id)
        deleted = self.manager.delete(memory_id)
        if deleted:
            self.retrieval.on_deleted(memory_id)
        return deleted

    def list(
        self,
        *,
        api_key_id: str,
        type: MemoryType | str | None = None,
        session_id: str | None = None,
        query: str | None = None,
        limit: int = 50,
        offset: int = 0,
        order_by: str = "created_at",
        order_dir: str = "desc",
    ) -> ListPage:
        return self.manager.list(
            ListFilter(api_key_id=api_key_id, type=type, session_id=session_id, query=query, limit=limit,
                       offset=offset, order_by=order_by, order_dir=order_dir)
        )

    # --- search --------------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        api_key_id: str,
        strategy: str | None = None,
        limit: int | None = None,
        max_tokens: int | None = None,
        session_id: str | None = None,
        type: MemoryType | str | None = None,
    ) -> SearchResult:
        """Ranked memories of ``api_key_id`` for ``query``. ``strategy``: ``exact``/``recent`` (newest
        first), ``semantic`` or ``hybrid`` (default: the configured one). Expired memories, memories older
        than ``retention_days`` and (with ``session_id``) other sessions' memories are never returned; with
        ``type``, only memories of that type are (filtered before the token budget is filled)."""
        if not isinstance(query, str):
            raise ValidationError("query: expected a string", [("query", "type")])
        chosen = strategy if strategy is not None else self.settings.memory.strategy
        if chosen not in _STRATEGY_ALIASES:
            raise ValidationError(
                f"strategy: {chosen!r} is not one of exact, recent, semantic, hybrid", [("strategy", "invalid")]
            )
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or not 0 <= max_tokens <= 16000):
            raise ValidationError("max_tokens: must be an integer in [0, 16000]", [("max_tokens", "range")])
        search_query = SearchQuery(
            api_key_id=api_key_id, text=query[:4096], strategy=_STRATEGY_ALIASES[chosen],
            limit=limit if limit is not None else self.settings.memory.vec_top_k,
            session_id=session_id, retention_days=self.settings.memory.retention_days, type=type,
        )
        return self.retrieval.search(search_query, max_tokens=max_tokens)

    # --- operations ----------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self.manager.health()

    def status(self) -> dict[str, Any]:
        return {
            "data_dir": str(self.data_dir),
            "state_dir": str(self.state_dir),
            "memory": {"enabled": self.settings.memory.enabled, "strategy": self.settings.memory.strategy,
                       "max_tokens": self.settings.memory.max_tokens,
                       "retention_days": self.settings.memory.retention_days},
            "backends": {"primary": self.settings.backends.primary,
                         "fallbacks": list(self.settings.backends.fallbacks),
                         "instances": [b.describe() for b in self.manager.backends]},
            **self.retrieval.status(),
            "health": self.health(),
        }

    def export(self, api_key_id: str | None = None) -> Iterator[Memory]:
        """Every memory (of one tenant, or all), oldest first."""
        if api_key_id is not None:
            ListFilter(api_key_id=api_key_id)  # validates
        return iter(self.manager.iter_all(api_key_id))

    def export_jsonl(self, out: IO[str], api_key_id: str | None = None) -> int:
        count = 0
        for memory in self.export(api_key_id):
            out.write(json.dumps(memory_to_dict(memory), ensure_ascii=False) + "\n")
            count += 1
        return count

    def import_memories(self, memories: Iterable[Memory]) -> int:
        """Store memories exactly as given (ids and timestamps kept)."""
        batch = list(memories)
        count = 0
        for start in range(0, len(batch), _IMPORT_BATCH):
            count += self.manager.put_many(batch[start:start + _IMPORT_BATCH])
        self.retrieval.on_written(batch)
        return count

    def import_jsonl(self, lines: Iterable[str], *, progress: Callable[[int], None] | None = None) -> int:
        """Import JSONL (one memory object a line, as ``export`` writes). The whole file is validated before
        anything is written, so a bad line writes nothing; the error names its line number."""
        parsed: list[Memory] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                message = f"line {number}: not valid JSON ({exc.msg})"
                raise ValidationError(message, [(f"line {number}", "json")]) from None
            try:
                parsed.append(memory_from_dict(data))
            except MemrouteError as exc:
                raise ValidationError(f"line {number}: {exc}", [(f"line {number}", str(exc))]) from None
        count = 0
        for start in range(0, len(parsed), _IMPORT_BATCH):
            chunk = parsed[start:start + _IMPORT_BATCH]
            count += self.manager.put_many(chunk)
            if progress is not None:
                progress(len(chunk))
        self.retrieval.on_written(parsed)
        return count

    # --- conversation pipeline (memroute.pipeline.conversation; docs/pipeline.md) ----------------------
    @property
    def conversation(self) -> Conversation:
        """The pipeline object: extraction worker, augmentation, summarization and retention."""
        with self._lock:
            if self._conversation is None:
                from memroute.pipeline.conversation import Conversation

                self._conversation = Conversation(self)
            return self._conversation

    def augment(self, request: Any, api_key_id: str, session_id: str | None = None, provider: str | None = None,
                headers: Any = None, **options: Any) -> Any:
        """``request`` with relevant memories of ``api_key_id`` injected (never mutated; the same object when
        nothing is injected). See :meth:`Conversation.augment`."""
        return self.conversation.augment(request, api_key_id, session_id, provider, headers, **options)

    def observe(self, request: Any, response: Any = None, *, api_key_id: str, session_id: str | None = None,
                headers: Any = None, wait: bool = False) -> builtins.list[Memory]:
        """Extract facts from a chat turn and store them (in the background unless ``wait``)."""
        return self.conversation.observe(request, response, api_key_id=api_key_id, session_id=session_id,
                                         headers=headers, wait=wait)

    def summarize(self, api_key_id: str, older_than_days: int, *, dry_run: bool = True) -> MaintenanceReport:
        """Replace one key's memories older than ``older_than_days`` with summaries (dry run by default)."""
        return self.conversation.summarize(api_key_id, older_than_days, dry_run=dry_run)

    def compact(self, api_key_id: str, session_id: str | None = None, max_tokens: int = 4000, *,
                dry_run: bool = True) -> MaintenanceReport:
        """Summarize what does not fit ``max_tokens`` of one key (dry run by default)."""
        return self.conversation.compact(api_key_id, session_id, max_tokens, dry_run=dry_run)

    def prune(self, api_key_id: str | None = None, *, dry_run: bool = False) -> MaintenanceReport:
        """Delete memories past retention, expired, or decayed (typed decay, when enabled)."""
        return self.conversation.prune(api_key_id, dry_run=dry_run)


def state_dir_for(data_dir: Path, primary: MemoryBackend) -> Path:
    """Where the vector index, its queue and the outbox of this primary live: one directory per primary
    identity, so two databases never share an index."""
    identity = primary.identity()
    slug = re.sub(r"[^A-Za-z0-9]+", "-", identity).strip("-")[-40:] or "store"
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:10]
    path = data_dir / "state" / f"{slug}-{digest}"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"data_dir: cannot create {path} ({exc.strerror or exc}); set data_dir or MEMROUTE_DATA_DIR to a "
            "writable directory", [("data_dir", "not writable")]
        ) from exc
    return path


def _check_id(memory_id: object) -> None:
    if not isinstance(memory_id, str) or not memory_id.strip() or len(memory_id) > 256:
        raise ValidationError("id: expected a non-empty string of at most 256 characters", [("id", "invalid")])

