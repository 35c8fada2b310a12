"""memroute's settings: attrs classes with the reference system's names and defaults, loaded from
``memroute.toml``, overridden by environment variables, then by keyword overrides.

Precedence (lowest first): defaults → the reference's own variables that map to a setting
(``QDRANT_HOST``, ...: :mod:`memroute.config.omniroute`) → the TOML file (``--config``, ``MEMROUTE_CONFIG``, or
``./memroute.toml``) → environment variables (``MEMROUTE_*`` and the reference's ``MEMORY_*``) →
``memroute.open(**overrides)``. ``"${VAR}"`` (or ``"${VAR:-default}"``) inside a string expands from the
environment.
"""

from __future__ import annotations

import copy
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import platformdirs

from memroute.config.omniroute import backend_env_defaults, reference_env_layer, warn_ignored
from memroute.config.serialization import structure_config
from memroute.errors import ConfigError
from memroute.models import MAX_CONTENT_CHARS, MAX_METADATA_BYTES, MAX_METADATA_DEPTH, STRATEGY_ALIASES, MemoryType

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = [
    "ENV_VARS",
    "BackendsSettings",
    "ComponentConfig",
    "EmbeddingSettings",
    "ExtractionSettings",
    "LimitsSettings",
    "ManagerSettings",
    "McpSettings",
    "MemorySettings",
    "MemrouteSettings",
    "ProxySettings",
    "RerankSettings",
    "ServerSettings",
    "TypeRetention",
    "UpstreamSettings",
    "VectorSettings",
    "default_data_dir",
    "find_config_file",
    "load_settings",
    "structure_options",
]


def _range(low: float, high: float) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not low <= value <= high:
            raise ConfigError(f"must be in [{low:g}, {high:g}], got {value!r}", [(attribute.name, "range")])

    return check


def _choice(*allowed: str) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in allowed:
            raise ConfigError(f"must be one of {', '.join(allowed)}, got {value!r}", [(attribute.name, "invalid")])

    return check


def _strategy(value: str) -> str:
    # The reference's settings name is "recent"; retrieval calls it "exact". Accept every spelling of
    # STRATEGY_ALIASES and keep the reference's.
    return "recent" if STRATEGY_ALIASES.get(value) == "exact" else value


