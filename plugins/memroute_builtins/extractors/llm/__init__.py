"""The built-in ``llm`` extractor: facts and consolidation from any OpenAI-compatible Chat Completions model
(OpenAI, a local Ollama / llama.cpp / vLLM server, or the proxy's own upstream). Off by default; chain it after
the offline extractor with ``[extraction] extractors = ["regex", "llm"]`` and configure ``[extraction.llm]``
(docs/extraction.md)."""

from __future__ import annotations

import threading
from typing import Any

import attrs

import memroute
from memroute.config.netguard import check_configured_url
from memroute.errors import ConfigError, PluginError
from memroute.interfaces import ComponentContext
from memroute.specs import ExtractorSpec

from .extractor import ACTOR, LlmExtractor, llm_key
from .prompts import DECIDE_PROMPT, DECIDE_SCHEMA, EXTRACT_PROMPT, EXTRACT_SCHEMA
from .settings import LlmExtractorSettings

__all__ = [
    "ACTOR",
    "USAGE_FILE",
    "DECIDE_PROMPT",
    "DECIDE_SCHEMA",
    "EXTRACT_PROMPT",
    "EXTRACT_SCHEMA",
    "LlmExtractor",
    "LlmExtractorSettings",
    "build_llm_extractor",
    "llm_key",
]


USAGE_FILE = "llm-extractor.db"
"""The counters ``memroute status`` shows, in the data directory (shared by every process on the machine)."""


def _with_proxy_upstream(settings: LlmExtractorSettings, context: ComponentContext) -> LlmExtractorSettings:
    """``use_proxy_upstream``: what is unset here comes from ``[proxy.openai]``."""
    upstream = getattr(getattr(context.settings, "proxy", None), "openai", None)
    if upstream is None or not upstream.base_url:
        raise ConfigError("extraction.llm.use_proxy_upstream: [proxy.openai] base_url is not configured",
                          [("extraction.llm.use_proxy_upstream", "no proxy upstream")])
    return attrs.evolve(
        settings, base_url=settings.base_url or upstream.base_url,
        api_key=settings.api_key if settings.api_key is not None else upstream.api_key,
        allow_private=settings.allow_private or upstream.allow_private,
        connect_timeout=min(settings.connect_timeout, upstream.connect_timeout),
    )


def build_llm_extractor(settings: LlmExtractorSettings, context: ComponentContext) -> LlmExtractor:
    """The factory: checks the configuration (a missing ``base_url`` / ``model``, a blocked address) and builds
    the client; nothing is sent until a turn is observed."""
    if settings.use_proxy_upstream:
        settings = _with_proxy_upstream(settings, context)
    missing = [name for name in ("base_url", "model") if not getattr(settings, name).strip()]
    if missing:
        raise ConfigError("; ".join(f"extraction.llm.{name}: required" for name in missing),
                          [(f"extraction.llm.{name}", "required") for name in missing])
    if "?" in settings.base_url or "#" in settings.base_url:
        raise ConfigError("extraction.llm.base_url: a query string or fragment is not allowed",
                          [("extraction.llm.base_url", "query")])
    check_configured_url(settings.base_url, "extraction.llm.base_url", allow_private=settings.allow_private,
                         allow_hosts=settings.allow_hosts)
    try:
        import httpx  # noqa: F401 - the client's transport
    except ImportError:
        raise PluginError("the llm extractor needs httpx: pip install 'memroute[llm]'") from None
    from .budget import Usage
    from .wire import ChatClient

    stop = threading.Event()
    client = ChatClient(
        base_url=settings.base_url, model=settings.model.strip(), api_key=settings.api_key,
        timeout=settings.timeout, connect_timeout=settings.connect_timeout, allow_private=settings.allow_private,
        allow_hosts=settings.allow_hosts, headers=dict(settings.headers),
        structured_outputs=settings.structured_outputs, temperature=settings.temperature,
        max_output_tokens=settings.max_output_tokens, max_retry_wait=settings.max_retry_wait, stop=stop,
    )
    try:
        usage = Usage(context.data_dir / USAGE_FILE)
    except BaseException:
        client.close()
        raise
    return LlmExtractor(settings, client, stop, usage)


@memroute.hookimpl
def memroute_extractors() -> Any:
    yield ExtractorSpec(
        name="llm", factory=build_llm_extractor, settings_class=LlmExtractorSettings,
        description="facts and consolidation from any OpenAI-compatible chat model (background, per-tenant budget)",
    )
