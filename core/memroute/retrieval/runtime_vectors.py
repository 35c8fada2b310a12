"""The vector store chosen at run time: ``PUT /api/settings/qdrant`` (``Memroute.update_qdrant_settings``).

The connection overrides (``enabled``, ``host``, ``port``, ``collection``, ``quantization``, ``apiKey``) are
stored in the deployment's state store under ``("settings", "qdrant")``. They apply on top of ``[vectors]``:

* when ``enabled`` is true, the store is ``qdrant`` with ``[vectors.options.qdrant]`` plus the overrides (a
  ``host`` makes it a server at ``http://host:port``, replacing a local-mode ``path``);
* when ``enabled`` is false, the store is the configured one, or ``auto`` when the configured one is qdrant
  (the reference's ``memoryVectorStore = "auto"``);
* with no ``enabled`` override the configured store stays, with the connection overrides applied if it is
  qdrant.

Every ``memroute.open`` applies the stored overrides before it builds the vector store; a process already
running re-reads them at most every :data:`~memroute.deployment.state.RUNTIME_SETTINGS_TTL_S` and switches its store in
the background (:meth:`memroute.retrieval.engine.RetrievalEngine.replace_vector_store`). A change is probed
for real before it is stored: the new store is built, bound to the index's embedding signature and searched;
a target that does not work is a :class:`~memroute.errors.ValidationError` naming ``host`` and nothing is
stored.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit, urlunsplit

import attrs

from memroute.config.settings import MemrouteSettings, VectorSettings
from memroute.deployment.state import RUNTIME_SETTINGS_TTL_S, StateStore
from memroute.errors import ValidationError

if TYPE_CHECKING:
    from memroute.interfaces import EmbeddingSource

__all__ = ["QDRANT_FIELDS", "QDRANT_SETTINGS_KEY", "RuntimeVectorSettings", "VectorSwitch", "effective_vectors",
           "mask_secret", "merge_qdrant_change", "open_retrieval", "qdrant_url", "validate_qdrant_change"]

log = logging.getLogger("memroute.vectors")

QDRANT_SETTINGS_KEY: Final = ("settings", "qdrant")
QDRANT_FIELDS: Final[dict[str, str]] = {
    "enabled": "enabled", "host": "host", "port": "port", "collection": "collection",
    "embeddingModel": "embedding_model", "quantization": "quantization", "apiKey": "api_key",
}
"""Wire name → stored name of what ``PUT /api/settings/qdrant`` takes (``embeddingModel`` is checked, never
stored: memroute embeds with its ``[embedding]`` source)."""
_STORED: Final = frozenset({"enabled", "host", "port", "collection", "quantization", "api_key"})
DEFAULT_PORT: Final = 6333
QUANTIZATIONS: Final = ("none", "int8", "binary")


def _collection_ok(name: str) -> bool:
    return 0 < len(name) <= 255 and all(c.isalnum() or c in "-_." for c in name)


def validate_qdrant_change(changes: Any, *, embedding_model: str | None) -> dict[str, Any]:
    """Strictly check a ``PUT /api/settings/qdrant`` body: the stored-name → value mapping to merge, or a
    :class:`ValidationError` naming every bad field. ``None`` (JSON ``null``) drops an override; ``apiKey: ""``
    stores "no key" (it removes a key configured in the file, too)."""
    if not isinstance(changes, Mapping):
        raise ValidationError("qdrant settings: expected a JSON object", [("(root)", "type")])
    problems: list[tuple[str, str]] = []
    out: dict[str, Any] = {}
    for wire, value in changes.items():
        name = QDRANT_FIELDS.get(wire)
        if name is None:
            problems.append((wire, f"unknown field (allowed: {', '.join(QDRANT_FIELDS)})"))
            continue
        if value is None:
            if name != "embedding_model":
                out[name] = None
            continue
        if name == "enabled" and not isinstance(value, bool):
            problems.append((wire, "expected a boolean"))
        elif name == "port" and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535):
            problems.append((wire, "expected an integer from 1 to 65535"))
        elif name not in ("enabled", "port") and not isinstance(value, str):
            problems.append((wire, "expected a string"))
        elif name == "host" and (not value.strip() or len(value) > 2048 or any(c.isspace() for c in value.strip())):
            problems.append((wire, "expected a host name or an http(s) URL"))
        elif name == "collection" and not _collection_ok(value):
            problems.append((wire, "expected a plain name (letters, digits, - _ .; 1 to 255 characters)"))
        elif name == "quantization" and value not in QUANTIZATIONS:
            problems.append((wire, f"expected one of {', '.join(QUANTIZATIONS)}"))
        elif name == "api_key" and (len(value) > 4096 or any(ord(c) < 0x20 for c in value)):
            problems.append((wire, "expected a printable string of at most 4096 characters"))
        elif name == "embedding_model":
            if value != embedding_model:
                problems.append((wire, f"memroute embeds with its [embedding] source ({embedding_model or 'none'}) "
                                       "for every vector store; change it in memroute.toml"))
        elif name == "host":
            try:
                qdrant_url(value.strip(), None)
            except ValidationError as exc:
                problems.append((wire, str(exc)))
            else:
                out[name] = value.strip()
        else:
            out[name] = value
    if problems:
        raise ValidationError("invalid qdrant settings:", problems)
    return out


def merge_qdrant_change(stored: Any, checked: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` overrides with a validated change applied (``None`` drops a field)."""
    merged = {k: v for k, v in (stored if isinstance(stored, Mapping) else {}).items() if k in _STORED}
    merged.update({k: v for k, v in checked.items() if k in _STORED})
    return {k: v for k, v in merged.items() if v is not None}