def _optional_days(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        _range(0, 36_500)(_inst, attribute, value)


@attrs.frozen(kw_only=True)
class TypeRetention:
    """``[memory.types.<type>]``: the retention of one memory type; unset fields take the ``[memory]`` ones."""

    retention_days: int | None = attrs.field(default=None, validator=_optional_days)
    """The retrieval window of this type in days (0: none)."""
    delete_after_days: int | None = attrs.field(default=None, validator=_optional_days)
    """Delete memories of this type after this many days (0: never)."""


def _type_names(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    known = {t.value for t in MemoryType}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(f"unknown memory type(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})",
                          [(f"{attribute.name}.{name}", "unknown type") for name in unknown])


@attrs.frozen(kw_only=True)
class MemorySettings:
    """``[memory]``: the reference system's settings (reference §12), with the same names and defaults."""

    enabled: bool = False
    """Inject memories into requests and extract facts from them (the reference defaults this off)."""
    max_tokens: int = attrs.field(default=2000, validator=_range(0, 16000))
    """Token budget of the injected memory block (estimate ``ceil(len/4)``); 0 disables injection."""
    retention_days: int = attrs.field(default=0, validator=_range(0, 36_500))
    """The retrieval window (the reference's ``retentionDays``): memories created longer ago than this many days
    are not retrieved, only hidden (nothing is deleted because of it). 0, the default: no window, so a fact
    stated years ago is still found. ``[memory.types.<type>] retention_days`` sets it per memory type."""
    delete_after_days: int = attrs.field(default=0, validator=_range(0, 36_500))
    """Hard deletion: ``memroute prune`` and the server's scheduled prune delete memories created longer ago than
    this many days. 0, the default: never (an operator turns deletion on; see docs/pipeline.md, "Retention").
    ``[memory.types.<type>] delete_after_days`` sets it per memory type."""
    types: dict[str, TypeRetention] = attrs.field(factory=dict, hash=False, validator=_type_names)
    """Per memory type (``factual``, ``episodic``, ``procedural``, ``semantic``): ``retention_days`` and
    ``delete_after_days`` that replace the two above for that type. Left out of the hash (not of equality): a
    dict cannot be hashed, and equal settings still hash alike."""
    strategy: str = attrs.field(
        default="hybrid", converter=_strategy, validator=_choice("recent", "semantic", "hybrid")
    )
    """Retrieval strategy: ``recent`` (newest first), ``semantic`` or ``hybrid`` (keyword + vector)."""
    fusion: str = attrs.field(default="score", validator=_choice("score", "rrf"))
    """How hybrid search fuses its legs: ``score`` (score-aware, calibrated per embedding model) or ``rrf``
    (weighted Reciprocal Rank Fusion with ``rrf_k``). See docs/retrieval.md, "Fusion"."""
    keyword_weight: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(_range(0.0, 100.0)))
    """The keyword leg's weight in score fusion; unset means the embedding source's calibrated value."""
    rrf_k: int = attrs.field(default=60, validator=_range(1, 100_000))
    """Reciprocal Rank Fusion constant ``k`` (``MEMORY_RRF_K``), for ``fusion = "rrf"``."""
    vec_top_k: int = attrs.field(default=20, validator=_range(1, 1000))
    """Default number of vector-leg candidates (``MEMORY_VEC_TOP_K``)."""
    min_score: float = attrs.field(default=0.18, validator=_range(0.0, 1.0))
    """The relevance floor (``MEMORY_MIN_SCORE``): a semantic or hybrid search, ``augment`` and the preview
    leave out memories whose relevance (a calibrated score in [0, 1], docs/retrieval.md, "Score and floor")
    is below it; 0 turns it off. The default hides at most 3 % of the answers ranked in the top 5 on the
    benchmark's dev split (:data:`memroute.retrieval.relevance.DEFAULT_MIN_SCORE`)."""
    question_cues: bool = True
    """Read the time and the people a question names ("what did I say yesterday", "what did Maria say about
    the move") and prefer the memories said then, or by them (docs/retrieval.md, "Time and people in
    questions"); false searches the question's words alone."""
    rerank_enabled: bool = False
    """Re-score the top fused candidates of semantic / hybrid searches with the ``[rerank]`` reranker (the
    reference's ``rerankEnabled``; off by default: see docs/retrieval.md, "Reranking")."""
    rerank_provider_model: str | None = None
    """The reranker's model, e.g. ``"jina-reranker-v2-base-multilingual"`` (the reference's
    ``rerankProviderModel``); a reranker whose options name a ``model`` uses that instead."""
    typed_decay_enabled: bool = False
    """Opt-in typed decay (reference §16): episodic memories expire unless accessed often."""
    typed_decay_episodic_days: int = attrs.field(default=30, validator=_range(1, 3650))
    typed_decay_access_immunity: int = attrs.field(default=3, validator=_range(0, 1_000_000))
    typed_decay_sweep_interval: int = attrs.field(default=0, validator=_range(0, 365 * 86_400))
    """Seconds between the typed-decay sweeps ``memroute serve`` runs (``MEMORY_TYPED_DECAY_SWEEP_INTERVAL``);
    0 disables the sweep. Needs ``typed_decay_enabled``."""

    def window_days(self, type: str) -> int:
        """The retrieval window of memories of ``type`` in days; 0: none."""
        override = self.types.get(type)
        days = override.retention_days if override is not None else None
        return self.retention_days if days is None else days

    def delete_after(self, type: str) -> int:
        """After how many days ``prune`` deletes memories of ``type``; 0: never."""
        override = self.types.get(type)
        days = override.delete_after_days if override is not None else None
        return self.delete_after_days if days is None else days

    @property
    def deletes_by_age(self) -> bool:
        """Whether an operator configured deletion by age for any memory type (or typed decay, which deletes
        stale episodic memories): without it, ``prune`` deletes only memories whose own expiry passed."""
        return self.typed_decay_enabled or any(self.delete_after(t.value) > 0 for t in MemoryType)

    def search_windows(self) -> tuple[int | None, dict[str, int]]:
        """The retrieval windows as a search applies them: the widest one (``None``: some type has none), which
        every backend and vector store filters on, and the per-type windows narrower than it, which the
        retrieval engine applies to each candidate (:attr:`memroute.models.SearchQuery.type_windows`)."""
        windows = {t.value: self.window_days(t.value) for t in MemoryType}
        widest = None if 0 in windows.values() else max(windows.values())
        narrower = {t: d for t, d in windows.items() if d > 0 and (widest is None or d < widest)}
        return widest, narrower


@attrs.frozen(kw_only=True)
class ComponentConfig:
    """One configured component instance: the plugin name and its still-unstructured options."""

    type: str
    options: dict[str, Any] = attrs.field(factory=dict)
    db_path: str | None = None
    """The primary's database path from ``MEMROUTE_DB`` / ``load_settings(db_path=...)``. Building the backend
    writes it into the option its spec names (``BackendSpec.path_option``); a backend without one refuses
    it with a :class:`ConfigError`."""


def _default_instances() -> dict[str, ComponentConfig]:
    return {"main": ComponentConfig(type="sqlite")}


@attrs.frozen(kw_only=True)
class BackendsSettings:
    """``[backends]``: ``primary``, ordered ``fallbacks``, and one ``[backends.NAME]`` table per instance."""

    primary: str = "main"
    fallbacks: tuple[str, ...] = ()
    instances: dict[str, ComponentConfig] = attrs.field(factory=_default_instances)

    def __attrs_post_init__(self) -> None:
        names = [self.primary, *self.fallbacks]
        for name in names:
            if name not in self.instances:
                defined = ", ".join(sorted(self.instances)) or "none"
                raise ValueError(f"backend {name!r} has no [backends.{name}] table (defined: {defined})")
        if len(set(names)) != len(names):
            raise ValueError("a backend appears more than once in primary + fallbacks")


@attrs.frozen(kw_only=True)
class EmbeddingSettings:
    """``[embedding]``: which source embeds text, plus options (``[embedding.<source>]`` tables, or flat
    keys for the selected source)."""

    source: str = "auto"
    """``auto`` | ``none`` | ``static`` | ``transformers`` | ``remote`` | any installed source plugin."""
    static_enabled: bool = True
    """``auto`` may pick the static source (memroute ships its weights, so this defaults on)."""
    transformers_enabled: bool = False
    """``auto`` may pick the local transformers (ONNX) source."""
    cache_max: int = attrs.field(default=1000, validator=_range(0, 10_000_000))
    """Entries in the embedding LRU cache (``MEMORY_EMBEDDING_CACHE_MAX``); 0 disables it."""
    cache_ttl_ms: int = attrs.field(default=300_000, validator=_range(0, 10**10))
    """Cache entry lifetime in ms (``MEMORY_EMBEDDING_CACHE_TTL_MS``)."""
    options: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    """Per-source options, by source name."""


@attrs.frozen(kw_only=True)
class VectorSettings:
    """``[vectors]``: which vector store indexes embeddings, plus its options."""

    store: str = "auto"
    """``auto`` (sqlite-vec when an embedding source resolves) | ``none`` | ``sqlite-vec`` | ``qdrant`` |
    ``pgvector`` | a plugin."""
    quantization: str = attrs.field(default="float32", validator=_choice("float32", "int8", "binary"))
    """Vector quantisation (``MEMORY_VEC_QUANTIZATION``)."""
    options: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    """Per-store options, by store name."""


@attrs.frozen(kw_only=True)
class ExtractionSettings:
    """``[extraction]``: the chain of fact extractors run by ``observe``."""

    extractors: tuple[str, ...] = ("everyday",)
    """The extractor chain: ``everyday`` (what people say about themselves, with slot keys) by default;
    ``regex`` (the reference's preference / decision / habit patterns) can be chosen or chained."""
    mine_assistant: bool = False
    """Also mine the assistant's reply (off: "I always recommend…" in a reply is not a fact about the user)."""
    consolidate: bool = True
    """Consolidate each extracted fact against what the tenant holds (docs/pipeline.md, "Consolidation"): the
    same key with other content is superseded; near-identical content under another key is updated in place."""
    restate_similarity: float = attrs.field(default=0.8, validator=_range(0.0, 1.0))
    """The cosine similarity (of the tenant's embedding vectors) from which a fact restates a memory of the same
    type stored under another key. Only with an embedding source; without one, only the same key consolidates."""
    keep_turns: str = attrs.field(default="salient", validator=_choice("salient", "all", "none"))
    """Which user messages ``observe`` keeps as ``episodic`` memories: ``salient`` (those that say something
    about the user or their world), ``all``, or ``none`` (facts only)."""
    turn_max_chars: int = attrs.field(default=2000, validator=_range(200, 100_000))
    """A kept message longer than this is split at sentence boundaries into parts of at most this size."""
    options: dict[str, dict[str, Any]] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class RerankSettings:
    """``[rerank]``: which reranker plugin re-scores results when ``[memory] rerank_enabled`` is set, how many
    fused candidates it sees, and its options (flat keys, or a ``[rerank.<name>]`` table)."""

    reranker: str = "remote"
    """The reranker plugin's name (``remote``: any Cohere / Jina-style ``/rerank`` endpoint)."""
    candidates: int = attrs.field(default=30, validator=_range(1, 200))
    """How many of the best fused candidates are sent to the reranker; the rest follow in fused order."""
    options: dict[str, dict[str, Any]] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ManagerSettings:
    """``[manager]``: routing, health checks, circuit breaker and the durable outbox."""

    outbox_path: str | None = None
    """The outbox's SQLite file (default: ``outbox.db`` in the data directory)."""
    health_interval_s: float = attrs.field(default=30.0, validator=_range(0, 86_400))
    """Seconds between scheduled health checks; 0 disables the schedule."""
    breaker_failures: int = attrs.field(default=3, validator=_range(1, 1000))
    """Consecutive failures that open a backend's circuit breaker."""
    breaker_reset_s: float = attrs.field(default=15.0, validator=_range(0, 86_400))
    """Seconds an open breaker waits before letting one probe through."""
    retry_base_s: float = attrs.field(default=0.5, validator=_range(0, 3600))
    """First outbox retry delay; doubles per attempt up to ``retry_max_s``."""
    retry_max_s: float = attrs.field(default=60.0, validator=_range(0, 86_400))
    operation_timeout_s: float = attrs.field(default=30.0, validator=_range(0.01, 3600))
    """A backend call that takes longer counts as a failure (the call is abandoned, not killed)."""
    access_flush_interval_s: float = attrs.field(default=1.0, validator=_range(0, 3600))
    """Seconds between background writes of the batched access telemetry (``access_count``,
    ``last_accessed_at``) to the primary; 0 writes it only on ``flush()`` and ``close()``."""


def _field_paths(_inst: Any, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for path in value:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", path):
            raise ConfigError(f"{attribute.name}: {path!r} is not a dotted field path (like metadata.user_id)",
                              [(attribute.name, "invalid")])


def _origins(_inst: Any, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for origin in value:
        if origin != "*" and not re.match(r"^https?://[^/\s]+$", origin):
            raise ConfigError(f"must be origins like https://app.example.com (no path) or \"*\", got {origin!r}",
                              [(attribute.name, "invalid")])


@attrs.frozen(kw_only=True)
class ServerSettings:
    """``[server]``: how ``memroute serve`` listens and guards its HTTP surface (``docs/server.md``)."""

    host: str = "127.0.0.1"
    """Interface to bind (loopback by default; put a reverse proxy in front to expose it)."""
    port: int = attrs.field(default=8765, validator=_range(0, 65535))
    """TCP port (0 picks a free one)."""
    workers: int = attrs.field(default=1, validator=_range(1, 256))
    """Worker processes; each opens its own service on the same deployment."""
    cors_origins: tuple[str, ...] = attrs.field(default=(), validator=_origins)
    """Origins allowed to call the API from a browser. Empty (the default): no CORS headers at all."""
    allowed_hosts: tuple[str, ...] = ()
    """``Host`` header values accepted (e.g. ``["memory.example.com"]``); empty accepts any."""
    max_body_bytes: int = attrs.field(default=1_048_576, validator=_range(1024, 2**40))
    """Largest request body accepted (413 beyond it), except on the import route."""
    max_import_bytes: int = attrs.field(default=67_108_864, validator=_range(1024, 2**40))
    """Largest body ``POST /api/memory/import`` accepts."""
    max_json_depth: int = attrs.field(default=64, validator=_range(2, 500))
    """Deepest nesting of arrays and objects a JSON body may have (400 beyond it), checked before any parser
    recurses into it. memroute's own bodies nest a handful of levels; memory metadata at most 32."""
    body_timeout_s: float = attrs.field(default=30.0, validator=_range(0.1, 86_400))
    """Seconds a client may take to send its whole request body (408 after): a slow sender holds a connection."""
    header_timeout_s: float = attrs.field(default=10.0, validator=_range(0.1, 3600))
    """Seconds a client may take to send a request's headers (the connection is closed after)."""
    idle_timeout_s: float = attrs.field(default=5.0, validator=_range(0.1, 3600))
    """Seconds an idle keep-alive connection stays open."""
    requests_per_minute: int = attrs.field(default=60_000, validator=_range(0, 10**9))
    """Requests one API key may make a minute, across every process of the deployment (429 after); 0:
    unlimited. A key can have its own (``memroute keys limits``)."""
    concurrent_requests: int = attrs.field(default=64, validator=_range(0, 10**9))
    """Requests one API key may have in flight at once, across every process of the deployment (429 beyond);
    0: unlimited."""
    concurrency_lease_s: float = attrs.field(default=30.0, validator=_range(1, 3600))
    """How long a process's claim on a key's concurrency slots lasts in the state store unless renewed (every
    third of it): the slots of a process that died come free this long after."""
    fair_queueing: bool = True
    """Serve the requests waiting for the event loop round-robin across API keys, not first come, first served:
    one key's backlog never waits in front of another key's request (``memroute.server.fair_queue``). Their
    calls in worker threads are shared by key too, the light key first (:class:`memroute.aio.FairShares`);
    off, both are first come, first served."""
    queued_requests: int = attrs.field(default=64, validator=_range(0, 10**9))
    """Requests of one API key that may wait for their turn on the event loop in one server process (429
    beyond); 0: unlimited. Only reached while other requests hold the loop."""
    request_timeout_s: float = attrs.field(default=60.0, validator=_range(0.1, 86_400))
    """Seconds a request may take before its response starts (504 after); streams then run to the end."""
    maintenance_interval_s: float = attrs.field(default=3600.0, validator=_range(0, 365 * 86_400))
    """Seconds between scheduled prunes (one process of the deployment at a time); 0 disables. A prune deletes
    only what was configured to go: expired memories, and memories past ``[memory] delete_after_days``."""
    maintenance_first_delay_s: float = attrs.field(default=3600.0, validator=_range(0, 365 * 86_400))
    """Seconds after start-up before the scheduled jobs may run for the first time (never at start-up: a
    server started on an imported or restored database gives the operator time to look first)."""
    inline_search_ms: float = attrs.field(default=4.0, validator=_range(0, 1000))
    """``POST /api/memory/search`` runs on the event loop, without a thread hop, for a tenant whose recent
    searches took at most this many milliseconds (on average), when every component works in this process;
    longer ones, and any deployment that waits on a server, go to a worker thread. 0: always a thread."""
    ssl_certfile: str | None = None
    """TLS certificate (PEM) for uvicorn; with ``ssl_keyfile`` the server speaks HTTPS."""
    ssl_keyfile: str | None = None
    """TLS private key (PEM)."""
    graceful_timeout_s: float = attrs.field(default=10.0, validator=_range(0, 3600))
    """On shutdown, seconds to let requests finish and background work flush."""


def _upstream_url(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    from memroute.config.netguard import BlockedUrlError, parse_url

    try:
        parse_url(value)
    except BlockedUrlError as exc:
        raise ConfigError(f"{attribute.name}: {exc}", [(attribute.name, "invalid URL")]) from None


@attrs.frozen(kw_only=True)
class UpstreamSettings:
    """``[proxy.openai]`` / ``[proxy.anthropic]``: the model API the proxy forwards to, with memroute's own
    credential (the caller's memroute key is never forwarded)."""

    base_url: str | None = attrs.field(default=None, validator=_upstream_url)
    """Where requests go (OpenAI-style: including ``/v1``; Anthropic-style: without). Unset: the routes answer 503."""
    api_key: str | None = attrs.field(default=None, repr=False)
    """memroute's credential for the upstream (``"${OPENAI_API_KEY}"``); unset sends none (a local server)."""
    timeout: float = attrs.field(default=600.0, validator=_range(0.1, 86_400))
    """Seconds to wait for the upstream's next bytes (the whole reply, when not streamed): then 504."""
    connect_timeout: float = attrs.field(default=10.0, validator=_range(0.1, 3600))
    """Seconds to wait for a connection to the upstream; also the longest a request waits for one of
    ``max_connections`` to come free (then 504)."""
    max_connections: int = attrs.field(default=100, validator=_range(1, 10_000))
    """Connections open to the upstream at most (idle and in use; per address it resolves to): more requests
    wait for one to come free."""
    allow_private: bool = False
    """Allow loopback / private / CGNAT upstream addresses (a local Ollama, a vLLM on the LAN)."""
    provider: str | None = None
    """The provider id placement rules use (``glm``, ``o1``, ...); unset: the request's ``model``."""


@attrs.frozen(kw_only=True)
class ProxySettings:
    """``[proxy]``: the OpenAI- and Anthropic-compatible memory proxy inside ``memroute serve``."""

    openai: UpstreamSettings = attrs.field(factory=UpstreamSettings)
    """Upstream of ``/v1/chat/completions``, ``/v1/responses`` and ``/v1/models``."""
    anthropic: UpstreamSettings = attrs.field(factory=UpstreamSettings)
    """Upstream of ``/v1/messages`` (and of ``/v1/models`` for Anthropic clients)."""
    max_body_bytes: int = attrs.field(default=33_554_432, validator=_range(1024, 2**40))
    """Largest request body the proxy routes accept (413 beyond it): chat requests carry images and long contexts."""
    memory_timeout_s: float = attrs.field(default=5.0, validator=_range(0.01, 3600))
    """Longest a request waits for its memories (retrieval + injection); then it goes out without them."""
    inline_search_ms: float = attrs.field(default=10.0, validator=_range(0, 1000))
    """Search on the event loop (no thread hop, not bounded by ``memory_timeout_s``) for a tenant whose recent
    augments averaged at most this, when every component works in this process; 0: always a worker thread."""
    end_user_fields: tuple[str, ...] = attrs.field(default=("user", "metadata.user_id"), validator=_field_paths)
    """For an app key (``--end-users``) without an ``x-memroute-user`` header: the request body fields that name
    the end user, first present wins (dotted paths: OpenAI's ``user`` and ``metadata.user_id``, Anthropic's
    ``metadata.user_id``); ``[]`` accepts the header only. Ignored for other keys."""
    server_timing: bool = True
    """Add a ``Server-Timing`` header to proxied answers: how long memroute's memory step and the upstream took
    (``memroute-memory;dur=…;desc="search"``, ``memroute-upstream;dur=…``), after any the upstream sent."""


@attrs.frozen(kw_only=True)
class LimitsSettings:
    """``[limits]``: how large one memory may be. Checked by the service on add, update and import, before
    any backend is called; a larger input is a ``ValidationError`` naming the field and the limit."""

    max_content_chars: int = attrs.field(default=MAX_CONTENT_CHARS, validator=_range(1, MAX_CONTENT_CHARS))
    """Characters of ``content`` (the model's ceiling is 1,000,000)."""
    max_metadata_bytes: int = attrs.field(default=65_536, validator=_range(2, MAX_METADATA_BYTES))
    """Bytes of ``metadata`` serialised as UTF-8 JSON (the model's ceiling is 1 MiB)."""
    max_metadata_depth: int = attrs.field(default=16, validator=_range(1, MAX_METADATA_DEPTH))
    """Nesting levels of ``metadata`` (a flat object is 1; the model's ceiling is 32)."""
    max_memories_per_tenant: int = attrs.field(default=1_000_000, validator=_range(0, 2**62))
    """Memories one tenant may hold (403 for a write past it); 0: unlimited."""
    max_bytes_per_tenant: int = attrs.field(default=0, validator=_range(0, 2**62))
    """Bytes of content and metadata one tenant may hold (403 past it); 0 (the default): unlimited. Checking it
    reads a tenant's memories about once a minute per process while it writes."""


@attrs.frozen(kw_only=True)
class McpSettings:
    """``[mcp]``: the MCP endpoint ``/mcp`` of ``memroute serve`` (docs/mcp.md)."""

    dns_rebinding_protection: bool = True
    """Check the ``Host`` and ``Origin`` of every ``/mcp`` request (421 / 403 otherwise), so a web page cannot
    reach a local memroute through a rebound DNS name. Loopback names are always accepted."""
    allowed_hosts: tuple[str, ...] = ()
    """More ``Host`` values ``/mcp`` accepts besides loopback and ``[server] allowed_hosts``: ``name``,
    ``name:port`` or ``name:*`` (any port)."""
    allowed_origins: tuple[str, ...] = ()
    """``Origin`` values accepted from browsers besides loopback ones (``https://app.example.com``; a ``:*``
    suffix allows any port). Requests without an ``Origin`` (every non-browser client) are not affected."""
    omniroute_tools: bool = True
    """Also serve ``omniroute_memory_search`` / ``_add`` / ``_clear``, the tools of the system memroute
    re-implements, with its argument names, so agents written for it keep working (docs/omniroute-compatibility.md,
    "MCP tool aliases"). The tenant still comes from the key. ``false`` serves memroute's own tools only."""
    resource_url: str | None = None
    """The public URL of ``/mcp``, announced in the OAuth protected-resource metadata and the 401's
    ``WWW-Authenticate`` (default: ``http://<server.host>:<server.port>/mcp``). Set it behind a reverse proxy."""


@attrs.frozen(kw_only=True)
class MemrouteSettings:
    """Everything memroute is configured with."""

    data_dir: str | None = None
    """Where memroute keeps its files (default: the platform's user data directory for ``memroute``)."""
    memory: MemorySettings = attrs.field(factory=MemorySettings)
    backends: BackendsSettings = attrs.field(factory=BackendsSettings)
    embedding: EmbeddingSettings = attrs.field(factory=EmbeddingSettings)
    vectors: VectorSettings = attrs.field(factory=VectorSettings)
    extraction: ExtractionSettings = attrs.field(factory=ExtractionSettings)
    rerank: RerankSettings = attrs.field(factory=RerankSettings)
    manager: ManagerSettings = attrs.field(factory=ManagerSettings)
    server: ServerSettings = attrs.field(factory=ServerSettings)
    limits: LimitsSettings = attrs.field(factory=LimitsSettings)
    proxy: ProxySettings = attrs.field(factory=ProxySettings)
    mcp: McpSettings = attrs.field(factory=McpSettings)

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser() if self.data_dir else default_data_dir()


def default_data_dir() -> Path:
    """The platform's user data directory for memroute (``MEMROUTE_DATA_DIR`` overrides it)."""
    env = os.environ.get("MEMROUTE_DATA_DIR")
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir("memroute", appauthor=False))


# --- environment ---------------------------------------------------------------------------------------

ENV_VARS: Final[dict[str, tuple[str, ...]]] = {
    "MEMROUTE_DATA_DIR": ("data_dir",),
    "MEMORY_ENABLED": ("memory", "enabled"),
    "MEMORY_MAX_TOKENS": ("memory", "max_tokens"),
    "MEMORY_RETENTION_DAYS": ("memory", "retention_days"),
    "MEMROUTE_DELETE_AFTER_DAYS": ("memory", "delete_after_days"),
    "MEMORY_STRATEGY": ("memory", "strategy"),
    "MEMORY_RRF_K": ("memory", "rrf_k"),
    "MEMORY_MIN_SCORE": ("memory", "min_score"),
    "MEMORY_VEC_TOP_K": ("memory", "vec_top_k"),
    "MEMORY_TYPED_DECAY_ENABLED": ("memory", "typed_decay_enabled"),
    "MEMORY_TYPED_DECAY_EPISODIC_DAYS": ("memory", "typed_decay_episodic_days"),
    "MEMORY_TYPED_DECAY_ACCESS_IMMUNITY": ("memory", "typed_decay_access_immunity"),
    "MEMORY_TYPED_DECAY_SWEEP_INTERVAL": ("memory", "typed_decay_sweep_interval"),
    "MEMORY_EMBEDDING_SOURCE": ("embedding", "source"),
    "MEMORY_STATIC_ENABLED": ("embedding", "static_enabled"),
    "MEMORY_TRANSFORMERS_ENABLED": ("embedding", "transformers_enabled"),
    "MEMORY_EMBEDDING_CACHE_MAX": ("embedding", "cache_max"),
    "MEMORY_EMBEDDING_CACHE_TTL_MS": ("embedding", "cache_ttl_ms"),
    "MEMORY_VECTOR_STORE": ("vectors", "store"),
    "MEMORY_VEC_QUANTIZATION": ("vectors", "quantization"),
    "MEMROUTE_PRIMARY_BACKEND": ("backends", "primary"),
    "MEMROUTE_FALLBACK_BACKENDS": ("backends", "fallbacks"),
}
"""Environment variables and the setting each overrides (dotted path)."""


def _env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    for var, path in ENV_VARS.items():
        if var not in environ or environ[var] == "":
            continue
        value: Any = environ[var]
        if var == "MEMROUTE_FALLBACK_BACKENDS":
            value = [part.strip() for part in value.split(",") if part.strip()]
        if var == "MEMORY_VEC_QUANTIZATION" and value not in ("int8", "binary"):
            value = "float32"  # the reference: anything but int8 means none
        _set_path(layer, path, value)
    if environ.get("VECTOR_STORE_DISABLE_VEC", "").strip().lower() == "true":
        _set_path(layer, ("vectors", "store"), "none")
    if environ.get("MEMROUTE_DB"):
        layer.setdefault("_db_path", environ["MEMROUTE_DB"])
    return layer


def _set_path(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        target = target.setdefault(part, {})
    target[path[-1]] = value


# --- file loading --------------------------------------------------------------------------------------

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(value: Any, environ: Mapping[str, str], path: str) -> Any:
    if isinstance(value, str):
        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in environ:
                return environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{path}: environment variable {name} is not set", [(path, f"${{{name}}} unset")])

        return _ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, environ, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, environ, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def find_config_file(explicit: str | os.PathLike[str] | None = None,
                     environ: Mapping[str, str] | None = None) -> Path | None:
    """The config file to read: ``explicit``, else ``MEMROUTE_CONFIG``, else ``./memroute.toml`` if present."""
    environ = os.environ if environ is None else environ
    if explicit is not None:
        return Path(explicit).expanduser()
    if environ.get("MEMROUTE_CONFIG"):
        return Path(environ["MEMROUTE_CONFIG"]).expanduser()
    local = Path.cwd() / "memroute.toml"
    return local if local.is_file() else None


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}", [("(file)", "not found")]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}", [("(file)", str(exc))]) from None
    except RecursionError:
        raise ConfigError(f"{path}: not usable TOML: nested too deeply", [("(file)", "too deep")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start})",
                          [("(file)", "encoding")]) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}", [("(file)", str(exc))]) from None


