"""Obsidian storage backend (``type = "obsidian"``): memories as Markdown notes through the Local REST API plugin.

Uses only what behaves the same in plugin versions 3.x to 5.x (``reference/apis.md`` §1): ``GET /``, folder
listings, whole-note ``GET`` / ``PUT`` / ``DELETE`` on ``/vault/…``, ``POST /search/simple/`` and JsonLogic
``POST /search/``. No PATCH, no Dataview DQL, no ``/periodic/``.

Layout and note format: :mod:`memroute_builtins.backends.obsidian.notes`. How each operation finds its notes:

* **id index** — a note's file name is a pure function of the memory id, so the index only maps a file
  name to its tenant folder. It is filled by this process's own writes and rebuilt on demand from folder
  listings (the memory folder, then each tenant folder) when an id is not in it.
* **tenant view** — ``list``, ``search``, ``create`` (the upsert on ``(api_key_id, key)``) and
  ``iter_all`` read one tenant's notes: one folder listing, one JsonLogic query returning every note's
  ``stat.mtime`` and ``stat.size``, then a ``GET`` of only the notes that are new or changed since they
  were cached (several at once). Notes edited by hand in Obsidian are therefore picked up.
* ``get`` / ``update`` always read the note itself (never the cache): what a fallback serves is what is on
  disk.

Frontmatter is parsed here with PyYAML from the raw note, never taken from the plugin's NoteJson or search
index: those come from Obsidian's metadata cache, which lags behind writes (apis.md §1.5).
"""

from __future__ import annotations

import builtins
import json
import logging
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import attrs

import memroute
from memroute.errors import BackendError, BackendUnavailableError, ConfigError, ConflictError
from memroute.interfaces import BackendCapabilities, ComponentContext, MemoryBackend
from memroute.models import (
    BackendHit,
    HealthResult,
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    NewMemory,
    SearchQuery,
)
from memroute.specs import BackendSpec
from memroute_builtins.backends.obsidian.notes import (
    NoteFormatError,
    check_folder,
    is_tenant_slug,
    note_filename,
    parse_note,
    render_note,
    tenant_slug,
)
from memroute_builtins.backends.obsidian.ranking import rank

__all__ = ["ObsidianBackend", "ObsidianSettings"]

log = logging.getLogger("memroute.obsidian")

JSONLOGIC: Final = "application/vnd.olrapi.jsonlogic+json"
DEFAULT_BASE_URL: Final = "https://127.0.0.1:27124"


def _coerce_verify(value: Any) -> bool | str:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "yes", "on", "1"):
            return True
        if lowered in ("false", "no", "off", "0"):
            return False
        if value.strip():
            return str(Path(value.strip()).expanduser())
    raise ConfigError(
        f"verify: expected true, false or the path of the plugin's certificate, got {value!r}",
        [("verify", "invalid")],
    )


@attrs.frozen(kw_only=True)
class ObsidianSettings:
    """Options of ``[backends.NAME]`` with ``type = "obsidian"``."""

    api_key: str
    """The key shown in Obsidian → Settings → Local REST API."""
    base_url: str = DEFAULT_BASE_URL
    """``https://127.0.0.1:27124`` (HTTPS, the default) or ``http://127.0.0.1:27123`` (if enabled)."""
    folder: str = "memroute"
    """The vault folder that holds the memory notes (one sub-folder per API key)."""
    verify: Any = attrs.field(default=True, converter=_coerce_verify)
    """TLS: ``true`` (system trust store), ``false`` (no verification) or the path of the certificate to pin."""
    timeout: float = 10.0
    """Seconds to wait for Obsidian per request."""
    trash: bool = False
    """Plugin 5.x only: move deleted notes to Obsidian's trash instead of deleting them for good."""
    workers: int = 4
    """Notes read at once when a folder's notes are (re)loaded."""
    allow_private: bool = True
    """The SSRF guard admits loopback and private (LAN) addresses, where the Local REST API runs; false admits
    only public ones. Cloud metadata and link-local addresses are refused either way."""


OWN_WRITE_WINDOW_MS: Final = 5000


@attrs.define
class _Cached:
    """A note as last read or written. ``token`` is the note's ``(stat.mtime, stat.size)`` when known;
    ``written`` is ``(bytes, wall-clock ms)`` of this process's own last write of it."""

    memory: Memory
    extra: dict[str, Any]
    token: tuple[int, int] | None
    written: tuple[int, float] | None

    def adopts(self, token: tuple[int, int] | None) -> bool:
        """Whether the first stat seen after our own write is that write (same size, mtime around it), so
        the note need not be read back. An edit by hand within seconds of the write, keeping the exact byte
        count, would be missed until the note changes again: an accepted, documented trade."""
        if token is None or self.written is None:
            return False
        size, at_ms = self.written
        return token[1] == size and abs(token[0] - at_ms) <= OWN_WRITE_WINDOW_MS


