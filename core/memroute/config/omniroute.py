"""The reference system's configuration, read by memroute: its environment variables and its settings JSON.

**Environment variables.** The reference (OmniRoute) is configured partly through variables memroute reads
too (``MEMORY_*``: :data:`memroute.config.settings.ENV_VARS`) and partly through its own. Each of its own
that concerns memory is listed in :data:`REFERENCE_ENV` with what memroute does with it: **mapped** to a
memroute setting, **ignored with a warning** (an :class:`OmnirouteEnvWarning` naming the variable, issued
when the settings are loaded, i.e. at start-up), or **refused** (a :class:`~memroute.errors.ConfigError`
naming the variable: a value that means nothing). memroute's own variables and ``memroute.toml`` win over a
mapped one. docs/omniroute-compatibility.md, "OmniRoute's other environment variables", is the table for users.

**Settings JSON.** :func:`settings_from_json` turns what the reference's ``GET /api/settings/memory``
returns into ``memroute.toml`` content (``memroute config import --from omniroute settings.json``), with a
note for each field that has no memroute meaning.
"""

from __future__ import annotations

import ipaddress
import warnings
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

from memroute.errors import ConfigError

__all__ = ["REFERENCE_ENV", "OmnirouteEnvWarning", "SettingsImport", "backend_env_defaults", "reference_env_layer",
           "settings_from_json", "warn_ignored"]


class OmnirouteEnvWarning(UserWarning):
    """A variable of the reference system that memroute does not apply (the message names it and says why)."""


REFERENCE_ENV: Final[dict[str, str]] = {
    "MEMORY_TRANSFORMERS_MODEL": "mapped to [embedding.transformers] model when it names all-MiniLM-L6-v2 or "
                                 "multilingual-e5-small (memroute runs both); otherwise ignored",
    "MEMORY_STATIC_MODEL": "mapped when it names potion-base-8M (memroute ships it); otherwise ignored",
    "MEMORY_STATIC_CACHE_DIR": "ignored: memroute's static model comes with the package, nothing is downloaded",
    "DATA_DIR": "ignored: memroute's data directory is MEMROUTE_DATA_DIR",
    "QDRANT_HOST": "mapped: [vectors.qdrant] url (with QDRANT_PORT)",
    "QDRANT_PORT": "mapped: the port of [vectors.qdrant] url (default 6333)",
    "QDRANT_API_KEY": "mapped: [vectors.qdrant] api_key",
    "QDRANT_COLLECTION": "mapped: [vectors.qdrant] collection",
    "QDRANT_EMBEDDING_MODEL": "ignored: Qdrant stores the vectors of memroute's [embedding] source",
    "QDRANT_VECTOR_SIZE": "ignored: the size is the embedding source's dimension",
    "QDRANT_HNSW_EF_CONSTRUCT": "ignored: the collection keeps Qdrant's HNSW defaults",
    "OBSIDIAN_API_URL": "mapped: base_url of each obsidian backend that sets none",
    "OBSIDIAN_API_KEY": "mapped: api_key of each obsidian backend that sets none",
    "NOTION_API_URL": "mapped: base_url of each notion backend that sets none",
    "NOTION_API_KEY": "mapped: token of each notion backend that sets none",
    "OUTBOUND_SSRF_GUARD_ENABLED": "true: mapped (the guard is always on); false: ignored",
    "OMNIROUTE_ALLOW_PRIVATE_PROVIDER_URLS": "true: mapped to [embedding.remote] allow_private; false: mapped",
    "OMNIROUTE_ALLOW_LOCAL_PROVIDER_URLS": "true: mapped to [embedding.remote] allow_private; false: mapped",
    "OMNIROUTE_MCP_ENFORCE_SCOPES": "true: mapped (scopes are always enforced); false: ignored",
}
"""Every reference variable memroute knows, and what it does with it (the docs' table is checked against it)."""

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


def _flag(environ: Mapping[str, str], name: str) -> bool | None:
    raw = environ.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(f"{name}: expected true or false, got {environ[name]!r}", [(name, "invalid")])


