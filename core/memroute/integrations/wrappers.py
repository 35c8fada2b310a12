"""Wrap an OpenAI or Anthropic Python SDK client so every chat call augments before and observes after.

The SDKs are optional and never imported: the wrappers are duck-typed. ``wrap_openai`` replaces
``client.chat.completions.create`` and ``wrap_anthropic`` replaces ``client.messages.create`` on the
client's own resource objects (both SDKs cache those), and return the same client::

    client = wrap_openai(OpenAI(), mem, api_key_id="user-1")
    client.chat.completions.create(model="gpt-4o", messages=[...])   # memories injected, facts extracted

Keyword arguments other than the SDK's transport options (``extra_headers``, ``extra_query``,
``extra_body``, ``timeout``) form the request body memroute reads and augments. Streaming calls are
augmented, and the request (not the streamed reply) is observed. Memory never breaks a call: a retrieval
or extraction failure is logged and the call proceeds (the service's ``augment`` / ``observe`` contract).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from memroute.pipeline.requests import ApiShape

if TYPE_CHECKING:
    from memroute.service import Memroute

__all__ = ["wrap_anthropic", "wrap_create", "wrap_openai"]

log = logging.getLogger("memroute.integrations")

_TRANSPORT_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})
_WRAPPED = "__memroute_wrapped__"


def wrap_create(
    create: Callable[..., Any],
    mem: Memroute,
    api_key_id: str,
    *,
    api: ApiShape,
    session_id: str | None = None,
    provider: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Callable[..., Any]:
    """A ``create(**body)`` that augments ``body`` before calling ``create`` and observes the turn after.
    Opt-out headers may come from ``headers`` or the call's ``extra_headers``."""

    @functools.wraps(create)
    def augmented_create(*args: Any, **kwargs: Any) -> Any:
        body = {k: v for k, v in kwargs.items() if k not in _TRANSPORT_OPTIONS}
        transport = {k: v for k, v in kwargs.items() if k in _TRANSPORT_OPTIONS}
        call_headers = {**(headers or {}), **dict(transport.get("extra_headers") or {})}
        try:
            new_body = mem.augment(body, api_key_id=api_key_id, session_id=session_id, provider=provider,
                                   headers=call_headers, api=api)
        except Exception:
            log.exception("memroute: augment failed; calling without memory")
            new_body = body
        response = create(*args, **new_body, **transport)
        try:
            mem.observe(body, None if kwargs.get("stream") else response, api_key_id=api_key_id,
                        session_id=session_id, headers=call_headers)
        except Exception:
            log.exception("memroute: observe failed")
        return response

    setattr(augmented_create, _WRAPPED, True)
    return augmented_create


def _wrap_resource(resource: Any, mem: Memroute, api_key_id: str, api: ApiShape, **options: Any) -> None:
    create = getattr(resource, "create", None)
    if not callable(create):
        raise TypeError(f"{type(resource).__name__} has no create() method to wrap")
    if getattr(create, _WRAPPED, False):
        return  # wrapping twice would inject twice
    resource.create = wrap_create(create, mem, api_key_id, api=api, **options)


def wrap_openai(client: Any, mem: Memroute, api_key_id: str, *, session_id: str | None = None,
                provider: str | None = None, headers: Mapping[str, str] | None = None) -> Any:
    """Make ``client.chat.completions.create`` augment and observe (OpenAI Chat Completions shape). Returns
    ``client``. ``provider`` selects placement rules (``o1``, ``glm``, ``mimo``, ...)."""
    _wrap_resource(client.chat.completions, mem, api_key_id, "openai-chat", session_id=session_id,
                   provider=provider, headers=headers)
    return client


def wrap_anthropic(client: Any, mem: Memroute, api_key_id: str, *, session_id: str | None = None,
                   headers: Mapping[str, str] | None = None) -> Any:
    """Make ``client.messages.create`` augment (into top-level ``system``) and observe. Returns ``client``."""
    _wrap_resource(client.messages, mem, api_key_id, "anthropic", session_id=session_id, provider="anthropic",
                   headers=headers)
    return client
