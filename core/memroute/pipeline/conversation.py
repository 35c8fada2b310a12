"""The conversation pipeline the service owns: ``augment`` (retrieve + inject), ``observe`` (extract +
store, in a background worker), and the maintenance jobs ``summarize``, ``compact`` and ``prune``.

Everything goes through the narrow :class:`~memroute.pipeline.ports.MemoryStore` port the service satisfies
(``search``, ``add``, ``delete``, ``get_by_key``, ``export``), so memories written here are indexed for
vector search and replicated to fallbacks, and deletions remove vectors and replicas too: nothing here
touches a database directly, and nothing here imports the service (it builds this pipeline and hands
itself in: the composition root).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import attrs

from memroute.components import build_component, make_context
from memroute.errors import ValidationError
from memroute.interfaces import ExtractedFact, Extractor
from memroute.models import (
    Memory,
    MemoryType,
    NewMemory,
    SearchHit,
    SearchQuery,
    SearchResult,
    require_session,
    require_tenant,
    utcnow,
)
from memroute.pipeline import consolidate
from memroute.pipeline.gate import memory_enabled, message_time_from_headers, opted_out, session_from_headers
from memroute.pipeline.inject import block_of, inject_block, memory_lines
from memroute.pipeline.learning import background_status, flush_background, hand_off, offline_extractors
from memroute.pipeline.requests import ApiShape, assistant_text, extraction_text, last_user_name, query_text
from memroute.pipeline.summarize import build_summary, select_for_compaction
from memroute.pipeline.turns import TURN_CATEGORY, is_salient, legacy_turn_key, parse_said_at, split_turn, turn_key
from memroute.reports import MaintenanceReport

if TYPE_CHECKING:
    from pathlib import Path

    from memroute.config.settings import MemorySettings, MemrouteSettings
    from memroute.pipeline.augment_cache import AugmentCache
    from memroute.pipeline.ports import MemoryStore
    from memroute.plugins import MemroutePluginManager

__all__ = ["NOT_CACHED", "Augmentation", "Conversation", "build_extractors", "run_extractors"]

NOT_CACHED: Final = "not cached"
"""``skipped`` of an ``explain_augment(cached_only=True)`` that would have had to search."""
BUDGET_CANDIDATES = 100
"""How many ranked memories ``augment`` walks to fill its token budget: the reference's retrieval always
passes 100; ``vec_top_k`` (20) is only a search's default limit and must not cap what fits the budget."""

log = logging.getLogger("memroute.pipeline")

_SUMMARY_BATCH = 500
"""At most this many memories go into one summary memory (a run over more writes several)."""


@attrs.frozen(kw_only=True)
class Augmentation:
    """What ``augment`` did; the service turns it into the public
    :class:`~memroute.reports.AugmentReport`."""

    request: Any
    """The request to send: the input object itself when nothing was injected."""
    query: str = ""
    result: SearchResult | None = None
    hits: tuple[SearchHit, ...] = ()
    """The hits chosen for the block (the search result's, without decayed memories)."""
    block: str = ""
    count: int = 0
    """How many memories the block holds."""
    max_tokens: int = 0
    """The token budget the retrieval was fitted into (``[memory] max_tokens`` in effect)."""
    skipped: str | None = None
    """Why nothing was injected (``disabled``, ``opted out``, ``no user message``, ``no memories``, ...)."""
    searched: bool = False
    """Whether this call ran a search (not when nothing needed one, nor when a retrieval was reused)."""

    @property
    def injected(self) -> bool:
        return bool(self.block)


@attrs.frozen(kw_only=True)
class _Job:
    api_key_id: str
    session_id: str | None
    texts: tuple[tuple[str, str], ...]
    """(text, source) pairs."""
    said_at: datetime
    """When the user's message was said (``observe``'s ``said_at``, the message-time header, or the call's time)."""
    speaker: str | None = None
    """The user message's ``name``, when it carries one."""


def _check_days(name: str, value: object, low: int = 0, high: int = 36_500) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{name}: must be an integer in [{low}, {high}]", [(name, "range")])
    return value