class ObsidianBackend(MemoryBackend):
    """Memories as notes in an Obsidian vault, through the Local REST API plugin. Thread-safe."""

    in_process = True  # Markdown files read and parsed in Python

    type_name = "obsidian"
    capabilities = BackendCapabilities()

    def __init__(self, name: str, settings: ObsidianSettings) -> None:
        super().__init__(name)
        import requests  # a core dependency, imported here to keep plugin discovery light

        self._requests = requests
        self.settings = settings
        if not isinstance(settings.api_key, str) or not settings.api_key.strip():
            raise ConfigError(
                "api_key: required: copy it from Obsidian → Settings → Local REST API", [("api_key", "required")]
            )
        parsed = urllib.parse.urlsplit(settings.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ConfigError(
                f"base_url: expected http(s)://host:port, got {settings.base_url!r}", [("base_url", "invalid")]
            )
        from memroute.config.netguard import check_configured_url

        check_configured_url(settings.base_url, "base_url", allow_private=settings.allow_private)
        if not settings.timeout > 0:
            raise ConfigError("timeout: must be a positive number of seconds", [("timeout", "range")])
        if not 1 <= settings.workers <= 32:
            raise ConfigError("workers: must be in [1, 32]", [("workers", "range")])
        if isinstance(settings.verify, str) and not Path(settings.verify).is_file():
            raise ConfigError(
                f"verify: certificate file not found: {settings.verify} (download it from "
                f"{settings.base_url.rstrip('/')}/obsidian-local-rest-api.crt)",
                [("verify", "not found")],
            )
        if settings.verify is False and parsed.scheme == "https":
            log.warning("%s: TLS certificate verification is off (verify = false); pin the plugin's certificate "
                        "with verify = \"<path to obsidian-local-rest-api.crt>\" instead", name)
        self._base = settings.base_url.rstrip("/")
        self._folder = check_folder(settings.folder)
        self._folder_rel = "/".join(self._folder)
        self._local = threading.local()
        self._sessions: builtins.list[Any] = []
        self._lock = threading.RLock()
        self._tenant_locks: dict[str, threading.Lock] = {}
        self._where: dict[str, str] = {}
        """id index: note file name → tenant slug."""
        self._cache: dict[str, _Cached] = {}
        """vault path → the note as last read or written."""
        self._pool: ThreadPoolExecutor | None = None
        self._plugin_version: str | None = None

    # --- lifecycle ---------------------------------------------------------------------------------------

    def initialize(self) -> None:
        """Nothing to set up: Obsidian may well be closed now (a normal condition); calls fail until it runs."""

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        self._local = threading.local()

    def describe(self) -> dict[str, Any]:
        verify = self.settings.verify
        return {
            "name": self.name, "type": self.type_name, "base_url": self._base, "folder": self._folder_rel,
            "verify": "pinned:" + verify if isinstance(verify, str) else verify,
            "plugin_version": self._plugin_version, "delete": "trash" if self.settings.trash else "permanent",
        }

    # --- HTTP --------------------------------------------------------------------------------------------

    def _session(self) -> Any:
        # requests.Session is not documented as thread-safe: one per thread.
        session = getattr(self._local, "session", None)
        if session is None:
            from memroute.config.netguard import GuardedSession

            # Every request is checked by the SSRF guard and pinned to the checked address; no proxies from
            # the environment (GuardedSession turns trust_env off), no redirects followed.
            session = GuardedSession(allow_private=self.settings.allow_private)
            session.headers["Authorization"] = f"Bearer {self.settings.api_key}"
            session.verify = self.settings.verify
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def _vault_url(self, segments: Sequence[str], folder: bool = False) -> str:
        # Each segment is encoded on its own: 5.x decodes per segment, so an encoded "/" would not resolve.
        path = "/".join(urllib.parse.quote(seg, safe="") for seg in segments)
        return f"{self._base}/vault/{path}{'/' if folder and segments else ''}"

    def _call(self, method: str, url: str, *, expect: tuple[int, ...] = (200,), missing_ok: bool = False,
              **kwargs: Any) -> Any:
        """One request; maps every failure to a memroute error. Returns ``None`` for a tolerated 404."""
        from memroute.config.netguard import BlockedUrlError

        requests = self._requests
        try:
            response = self._session().request(method, url, timeout=self.settings.timeout, **kwargs)
        except BlockedUrlError as exc:
            # The configuration's fault, not the caller's: a backend failure (it counts against the breaker).
            raise BackendUnavailableError(f"Obsidian backend {self.name!r}: base_url: {exc}",
                                          backend=self.name) from None
        except requests.exceptions.SSLError as exc:
            raise BackendUnavailableError(
                f"TLS verification failed for {self._base} ({_short(exc)}). The plugin uses a self-signed "
                f"certificate: download {self._base}/obsidian-local-rest-api.crt and set "
                f'verify = "<path to that .crt>" (and use 127.0.0.1, not localhost, in base_url: the '
                f"certificate names only the IP address)",
                backend=self.name,
            ) from exc
        except requests.exceptions.Timeout as exc:
            raise BackendUnavailableError(
                f"Obsidian at {self._base} did not answer within {self.settings.timeout:g} s (raise `timeout` "
                f"if the vault is large)",
                backend=self.name,
            ) from exc
        except requests.exceptions.ConnectionError as exc:
            raise BackendUnavailableError(
                f"cannot reach Obsidian at {self._base}: is Obsidian running with the Local REST API plugin "
                f"enabled (and, for http://, the non-encrypted server switched on)? ({_short(exc)})",
                backend=self.name,
            ) from exc
        except requests.exceptions.RequestException as exc:
            raise BackendError(f"request to Obsidian failed: {_short(exc)}", backend=self.name) from exc
        status = response.status_code
        if status in expect:
            return response
        if status == 404 and missing_ok:
            return None
        code, message = _error_body(response)
        if status == 401:
            raise BackendUnavailableError(
                f"Obsidian rejected the API key (401, errorCode {code}): check the api_key option of backend "
                f"{self.name!r} against Obsidian → Settings → Local REST API",
                backend=self.name,
            )
        raise BackendError(
            f"Obsidian answered {status} (errorCode {code}) to {method} {_redact(url, self._base)}: {message}",
            backend=self.name,
        )

    # --- notes -------------------------------------------------------------------------------------------

    def _segments(self, slug: str, filename: str | None = None) -> tuple[str, ...]:
        return (*self._folder, slug) if filename is None else (*self._folder, slug, filename)

    def _rel(self, slug: str, filename: str) -> str:
        return f"{self._folder_rel}/{slug}/{filename}"

    def _read_note(self, slug: str, filename: str) -> tuple[Memory, dict[str, Any]] | None:
        """The memory a note holds, read from disk; ``None`` when missing; NoteFormatError when foreign."""
        response = self._call("GET", self._vault_url(self._segments(slug, filename)), missing_ok=True)
        if response is None:
            return None
        rel = self._rel(slug, filename)
        memory, extra = parse_note(response.content.decode("utf-8", errors="replace"), rel)
        # A note moved or copied by hand into another tenant's folder, or renamed, is not trusted.
        if tenant_slug(memory.api_key_id) != slug or note_filename(memory.id) != filename:
            raise NoteFormatError(f"{rel}: its id / api_key_id do not belong at this path")
        return memory, extra

    def _write_note(self, memory: Memory, extra: dict[str, Any] | None = None) -> None:
        slug, filename = tenant_slug(memory.api_key_id), note_filename(memory.id)
        body = render_note(memory, extra).encode("utf-8")
        written_ms = time.time() * 1000
        self._call("PUT", self._vault_url(self._segments(slug, filename)), expect=(200, 204), data=body,
                   headers={"Content-Type": "text/markdown"})
        with self._lock:
            self._where[filename] = slug
            self._cache[self._rel(slug, filename)] = _Cached(memory, dict(extra or {}), None, (len(body), written_ms))

    def _delete_note(self, slug: str, filename: str) -> bool:
        params = {} if self.settings.trash else {"permanent": "true"}
        response = self._call("DELETE", self._vault_url(self._segments(slug, filename)), expect=(200, 204),
                              missing_ok=True, params=params)
        with self._lock:
            self._where.pop(filename, None)
            self._cache.pop(self._rel(slug, filename), None)
        return response is not None

    def _listing(self, segments: Sequence[str]) -> list[str]:
        response = self._call("GET", self._vault_url(segments, folder=True), missing_ok=True)
        if response is None:  # the plugin answers 404 for a folder with no files
            return []
        files = _json(response, self.name).get("files")
        if not isinstance(files, list):
            raise BackendError("Obsidian's folder listing has no 'files' list", backend=self.name)
        return [f for f in files if isinstance(f, str)]

    def _tenant_slugs(self) -> list[str]:
        return [name[:-1] for name in self._listing(self._folder) if name.endswith("/") and is_tenant_slug(name[:-1])]

    # --- the id index ------------------------------------------------------------------------------------

    def _rebuild_index(self) -> None:
        where = {}
        for slug in self._tenant_slugs():
            for name in self._listing(self._segments(slug)):
                if name.endswith(".md") and "/" not in name:
                    where[name] = slug
        with self._lock:
            self._where = where

    def _locate(self, memory_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """``{id: (slug, file name)}`` for the ids that have a note; at most one index rebuild."""
        wanted = {memory_id: note_filename(memory_id) for memory_id in memory_ids}
        with self._lock:
            found = {i: (self._where[f], f) for i, f in wanted.items() if f in self._where}
        if len(found) < len(wanted):
            self._rebuild_index()
            with self._lock:
                found = {i: (self._where[f], f) for i, f in wanted.items() if f in self._where}
        return found

    def _fetch(self, memory_id: str, slug: str, filename: str) -> tuple[Memory, dict[str, Any]] | None:
        note = self._read_note(slug, filename)
        with self._lock:
            if note is None or note[0].id != memory_id:
                self._where.pop(filename, None)
                return None
            self._cache[self._rel(slug, filename)] = _Cached(note[0], note[1], None, None)
        return note

    # --- tenant views ------------------------------------------------------------------------------------

    def _tenant_lock(self, slug: str) -> threading.Lock:
        with self._lock:
            return self._tenant_locks.setdefault(slug, threading.Lock())

    def _stat_tokens(self, slug: str) -> dict[str, tuple[int, int]]:
        """``{file name: (mtime, size)}`` of a tenant's notes in one JsonLogic query (no note content)."""
        pattern = f"{self._folder_rel}/{slug}/*.md"
        logic = {"and": [{"glob": [pattern, {"var": "path"}]}, [{"var": "stat.mtime"}, {"var": "stat.size"}]]}
        try:
            response = self._call("POST", f"{self._base}/search/", data=json.dumps(logic).encode("utf-8"),
                                  headers={"Content-Type": JSONLOGIC})
            rows = _json(response, self.name)
        except BackendUnavailableError:
            raise
        except BackendError as exc:  # degrade: every note is re-read instead
            log.warning("%s: JsonLogic stat query failed, re-reading notes: %s", self.name, exc)
            return {}
        tokens = {}
        prefix = f"{self._folder_rel}/{slug}/"
        for row in rows if isinstance(rows, list) else []:
            name, result = (row.get("filename"), row.get("result")) if isinstance(row, dict) else (None, None)
            if isinstance(name, str) and name.startswith(prefix) and isinstance(result, list) and len(result) == 2:
                tokens[name[len(prefix):]] = (result[0], result[1])
        return tokens

    def _tenant(self, slug: str) -> list[Memory]:
        """Every readable memory in one tenant folder, re-reading only notes new or changed since cached."""
        names = [n for n in self._listing(self._segments(slug)) if n.endswith(".md") and "/" not in n]
        tokens = self._stat_tokens(slug) if names else {}
        keep: dict[str, Memory] = {}
        stale = []
        with self._lock:
            prefix = f"{self._folder_rel}/{slug}/"
            for rel in [r for r in self._cache if r.startswith(prefix) and r[len(prefix):] not in names]:
                del self._cache[rel]
            for name in names:
                self._where[name] = slug
                cached = self._cache.get(prefix + name)
                token = tokens.get(name)
                if cached is not None and cached.token is None and cached.adopts(token):
                    cached.token = token
                if cached is not None and cached.token is not None and cached.token == token:
                    keep[name] = cached.memory
                else:
                    stale.append(name)

        def load(name: str) -> tuple[str, tuple[Memory, dict[str, Any]] | None]:
            try:
                return name, self._read_note(slug, name)
            except NoteFormatError as exc:
                log.warning("%s: skipping a note that is not a memroute memory: %s", self.name, exc)
                return name, None

        for name, note in self._map(load, stale):
            if note is not None:
                keep[name] = note[0]
                with self._lock:
                    self._cache[f"{self._folder_rel}/{slug}/{name}"] = _Cached(note[0], note[1], tokens.get(name), None)
        return [keep[n] for n in names if n in keep]

    def _map(self, fn: Any, items: Sequence[Any]) -> Iterator[Any]:
        if len(items) <= 1:
            return iter([fn(item) for item in items])
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.settings.workers, thread_name_prefix=f"obsidian-{self.name}")
            pool = self._pool
        return pool.map(fn, items)

    def _memories(self, api_key_id: str | None) -> list[Memory]:
        if api_key_id is not None:
            return [m for m in self._tenant(tenant_slug(api_key_id)) if m.api_key_id == api_key_id]
        found = []
        for slug in self._tenant_slugs():
            found.extend(self._tenant(slug))
        return found

    # --- CRUD --------------------------------------------------------------------------------------------

    def create(self, new: NewMemory) -> Memory:
        slug = tenant_slug(new.api_key_id)
        with self._tenant_lock(slug):
            existing = next((m for m in self._memories(new.api_key_id) if m.key == new.key), None)
            if existing is None:
                memory, extra = new.as_memory(), {}
            else:
                memory = new.merged_into(existing)
                extra = self._extra(slug, existing.id)
            self._write_note(memory, extra)
            return memory

    def put(self, memory: Memory) -> None:
        slug = tenant_slug(memory.api_key_id)
        with self._tenant_lock(slug):
            current = self._memories(memory.api_key_id)
            for other in current:
                if other.key == memory.key and other.id != memory.id:
                    self._delete_note(slug, note_filename(other.id))
            # The same id under another owner (known to the index; no rebuild for this rare case): move it.
            filename = note_filename(memory.id)
            with self._lock:
                other_slug = self._where.get(filename)
            if other_slug is not None and other_slug != slug:
                self._delete_note(other_slug, filename)
            self._write_note(memory, self._extra(slug, memory.id))

    def _extra(self, slug: str, memory_id: str) -> dict[str, Any]:
        with self._lock:
            cached = self._cache.get(self._rel(slug, note_filename(memory_id)))
        return dict(cached.extra) if cached else {}

    def get(self, memory_id: str) -> Memory | None:
        located = self._locate([memory_id]).get(memory_id)
        if located is None:
            return None
        note = self._fetch_checked(memory_id, *located)
        return None if note is None else note[0]

    def _fetch_checked(self, memory_id: str, slug: str, filename: str) -> tuple[Memory, dict[str, Any]] | None:
        try:
            return self._fetch(memory_id, slug, filename)
        except NoteFormatError as exc:
            raise BackendError(f"cannot read memory {memory_id}: {exc}", backend=self.name) from None

    def get_many(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        located = self._locate(dict.fromkeys(memory_ids))

        def load(item: tuple[str, tuple[str, str]]) -> tuple[str, Memory | None]:
            memory_id, (slug, filename) = item
            try:
                note = self._fetch(memory_id, slug, filename)
            except NoteFormatError as exc:
                log.warning("%s: %s", self.name, exc)
                return memory_id, None
            return memory_id, None if note is None else note[0]

        return {memory_id: m for memory_id, m in self._map(load, list(located.items())) if m is not None}

    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        located = self._locate([memory_id]).get(memory_id)
        if located is None:
            return None
        slug, filename = located
        with self._tenant_lock(slug):
            note = self._fetch_checked(memory_id, slug, filename)
            if note is None:
                return None
            memory, extra = note
            updated = patch.applied_to(memory)
            if updated.key != memory.key and any(
                m.key == updated.key and m.id != memory_id for m in self._memories(memory.api_key_id)
            ):
                raise ConflictError(
                    f"key {updated.key!r} is already used by another memory of this API key", backend=self.name
                )
            self._write_note(updated, extra)
            return updated

    def delete(self, memory_id: str) -> bool:
        located = self._locate([memory_id]).get(memory_id)
        if located is None:
            return False
        with self._tenant_lock(located[0]):
            return self._delete_note(*located)

    # --- list and search ---------------------------------------------------------------------------------

    def list(self, filter: ListFilter) -> ListPage:
        needle = filter.query.lower() if filter.query else None
        matches = [
            m for m in self._memories(filter.api_key_id)
            if (filter.type is None or m.type == filter.type)
            and (filter.session_id is None or m.session_id == filter.session_id)
            and (needle is None or needle in m.content.lower() or needle in m.key.lower())
        ]
        matches.sort(key=filter.sort_key, reverse=filter.order_dir == "desc")
        by_type = Counter(m.type.value for m in matches)
        page = tuple(matches[filter.offset:filter.offset + filter.limit])
        return ListPage(data=page, total=len(matches), by_type=dict(by_type))

    def iter_all(self, api_key_id: str | None = None, batch: int = 500) -> Iterable[Memory]:
        """Every memory of one tenant (or all), oldest first; each tenant folder is read once."""
        slugs = [tenant_slug(api_key_id)] if api_key_id is not None else self._tenant_slugs()
        memories: builtins.list[Memory] = []
        for slug in slugs:
            memories.extend(m for m in self._tenant(slug) if api_key_id is None or m.api_key_id == api_key_id)
        memories.sort(key=lambda m: (m.created_at, m.id))
        yield from memories

    def search(self, query: SearchQuery) -> builtins.list[BackendHit]:
        candidates = [m for m in self._memories(query.api_key_id) if query.admits(m)]
        if query.strategy == "exact" or not query.text.strip():
            candidates.sort(key=lambda m: (m.created_at, m.id), reverse=True)
            return [BackendHit(memory=m, score=m.created_at.timestamp()) for m in candidates[:query.limit]]
        plugin_hits = self._plugin_matches(query) if candidates else set()
        scored = rank(query.text, candidates, {m.id for m in candidates if note_filename(m.id) in plugin_hits})
        return [BackendHit(memory=m, score=s) for m, s in scored[:query.limit]]

    def _plugin_matches(self, query: SearchQuery) -> set[str]:
        """File names in the tenant's folder the plugin's own (fuzzy) simple search matched. Its index may
        lag behind writes and its scores differ by version, so it only adds a bonus; failures are ignored."""
        prefix = f"{self._folder_rel}/{tenant_slug(query.api_key_id)}/"
        try:
            response = self._call("POST", f"{self._base}/search/simple/",
                                  params={"query": query.text, "contextLength": "0"})
            rows = _json(response, self.name)
        except BackendUnavailableError:
            raise
        except BackendError as exc:
            log.warning("%s: simple search failed, ranking by keywords only: %s", self.name, exc)
            return set()
        found = set()
        for row in rows if isinstance(rows, list) else []:
            name = row.get("filename") if isinstance(row, dict) else None
            if isinstance(name, str) and name.startswith(prefix):
                found.add(name[len(prefix):])
        return found

    # --- health ------------------------------------------------------------------------------------------

    def health(self) -> HealthResult:
        """``GET /`` (does Obsidian answer, is the key accepted, which plugin version), for real."""
        started = time.perf_counter()
        try:
            response = self._call("GET", f"{self._base}/")
            status = _json(response, self.name)
            versions = status.get("versions") if isinstance(status.get("versions"), dict) else {}
            self._plugin_version = versions.get("self")
            if status.get("authenticated") is False:
                raise BackendUnavailableError(
                    "Obsidian is running but rejected the API key: check the api_key option against Obsidian → "
                    "Settings → Local REST API", backend=self.name,
                )
            if "authenticated" not in status:  # an old plugin: prove the key with an authenticated call
                self._listing(self._folder)
        except BackendError as exc:
            return HealthResult(ok=False, latency_ms=(time.perf_counter() - started) * 1000, error=str(exc))
        return HealthResult(
            ok=True, latency_ms=(time.perf_counter() - started) * 1000,
            details={"plugin_version": self._plugin_version, "obsidian_version": versions.get("obsidian"),
                     "base_url": self._base, "folder": self._folder_rel},
        )


# --- helpers -----------------------------------------------------------------------------------------------

def _json(response: Any, backend: str) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise BackendError(f"Obsidian sent a body that is not JSON ({_short(exc)})", backend=backend) from None


def _error_body(response: Any) -> tuple[Any, str]:
    try:
        body = response.json()
    except ValueError:
        return None, response.text[:200]
    if isinstance(body, dict):
        return body.get("errorCode"), str(body.get("message", ""))[:500]
    return None, str(body)[:200]


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:300] + "…"


def _redact(url: str, base: str) -> str:
    return url[len(base):] if url.startswith(base) else url


# --- the plugin --------------------------------------------------------------------------------------------

def _factory(settings: ObsidianSettings, context: ComponentContext) -> ObsidianBackend:
    return ObsidianBackend(context.instance_name, settings)


@memroute.hookimpl
def memroute_backends() -> Iterator[BackendSpec]:
    yield BackendSpec(
        name="obsidian",
        factory=_factory,
        settings_class=ObsidianSettings,
        description="Memories as Markdown notes in an Obsidian vault, through the Local REST API plugin (3.x to 5.x).",
    )
