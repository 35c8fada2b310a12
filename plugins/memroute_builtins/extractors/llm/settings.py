"""``[extraction.llm]``: where the ``llm`` extractor's model is, how long to wait for it, and how much of it each
tenant may use."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["LlmExtractorSettings"]


def _between(low: float, high: float) -> Any:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not low <= value <= high:
            raise ValueError(f"{attribute.name} must be in [{low:g}, {high:g}], got {value!r}")

    return check


@attrs.frozen(kw_only=True)
class LlmExtractorSettings:
    """``[extraction.llm]`` options (docs/extraction.md)."""

    base_url: str = ""
    """The OpenAI-compatible API root, including ``/v1`` (``https://api.openai.com/v1``,
    ``http://127.0.0.1:11434/v1`` for Ollama, ``http://gpu-box:8000/v1`` for vLLM). ``/chat/completions`` is
    appended."""
    model: str = ""
    """The model id the server expects (``gpt-4o-mini``, ``qwen2.5:7b-instruct``, ...)."""
    api_key: str | None = attrs.field(default=None, repr=False)
    """Sent as ``Authorization: Bearer <api_key>``; write ``"${OPENAI_API_KEY}"`` in the file. Unset: no header
    (a local server)."""
    use_proxy_upstream: bool = False
    """Take ``base_url``, ``api_key`` and ``allow_private`` from ``[proxy.openai]`` (the server the proxy forwards
    to) where they are not set here. ``model`` is still required."""
    timeout: float = attrs.field(default=30.0, validator=_between(0.1, 600))
    """Seconds to wait for the model's answer (each read; the whole answer may take twice this). A timeout is
    counted; the turn's offline facts are already stored."""
    connect_timeout: float = attrs.field(default=5.0, validator=_between(0.1, 120))
    """Seconds to wait for a connection."""
    allow_private: bool = False
    """Allow loopback / private / CGNAT addresses (a local Ollama, a vLLM on the LAN). Metadata addresses stay
    blocked."""
    allow_hosts: tuple[str, ...] = ()
    """Hosts, addresses or CIDR networks allowed even though they are not public."""
    headers: dict[str, str] = attrs.field(factory=dict)
    """Extra request headers (``Authorization`` comes from ``api_key`` and wins)."""
    structured_outputs: bool = True
    """Send ``response_format`` with the JSON schema (OpenAI, Ollama, vLLM, llama.cpp support it). A server that
    refuses it is asked again without, once, and not sent it again; the answer's first JSON object is read."""
    temperature: float = attrs.field(default=0.0, validator=_between(0, 2))
    max_output_tokens: int = attrs.field(default=1024, validator=_between(16, 65_536))
    """``max_tokens`` of each request."""
    max_facts: int = attrs.field(default=8, validator=_between(1, 50))
    """Candidate facts kept from one extraction (the rest are dropped and counted)."""
    similar_memories: int = attrs.field(default=5, validator=_between(0, 20))
    """Existing memories shown to the model per candidate (the tenant's most similar, by memroute's search)."""
    batch_turns: int = attrs.field(default=8, validator=_between(1, 100))
    """Queued turns of one tenant read in one extraction request."""
    max_text_chars: int = attrs.field(default=8000, validator=_between(100, 200_000))
    """Characters of one turn's text sent to the model (the newest part is kept)."""
    queue_limit: int = attrs.field(default=1000, validator=_between(1, 1_000_000))
    """Turns waiting for the model at most (all tenants); more are dropped and counted (``queue_full``)."""
    requests_per_minute: int = attrs.field(default=0, validator=_between(0, 1_000_000))
    """Model requests per tenant per minute (0: no limit). A turn over budget keeps only its offline facts."""
    tokens_per_minute: int = attrs.field(default=0, validator=_between(0, 100_000_000))
    """Model tokens (prompt + completion, as the server reports them) per tenant per minute (0: no limit)."""
    max_retry_wait: float = attrs.field(default=30.0, validator=_between(0, 3600))
    """Longest ``Retry-After`` of a 429 that is waited out (then the request is tried once more); a longer one
    drops the batch (counted ``rate_limited``)."""