def build_extractors(settings: MemrouteSettings, plugins: MemroutePluginManager,
                     data_dir: Path) -> list[tuple[str, Extractor]]:
    """The extractor chain ``[extraction] extractors`` names, each built with its ``[extraction.<name>]``
    options. Unknown names raise :class:`~memroute.errors.UnknownComponentError`."""
    chain = []
    for name in settings.extraction.extractors:
        extractor = build_component(
            plugins, "extractor", name, settings.extraction.options.get(name, {}),
            context=attrs.evolve(make_context(plugins, name, data_dir), settings=settings),
            path=f"extraction.{name}",
        )
        chain.append((name, extractor))
    return chain


def run_extractors(chain: Sequence[tuple[str, Extractor]], text: str, *, source: str = "user") -> list[ExtractedFact]:
    """Run every extractor of ``chain`` on ``text``. Facts are merged by key (the first extractor that produced a
    key wins); an extractor that raises is logged and skipped, so one bad plugin cannot stop extraction."""
    if source not in ("user", "assistant"):
        raise ValidationError("source: expected 'user' or 'assistant'", [("source", "invalid")])
    merged: dict[str, ExtractedFact] = {}
    for name, extractor in chain:
        try:
            facts = extractor.extract(text, source=source)
        except Exception:
            log.exception("memroute: extractor %r failed; its facts are skipped", name)
            continue
        for fact in facts:
            if isinstance(fact, ExtractedFact) and fact.key not in merged:
                merged[fact.key] = fact if fact.extractor is not None else attrs.evolve(fact, extractor=name)
    return list(merged.values())