def qdrant_url(host: str, port: int | None) -> str:
    """``http://host:port`` from a host name or URL (the reference's rule: ``http://`` when there is no
    scheme, ``port`` (6333 by default) when the URL names none, no trailing slash)."""
    from memroute.config.netguard import BlockedUrlError, parse_url

    text = host.strip().rstrip("/")
    if "://" not in text:
        text = "http://" + text
    try:
        parsed = parse_url(text)
        parts = urlsplit(parsed.url)
    except (BlockedUrlError, ValueError) as exc:
        raise ValidationError(str(exc).replace("SSRF guard blocked request", "not a usable Qdrant URL"),
                              [("host", "invalid")]) from None
    if parts.query or parts.fragment:
        raise ValidationError("a Qdrant URL takes no query or fragment", [("host", "invalid")])
    netloc = parts.netloc if parts.port is not None else f"{parts.netloc}:{port or DEFAULT_PORT}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def _split(url: str | None) -> tuple[str | None, int | None]:
    if not url:
        return None, None
    parts = urlsplit(url)
    base = urlunsplit((parts.scheme, parts.hostname or "", parts.path, "", ""))
    return base, parts.port


def effective_vectors(base: VectorSettings, stored: Mapping[str, Any]) -> VectorSettings:
    """``[vectors]`` with the stored qdrant overrides applied (see the module docstring)."""
    configured_qdrant = base.store == "qdrant"
    if not stored or ("enabled" not in stored and not configured_qdrant):
        return base  # connection settings kept for later; the store stays the configured one
    if not stored.get("enabled", True):
        return base if not configured_qdrant else attrs.evolve(base, store="auto")
    options = dict(base.options.get("qdrant", {}))
    configured_host, configured_port = _split(options.get("url"))
    host = stored.get("host") or configured_host
    if host is not None and ("host" in stored or "port" in stored or configured_host):
        port = stored.get("port") or configured_port
        options["url"] = qdrant_url(host, port)
        options.pop("path", None)
        options.pop("location", None)
    for name in ("collection", "quantization"):
        if name in stored:
            options[name] = stored[name]
    if "api_key" in stored:
        options["api_key"] = stored["api_key"] or None
    return attrs.evolve(base, store="qdrant", options={**base.options, "qdrant": options})


def mask_secret(secret: str | None) -> str | None:
    """``"***" + last 4`` (the reference's mask) for a key long enough that four characters reveal little;
    ``"***"`` for a shorter one; ``None`` when there is none."""
    if not secret:
        return None
    return "***" + secret[-4:] if len(secret) >= 12 else "***"


