"""The ``remote`` reranker: any endpoint speaking the Cohere / Jina ``POST {base_url}/rerank`` shape.

Request ``{"model", "query", "documents": [text, ...], "top_n"}``; response ``{"results": [{"index",
"relevance_score"}, ...]}`` (Cohere ``/v1/rerank`` and ``/v2/rerank``, Jina ``/v1/rerank``, vLLM, TEI and
LiteLLM's rerank routes all answer so). Requests go through :class:`memroute.config.netguard.GuardedSession` (the
host is resolved and every address checked, the connection pinned to it, no redirects, no credentials in the
URL); a self-hosted endpoint on loopback or a private network needs ``allow_private = true`` or
``allow_hosts``. Every failure is a :class:`~memroute.errors.RerankError` with a reason (``no_key``,
``rate_limited``, ``timeout``, ``blocked``, ``request_failed``); the API key never appears in a message.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import attrs

import memroute
from memroute.config.netguard import BlockedUrlError, GuardedSession, HostResolutionError, Resolver, parse_url
from memroute.errors import ConfigError, RerankError
from memroute.interfaces import ComponentContext, Reranker, RerankResult
from memroute.specs import RerankerSpec

__all__ = ["RemoteReranker", "RemoteRerankSettings", "rerank_endpoint"]


def _between(low: float, high: float) -> Any:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not low <= value <= high:
            raise ValueError(f"{attribute.name} must be in [{low:g}, {high:g}], got {value!r}")

    return check


@attrs.frozen(kw_only=True)
class RemoteRerankSettings:
    """``[rerank]`` options of the ``remote`` reranker."""

    base_url: str = ""
    """The API root, e.g. ``https://api.jina.ai/v1`` (``/rerank`` is appended unless present)."""
    model: str = ""
    """The model id; empty means ``[memory] rerank_provider_model``."""
    api_key: str | None = attrs.field(default=None, repr=False)
    """Sent as ``Authorization: Bearer <api_key>``; use ``"${JINA_API_KEY}"`` in the TOML file."""
    timeout: float = attrs.field(default=5.0, validator=_between(0.05, 120))
    """Seconds per request (connect and read); the reference used 5 s. A search waits at most this long."""
    allow_private: bool = False
    """Allow loopback/private/CGNAT addresses (a self-hosted endpoint). Metadata addresses stay blocked."""
    allow_hosts: tuple[str, ...] = ()
    """Hosts, addresses or CIDR networks allowed even though they are not public."""
    headers: dict[str, str] = attrs.field(factory=dict)
    """Extra request headers (``Authorization`` is set from ``api_key`` and wins)."""


def rerank_endpoint(base_url: str) -> str:
    """``base_url`` without trailing slashes, plus ``/rerank`` unless it already ends with it."""
    root = base_url.strip().rstrip("/")
    return root if root.endswith("/rerank") else root + "/rerank"


class RemoteReranker(Reranker):
    """Reranking by an HTTP rerank endpoint."""

    in_process = False  # a remote /rerank API

    name = "remote"

    def __init__(self, settings: RemoteRerankSettings, *, resolver: Resolver | None = None) -> None:
        missing = [n for n in ("base_url", "model") if not getattr(settings, n).strip()]
        if missing:
            raise ConfigError("; ".join(f"rerank.{n}: required" for n in missing),
                              [(f"rerank.{n}", "required") for n in missing])
        if "?" in settings.base_url or "#" in settings.base_url:
            raise ConfigError("rerank.base_url: a query string or fragment is not allowed",
                              [("rerank.base_url", "query")])
        try:
            parsed = parse_url(settings.base_url)
        except BlockedUrlError as exc:
            raise ConfigError(f"rerank.base_url: {exc}", [("rerank.base_url", exc.reason)]) from None
        self.settings = settings
        self.model = settings.model.strip()
        self.endpoint = rerank_endpoint(parsed.url)
        self.host = parsed.host
        self._resolver = resolver
        self._local = threading.local()

    def _session(self) -> GuardedSession:
        session: GuardedSession | None = getattr(self._local, "session", None)
        if session is None:  # requests.Session is not documented as thread-safe: one per thread
            session = GuardedSession(allow_private=self.settings.allow_private,
                                     allow_hosts=self.settings.allow_hosts, resolver=self._resolver)
            headers = {**self.settings.headers, "Content-Type": "application/json", "Accept": "application/json"}
            if self.settings.api_key:
                headers["Authorization"] = f"Bearer {self.settings.api_key}"
            session.headers.update(headers)
            self._local.session = session
        return session

    def _error(self, message: str, reason: str) -> RerankError:
        return RerankError(f"remote reranker ({self.host}, {self.model}): {message}", reason=reason)

    def rerank(self, query: str, documents: Sequence[str], *, top_n: int | None = None) -> list[RerankResult]:
        if not documents:
            return []
        import requests

        body: dict[str, Any] = {"model": self.model, "query": query, "documents": list(documents),
                                "top_n": top_n if top_n is not None else len(documents)}
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
            raise self._error("HTTP 429: rate limited", "rate_limited")
        if 300 <= status < 400:
            raise self._error(f"HTTP {status}: redirects are not followed (point base_url at the final URL)",
                              "request_failed")
        if not 200 <= status < 300:
            raise self._error(f"HTTP {status}", "request_failed")
        try:
            payload = response.json()
        except ValueError:
            raise self._error("the response is not JSON", "request_failed") from None
        return self._parse(payload, len(documents))

    def _parse(self, payload: Any, count: int) -> list[RerankResult]:
        results = payload.get("results") if isinstance(payload, dict) else None
        if not isinstance(results, list) or not results:
            raise self._error("malformed response: no results list", "request_failed")
        out: list[RerankResult] = []
        seen: set[int] = set()
        for position, item in enumerate(results):
            index = item.get("index") if isinstance(item, dict) else None
            score = item.get("relevance_score") if isinstance(item, dict) else None
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count or index in seen:
                raise self._error(f"malformed response: results[{position}].index is invalid or repeated",
                                  "request_failed")
            if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
                raise self._error(f"malformed response: results[{position}].relevance_score is not a number",
                                  "request_failed")
            seen.add(index)
            out.append(RerankResult(index=index, score=float(score)))
        out.sort(key=lambda r: (-r.score, r.index))
        return out

    def describe(self) -> dict[str, Any]:
        return {"reranker": self.name, "model": self.model, "endpoint": self.endpoint,
                "api_key": "set" if self.settings.api_key else None}

    def close(self) -> None:
        session = getattr(self._local, "session", None)
        if session is not None:
            session.close()
            self._local.session = None


def _factory(settings: RemoteRerankSettings, context: ComponentContext) -> RemoteReranker:
    return RemoteReranker(settings)


@memroute.hookimpl
def memroute_rerankers() -> Any:
    yield RerankerSpec(
        name="remote", factory=_factory, settings_class=RemoteRerankSettings,
        description="any Cohere / Jina-style /rerank endpoint (SSRF-guarded)",
    )
