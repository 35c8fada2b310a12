"""memroute API keys: who may call a deployment, on which tenant, with which scopes (DESIGN "Tenancy and auth").

A key is a random secret (``mr_`` + 43 url-safe characters, 256 bits) shown once at creation. The store keeps
only its SHA-256, with an id, a name, the **tenant** its memories belong to (by default the key's own id, so a
rotated key keeps the memories), scopes (``read``, ``write``, ``admin``) and created / last-used / revoked
times. Every surface authenticates through :meth:`KeyStore.authenticate`; it reads the shared store on every
call, so a key revoked by one process fails at once in every process of the deployment.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

import attrs

from memroute.errors import AuthenticationError, ConflictError, NotFoundError, ValidationError
from memroute.models import MAX_ID_CHARS, as_utc, utcnow
from memroute.tenancy import END_USER_SEPARATOR, require_key_tenant

__all__ = [
    "SCOPES",
    "SECRET_PREFIX",
    "ApiKey",
    "KeyStore",
    "SqliteKeyStore",
    "hash_secret",
    "new_key_id",
    "new_secret",
    "parse_scopes",
]

SCOPES: Final = ("read", "write", "admin")
"""Every scope a key can hold. ``admin`` implies the other two and may act on any tenant."""
SECRET_PREFIX: Final = "mr_"
LAST_USED_THROTTLE_S: Final = 60.0
"""``last_used_at`` is written at most once a minute per key and process: authentication stays one indexed
read, not a write per request."""
_MAX_NAME_CHARS: Final = 200


def new_secret() -> str:
    """A fresh key secret: ``mr_`` + 32 random bytes, url-safe base64."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def new_key_id() -> str:
    return "key_" + secrets.token_hex(8)


