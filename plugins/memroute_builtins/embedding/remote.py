"""The ``remote`` embedding source: any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

OpenAI, Azure-style gateways, vLLM, Ollama (``/v1``), LiteLLM, TEI and others speak it. Requests go
through :class:`memroute.config.netguard.GuardedSession`: the host is resolved and every address checked before
each request, the connection is pinned to a checked address, redirects are not followed and credentials in
the URL are refused. A self-hosted endpoint on loopback or a private network needs ``allow_private = true``
(or ``allow_hosts``). Errors map to :class:`~memroute.errors.EmbeddingError` reasons as the reference
system's do (§9.2): 401/403 → ``no_key``, 429 → ``rate_limited``, a timeout → ``timeout``, anything else
→ ``request_failed``; a refused URL → ``blocked``. The API key never appears in a message.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

import memroute
from memroute.config.netguard import BlockedUrlError, GuardedSession, HostResolutionError, Resolver, parse_url
from memroute.embedding import fallback_vector, normalize_rows, validate_texts
from memroute.errors import ConfigError, EmbeddingError
from memroute.interfaces import ComponentContext, EmbeddingSource
from memroute.specs import Availability, EmbeddingSourceSpec

__all__ = ["RemoteEmbeddingSource", "RemoteSettings", "embeddings_endpoint"]


def _between(low: float, high: float) -> Any:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None and not low <= value <= high:
            raise ValueError(f"{attribute.name} must be in [{low:g}, {high:g}], got {value!r}")

    return check


@attrs.frozen(kw_only=True)
class RemoteSettings:
    """``[embedding.remote]`` options."""

    base_url: str = ""
    """The API root, e.g. ``https://api.openai.com/v1`` (``/embeddings`` is appended unless present)."""
    model: str = ""
    """The model id the endpoint expects, e.g. ``text-embedding-3-small``."""
    api_key: str | None = attrs.field(default=None, repr=False)
    """Sent as ``Authorization: Bearer <api_key>``; use ``"${OPENAI_API_KEY}"`` in the TOML file."""
    timeout: float = attrs.field(default=30.0, validator=_between(0.1, 600))
    """Seconds per request (connect and read)."""
    batch_size: int = attrs.field(default=64, validator=_between(1, 2048))
    """Texts per request."""
    dimensions: int | None = attrs.field(default=None, validator=_between(1, 65536))
    """Ask the endpoint for this many dimensions (models that support it, e.g. text-embedding-3-*);
    responses of another size are refused."""
    allow_private: bool = False
    """Allow loopback/private/CGNAT addresses (a self-hosted endpoint). Metadata addresses stay blocked."""
    allow_hosts: tuple[str, ...] = ()
    """Hosts, addresses or CIDR networks allowed even though they are not public."""
    headers: dict[str, str] = attrs.field(factory=dict)
    """Extra request headers (``Authorization`` is set from ``api_key`` and wins)."""


def embeddings_endpoint(base_url: str) -> str:
    """``base_url`` without trailing slashes, plus ``/embeddings`` unless it already ends with it."""
    root = base_url.strip().rstrip("/")
    return root if root.endswith("/embeddings") else root + "/embeddings"