def _set(layer: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        layer = layer.setdefault(part, {})
    layer[path[-1]] = value


def _qdrant_url(environ: Mapping[str, str]) -> str | None:
    host = environ.get("QDRANT_HOST", "").strip().rstrip("/")
    raw_port = environ.get("QDRANT_PORT", "").strip()
    if raw_port and not (raw_port.isdigit() and 0 < int(raw_port) < 65536):
        raise ConfigError(f"QDRANT_PORT: expected a port number (1-65535), got {raw_port!r}",
                          [("QDRANT_PORT", "range")])
    if not host:
        return None
    url = host if "://" in host else f"http://{host}"
    if urlsplit(url).port is None:
        url = f"{url}:{raw_port or 6333}"
    return url


def reference_env_layer(environ: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The settings (TOML shape) the reference's variables in ``environ`` map to, and a warning for each one
    that is ignored. A value that means nothing raises :class:`ConfigError` naming the variable."""
    layer: dict[str, Any] = {}
    ignored: list[str] = []

    def ignore(name: str, why: str) -> None:
        ignored.append(f"{name} is set but memroute does not use it: {why}")

    transformers = environ.get("MEMORY_TRANSFORMERS_MODEL", "").strip()
    known = next((name for name in ("all-MiniLM-L6-v2", "multilingual-e5-small")
                  if name.lower() in transformers.lower()), None) if transformers else None
    if known:
        _set(layer, ("embedding", "options", "transformers", "model"), known)
    elif transformers:
        ignore("MEMORY_TRANSFORMERS_MODEL", "memroute never downloads a model; its transformers source runs "
               "multilingual-e5-small or all-MiniLM-L6-v2 from their packages, or an ONNX export named by "
               "[embedding.transformers] model_path")
    static = environ.get("MEMORY_STATIC_MODEL", "").strip()
    if static and "potion-base-8m" not in static.lower():
        ignore("MEMORY_STATIC_MODEL", "memroute never downloads a model; its static source runs the bundled "
               "potion-base-8M, or a local model2vec directory named by [embedding.static] model_dir")
    if environ.get("MEMORY_STATIC_CACHE_DIR", "").strip():
        ignore("MEMORY_STATIC_CACHE_DIR", "the static model comes with memroute, nothing is downloaded or cached")
    if environ.get("DATA_DIR", "").strip():
        ignore("DATA_DIR", "memroute keeps its files in MEMROUTE_DATA_DIR; to bring OmniRoute's memories over, run "
               "memroute import --from omniroute $DATA_DIR/storage.sqlite")

    url = _qdrant_url(environ)
    if url is not None:
        _set(layer, ("vectors", "options", "qdrant", "url"), url)
    elif environ.get("QDRANT_PORT", "").strip():
        ignore("QDRANT_PORT", "without QDRANT_HOST there is no Qdrant server to use")
    for name, option in (("QDRANT_API_KEY", "api_key"), ("QDRANT_COLLECTION", "collection")):
        if environ.get(name, "").strip():
            _set(layer, ("vectors", "options", "qdrant", option), environ[name].strip())
    for name, why in (("QDRANT_EMBEDDING_MODEL", "Qdrant stores the vectors of memroute's [embedding] source"),
                      ("QDRANT_VECTOR_SIZE", "the vector size is the embedding source's dimension"),
                      ("QDRANT_HNSW_EF_CONSTRUCT", "memroute creates its collection with Qdrant's HNSW defaults")):
        if environ.get(name, "").strip():
            ignore(name, why)

    if _flag(environ, "OUTBOUND_SSRF_GUARD_ENABLED") is False:
        ignore("OUTBOUND_SSRF_GUARD_ENABLED", "memroute's outbound URL guard cannot be turned off; a self-hosted "
               "service is allowed per component with allow_private = true or allow_hosts")
    private = [_flag(environ, name) for name in ("OMNIROUTE_ALLOW_PRIVATE_PROVIDER_URLS",
                                                  "OMNIROUTE_ALLOW_LOCAL_PROVIDER_URLS")]
    if True in private:
        _set(layer, ("embedding", "options", "remote", "allow_private"), True)
    if _flag(environ, "OMNIROUTE_MCP_ENFORCE_SCOPES") is False:
        ignore("OMNIROUTE_MCP_ENFORCE_SCOPES", "memroute always checks each MCP tool's scope against the API key")
    return layer, ignored


def warn_ignored(messages: list[str]) -> None:
    """Issue an :class:`OmnirouteEnvWarning` for each of ``messages`` (from :func:`reference_env_layer`)."""
    for message in messages:
        warnings.warn(message, OmnirouteEnvWarning, stacklevel=4)


_BACKEND_ENV: Final = {
    "obsidian": (("OBSIDIAN_API_URL", "base_url"), ("OBSIDIAN_API_KEY", "api_key")),
    "notion": (("NOTION_API_URL", "base_url"), ("NOTION_API_KEY", "token")),
}


def backend_env_defaults(instances: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """``instances`` (``[backends]`` instance tables, TOML shape after normalising) with ``OBSIDIAN_API_*`` /
    ``NOTION_API_*`` filling the options an obsidian or notion backend leaves unset."""
    out = dict(instances)
    for name, table in instances.items():
        if not isinstance(table, Mapping) or table.get("type") not in _BACKEND_ENV:
            continue
        options = dict(table.get("options") or {})
        for var, option in _BACKEND_ENV[table["type"]]:
            if option not in options and environ.get(var, "").strip():
                options[option] = environ[var].strip()
        out[name] = {**table, "options": options}
    return out


# --- the settings JSON ---------------------------------------------------------------------------------------

@attrs.frozen(kw_only=True)
class SettingsImport:
    """``memroute.toml`` content (TOML shape) made from the reference's settings, and what was not carried."""

    config: dict[str, Any]
    notes: tuple[str, ...]
    """One line per field that has no memroute meaning or needs a step by hand."""


_FIELDS: Final = ("enabled", "maxTokens", "retentionDays", "strategy", "skillsEnabled", "embeddingSource",
                  "embeddingProviderModel", "customBaseUrl", "customModelId", "transformersEnabled",
                  "staticEnabled", "rerankEnabled", "rerankProviderModel", "vectorStore", "primaryBackend",
                  "fallbackBackends", "backendConfigs")


def _expect(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{name}: expected {what}, got {value!r:.60}", [(name, "type")])
    return value


def _is_private(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith((".localhost", ".local", ".internal")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_private or address.is_loopback


def _instance(name: str) -> str:
    # The reference's built-in SQLite store is memroute's default instance, "main" (memroute.db).
    return "main" if name == "sqlite" else name


def _backend(name: str, config: Mapping[str, Any], notes: list[str]) -> dict[str, Any] | None:
    """A ``[backends.NAME]`` table for the reference's backend ``name`` (its ``backendConfigs[name]``)."""
    if name == "sqlite":
        return {"type": "sqlite"}
    base_url = config.get("baseUrl")
    if name == "notion":
        notes.append("backends.notion: memroute's notion backend needs a database (database_id); create one with "
                     "memroute notion init and add the [backends.notion] table it prints")
        return None
    has_url = isinstance(base_url, str) and bool(base_url)
    if name == "obsidian":  # memroute's obsidian backend has a default address (and OBSIDIAN_API_URL)
        table: dict[str, Any] = {"type": "obsidian", **({"base_url": base_url} if has_url else {})}
        if isinstance(config.get("apiKey"), str) and config["apiKey"]:
            table["api_key"] = config["apiKey"]
        else:
            table["api_key"] = "${OBSIDIAN_API_KEY}"
            notes.append("backends.obsidian: api_key is read from the OBSIDIAN_API_KEY environment variable")
        return table
    if not has_url:
        notes.append(f"backends.{name}: no baseUrl in backendConfigs; not carried")
        return None
    table = {"type": "http", "base_url": base_url}
    if isinstance(config.get("apiKey"), str) and config["apiKey"]:
        table["api_key"] = config["apiKey"]
    if isinstance(config.get("timeout"), (int, float)) and not isinstance(config["timeout"], bool):
        table["timeout"] = config["timeout"] / 1000  # the reference's milliseconds; memroute's seconds
    for source, option in (("headers", "headers"), ("endpoints", "endpoints"), ("queryParams", "query_params"),
                           ("pathParams", "path_params")):
        if isinstance(config.get(source), Mapping) and config[source]:
            table[option] = dict(config[source])
    if isinstance(config.get("backendType"), str):
        table["backend_type"] = config["backendType"]
    return table


def settings_from_json(data: object) -> SettingsImport:
    """``memroute.toml`` content for the reference's memory settings (the JSON ``GET /api/settings/memory``
    returns, or its ``PUT`` body). Unknown fields and values of the wrong type are a :class:`ConfigError`
    naming the field; values out of memroute's ranges are reported when the result is loaded
    (:func:`memroute.config.settings.load_settings`), as the CLI does before writing it."""
    if not isinstance(data, Mapping):
        raise ConfigError("settings: expected a JSON object (what GET /api/settings/memory returns)",
                          [("(root)", "type")])
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"{', '.join(unknown)}: not a field of OmniRoute's memory settings",
                          [(name, "unknown field") for name in unknown])
    notes: list[str] = []
    memory: dict[str, Any] = {}
    embedding: dict[str, Any] = {}
    for source, target, kind, what in (("enabled", "enabled", bool, "true or false"),
                                       ("maxTokens", "max_tokens", int, "an integer"),
                                       ("retentionDays", "retention_days", int, "an integer"),
                                       ("strategy", "strategy", str, "recent, semantic or hybrid"),
                                       ("rerankEnabled", "rerank_enabled", bool, "true or false"),
                                       ("rerankProviderModel", "rerank_provider_model", str, "a string")):
        value = _expect(data, source, kind, what)
        if value is not None:
            memory[target] = value
    if memory.get("rerank_enabled"):
        notes.append("rerankEnabled: OmniRoute called its own /v1/rerank; point memroute's reranker at a rerank "
                     "endpoint with [rerank] base_url (docs/retrieval.md, \"Reranking\")")
    if _expect(data, "skillsEnabled", bool, "true or false") is not None:
        notes.append("skillsEnabled: skills injection is OmniRoute's, not memory; memroute has none")
    for source, target in (("transformersEnabled", "transformers_enabled"), ("staticEnabled", "static_enabled")):
        value = _expect(data, source, bool, "true or false")
        if value is not None:
            embedding[target] = value
    kind_of_source = _expect(data, "embeddingSource", str, "remote, static, transformers or auto")
    if kind_of_source is not None:
        embedding["source"] = kind_of_source
    base_url = _expect(data, "customBaseUrl", str, "a URL")
    model_id = _expect(data, "customModelId", str, "a model id")
    if base_url and model_id:
        remote = {"base_url": base_url, "model": model_id}
        if _is_private(base_url):
            remote["allow_private"] = True  # OmniRoute's default policy admitted local endpoints
        embedding["remote"] = remote
    elif base_url or model_id:
        notes.append("customBaseUrl / customModelId: only one is set (OmniRoute ignored the endpoint too); not carried")
    provider_model = _expect(data, "embeddingProviderModel", str, "a string")
    if provider_model and "remote" not in embedding:
        notes.append(f"embeddingProviderModel: {provider_model!r} went through OmniRoute's provider registry and "
                     "its stored credentials; set [embedding.remote] base_url, model and api_key for it")
    if embedding.get("source") == "remote" and "remote" not in embedding:
        notes.append("embeddingSource: remote needs [embedding.remote] base_url and model; using auto meanwhile")
        embedding["source"] = "auto"
    store = _expect(data, "vectorStore", str, "sqlite-vec, qdrant or auto")
    vectors = {"store": store} if store is not None else {}
    if store == "qdrant":
        notes.append("vectorStore: qdrant needs [vectors.qdrant] url (QDRANT_HOST / QDRANT_PORT are read too); "
                     "memroute creates its own collection and rebuilds the vectors")

    backends: dict[str, Any] = {}
    primary = _expect(data, "primaryBackend", str, "a backend id")
    fallbacks = _expect(data, "fallbackBackends", list, "a list of backend ids") or []
    configs = _expect(data, "backendConfigs", Mapping, "an object") or {}
    if primary is not None or fallbacks:
        names = [primary or "sqlite", *[f for f in fallbacks if isinstance(f, str)]]
        tables = {}
        for name in names:
            options = configs.get(name)
            table = _backend(name, options if isinstance(options, Mapping) else {}, notes)
            if table is not None:
                tables[_instance(name)] = table
        if _instance(names[0]) not in tables:
            notes.append(f"primaryBackend: {names[0]!r} not carried; the primary stays memroute's sqlite")
            tables = {"main": {"type": "sqlite"}, **tables}
            names[0] = "sqlite"
        kept = [_instance(n) for n in names[1:] if _instance(n) in tables and _instance(n) != _instance(names[0])]
        if kept or tables != {"main": {"type": "sqlite"}}:  # sqlite alone is memroute's default: nothing to write
            backends = {"primary": _instance(names[0]), "fallbacks": kept, **tables}
    config = {k: v for k, v in (("memory", memory), ("embedding", embedding), ("vectors", vectors),
                                ("backends", backends)) if v}
    return SettingsImport(config=config, notes=tuple(notes))
