"""The ``llm`` extractor's HTTP client: one Chat Completions request (``POST {base_url}/chat/completions``) with
``httpx`` through memroute's SSRF guard (:func:`memroute.config.netguard.guarded_httpx_transport`: every address
checked, the connection pinned to it, no redirects, no environment proxies), and the tolerant reading of the
answer.

Failures become :class:`~memroute.errors.ExtractionError` with a reason: a 429 is waited out once when its
``Retry-After`` is short enough, a 5xx or a dropped connection is tried once more, a 400 that refuses
``response_format`` (or ``max_tokens``, or ``temperature``) is asked again without it, and it is not sent again.
The API key never appears in a message.
"""

from __future__ import annotations

import email.utils
import json
import threading
import time
from typing import Any

import attrs

from memroute.config.netguard import BlockedUrlError, HostResolutionError
from memroute.errors import ExtractionError

__all__ = ["MAX_ANSWER_BYTES", "ChatClient", "ModelReply", "chat_endpoint", "first_json_object", "retry_after_seconds"]

_RETRY_5XX_S = 0.5
MAX_ANSWER_BYTES = 1_048_576
"""A larger answer is refused (``invalid_response``) without reading the rest: no answer to a fact extraction
is that long, and a misbehaving server must not fill memory."""


@attrs.frozen(kw_only=True)
class _Answer:
    status: int
    headers: Any
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


@attrs.frozen(kw_only=True)
class ModelReply:
    """The model's text and what the server said it cost (``None``: not reported)."""

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def chat_endpoint(base_url: str) -> str:
    """``base_url`` without trailing slashes, plus ``/chat/completions`` unless it already ends with it."""
    root = base_url.strip().rstrip("/")
    return root if root.endswith("/chat/completions") else root + "/chat/completions"


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header's wait: delay-seconds or an HTTP date; ``None`` when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def first_json_object(text: str) -> dict[str, Any] | None:
    """The answer as a JSON object: the whole text when it is one, else the first object inside it (a server
    without structured outputs wraps it in prose or a code fence); ``None`` when there is none."""
    decoder = json.JSONDecoder()
    stripped = text.strip()
    try:
        whole = json.loads(stripped)
    except (ValueError, RecursionError):
        whole = None
    if isinstance(whole, dict):
        return whole
    start = stripped.find("{")
    while start != -1:
        try:
            found, _end = decoder.raw_decode(stripped, start)
        except (ValueError, RecursionError):
            found = None
        if isinstance(found, dict):
            return found
        start = stripped.find("{", start + 1)
    return None


