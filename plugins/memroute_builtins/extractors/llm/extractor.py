"""The ``llm`` extractor: a model reads each turn, proposes facts, and decides against the tenant's existing
memories whether each is new, an update, a contradiction or nothing.

``observe`` stores the offline extractors' facts first, then submits the turn here; a worker thread (never a
request's thread) takes the queued turns of one tenant at a time (up to ``batch_turns``, tenants in turn) and:

1. asks the model for candidate facts in the turns' text (:data:`~.prompts.EXTRACT_PROMPT`);
2. searches the tenant's most similar memories for each candidate (memroute's own search, through the
   tenant-bound :class:`~memroute.interfaces.TenantMemories`), shows them under short references (``m1``, ...)
   and asks for one operation per candidate (:data:`~.prompts.DECIDE_PROMPT`): add, update, delete (the
   candidate supersedes the memory) or none. When no candidate has a similar memory, every candidate is added
   without the second request;
3. applies the valid operations through the service. What the model answers that does not validate is dropped
   and counted, never stored; a reference it was not shown is refused.

A timeout, an error, a full queue or a tenant over its budget skips the model's part of a batch and is
counted; the offline facts were stored before. Memories written here carry ``metadata.actor = "llm"`` (the
service's writes take no actor yet; per-memory history will read it from there).
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
import unicodedata
from collections import deque
from collections.abc import Sequence
from typing import Any

from memroute.errors import ExtractionError, MemrouteError
from memroute.interfaces import BackgroundExtractor, ExtractedFact, ObservedTurn, TenantMemories
from memroute.models import Memory

from .budget import TenantBudget, Usage
from .parsing import Candidate, Operation, Parsed, parse_facts, parse_operations
from .prompts import DECIDE_PROMPT, DECIDE_SCHEMA, EXTRACT_PROMPT, EXTRACT_SCHEMA, decide_message, extract_message
from .settings import LlmExtractorSettings
from .wire import ChatClient, ModelReply, first_json_object

__all__ = ["ACTOR", "LlmExtractor", "llm_key"]

log = logging.getLogger("memroute.extractors.llm")

ACTOR = "llm"
"""``metadata.actor`` of every memory this extractor writes or changes."""
_CLOSE_WAIT_S = 10.0


def llm_key(content: str) -> str:
    """The upsert key of a fact the model proposed: a readable slug and a hash of the normalised text, so a
    re-stated fact upserts and different facts never share a key."""
    normalised = " ".join(unicodedata.normalize("NFKC", content).casefold().split())
    slug = re.sub(r"[^\w]+", "_", normalised).strip("_")[:40].rstrip("_")
    digest = hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:12]
    return f"llm:{slug}:{digest}" if slug else f"llm:{digest}"


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


class LlmExtractor(BackgroundExtractor):
    """Facts and consolidation from any OpenAI-compatible Chat Completions model (docs/extraction.md)."""

    in_process = False  # it waits on a model server

    def __init__(self, settings: LlmExtractorSettings, client: ChatClient, stop: threading.Event, usage: Usage,
                 budget: TenantBudget | None = None) -> None:
        self.settings = settings
        self.client = client
        self.budget = budget or TenantBudget(settings.requests_per_minute, settings.tokens_per_minute)
        self.usage = usage
        self._stop = stop
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queues: dict[str, deque[tuple[ObservedTurn, TenantMemories]]] = {}
        self._order: deque[str] = deque()
        """Tenants with queued turns, in the order they are served."""
        self._queued = 0
        self._busy = 0
        self._worker: threading.Thread | None = None
        self._closed = False

    # --- the Extractor interface -----------------------------------------------------------------------
    def extract(self, text: str, *, source: str = "user") -> list[ExtractedFact]:
        """Step 1 only, now (no tenant, so no consolidation): what the model finds in ``text``, for trying a model
        and the prompt from Python. ``observe`` and ``memroute extract`` never call it (they use :meth:`submit` /
        the offline extractors). A failure is logged and counted and gives no facts."""
        try:
            candidates = self._candidates(None, [(text, source)])
        except ExtractionError as exc:
            log.warning("memroute: %s", exc)
            return []
        return [ExtractedFact(key=llm_key(c.content), content=c.content, type=c.type, category=c.category,
                              metadata={"actor": ACTOR, "source": source}) for c in candidates]

    # --- background work -----------------------------------------------------------------------------
    def submit(self, turn: ObservedTurn, memories: TenantMemories) -> None:
        tenant = turn.api_key_id
        with self._lock:
            refused = "closed" if self._closed else "queue_full" if self._queued >= self.settings.queue_limit \
                else None
            if refused is None:
                self._enqueue(tenant, turn, memories)
        if refused is not None:
            self.usage.count(tenant, "failures", refused)

    def _enqueue(self, tenant: str, turn: ObservedTurn, memories: TenantMemories) -> None:
        """Under the lock: queue the turn and make sure the worker runs."""
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = deque()
            self._order.append(tenant)
        queue.append((turn, memories))
        self._queued += 1
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="memroute-llm-extractor", daemon=True)
            self._worker.start()
        self._changed.notify_all()

    def _next_batch(self) -> list[tuple[ObservedTurn, TenantMemories]] | None:
        """The next tenant's queued turns (up to ``batch_turns``); ``None`` when closed and drained."""
        with self._lock:
            while not self._order and not self._closed:
                self._changed.wait()
            if not self._order:
                return None
            tenant = self._order.popleft()
            queue = self._queues[tenant]
            batch = [queue.popleft() for _ in range(min(len(queue), self.settings.batch_turns))]
            if queue:
                self._order.append(tenant)  # the others go first
            else:
                del self._queues[tenant]
            self._queued -= len(batch)
            self._busy += len(batch)
            return batch

    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            tenant = batch[0][0].api_key_id
            try:
                if self._stop.is_set():
                    self.usage.count(tenant, "failures", "closed")
                else:
                    self._learn(tenant, batch)
            except ExtractionError as exc:
                self.usage.count(tenant, "failures", exc.reason)
                log.warning("memroute: %s (tenant %s: the turn keeps its offline facts)", exc, tenant)
            except Exception:
                self.usage.count(tenant, "failures", "unexpected")
                log.exception("memroute: the llm extractor failed on a batch of tenant %s", tenant)
            finally:
                with self._lock:
                    self._busy -= len(batch)
                    self._changed.notify_all()

    def _learn(self, tenant: str, batch: Sequence[tuple[ObservedTurn, TenantMemories]]) -> None:
        texts = [pair for turn, _ in batch for pair in turn.texts]
        memories = batch[-1][1]  # the newest turn's session holds what is added
        candidates = self._candidates(tenant, texts)
        if not candidates:
            return
        refs: dict[str, Memory] = {}
        by_id: dict[str, str] = {}
        shown: list[list[tuple[str, Memory]]] = []
        for candidate in candidates:
            found = memories.search(candidate.content, limit=self.settings.similar_memories) \
                if self.settings.similar_memories else []
            mine = []
            for memory in found:
                if memory.api_key_id != tenant:  # the view is tenant-bound; this is a second wall
                    continue
                ref = by_id.get(memory.id)
                if ref is None:
                    ref = by_id[memory.id] = f"m{len(refs) + 1}"
                    refs[ref] = memory
                mine.append((ref, memory))
            shown.append(mine)
        if not refs:  # nothing similar stored: every candidate is new, no second request needed
            operations: Sequence[Operation] = [Operation(candidate=i, event="add") for i in range(len(candidates))]
        else:
            reply = self._ask(tenant, DECIDE_PROMPT,
                              decide_message([(c.content, s) for c, s in zip(candidates, shown, strict=True)]),
                              "memroute_operations", DECIDE_SCHEMA)
            parsed = parse_operations(first_json_object(reply.text), [[r for r, _ in s] for s in shown])
            self._count_dropped(tenant, parsed)
            operations = parsed.items
            # A candidate the answer left without a valid operation is not stored (the model did not decide).
            self.usage.count(tenant, "dropped", "no_operation", len(candidates) - len(operations))
        for operation in operations:
            try:
                self._apply(tenant, memories, candidates[operation.candidate], operation, refs)
            except MemrouteError as exc:
                self.usage.count(tenant, "failures", "apply_failed")
                log.warning("memroute: an llm extractor operation for tenant %s failed: %s", tenant, exc)

    def _candidates(self, tenant: str | None, texts: Sequence[tuple[str, str]]) -> tuple[Candidate, ...]:
        reply = self._ask(tenant, EXTRACT_PROMPT, extract_message(texts, max_chars=self.settings.max_text_chars),
                          "memroute_facts", EXTRACT_SCHEMA)
        parsed = parse_facts(first_json_object(reply.text), limit=self.settings.max_facts)
        self._count_dropped(tenant, parsed)
        return parsed.items

    def _ask(self, tenant: str | None, system: str, user: str, name: str, schema: dict[str, Any]) -> ModelReply:
        if tenant is not None and not self.budget.allows(tenant):
            raise ExtractionError(f"tenant {tenant} is over its llm extractor budget for this minute", reason="budget")
        try:
            reply = self.client.complete(system, user, schema_name=name, schema=schema)
        except ExtractionError:
            if tenant is not None:
                self.budget.spend(tenant, 0)  # a failed request still counts against the request rate
            raise
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None else _tokens(system) + _tokens(user)
        completion = reply.completion_tokens if reply.completion_tokens is not None else _tokens(reply.text)
        self.usage.request(tenant, prompt, completion)
        if tenant is not None:
            self.budget.spend(tenant, prompt + completion)
        return reply

    def _count_dropped(self, tenant: str | None, parsed: Parsed) -> None:
        for reason, count in parsed.dropped.items():
            self.usage.count(tenant, "dropped", reason, count)

    def _apply(self, tenant: str, memories: TenantMemories, candidate: Candidate, operation: Operation,
               refs: dict[str, Memory]) -> None:
        event = operation.event
        target = refs.get(operation.memory) if operation.memory else None
        metadata: dict[str, Any] = {"category": candidate.category, "actor": ACTOR, "model": self.client.model}
        if event == "add":
            memories.add(content=candidate.content, key=llm_key(candidate.content), type=candidate.type,
                         metadata=metadata)
        elif event == "update" and target is not None and operation.content is not None:
            if memories.update(target.id, content=operation.content,
                               metadata={**target.metadata, "actor": ACTOR, "model": self.client.model}) is None:
                self.usage.count(tenant, "dropped", "unknown_memory")
                return
        elif event == "delete" and target is not None:
            # The candidate is stored first: a failure in between leaves both, never neither.
            memories.add(content=candidate.content, key=llm_key(candidate.content), type=candidate.type,
                         metadata={**metadata, "supersedes": [target.id]})
            memories.delete(target.id)
        self.usage.count(tenant, "operations", event)

    # --- lifecycle, status ---------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        with self._lock:
            return self._changed.wait_for(lambda: self._queued == 0 and self._busy == 0, timeout)

    def status(self, api_key_id: str | None = None) -> dict[str, Any]:
        config = {"model": self.client.model, "structured_outputs": self.client.structured_outputs,
                  "budget": {"requests_per_minute": self.settings.requests_per_minute,
                             "tokens_per_minute": self.settings.tokens_per_minute}}
        if api_key_id is not None:
            return {**config, "tenant": api_key_id, **self.usage.of_tenant(api_key_id)}
        with self._lock:
            queued = self._queued
        return {**config, "endpoint": self.client.endpoint, "queued": queued, **self.usage.snapshot()}

    def close(self) -> None:
        """Work through what is queued for up to 10 s, then abandon the rest (counted ``closed``)."""
        with self._lock:
            self._closed = True
            self._changed.notify_all()
            worker = self._worker
        if worker is not None:
            worker.join(_CLOSE_WAIT_S)
        self._stop.set()  # a Retry-After wait ends now; the next batches are counted, not sent
        if worker is not None:
            worker.join(self.settings.timeout + self.settings.connect_timeout)
        self.client.close()
        self.usage.close()