class RuntimeVectorSettings:
    """The stored qdrant overrides as one process sees them: re-read at most every ``ttl_s`` seconds. Reading
    never raises: when the state store cannot be read, the last overrides read stay in effect (none at
    first) and a warning is logged."""

    def __init__(self, base: VectorSettings, store: Callable[[], StateStore], *,
                 ttl_s: float = RUNTIME_SETTINGS_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.base = base
        self._store = store
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stored: dict[str, Any] = {}
        self._fresh_until = float("-inf")

    def due(self) -> bool:
        """True when the cached overrides are older than ``ttl_s`` (cheap: one clock read)."""
        return self._clock() >= self._fresh_until

    def stored(self, *, fresh: bool = False) -> dict[str, Any]:
        if fresh or self.due():
            with self._lock:
                if fresh or self.due():
                    try:
                        value = self._store().get_value(*QDRANT_SETTINGS_KEY) or {}
                        if not isinstance(value, Mapping):
                            raise ValueError("settings/qdrant: expected a JSON object")
                        self._stored = {k: v for k, v in value.items() if k in _STORED}
                    except Exception as exc:  # fail open: keep what was in effect
                        log.warning("memroute: cannot read the runtime qdrant settings (%s: %s); keeping the "
                                    "last ones", type(exc).__name__, exc)
                    self._fresh_until = self._clock() + self.ttl_s
        return dict(self._stored)

    def effective(self, *, fresh: bool = False) -> VectorSettings:
        stored = self.stored(fresh=fresh)
        try:
            return effective_vectors(self.base, stored)
        except ValidationError as exc:  # a value this version refuses: the file's settings apply
            log.warning("memroute: ignoring the stored qdrant settings (%s)", exc)
            return self.base

    def remember(self, stored: Mapping[str, Any]) -> None:
        """What this process just stored (applies here at once)."""
        with self._lock:
            self._stored = dict(stored)
            self._fresh_until = self._clock() + self.ttl_s


SWITCH_RETRY_S: Final = 30.0
"""After a failed background switch (the new store could not be built or bound), how long a process keeps its
current store before trying again."""


class VectorSwitch:
    """One process's vector store as the runtime overrides want it. :meth:`poll` (called on the service's hot
    paths; one clock read when nothing is due) notices a change stored by another process and switches in a
    background thread, so no request waits for a new store to connect and bind; :meth:`update` is the
    ``PUT``: validate, probe, store (compare-and-swap), switch here at once."""

    def __init__(self, runtime: RuntimeVectorSettings, in_use: VectorSettings, *,
                 build: Callable[[VectorSettings], Any], engine: Any, state: Callable[[], StateStore]) -> None:
        self.runtime = runtime
        self.in_use = in_use
        self._build = build
        self._engine = engine
        self._state = state
        self._lock = threading.Lock()
        """Held by a switch (the PUT's, or the background one) for its whole length."""
        self._spawn = threading.Lock()
        self._thread: threading.Thread | None = None
        self._retry_at = float("-inf")
        self._closed = False
        self.last_error: str | None = None

    # --- following other processes' changes -----------------------------------------------------------
    def poll(self) -> None:
        if not self.runtime.due() or self._closed:
            return
        wanted = self.runtime.effective()
        if wanted == self.in_use or time.monotonic() < self._retry_at:
            return
        with self._spawn:  # never self._lock here: a switch in progress must not stall a request
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._follow, name="memroute-vector-switch", daemon=True)
            self._thread.start()

    def _follow(self) -> None:
        try:
            with self._lock:
                wanted = self.runtime.effective()
                if self._closed or wanted == self.in_use:
                    return
                store = self._build(wanted)
                if store is not None and self._engine.embedder is not None:
                    self._engine.replace_vector_store(store)
                elif store is not None:
                    store.close()
                else:
                    self._engine.replace_vector_store(None)
                self.in_use, self.last_error = wanted, None
                log.info("memroute: vector store switched to %s (runtime settings)", wanted.store)
        except Exception as exc:  # keep the store in use; say why and retry later
            self.last_error = f"cannot switch the vector store to the runtime settings: {type(exc).__name__}: {exc}"
            self._retry_at = time.monotonic() + SWITCH_RETRY_S
            log.warning("memroute: %s; keeping %s, retrying in %.0f s", self.last_error, self.in_use.store,
                        SWITCH_RETRY_S)

    def close(self) -> None:
        self._closed = True
        with self._spawn:
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)

    # --- the PUT ---------------------------------------------------------------------------------------
    def update(self, changes: Any) -> None:
        """Validate ``changes``, probe the target they make, store them (failing with
        :class:`~memroute.errors.ConflictError` when another process changed them meanwhile) and switch this
        process's store. A target that does not work is a :class:`ValidationError` on ``host``; nothing is
        stored then."""
        from memroute.errors import ConflictError

        checked = validate_qdrant_change(changes, embedding_model=self.embedding_model())
        before = self.runtime.stored(fresh=True)
        after = merge_qdrant_change(before, checked)
        wanted = effective_vectors(self.runtime.base, after)
        with self._lock:
            if self._closed:
                raise ConflictError("the service is closed")
            candidate = self._probe(wanted) if wanted != self.in_use else None

            def swap(current: Any) -> dict[str, Any]:
                if merge_qdrant_change(current, {}) != before:
                    raise ConflictError("the qdrant settings were changed by another request meanwhile; read "
                                        "them again and retry")
                return after

            try:
                self._state().update_value(*QDRANT_SETTINGS_KEY, swap)
            except BaseException:
                if candidate is not None:
                    candidate.close()
                raise
            self.runtime.remember(after)
            if wanted != self.in_use:
                if self._engine.embedder is not None:
                    self._engine.replace_vector_store(candidate)
                elif candidate is not None:
                    candidate.close()
                self.in_use, self.last_error = wanted, None

    def _probe(self, wanted: VectorSettings) -> Any:
        """The store ``wanted`` names, built, bound to the index's signature and searched for real (a
        connection test with the deployment's own embedding), or a :class:`ValidationError` on ``host``."""
        from memroute.config.netguard import check_url
        from memroute.errors import MemrouteError
        from memroute.models import SearchQuery

        url = wanted.options.get("qdrant", {}).get("url") if wanted.store == "qdrant" else None
        if wanted.store == "qdrant" and not url:
            raise ValidationError("host: a Qdrant server is needed (local mode, a folder one process locks, is "
                                  "configured only in memroute.toml)", [("host", "required")])
        where = url or wanted.store
        try:
            if url:
                check_url(url, allow_private=True)  # no cloud metadata, link-local or unresolvable hosts
            store = self._build(wanted)
        except MemrouteError as exc:
            raise ValidationError(f"qdrant probe failed: {where}: {exc}", [("host", f"unreachable: {exc}")]) from None
        if store is None:
            return None
        engine = self._engine
        try:
            if engine.embedder is None:
                health = store.health()
                if not health.ok:
                    raise ValueError(health.error or "unhealthy")
                return store
            store.bind(engine.index_signature())
            probe = SearchQuery(api_key_id="memroute-settings-probe", text="probe", strategy="semantic", limit=1)
            store.query(engine.embedder.embed_query("memroute settings probe"), probe, 1)
        except Exception as exc:
            store.close()
            raise ValidationError(f"qdrant probe failed: {where}: {type(exc).__name__}: {exc}",
                                  [("host", f"the probe search failed: {exc}")]) from None
        return store

    # --- the view --------------------------------------------------------------------------------------
    def embedding_model(self) -> str | None:
        model = (self._engine.resolution or {}).get("model")
        return str(model) if model else None

    def view(self) -> dict[str, Any]:
        """What ``GET /api/settings/qdrant`` shows (snake_case; never the key itself)."""
        stored = self.runtime.stored(fresh=True)
        wanted = effective_vectors(self.runtime.base, stored)
        shown = wanted if wanted.store == "qdrant" else effective_vectors(self.runtime.base,
                                                                          {**stored, "enabled": True})
        options = shown.options.get("qdrant", {})
        host, port = _split(options.get("url"))
        engine = self._engine
        store = engine.vector_store
        active = getattr(store, "store_name", None) == "qdrant"
        described = store.describe() if active and callable(getattr(store, "describe", None)) else {}
        indexer = engine.indexer if active else None
        return {
            "enabled": wanted.store == "qdrant", "active": active, "switching": wanted != self.in_use,
            "host": host, "port": port if port is not None else (DEFAULT_PORT if host else None),
            "collection": options.get("collection", "memroute_memories"),
            "embedding_model": self.embedding_model(),
            "quantization": options.get("quantization") or described.get("quantization"),
            "has_api_key": bool(options.get("api_key")), "api_key_masked": mask_secret(options.get("api_key")),
            "mode": described.get("mode"), "target": described.get("target"),
            "signature": described.get("signature"),
            "available": active and indexer is not None,
            "rows": store.count() if active and indexer is not None else 0,
            "pending_reindex": indexer.depth() if indexer is not None else 0,
            "last_error": self.last_error or (indexer.last_error if indexer is not None else None),
            "overrides": tuple(wire for wire, name in QDRANT_FIELDS.items() if name in stored),
        }


