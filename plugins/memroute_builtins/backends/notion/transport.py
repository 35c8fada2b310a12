"""Calling Notion through notion-client 3.x for the Notion backend: the client, bounded retries on top of the
client's own, and the translation of every failure into a memroute error that says how to fix it.

What notion-client 3.1 does by itself (``shared/reference/apis.md`` §2.3): it retries ``429 rate_limited`` on
every method, honouring ``Retry-After``, and ``500``/``503`` on GET only. It raises ``UnknownHTTPResponseError``
(not retried) for ``529 service_overload``, ``missing_version``, ``database_connection_unavailable`` and any
non-JSON error page, and lets ``httpx`` transport errors through. :class:`NotionCaller` retries those.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, TypeVar

from memroute.errors import BackendError, BackendUnavailableError, MemrouteError, PluginError, ValidationError

if TYPE_CHECKING:
    from memroute_builtins.backends.notion.backend import NotionSettings

__all__ = ["INSTALL_HINT", "NotionCaller", "make_client"]

log = logging.getLogger("memroute.notion")
T = TypeVar("T")

INSTALL_HINT = "pip install 'memroute[notion]'"
NOTION_VERSION = "2025-09-03"


def make_client(settings: NotionSettings) -> Any:
    """A ``notion_client.Client`` for ``settings``; :class:`PluginError` naming the install when the optional
    dependency is missing."""
    try:
        import notion_client
    except ImportError as exc:
        raise PluginError(f"the Notion backend needs notion-client 3.x: {INSTALL_HINT}") from exc
    import httpx

    from memroute.config.netguard import check_configured_url, guarded_httpx_transport

    check_configured_url(settings.base_url, "base_url", allow_private=settings.allow_private)
    # The bearer token only ever goes where the SSRF guard approved: every request checked and pinned, no
    # redirects, no environment proxies.
    http = httpx.Client(transport=guarded_httpx_transport(allow_private=settings.allow_private),
                        follow_redirects=False, trust_env=False)
    return notion_client.Client(
        client=http,
        auth=settings.token,
        base_url=settings.base_url,
        timeout_ms=int(settings.timeout * 1000),
        notion_version=NOTION_VERSION,
        logger=logging.getLogger("memroute.notion.client"),
        retry=notion_client.RetryOptions(max_retries=settings.max_retries,
                                         max_retry_delay_ms=int(settings.max_retry_delay * 1000)),
    )


class RequestPacer:
    """A token bucket: at most ``rate`` requests per second on average, bursts of up to ``burst``. Notion
    allows about three per second per integration; pacing client-side keeps bulk work (an outbox replay, an
    import) from running into 429s. ``rate <= 0`` turns it off."""

    def __init__(self, rate: float, burst: int = 10, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._clock = clock
        self._sleep = sleep
        self._stamp = clock()
        self._lock = threading.Lock()

    def wait(self) -> None:
        """Take one token, sleeping until one is available."""
        if self.rate <= 0:
            return
        with self._lock:  # serialising the wait keeps the order fair between threads
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._tokens < 1:
                pause = (1 - self._tokens) / self.rate
                self._sleep(pause)
                self._stamp = self._clock()
                self._tokens = 1.0
            self._tokens -= 1


class NotionCaller:
    """Runs notion-client calls for one backend instance with pacing, bounded retries and error translation."""

    def __init__(self, name: str, settings: NotionSettings) -> None:
        self.name = name
        self.settings = settings
        self.pacer = RequestPacer(settings.requests_per_second)

    def call(self, what: str, fn: Callable[[], T], *, get: bool = False, replay_safe: bool = True,
             landed: Callable[[], T | None] | None = None, not_found_hint: str | None = None) -> T:
        """Run ``fn`` (one notion-client call; ``what`` names it in errors). ``get`` marks a GET, which
        notion-client already retried on 500/503. A call that is not ``replay_safe`` (creating a page) is
        re-sent after an ambiguous failure only when ``landed()`` shows the first attempt did not land, so a
        retry never duplicates it; without ``landed`` it is re-sent only when it surely never arrived."""
        attempt = 0
        while True:
            self.pacer.wait()
            try:
                return fn()
            except Exception as exc:
                delay = self.retry_delay(exc, attempt, get=get)
                if delay is not None and not replay_safe and not _never_sent(exc):
                    found = landed() if landed is not None else None
                    if found is not None:
                        return found
                    if landed is None:
                        delay = None  # cannot tell whether it landed: do not risk a duplicate
                if delay is None:
                    raise self.translate(exc, what, not_found_hint) from exc
                log.info("Notion %s failed (%s); retry %d in %.2fs", what, _short(exc), attempt + 1, delay)
                time.sleep(delay)
                attempt += 1

    def retry_delay(self, exc: Exception, attempt: int, *, get: bool = False) -> float | None:
        """Seconds to wait before retrying ``exc``, or ``None`` when it is not worth retrying (or
        notion-client already did)."""
        import httpx
        from notion_client.errors import APIErrorCode, APIResponseError, HTTPResponseError, RequestTimeoutError

        if attempt >= self.settings.max_retries:
            return None
        if isinstance(exc, HTTPResponseError):
            if isinstance(exc, APIResponseError) and (
                exc.code == APIErrorCode.RateLimited
                or (get and exc.code in (APIErrorCode.InternalServerError, APIErrorCode.ServiceUnavailable))
            ):
                return None  # notion-client spent its own retry budget on these already
            if exc.status != 429 and exc.status < 500:
                return None
            retry_after = _retry_after(exc.headers.get("retry-after"))
            if retry_after is not None:
                return min(retry_after, self.settings.max_retry_delay)
        elif not isinstance(exc, (RequestTimeoutError, httpx.TransportError)):
            return None
        base = min(0.5 * 2**attempt, self.settings.max_retry_delay)
        return base / 2 + random.random() * base / 2

    def translate(self, exc: Exception, what: str, not_found_hint: str | None = None) -> MemrouteError:
        """The memroute error for a failed call, with the fix where there is one (never the token)."""
        import httpx
        from notion_client.errors import HTTPResponseError, InvalidPathParameterError, RequestTimeoutError

        from memroute.config.netguard import BlockedUrlError

        where = f"Notion backend {self.name!r} ({what})"
        if isinstance(exc, BlockedUrlError):  # the configuration's fault, not the caller's: a backend failure
            return BackendUnavailableError(f"{where}: base_url: {exc}", backend=self.name)
        if isinstance(exc, MemrouteError):
            return exc
        if isinstance(exc, RequestTimeoutError):
            return BackendUnavailableError(f"{where}: no answer within {self.settings.timeout:g}s; Notion may be "
                                           "slow or down, or raise `timeout`", backend=self.name)
        if isinstance(exc, httpx.TransportError):
            return BackendUnavailableError(f"{where}: cannot reach {self.settings.base_url} ({_short(exc)}); "
                                           "check the network and `base_url`", backend=self.name)
        if isinstance(exc, InvalidPathParameterError):
            return ValidationError(f"{where}: {exc}", [("id", "invalid")])
        if not isinstance(exc, HTTPResponseError):
            return BackendError(f"{where}: {type(exc).__name__}: {_short(exc)}", backend=self.name)
        code = getattr(exc.code, "value", exc.code)
        detail = f"HTTP {exc.status} {code}: {_short(exc)}"
        if code == "notionhq_client_response_error":
            detail = f"HTTP {exc.status}, not a Notion error body: {_short(exc.body) or '(empty)'}"
        hints = {
            401: "check `token`: it must be the secret of an internal integration (https://www.notion.so/"
                 "my-integrations) and not revoked",
            403: "give the integration the Read, Update and Insert content capabilities",
            404: not_found_hint or "share the database with the integration (database page → ••• → Connections "
                 "→ add it) and check `database_id`",
            429: "Notion's rate limit (about 3 requests per second) was hit and retries ran out; slow down",
        }
        if exc.status in hints:
            return BackendUnavailableError(f"{where}: {detail}; {hints[exc.status]}", backend=self.name)
        if exc.status >= 500:
            return BackendUnavailableError(f"{where}: Notion is unavailable ({detail}); try again later",
                                           backend=self.name)
        if code in ("missing_version", "invalid_request_url", "notionhq_client_response_error"):
            return BackendError(f"{where}: {detail}; check `base_url` (the API root without /v1, "
                                "e.g. https://api.notion.com)", backend=self.name)
        return BackendError(f"{where}: Notion rejected the request ({detail}); if the database's properties were "
                            "changed, fix them or run `memroute notion init` (docs/backends/notion.md)",
                            backend=self.name)


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), or ``None``."""
    if not value:
        return None
    try:
        return max(0.0, float(int(value)))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _never_sent(exc: Exception) -> bool:
    """True when the request surely did no work at Notion (so re-sending it cannot duplicate anything)."""
    import httpx
    from notion_client.errors import HTTPResponseError

    if isinstance(exc, HTTPResponseError):
        return exc.status in (429, 529)  # rejected before any work was done
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))


def _short(value: object, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit] + "…"