class ChatClient:
    """One OpenAI-compatible Chat Completions endpoint. Thread-safe (one ``httpx.Client``)."""

    def __init__(self, *, base_url: str, model: str, api_key: str | None, timeout: float, connect_timeout: float,
                 allow_private: bool, allow_hosts: tuple[str, ...], headers: dict[str, str],
                 structured_outputs: bool, temperature: float, max_output_tokens: int, max_retry_wait: float,
                 stop: threading.Event) -> None:
        import httpx

        from memroute.config.netguard import guarded_httpx_transport

        self.endpoint = chat_endpoint(base_url)
        self.model = model
        self.structured_outputs = structured_outputs
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        self.max_retry_wait = max_retry_wait
        self.timeout = timeout
        self.token_field = "max_tokens"
        """``max_completion_tokens`` once the server refused ``max_tokens`` (OpenAI's reasoning models)."""
        self.send_temperature = True
        """``False`` once the server refused ``temperature`` (models that only sample at their default)."""
        self._stop = stop
        request_headers = {**headers, "Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            request_headers["Authorization"] = f"Bearer {api_key}"
        self._httpx = httpx
        self._client = httpx.Client(
            transport=guarded_httpx_transport(allow_private=allow_private, allow_hosts=allow_hosts),
            headers=request_headers, follow_redirects=False,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
        )

    def complete(self, system: str, user: str, *, schema_name: str, schema: dict[str, Any]) -> ModelReply:
        """Ask once (with the retries above); the reply's text and token usage."""
        body: dict[str, Any] = {
            "model": self.model, self.token_field: self.max_output_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        if self.send_temperature:
            body["temperature"] = self.temperature
        if self.structured_outputs:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": schema_name, "strict": True, "schema": schema}}
        retried: set[str] = set()
        while True:
            response = self._post(body)
            status = response.status
            if 200 <= status < 300:
                return self._reply(response)
            if status == 400:
                adapted = self._adapt(body, response.text)
                if adapted is not None:
                    body = adapted
                    continue
            if status == 429:
                wait = retry_after_seconds(response.headers.get("retry-after"))
                if "429" in retried or wait is None or wait > self.max_retry_wait:
                    raise ExtractionError(f"{self._where()}: HTTP 429: rate limited", reason="rate_limited")
                retried.add("429")
                if self._stop.wait(wait):
                    raise ExtractionError(f"{self._where()}: closing", reason="request_failed")
                continue
            if status >= 500 and "5xx" not in retried:
                retried.add("5xx")
                if self._stop.wait(_RETRY_5XX_S):
                    raise ExtractionError(f"{self._where()}: closing", reason="request_failed")
                continue
            raise self._status_error(status)

    def _adapt(self, body: dict[str, Any], error: str) -> dict[str, Any] | None:
        """The request without what a 400 says the server does not take (each at most once, and remembered so
        it is not sent again): ``response_format``, ``max_tokens`` (renamed ``max_completion_tokens``),
        ``temperature``. ``None``: the 400 is about something else."""
        if "response_format" in body and ("response_format" in error or "json_schema" in error):
            self.structured_outputs = False
            return {k: v for k, v in body.items() if k != "response_format"}
        if "max_tokens" in body and "max_tokens" in error:
            self.token_field = "max_completion_tokens"
            return {("max_completion_tokens" if k == "max_tokens" else k): v for k, v in body.items()}
        if "temperature" in body and "temperature" in error:
            self.send_temperature = False
            return {k: v for k, v in body.items() if k != "temperature"}
        return None

    def _post(self, body: dict[str, Any]) -> _Answer:
        httpx = self._httpx
        try:
            deadline = time.monotonic() + 2 * self.timeout  # a server dripping bytes cannot hold it longer
            with self._client.stream("POST", self.endpoint, json=body) as response:
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise ExtractionError(f"{self._where()}: the answer is larger than {MAX_ANSWER_BYTES} bytes",
                                              reason="invalid_response")
                    if time.monotonic() > deadline:
                        raise ExtractionError(f"{self._where()}: the answer took longer than {2 * self.timeout:g} s",
                                              reason="timeout")
                    chunks.append(chunk)
                return _Answer(status=response.status_code, headers=response.headers, body=b"".join(chunks))
        except BlockedUrlError as exc:
            raise ExtractionError(f"{self._where()}: {exc}", reason="blocked") from None
        except HostResolutionError as exc:
            raise ExtractionError(f"{self._where()}: {exc}", reason="request_failed") from None
        except httpx.TimeoutException:
            raise ExtractionError(f"{self._where()}: timed out after {self.timeout:g} s", reason="timeout") from None
        except httpx.HTTPError as exc:
            raise ExtractionError(f"{self._where()}: request failed: {type(exc).__name__}",
                                  reason="request_failed") from None

    def _status_error(self, status: int) -> ExtractionError:
        if status in (401, 403):
            return ExtractionError(f"{self._where()}: HTTP {status}: the server refused the credentials (api_key)",
                                   reason="no_key")
        if 300 <= status < 400:
            return ExtractionError(f"{self._where()}: HTTP {status}: redirects are not followed (point base_url at "
                                   "the final URL)", reason="request_failed")
        return ExtractionError(f"{self._where()}: HTTP {status}",
                               reason="server_error" if status >= 500 else "request_failed")

    def _reply(self, response: _Answer) -> ModelReply:
        try:
            payload = json.loads(response.body)
        except (ValueError, RecursionError):
            raise ExtractionError(f"{self._where()}: the response is not JSON", reason="invalid_response") from None
        choices = payload.get("choices") if isinstance(payload, dict) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        text = message.get("content") if isinstance(message, dict) else None
        if not isinstance(text, str):
            raise ExtractionError(f"{self._where()}: no message content (a refusal, or not Chat Completions)",
                                  reason="invalid_response")
        usage = payload.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        return ModelReply(text=text, prompt_tokens=_count(usage.get("prompt_tokens")),
                          completion_tokens=_count(usage.get("completion_tokens")))

    def _where(self) -> str:
        return f"llm extractor ({self.endpoint}, {self.model})"

    def close(self) -> None:
        self._client.close()


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