class RemoteEmbeddingSource(EmbeddingSource):
    """Embeddings from an OpenAI-compatible HTTP endpoint."""

    in_process = False  # a remote embedding API

    source = "remote"

    def __init__(self, settings: RemoteSettings, *, resolver: Resolver | None = None) -> None:
        if not settings.base_url.strip() or not settings.model.strip():
            missing = [n for n in ("base_url", "model") if not getattr(settings, n).strip()]
            raise ConfigError("; ".join(f"embedding.remote.{n}: required" for n in missing),
                              [(f"embedding.remote.{n}", "required") for n in missing])
        try:
            parsed = parse_url(settings.base_url)
        except BlockedUrlError as exc:
            raise ConfigError(f"embedding.remote.base_url: {exc}", [("embedding.remote.base_url", exc.reason)]) \
                from None
        if "?" in settings.base_url or "#" in settings.base_url:
            raise ConfigError("embedding.remote.base_url: a query string or fragment is not allowed",
                              [("embedding.remote.base_url", "query")])
        self.settings = settings
        self.model = settings.model.strip()
        self.dimensions = settings.dimensions
        self.endpoint = embeddings_endpoint(parsed.url)
        self.host = parsed.host
        self._resolver = resolver
        self._local = threading.local()

    def _session(self) -> GuardedSession:
        # requests.Session is not documented as thread-safe: one per thread.
        session: GuardedSession | None = getattr(self._local, "session", None)
        if session is None:
            session = GuardedSession(allow_private=self.settings.allow_private,
                                     allow_hosts=self.settings.allow_hosts, resolver=self._resolver)
            headers = {**self.settings.headers, "Content-Type": "application/json", "Accept": "application/json"}
            if self.settings.api_key:
                headers["Authorization"] = f"Bearer {self.settings.api_key}"
            session.headers.update(headers)
            self._local.session = session
        return session

    def _error(self, message: str, reason: str) -> EmbeddingError:
        return EmbeddingError(f"remote embedding ({self.host}, {self.model}): {message}", reason=reason,
                              source=self.source)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        items = validate_texts(texts)
        # Endpoints reject empty input strings (OpenAI: 400); an empty text gets the fallback vector.
        wanted = [i for i, text in enumerate(items) if text.strip()]
        vectors: dict[int, np.ndarray] = {}
        size = self.settings.batch_size
        for start in range(0, len(wanted), size):
            chunk = wanted[start:start + size]
            rows = self._request([items[i] for i in chunk])
            for index, row in zip(chunk, rows, strict=True):
                vectors[index] = row
        if self.dimensions is None:
            if not vectors:
                # Nothing was sent, so the size is unknown: measure it once with a real request.
                self._request(["dimension probe"])
            assert self.dimensions is not None
        dim = self.dimensions
        out = np.empty((len(items), dim), dtype=np.float32)
        for index in range(len(items)):
            out[index] = vectors[index] if index in vectors else fallback_vector(dim)
        return normalize_rows(out)

    def _request(self, batch: list[str]) -> np.ndarray:
        import requests

        body: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
        if self.settings.dimensions is not None:
            body["dimensions"] = self.settings.dimensions
        try:
            response = self._session().post(self.endpoint, json=body, timeout=self.settings.timeout)
        except HostResolutionError as exc:
            raise self._error(str(exc), "request_failed") from None
        except BlockedUrlError as exc:
            raise self._error(str(exc), "blocked") from None
        except requests.Timeout:
            raise self._error(f"timed out after {self.settings.timeout:g} s", "timeout") from None
        except requests.RequestException as exc:
            raise self._error(f"request failed: {type(exc).__name__}", "request_failed") from None
        status = response.status_code
        if status in (401, 403):
            raise self._error(f"HTTP {status}: the endpoint refused the credentials (check api_key)", "no_key")
        if status == 429:
            retry = response.headers.get("Retry-After")
            raise self._error("HTTP 429: rate limited" + (f" (retry after {retry} s)" if retry else ""),
                              "rate_limited")
        if 300 <= status < 400:
            raise self._error(f"HTTP {status}: redirects are not followed (point base_url at the final URL)",
                              "request_failed")
        if not 200 <= status < 300:
            raise self._error(f"HTTP {status}: {_short(response.text)}", "request_failed")
        try:
            payload = response.json()
        except ValueError:
            raise self._error("the response is not JSON", "request_failed") from None
        return self._parse(payload, len(batch))

    def _parse(self, payload: Any, expected: int) -> np.ndarray:
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list) or len(data) != expected:
            got = len(data) if isinstance(data, list) else "no data list"
            raise self._error(f"malformed response: expected {expected} embeddings, got {got}", "request_failed")
        rows: list[list[float] | None] = [None] * expected
        for position, item in enumerate(data):
            if not isinstance(item, dict):
                raise self._error(f"malformed response: data[{position}] is not an object", "request_failed")
            index = item.get("index", position)
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < expected \
                    or rows[index] is not None:
                raise self._error(f"malformed response: data[{position}].index {index!r} is invalid or repeated",
                                  "request_failed")
            vector = item.get("embedding")
            if not isinstance(vector, list) or not vector or not all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in vector):
                raise self._error(f"malformed response: data[{position}].embedding is not a non-empty list of "
                                  "finite numbers", "request_failed")
            rows[index] = vector
        dims = {len(row) for row in rows if row is not None}
        if len(dims) != 1:
            raise self._error(f"malformed response: embeddings of different sizes {sorted(dims)}", "request_failed")
        dim = dims.pop()
        if self.dimensions is not None and dim != self.dimensions:
            raise self._error(f"the endpoint returned {dim}-d vectors, expected {self.dimensions}", "request_failed")
        self.dimensions = dim
        return np.asarray(rows, dtype=np.float32)

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "model": self.model, "dimensions": self.dimensions,
                "endpoint": self.endpoint, "api_key": "set" if self.settings.api_key else None}

    def close(self) -> None:
        session = getattr(self._local, "session", None)
        if session is not None:
            session.close()
            self._local.session = None


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def _factory(settings: RemoteSettings, context: ComponentContext) -> RemoteEmbeddingSource:
    return RemoteEmbeddingSource(settings)


def endpoint_configured(options: Mapping[str, Any], section: Any = None) -> Availability:
    """Ready when the options name an endpoint (``base_url`` and ``model``). Not configured at all is
    quiet under ``auto``; half configured is worth saying."""
    base_url = str(options.get("base_url") or "").strip()
    model = str(options.get("model") or "").strip()
    if base_url and model:
        return Availability(ok=True, reason="remote endpoint configured")
    if base_url or model:
        missing = "model" if base_url else "base_url"
        return Availability(ok=False, reason=f"no_key: remote embedding endpoint is incomplete (missing {missing})")
    return Availability(ok=False, reason="no_key: no remote endpoint configured", mention=False)


@memroute.hookimpl
def memroute_embedding_sources() -> Any:
    # auto prefers a configured endpoint over the bundled static model
    yield EmbeddingSourceSpec(
        name="remote", factory=_factory, settings_class=RemoteSettings,
        description="any OpenAI-compatible /embeddings endpoint (SSRF-guarded)",
        auto_priority=300, ready=endpoint_configured,
    )