def open_retrieval(settings: MemrouteSettings, manager: Any, plugins: Any, state_dir: Path,
                   embedder: EmbeddingSource | None, state: Callable[[], StateStore]) -> tuple[Any, VectorSwitch]:
    """The service's retrieval engine, its vector store chosen with the stored runtime qdrant settings
    applied, and the switcher that follows later changes. A stored choice that cannot be built now (Qdrant
    down at start-up) leaves ``[vectors]`` in use, with a warning; the switcher tries again later."""
    from memroute.errors import MemrouteError
    from memroute.retrieval.build import build_retrieval, build_vector_store

    runtime = RuntimeVectorSettings(settings.vectors, state)
    wanted = runtime.effective(fresh=True)
    try:
        engine = build_retrieval(manager, attrs.evolve(settings, vectors=wanted), plugins, state_dir,
                                 embedder=embedder)
        in_use = wanted
    except MemrouteError as exc:
        if wanted == settings.vectors:
            raise
        log.warning("memroute: the runtime vector store settings do not open (%s); using [vectors]", exc)
        engine = build_retrieval(manager, settings, plugins, state_dir, embedder=embedder)
        in_use = settings.vectors

    def build(vectors: VectorSettings) -> Any:
        return build_vector_store(attrs.evolve(settings, vectors=vectors), plugins, state_dir, manager.primary)[0]

    return engine, VectorSwitch(runtime, in_use, build=build, engine=engine, state=state)