def _deep_merge(base: dict[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


_SECTION_RESERVED: Final = {
    "embedding": ("source", "static_enabled", "transformers_enabled", "cache_max", "cache_ttl_ms", "options"),
    "vectors": ("store", "quantization", "options"),
    "extraction": ("extractors", "mine_assistant", "keep_turns", "turn_max_chars", "consolidate", "restate_similarity",
                   "options"),
    "rerank": ("reranker", "candidates", "options"),
}


def _selector_default(section_name: str) -> Any:
    sections = {"embedding": (EmbeddingSettings, "source"), "vectors": (VectorSettings, "store"),
                "rerank": (RerankSettings, "reranker")}
    if section_name not in sections:
        return None
    cls, field = sections[section_name]
    return getattr(attrs.fields(cls), field).default


def _normalise(raw: Mapping[str, Any]) -> dict[str, Any]:
    """From the TOML shape to the attrs shape: backend instance tables go under ``instances``; flat component
    options go under ``options[<selected name>]`` and sub-tables under ``options[<table name>]``."""
    data = dict(raw)
    backends = data.get("backends")
    if backends is not None:
        if not isinstance(backends, Mapping):
            raise ConfigError("backends: expected a table", [("backends", "type")])
        section = {k: v for k, v in backends.items() if k in ("primary", "fallbacks", "instances")}
        instances = dict(section.get("instances") or {})
        for name, table in backends.items():
            if name in ("primary", "fallbacks", "instances"):
                continue
            if not isinstance(table, Mapping):
                raise ConfigError(f"backends.{name}: expected a [backends.{name}] table",
                                  [(f"backends.{name}", "expected a table")])
            instances[name] = table
        for name, table in list(instances.items()):
            if isinstance(table, ComponentConfig):
                continue
            if not isinstance(table, Mapping) or "type" not in table:
                raise ConfigError(f"backends.{name}.type: required (the backend plugin's name)",
                                  [(f"backends.{name}.type", "required")])
            if "options" in table and set(table) <= {"type", "options", "db_path"}:
                instances[name] = {**table, "options": dict(table["options"])}
            else:
                instances[name] = {"type": table["type"], "options": {k: v for k, v in table.items() if k != "type"}}
        if instances:
            section["instances"] = instances
        data["backends"] = section
    for section_name, reserved in _SECTION_RESERVED.items():
        component_section = data.get(section_name)
        if not isinstance(component_section, Mapping):
            continue
        section = dict(component_section)
        selector = reserved[0]
        fixed = {k: v for k, v in section.items() if k in reserved}
        options: dict[str, Any] = dict(fixed.get("options") or {})
        flat = {}
        for key, value in section.items():
            if key in reserved:
                continue
            if isinstance(value, Mapping):
                options[key] = {**options.get(key, {}), **value}
            else:
                flat[key] = value
        if flat:
            # An unset selector means its default: flat [rerank] options go to "remote", as documented.
            target = fixed.get(selector, _selector_default(section_name))
            if not isinstance(target, str) or target in ("auto", "none") or section_name == "extraction":
                raise ConfigError(
                    f"{', '.join(f'{section_name}.{k}' for k in sorted(flat))}: unknown field (component options "
                    f"need a selected {selector} or a [{section_name}.<name>] table)",
                    [(f"{section_name}.{k}", "unknown field") for k in sorted(flat)],
                )
            options[target] = {**options.get(target, {}), **flat}
        if options:
            fixed["options"] = options
        data[section_name] = fixed
    return data


def load_settings(
    config: str | os.PathLike[str] | Mapping[str, Any] | MemrouteSettings | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    use_env: bool = True,
    **overrides: Any,
) -> MemrouteSettings:
    """Build settings from a TOML path, a mapping or a settings object, then env, then ``overrides``.

    ``overrides`` use the TOML shape (``memory={"enabled": True}``, ``backends={...}``); ``db_path=`` (like
    ``MEMROUTE_DB``) is a shortcut for the primary backend's database path, whatever its type: the option
    its spec names in ``path_option`` (sqlite: ``path``). Any problem raises :class:`ConfigError` naming the
    field.
    """
    try:
        return _load_settings(config, environ, use_env, overrides)
    except RecursionError:
        # A hostile mapping or override nested thousands deep; a file is caught in read_toml.
        raise ConfigError("configuration: nested too deeply", [("(root)", "too deep")]) from None


def _load_settings(config: Any, environ: Mapping[str, str] | None, use_env: bool,
                   overrides: dict[str, Any]) -> MemrouteSettings:
    environ = os.environ if environ is None else environ
    if isinstance(config, MemrouteSettings):
        if not overrides and not use_env:
            return config
        import cattrs

        raw: dict[str, Any] = _to_toml_shape(cattrs.Converter().unstructure(config))
    elif isinstance(config, Mapping):
        raw = _expand(dict(config), environ, "")
    else:
        path = find_config_file(config, environ)
        raw = _expand(read_toml(path), environ, "") if path is not None else {}
    merged = _normalise(raw)
    db_path: str | None = None
    if use_env:
        # The reference system's own variables (memroute.config.omniroute) sit under the file and memroute's.
        reference, ignored = reference_env_layer(environ)
        merged = _deep_merge(_normalise(reference), merged)
        warn_ignored(ignored)
        env = _env_layer(environ)
        db_path = env.pop("_db_path", None)
        merged = _deep_merge(merged, _normalise(env))
    if overrides:
        layer = dict(overrides)
        if "db_path" in layer:
            db_path = str(layer.pop("db_path"))
        merged = _deep_merge(merged, _normalise(layer))
    if db_path:
        merged = _with_primary_db_path(merged, db_path)
    _refuse_removed(merged)
    if use_env and isinstance(merged.get("backends"), Mapping) and merged["backends"].get("instances"):
        backends = dict(merged["backends"])
        backends["instances"] = backend_env_defaults(backends["instances"], environ)
        merged = {**merged, "backends": backends}
    return structure_config(merged, MemrouteSettings)


REMOVED = {
    ("memory", "min_similarity"): "the relevance floor is now memory.min_score, a calibrated relevance in [0, 1] "
                                  "(default 0.02) applied to every search (docs/retrieval.md, \"Score and floor\")",
    ("memory", "similarity_window"): "the relevance floor is now memory.min_score alone (docs/retrieval.md, "
                                     "\"Score and floor\")",
}
"""Settings that were removed, with what replaces them: a config that still sets one is told so, rather
than only that the field is unknown."""


def _refuse_removed(data: Mapping[str, Any]) -> None:
    found = [(section, key) for section, key in REMOVED
             if isinstance(data.get(section), Mapping) and key in data[section]]
    if found:
        raise ConfigError("; ".join(f"{section}.{key}: removed: {REMOVED[(section, key)]}" for section, key in found),
                          [(f"{section}.{key}", "removed") for section, key in found])


def _with_primary_db_path(data: dict[str, Any], db_path: str) -> dict[str, Any]:
    """Mark the primary instance (after every layer is merged, so a file's ``primary`` counts) with the
    ``MEMROUTE_DB`` path; which option it sets is the backend plugin's business (``BackendSpec.path_option``)."""
    backends = dict(data.get("backends") or {})
    primary = backends.get("primary", "main")
    instances = dict(backends.get("instances") or {})
    if not instances:
        instances = {n: {"type": c.type, "options": dict(c.options)} for n, c in _default_instances().items()}
    table = instances.get(primary)
    if isinstance(table, ComponentConfig):
        instances[primary] = attrs.evolve(table, db_path=db_path)
    elif isinstance(table, Mapping):
        instances[primary] = {**table, "db_path": db_path}
    # a primary without a table is reported by BackendsSettings, naming the tables that exist
    backends["instances"] = instances
    return {**data, "backends": backends}


def _to_toml_shape(data: dict[str, Any]) -> dict[str, Any]:
    backends = data.get("backends", {})
    instances = backends.get("instances", {})
    shaped = {}
    for name, config in instances.items():
        shaped[name] = {"type": config["type"], "options": config.get("options", {})}
        if config.get("db_path"):
            shaped[name]["db_path"] = config["db_path"]
    backends["instances"] = shaped
    return data


def structure_options(options: Mapping[str, Any], settings_class: type, path: str) -> Any:
    """Second phase of plugin configuration: a component's options into the class its spec names."""
    return structure_config(dict(options), settings_class, f"$.{path}")