def hash_secret(secret: str) -> str:
    """The stored form of a secret. A plain SHA-256 is enough here (no salt, no slow KDF): the secret has 256
    bits of entropy, so nothing can be guessed from the hash, and slow hashes exist to protect low-entropy
    *passwords*. A fast, unsalted hash is also what lets authentication find the key by an indexed lookup."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def parse_scopes(scopes: Iterable[str] | str) -> frozenset[str]:
    """``"read,write"`` or an iterable of scope names → a validated frozenset (``admin`` adds read and write)."""
    if isinstance(scopes, str):
        scopes = scopes.split(",")
    items = [str(scope).strip() for scope in scopes]
    chosen = frozenset(item for item in items if item)
    unknown = sorted(chosen - set(SCOPES))
    if unknown:
        raise ValidationError(f"scopes: unknown scope(s) {', '.join(unknown)} (known: {', '.join(SCOPES)})",
                              [("scopes", "unknown scope")])
    if not chosen:
        raise ValidationError("scopes: at least one of read, write, admin", [("scopes", "empty")])
    return chosen | {"read", "write"} if "admin" in chosen else chosen


def _check_text(field: str, value: object, limit: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit or any(c in value for c in "\r\n\x00"):
        raise ValidationError(f"{field}: expected a non-empty single-line string of at most {limit} characters",
                              [(field, "invalid")])
    return value


@attrs.frozen(kw_only=True)
class ApiKey:
    """One API key as stored (never its secret)."""

    id: str
    name: str
    tenant: str
    """The ``api_key_id`` of the memories this key acts on; for an app key (``end_users``), the app's tenant,
    whose end users' memories it acts on (:mod:`memroute.tenancy`)."""
    scopes: frozenset[str]
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    end_users: bool = False
    """An app key: every request names an end user of ``tenant`` and acts on that end user's memories only."""

    @property
    def stored_tenant(self) -> str:
        """The tenant as the key stores keep it: an app key's with the separator after it (``shop/``, the
        prefix of every end user's tenant), so the flag needs no column of its own in any store."""
        return self.tenant + END_USER_SEPARATOR if self.end_users else self.tenant

    @classmethod
    def from_stored(cls, *, tenant: str, **fields: Any) -> ApiKey:
        """A key read back from a store (the inverse of :attr:`stored_tenant`)."""
        end_users = tenant.endswith(END_USER_SEPARATOR) and len(tenant) > 1
        return cls(tenant=tenant[:-1] if end_users else tenant, end_users=end_users, **fields)

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes

    def allows(self, scope: str) -> bool:
        """Whether the key holds ``scope`` (``admin`` holds every scope)."""
        return scope in self.scopes or self.is_admin

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape used by the CLI and ``/api/keys`` (camelCase like every REST body)."""
        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {"id": self.id, "name": self.name, "tenant": self.tenant, "scopes": sorted(self.scopes),
                "createdAt": iso(self.created_at), "lastUsedAt": iso(self.last_used_at),
                "revokedAt": iso(self.revoked_at), "endUsers": self.end_users}


class KeyStore(ABC):
    """Where a deployment's keys live. Implementations are shared by every process of the deployment (the
    SQLite state database, or a backend plugin's own store through ``memroute_state_store``)."""

    in_process: bool = False
    """``True`` when :meth:`authenticate` only reads a local file in this process (SQLite): the server then
    checks keys on its event loop. ``False`` (a store behind a server, PostgreSQL): from a worker thread."""

    def create(self, name: str, *, scopes: Iterable[str] | str, tenant: str | None = None,
               end_users: bool = False) -> tuple[ApiKey, str]:
        """A new key and its secret (the only time the secret exists outside the caller). ``end_users`` makes
        an app key: it acts for end users of ``tenant`` (see :mod:`memroute.tenancy`); it cannot be ``admin``.
        A tenant may not contain ``/`` (that would address an app's end user)."""
        key_id = new_key_id()
        if not isinstance(end_users, bool):
            raise ValidationError("end_users: expected true or false", [("end_users", "type")])
        chosen = parse_scopes(scopes)
        if end_users and "admin" in chosen:
            raise ValidationError("scopes: an app key (end users) cannot be admin: an admin key may name any "
                                  "tenant", [("scopes", "admin with end users")])
        key = ApiKey(
            id=key_id, name=_check_text("name", name, _MAX_NAME_CHARS),
            tenant=(require_key_tenant(_check_text("tenant", tenant, MAX_ID_CHARS), end_users=end_users)
                    if tenant is not None else key_id),
            scopes=chosen, created_at=utcnow(), end_users=end_users,
        )
        if end_users:
            self._check_no_legacy_end_user_keys(key.tenant)
        secret = new_secret()
        self._insert(key, hash_secret(secret))
        return key, secret

    def _check_no_legacy_end_user_keys(self, tenant: str) -> None:
        """Refuse an app key for ``tenant`` while a plain key made before tenants were checked for ``/`` acts on
        ``tenant/...``: it would reach one of the app's end users."""
        prefix = tenant + END_USER_SEPARATOR
        clash = [k.id for k in self.list(include_revoked=False) if not k.end_users and k.tenant.startswith(prefix)]
        if clash:
            raise ConflictError(f"tenant: live key(s) {', '.join(clash)} act on {prefix}…, which would be this app's "
                                "end users; revoke them first")

    @abstractmethod
    def _insert(self, key: ApiKey, secret_hash: str) -> None:
        """Store a new key with the hash of its secret."""

    @abstractmethod
    def list(self, *, include_revoked: bool = True) -> builtins.list[ApiKey]:
        """Every key, oldest first."""

    @abstractmethod
    def get(self, key_id: str) -> ApiKey | None:
        """The key with this id, or None."""

    @abstractmethod
    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key (idempotent); :class:`NotFoundError` for an unknown id."""

    @abstractmethod
    def rotate(self, key_id: str) -> tuple[ApiKey, str]:
        """Replace a key by a new one with the same name, scopes and tenant, revoking the old one in the same
        transaction. :class:`NotFoundError` for an unknown id, :class:`ConflictError` for a revoked key."""

    @abstractmethod
    def _find(self, secret_hash: str) -> tuple[ApiKey, str] | None:
        """The key whose secret hashes to ``secret_hash`` (revoked ones too) with its stored hash, or None."""

    @abstractmethod
    def _touch(self, key_id: str, when: datetime) -> None:
        """Record that the key was used at ``when``."""

    def authenticate(self, secret: str | None) -> ApiKey:
        """The live key for ``secret``; :class:`AuthenticationError` when it is missing, unknown or revoked."""
        if not secret:
            raise AuthenticationError("missing API key: send Authorization: Bearer mr_…")
        if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX) or len(secret) > 200:
            raise AuthenticationError("invalid API key")
        digest = hash_secret(secret)
        found = self._find(digest)
        # The lookup is by a hash of a 256-bit secret, so its timing reveals nothing usable; the comparison
        # below is constant-time anyway, as a second wall should an implementation look keys up differently.
        if found is None or not hmac.compare_digest(found[1], digest):
            raise AuthenticationError("invalid API key")
        key = found[0]
        if key.revoked:
            raise AuthenticationError("API key revoked")
        self._maybe_touch(key.id)
        return key

    # --- last-used throttle --------------------------------------------------------------------------
    def __init__(self) -> None:
        self._touched: dict[str, float] = {}
        self._touch_lock = threading.Lock()

    def _maybe_touch(self, key_id: str) -> None:
        now = time.monotonic()
        with self._touch_lock:
            last = self._touched.get(key_id)
            if last is not None and now - last < LAST_USED_THROTTLE_S:
                return
            self._touched[key_id] = now
        try:
            self._touch(key_id, utcnow())
        except Exception:  # bookkeeping must never fail a request
            pass


_KEYS_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    tenant TEXT NOT NULL,
    scopes TEXT NOT NULL,
    secret_hash TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    last_used_at TEXT,
    revoked_at TEXT,
    replaced_by TEXT
);
"""
_COLUMNS: Final = "id, name, tenant, scopes, created_at, last_used_at, revoked_at"