class Conversation:
    """Owned by a :class:`~memroute.service.Memroute` (private to it); use the service's
    ``augment`` / ``observe`` / ``summarize`` / ``compact`` / ``prune`` methods."""

    def __init__(self, store: MemoryStore, settings: MemrouteSettings,
                 extractors: Callable[[], list[tuple[str, Extractor]]], *,
                 cache: AugmentCache | None = None) -> None:
        """``store``: the memory operations (the service); ``extractors``: builds the configured chain, called
        once, on first use (the service passes :func:`build_extractors` bound to its settings); ``cache``:
        where ``augment`` may reuse a retrieval for a repeated message (:mod:`memroute.pipeline.augment_cache`)."""
        self.store = store
        self.cache = cache
        self.settings = settings
        self._build_extractors = extractors
        self._extractors: list[tuple[str, Extractor]] | None = None
        self._lock = threading.RLock()
        self._jobs: deque[_Job] = deque()
        self._pending = 0
        self._changed = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None
        self._closed = False
        self.failures = 0
        """Background extraction jobs that failed (each is logged)."""

    # --- extraction ----------------------------------------------------------------------------------
    def extractors(self) -> list[tuple[str, Extractor]]:
        """The configured chain (``[extraction] extractors``), built once from the plugin manager."""
        with self._lock:
            if self._extractors is None:
                self._extractors = self._build_extractors()
            return self._extractors

    def extract(self, text: str, *, source: str = "user") -> list[ExtractedFact]:
        """Run the chain's offline extractors on ``text`` (see :func:`run_extractors`). A background extractor
        (a model) is not asked: an explicit extraction, and the health probe built on it, never spend a model
        request; its work needs a tenant's memories and happens on ``observe``."""
        return run_extractors(offline_extractors(self.extractors()), text, source=source)

    def store_facts(self, api_key_id: str, facts: Sequence[ExtractedFact], *,
                    session_id: str | None = None, said: dict[str, str | None] | None = None) -> list[Memory]:
        """Store extracted facts for ``api_key_id`` now (an upsert per key), whatever the memory gate says:
        for explicit requests such as ``memroute extract --store``.

        A fact whose metadata names an ``opposite_key`` (the regex extractor sets it: ``aversion:python`` for
        ``preference:python``) supersedes that key's memory of the same owner: the old one is deleted through
        the manager and its id kept in the new memory's ``metadata.supersedes``. With ``[extraction]
        consolidate`` (the default), each fact is first consolidated with what the tenant holds
        (:mod:`memroute.pipeline.consolidate`). Each change's history names the extractor
        (``extractor:<name>``). ``said`` (``said_at``, ``speaker``) is added to each fact's metadata."""
        api_key_id = require_tenant(api_key_id)
        session_id = require_session(session_id)
        stored = []
        for fact in facts:
            metadata = {"category": fact.category, **fact.metadata, **(said or {})}
            actor = f"extractor:{fact.extractor or 'unnamed'}"
            opposite = self._find_by_key(api_key_id, metadata.get("opposite_key"))
            if opposite is not None:
                metadata["supersedes"] = [opposite.id]
            stored.append(self._write_fact(api_key_id, key=fact.key, content=fact.content, type=fact.type,
                                           session_id=session_id, metadata=metadata, actor=actor,
                                           opposite_key=opposite.key if opposite is not None else None))
            if opposite is not None:
                self.store.delete(opposite.id, api_key_id=api_key_id, actor=actor)
        return stored

    def _write_fact(self, api_key_id: str, *, key: str, content: str, type: MemoryType, session_id: str | None,
                    metadata: dict[str, Any], actor: str, opposite_key: str | None = None) -> Memory:
        extraction = self.settings.extraction
        if not extraction.consolidate:
            return self.store.add(api_key_id=api_key_id, content=content, key=key, type=type,
                                  session_id=session_id, metadata=metadata, actor=actor)
        decision = consolidate.decide(self.store, api_key_id, key=key, content=content, type=type,
                                      restate_similarity=extraction.restate_similarity, opposite_key=opposite_key)
        return consolidate.write(self.store, api_key_id, decision, key=key, content=content, type=type,
                                 session_id=session_id, metadata=metadata, actor=actor)

    def consolidate(self, new: NewMemory, *, actor: str, explicit_key: bool) -> Memory:
        """``add(..., consolidate=True)``: store ``new`` after consolidating it like an extracted fact. A key
        the caller did not give (derived from the content) never makes a slot: only near-identical content
        consolidates then."""
        decision = consolidate.decide(self.store, new.api_key_id, key=new.key, content=new.content, type=new.type,
                                      restate_similarity=self.settings.extraction.restate_similarity)
        if decision.action == "supersede" and not explicit_key:
            decision = consolidate.Decision(action="create")
        return consolidate.write(self.store, new.api_key_id, decision, key=new.key, content=new.content,
                                 type=new.type, session_id=new.session_id, metadata=new.metadata, actor=actor)

    def _find_by_key(self, api_key_id: str, key: object) -> Memory | None:
        if not isinstance(key, str) or not key.strip():
            return None
        return self.store.get_by_key(key, api_key_id=api_key_id)

    def _texts(self, request: Any, response: Any) -> tuple[tuple[str, str], ...]:
        texts = []
        user = extraction_text(request)
        if user.strip():
            texts.append((user, "user"))
        if response is not None and self.settings.extraction.mine_assistant:
            reply = assistant_text(response)
            if reply.strip():
                texts.append((reply, "assistant"))
        return tuple(texts)

    def _store(self, job: _Job) -> list[Memory]:
        """The offline extractors' facts and the kept message are stored now; then the turn goes to the
        background extractors (an ``llm`` extractor), which decide against the tenant's memories later, on their
        own threads."""
        chain = self.extractors()
        offline = offline_extractors(chain)
        # "speaker" is always written (None when the message has no name): the upsert merges metadata, and a
        # restatement without a name must not keep an earlier speaker's.
        said: dict[str, str | None] = {"said_at": job.said_at.isoformat(), "speaker": job.speaker}
        stored = []
        for text, source in job.texts:
            facts = run_extractors(offline, text, source=source)
            if source == "user":
                stored.extend(self._keep_turn(job, text, bool(facts), said))
            # The speaker said the user's message, not the assistant's reply.
            of_turn = said if source == "user" else {**said, "speaker": None}
            stored.extend(self.store_facts(job.api_key_id, facts, session_id=job.session_id, said=of_turn))
        hand_off(chain, self.store, api_key_id=job.api_key_id, session_id=job.session_id, texts=job.texts,
                 stored=stored)
        return stored

    def _keep_turn(self, job: _Job, text: str, has_facts: bool, said: dict[str, str | None]) -> list[Memory]:
        """Keep the user's message itself as ``episodic`` memories (:mod:`memroute.pipeline.turns`)."""
        extraction = self.settings.extraction
        if extraction.keep_turns == "none" or (extraction.keep_turns == "salient" and not (
                has_facts or is_salient(text))):
            return []
        parts = split_turn(text, extraction.turn_max_chars)
        kept = []
        for number, part in enumerate(parts, start=1):
            metadata: dict[str, Any] = {"category": TURN_CATEGORY, "source": "user", **said}
            if len(parts) > 1:
                metadata.update(part=number, parts=len(parts))
            kept.append(self.store.add(api_key_id=job.api_key_id, content=part, key=self._turn_key(job, part),
                                       type=MemoryType.EPISODIC, session_id=job.session_id, metadata=metadata,
                                       actor="observe"))
        return kept

    def _turn_key(self, job: _Job, part: str) -> str:
        """:func:`~memroute.pipeline.turns.turn_key`, or the key the same message was kept under by an earlier
        memroute (:func:`~memroute.pipeline.turns.legacy_turn_key`), so saying it again updates that memory."""
        key = turn_key(part)
        legacy = legacy_turn_key(part)
        if legacy != key and self.store.get_by_key(key, api_key_id=job.api_key_id) is None and \
                self.store.get_by_key(legacy, api_key_id=job.api_key_id) is not None:
            return legacy
        return key

    def observe(
        self,
        request: Any,
        response: Any = None,
        *,
        api_key_id: str,
        session_id: str | None = None,
        headers: Any = None,
        wait: bool = False,
        said_at: datetime | str | None = None,
    ) -> list[Memory]:
        """Keep the request's last user message (``[extraction] keep_turns``), extract facts from it (and, when
        ``[extraction] mine_assistant`` is on, from the assistant's reply) and store them for ``api_key_id``.

        ``said_at`` is when the message was said (a datetime with a time zone or ISO 8601 text); without it an
        ``x-memroute-message-time`` header gives it, else the time of the call. It is stored as
        ``metadata.said_at`` on the message and on each fact from it; a malformed one raises
        :class:`ValidationError` at once.

        Runs in a background worker: failures are logged, never raised. ``wait=True`` runs it now and returns
        the stored memories (still logging, not raising, a storage failure). Invalid ``api_key_id`` /
        ``session_id`` raise :class:`ValidationError` at once. Nothing happens when memory is disabled or the
        request opted out (``x-memroute-no-memory``). Without ``session_id``, an ``x-memroute-session-id`` (or
        ``x-omniroute-session-id``) header names the session."""
        api_key_id = require_tenant(api_key_id)
        session_id = require_session(session_id if session_id is not None else session_from_headers(headers))
        if said_at is None and (header := message_time_from_headers(headers)) is not None:
            moment = parse_said_at(header, "x-memroute-message-time")
        else:
            moment = utcnow() if said_at is None else parse_said_at(said_at)
        if not memory_enabled(self.store.memory_settings()) or opted_out(headers):
            return []
        texts = self._texts(request, response)
        if not texts:
            return []
        job = _Job(api_key_id=api_key_id, session_id=session_id, texts=texts, said_at=moment,
                   speaker=last_user_name(request))
        if wait:
            try:
                return self._store(job)
            except Exception:
                self._count_failure()
                log.exception("memroute: extraction for key %s failed", api_key_id)
                return []
        self._enqueue(job)
        return []

    def _enqueue(self, job: _Job) -> None:
        with self._lock:
            if self._closed:
                log.warning("memroute: observe after close; extraction skipped")
                return
            self._jobs.append(job)
            self._pending += 1
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="memroute-extraction", daemon=True)
                self._worker.start()
            self._changed.notify_all()

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._jobs and not self._closed:
                    self._changed.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            try:
                self._store(job)
            except Exception:
                self._count_failure()
                log.exception("memroute: background extraction for key %s failed", job.api_key_id)
            finally:
                with self._lock:
                    self._pending -= 1
                    self._changed.notify_all()

    def _count_failure(self) -> None:
        with self._lock:
            self.failures += 1

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued extraction has been stored, background extractors' work included; False on
        timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if not self._changed.wait_for(lambda: self._pending == 0, timeout):
                return False
            chain = self._extractors or []
        return flush_background(chain, None if deadline is None else max(0.0, deadline - time.monotonic()))

    def status(self, api_key_id: str | None = None) -> dict[str, Any]:
        """``memroute status``'s ``extraction`` block: the chain, the background jobs that failed, and each
        background extractor's own counters (requests, tokens per tenant, failures by reason). With
        ``api_key_id``: the chain and that tenant's counters only."""
        chain = self.extractors()
        names = [name for name, _ in chain]
        if api_key_id is not None:
            return {"extractors": names, **background_status(chain, api_key_id)}
        with self._lock:
            failures, pending = self.failures, self._pending
        return {"extractors": names, "failures": failures, "pending": pending, **background_status(chain)}

    def close(self, timeout: float | None = 10.0) -> None:
        """Finish queued work (up to ``timeout``) and stop the worker."""
        with self._lock:
            self._closed = True
            self._changed.notify_all()
            worker = self._worker
        if worker is not None:
            worker.join(timeout)
        with self._lock:
            extractors, self._extractors = self._extractors or [], None
        for _name, extractor in extractors:
            close = getattr(extractor, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    log.exception("memroute: closing an extractor failed")

    # --- augmentation --------------------------------------------------------------------------------
    def augment(
        self,
        request: Any,
        api_key_id: str,
        session_id: str | None = None,
        provider: str | None = None,
        headers: Any = None,
        *,
        api: ApiShape | None = None,
        session_scope: bool = False,
    ) -> Any:
        """``request`` with the memories of ``api_key_id`` relevant to its last user message injected (a new
        object; the input is never mutated), or ``request`` itself when nothing is injected. See
        :meth:`explain_augment` for the details."""
        return self.explain_augment(request, api_key_id, session_id, provider, headers, api=api,
                                    session_scope=session_scope).request

    def explain_augment(
        self,
        request: Any,
        api_key_id: str,
        session_id: str | None = None,
        provider: str | None = None,
        headers: Any = None,
        *,
        api: ApiShape | None = None,
        session_scope: bool = False,
        record_access: bool = True,
        reuse: bool = True,
        cached_only: bool = False,
    ) -> Augmentation:
        """Like :meth:`augment`, returning what was retrieved and why.

        Memories are per API key (the reference's chat path never scopes by session); ``session_scope=True``
        restricts retrieval to ``session_id``. Retrieval uses the ``[memory] strategy`` and ``max_tokens`` in
        effect (runtime overrides included). A retrieval failure is logged and the request goes out without
        memory. The memories injected (only those: not the ones decay hid) count as accessed unless
        ``record_access=False``. With ``reuse`` (and a cache), the retrieval of an earlier call with the same
        message, tenant and settings is reused while the tenant's data is unchanged
        (:mod:`memroute.pipeline.augment_cache`). With ``cached_only``, a call that would have to search returns
        at once instead, the request unchanged and ``skipped`` :data:`NOT_CACHED`."""
        api_key_id = require_tenant(api_key_id)
        session_id = require_session(session_id if session_id is not None else session_from_headers(headers))
        settings = self.store.memory_settings()
        if not memory_enabled(settings):
            return Augmentation(request=request, skipped="memory disabled ([memory] enabled / max_tokens)")
        if opted_out(headers):
            return Augmentation(request=request, skipped="opted out by header")
        query = query_text(request)
        if not query:
            return Augmentation(request=request, skipped="no user message")
        # "What did I say yesterday" is relative to when the message was said, when the request says (a
        # conversation replayed or imported through the proxy); a malformed time is refused, as observe does.
        header = message_time_from_headers(headers)
        said = None if header is None else parse_said_at(header, "x-memroute-message-time")
        try:
            result, searched = self._retrieve(query, api_key_id, session_id if session_scope else None, settings,
                                              reuse, cached_only, said)
        except Exception:
            log.exception("memroute: retrieval failed; the request goes out without memory")
            return Augmentation(request=request, query=query, skipped="retrieval failed")
        if result is None:
            return Augmentation(request=request, query=query, skipped=NOT_CACHED)
        hits = [hit for hit in result.hits if not self._decayed(hit.memory, settings=settings)]
        lines = memory_lines(hits)
        block, count = block_of(lines), len(lines)
        done = Augmentation(request=request, query=query, result=result, hits=tuple(hits),
                            max_tokens=settings.max_tokens, searched=searched)
        try:
            augmented = inject_block(request, block, provider=provider, api=api)
        except Exception:  # e.g. a body too deeply nested to copy: send it as it is, like a failed retrieval
            log.exception("memroute: injection failed; the request goes out without memory")
            return attrs.evolve(done, skipped="injection failed")
        if augmented is request:
            return attrs.evolve(done, skipped="no memories" if not block else "nowhere to inject")
        if record_access:
            self.store.record_access([hit.memory.id for hit in hits], api_key_id=api_key_id)
        return attrs.evolve(done, request=augmented, block=block, count=count)

    def _retrieve(self, query: str, api_key_id: str, session_id: str | None, settings: MemorySettings,
                  reuse: bool, cached_only: bool = False,
                  now: datetime | None = None) -> tuple[SearchResult | None, bool]:
        """The retrieval for ``query`` (``None`` with ``cached_only`` when it would have to search) and whether
        this call searched. ``now``: what the message's times are relative to (default the clock)."""
        # The budget walk runs over a deep candidate list (vec_top_k is a search's default, not a cap on what
        # fits the budget); strategy `recent` injects the newest memories, as the reference's chat path does
        # (it sends no query for it).
        text = "" if settings.strategy in ("recent", "exact") else query

        def search() -> SearchResult:
            return self.store.search(text, api_key_id=api_key_id, strategy=settings.strategy,
                                     max_tokens=settings.max_tokens, limit=BUDGET_CANDIDATES, session_id=session_id,
                                     record_access=False, now=now)

        cache = self.cache
        # Typed decay reads access telemetry, which moves no data version: nothing is reused with it on.
        if cache is None or not reuse or settings.typed_decay_enabled:
            return (None, False) if cached_only else (search(), True)
        version = cache.version(api_key_id)  # before the search: a write landing meanwhile makes the entry stale
        key = (api_key_id, text[:4096], session_id, settings, now)
        window, type_windows = settings.search_windows()
        scope = SearchQuery(api_key_id=api_key_id, session_id=session_id, retention_days=window,
                            type_windows=type_windows)
        reused = cache.get(key, version, scope, count_miss=not cached_only)  # the search that follows counts it
        if reused is not None:
            return reused, False
        if cached_only:
            return None, False
        result = search()
        cache.put(key, version, result)
        return result, True

    # --- decay, retention ----------------------------------------------------------------------------
    def _decayed(self, memory: Memory, now: datetime | None = None, *,
                 settings: MemorySettings | None = None) -> bool:
        """Typed decay (reference §16, opt-in): an episodic memory neither accessed (injected, returned by a
        search) nor refreshed (re-stated, updated) within ``typed_decay_episodic_days`` has decayed, unless its
        ``access_count`` reaches ``typed_decay_access_immunity`` (0 disables immunity). Other types never
        decay. The reference's deadline runs from ``last_accessed_at ?? created_at``; memroute also counts
        ``updated_at`` (a decision the user re-states is fresh, though nothing injected it yet)."""
        settings = settings or self.store.memory_settings()
        if not settings.typed_decay_enabled or memory.type is not MemoryType.EPISODIC:
            return False
        immunity = settings.typed_decay_access_immunity
        if immunity > 0 and memory.access_count >= immunity:
            return False
        last = max(memory.last_accessed_at or memory.created_at, memory.updated_at)
        return (now or utcnow()) > last + timedelta(days=settings.typed_decay_episodic_days)

    def prune(self, api_key_id: str | None = None, *, dry_run: bool = False,
              now: datetime | None = None) -> MaintenanceReport:
        """Delete (through the manager, so vectors, fallbacks and history follow) the memories of ``api_key_id``
        (every tenant when ``None``) that were configured to go: the expired ones, those created more than
        ``delete_after_days`` ago (per type; never by default) and, with typed decay on, the decayed ones. The
        retrieval window (``retention_days``) only hides memories: it never makes one a candidate. ``dry_run``
        only reports. A real run logs how many memories of how many tenants it deleted."""
        if api_key_id is not None:
            api_key_id = require_tenant(api_key_id)
        now = now or utcnow()
        settings = self.store.memory_settings()
        reasons = {"retention": 0, "expired": 0, "decay": 0}
        doomed: list[Memory] = []
        memories = self.store.export_all() if api_key_id is None else self.store.export(api_key_id)
        for memory in list(memories):
            reason = self._prune_reason(memory, now, settings)
            if reason is not None:
                reasons[reason] += 1
                doomed.append(memory)
        deleted = 0
        touched: set[str] = set()
        if not dry_run:
            for memory in doomed:
                if self.store.delete(memory.id, api_key_id=memory.api_key_id, actor="retention"):
                    deleted += 1
                    touched.add(memory.api_key_id)
            log.info("memroute prune: deleted %d memor%s of %d tenant%s (reasons: %s)", deleted,
                     "y" if deleted == 1 else "ies", len(touched), "" if len(touched) == 1 else "s",
                     ", ".join(f"{k} {v}" for k, v in reasons.items()))
        return MaintenanceReport(
            action="prune", dry_run=dry_run, api_key_id=api_key_id, candidates=tuple(m.id for m in doomed),
            candidate_tokens=sum(m.tokens for m in doomed), deleted=deleted, reasons=reasons,
            tenants=len(touched) if not dry_run else len({m.api_key_id for m in doomed}),
        )

    def _prune_reason(self, memory: Memory, now: datetime, settings: MemorySettings) -> str | None:
        if memory.is_expired(now):
            return "expired"
        days = settings.delete_after(memory.type.value)
        if days > 0 and memory.created_at < now - timedelta(days=days):
            return "retention"
        return "decay" if self._decayed(memory, now, settings=settings) else None

    # --- summarization -------------------------------------------------------------------------------
    def summarize(self, api_key_id: str, older_than_days: int, *, dry_run: bool = True,
                  now: datetime | None = None) -> MaintenanceReport:
        """Replace the memories of ``api_key_id`` created more than ``older_than_days`` ago with summary
        memories (type ``semantic``, ``metadata.replaces`` = the ids replaced), then delete the originals
        through the manager. Always one key; ``dry_run`` (the default) only reports and previews."""
        api_key_id = require_tenant(api_key_id)
        older_than_days = _check_days("older_than_days", older_than_days)
        now = now or utcnow()
        cutoff = now - timedelta(days=older_than_days)
        candidates = [m for m in self.store.export(api_key_id) if m.created_at < cutoff]
        return self._replace_with_summaries("summarize", api_key_id, candidates, None, dry_run, now,
                                            {"older_than_days": older_than_days})

    def compact(self, api_key_id: str, session_id: str | None = None, max_tokens: int = 4000, *,
                dry_run: bool = True, now: datetime | None = None) -> MaintenanceReport:
        """Keep the newest memories of ``api_key_id`` (of ``session_id`` when given) that fit ``max_tokens``
        and replace the rest with a summary memory (reference ``summarizeMemories``). Dry run by default."""
        api_key_id = require_tenant(api_key_id)
        session_id = require_session(session_id)
        max_tokens = _check_days("max_tokens", max_tokens, 0, 10_000_000)
        memories = [m for m in self.store.export(api_key_id) if session_id is None or m.session_id == session_id]
        _kept, candidates = select_for_compaction(memories, max_tokens)
        candidates.sort(key=lambda m: m.created_at)
        return self._replace_with_summaries("compact", api_key_id, candidates, session_id, dry_run, now or utcnow(),
                                            {"max_tokens": max_tokens})

    def _replace_with_summaries(self, action: str, api_key_id: str, candidates: Sequence[Memory],
                                session_id: str | None, dry_run: bool, now: datetime,
                                extra: dict[str, Any]) -> MaintenanceReport:
        batches = [candidates[i:i + _SUMMARY_BATCH] for i in range(0, len(candidates), _SUMMARY_BATCH)]
        days = extra.get("older_than_days")
        texts = [build_summary(batch, older_than_days=days) for batch in batches]
        report = MaintenanceReport(
            action=action, dry_run=dry_run, api_key_id=api_key_id, candidates=tuple(m.id for m in candidates),
            candidate_tokens=sum(m.tokens for m in candidates), summary_preview="\n\n".join(texts),
        )
        if dry_run or not candidates:
            return report
        summary_ids = []
        deleted = 0
        for batch, text in zip(batches, texts, strict=True):
            ids = [m.id for m in batch]
            digest = hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()[:12]
            summary = self.store.add(
                api_key_id=api_key_id, content=text, key=f"summary:{now.date().isoformat()}:{digest}",
                type=MemoryType.SEMANTIC, session_id=session_id,
                metadata={"category": "summary", "replaces": ids, "summarized_count": len(ids),
                          "generated_at": now.isoformat(), "source": action, **extra},
                actor="summarization",
            )
            summary_ids.append(summary.id)
            # The summary is stored first: a failure below leaves duplicates, never a loss.
            deleted += sum(1 for memory_id in ids
                           if self.store.delete(memory_id, api_key_id=api_key_id, actor="summarization"))
        return attrs.evolve(report, deleted=deleted, summary_ids=tuple(summary_ids))