class SqliteKeyStore(KeyStore):
    """Keys in the ``api_keys`` table of the deployment's SQLite state database. No cache: every
    :meth:`authenticate` is one indexed read, which is what makes revocation immediate everywhere."""

    in_process = True
    """A local file read in this process (the server authenticates on its event loop, without a thread hop)."""

    def __init__(self, connections: Any) -> None:
        """``connections``: a :class:`memroute.deployment.db.ThreadConnections` to the state database."""
        super().__init__()
        self._db = connections
        with self._db.transaction() as conn:
            conn.execute(_KEYS_SCHEMA)

    @staticmethod
    def _row(row: tuple[Any, ...]) -> ApiKey:
        key_id, name, tenant, scopes, created, used, revoked = row
        return ApiKey.from_stored(id=key_id, name=name, tenant=tenant, scopes=frozenset(scopes.split(",")),
                                  created_at=as_utc(created), last_used_at=as_utc(used) if used else None,
                                  revoked_at=as_utc(revoked) if revoked else None)

    def _insert(self, key: ApiKey, secret_hash: str) -> None:
        with self._db.transaction() as conn:
            conn.execute(
                "INSERT INTO api_keys (id, name, tenant, scopes, secret_hash, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (key.id, key.name, key.stored_tenant, ",".join(sorted(key.scopes)), secret_hash,
                 key.created_at.isoformat()),
            )

    def list(self, *, include_revoked: bool = True) -> builtins.list[ApiKey]:
        where = "" if include_revoked else " WHERE revoked_at IS NULL"
        rows = self._db.get().execute(f"SELECT {_COLUMNS} FROM api_keys{where} ORDER BY created_at, id").fetchall()
        return [self._row(row) for row in rows]

    def get(self, key_id: str) -> ApiKey | None:
        if not isinstance(key_id, str):
            return None
        row = self._db.get().execute(f"SELECT {_COLUMNS} FROM api_keys WHERE id = ?", (key_id,)).fetchone()
        return None if row is None else self._row(row)

    def _require(self, conn: Any, key_id: str) -> ApiKey:
        row = conn.execute(f"SELECT {_COLUMNS} FROM api_keys WHERE id = ?", (key_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no API key with id {key_id!r}")
        return self._row(row)

    def revoke(self, key_id: str) -> ApiKey:
        with self._db.transaction() as conn:
            key = self._require(conn, key_id)
            if key.revoked:
                return key
            conn.execute("UPDATE api_keys SET revoked_at = ? WHERE id = ?", (utcnow().isoformat(), key_id))
            return self._require(conn, key_id)

    def rotate(self, key_id: str) -> tuple[ApiKey, str]:
        with self._db.transaction() as conn:
            old = self._require(conn, key_id)
            if old.revoked:
                raise ConflictError(f"API key {key_id!r} is revoked; create a new key instead")
            new = attrs.evolve(old, id=new_key_id(), created_at=utcnow(), last_used_at=None)
            secret = new_secret()
            conn.execute("UPDATE api_keys SET revoked_at = ?, replaced_by = ? WHERE id = ?",
                         (new.created_at.isoformat(), new.id, old.id))
            conn.execute(
                "INSERT INTO api_keys (id, name, tenant, scopes, secret_hash, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (new.id, new.name, new.stored_tenant, ",".join(sorted(new.scopes)), hash_secret(secret),
                 new.created_at.isoformat()),
            )
        return new, secret

    def _find(self, secret_hash: str) -> tuple[ApiKey, str] | None:
        row = self._db.get().execute(f"SELECT {_COLUMNS}, secret_hash FROM api_keys WHERE secret_hash = ?",
                                     (secret_hash,)).fetchone()
        return None if row is None else (self._row(row[:-1]), str(row[-1]))

    def _touch(self, key_id: str, when: datetime) -> None:
        with self._db.transaction() as conn:
            conn.execute("UPDATE api_keys SET last_used_at = ? WHERE id = ?", (when.isoformat(), key_id))
