"""Dashboard sign-in sessions: an admin key exchanged for an HttpOnly, SameSite=Strict cookie.

The cookie holds a random session id; the deployment's state store (shared by every server process) holds
only its SHA-256 with the key id, a CSRF token and an expiry, so any worker can resolve the cookie, a
sign-out holds in every process at once, and a leaked state database yields no usable cookie. A session
acts as its key: revoking the key ends every session made with it on the next request.

State-changing requests authenticated by the cookie must carry the session's CSRF token in the
``x-csrf-token`` header (compared in constant time); SameSite=Strict already keeps other sites from sending
the cookie, the token is the second wall.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Any, Final

import attrs

from memroute.errors import AuthenticationError, PermissionDeniedError

__all__ = [
    "COOKIE_NAME",
    "CSRF_HEADER",
    "SAFE_METHODS",
    "DashboardSession",
    "end_session",
    "resolve_session",
    "start_session",
]

COOKIE_NAME: Final = "memroute_session"
CSRF_HEADER: Final = "x-csrf-token"
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
SESSION_TTL_S: Final = 12 * 3600
_NAMESPACE: Final = "dashboard-sessions"


@attrs.frozen(kw_only=True)
class DashboardSession:
    """A resolved session: the key it acts as and its CSRF token."""

    key_id: str
    csrf_token: str
    expires_at: float


def _name(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def start_session(mem: Any, key_id: str, *, ttl_s: float = SESSION_TTL_S) -> tuple[str, DashboardSession]:
    """A new session for ``key_id``: ``(cookie value, session)``."""
    session_id = secrets.token_urlsafe(32)
    session = DashboardSession(key_id=key_id, csrf_token=secrets.token_urlsafe(32), expires_at=time.time() + ttl_s)
    mem.state.put_value(_NAMESPACE, _name(session_id), attrs.asdict(session))
    return session_id, session


def resolve_session(mem: Any, session_id: str | None) -> DashboardSession:
    """The live session for a cookie value, or :class:`AuthenticationError` (missing, unknown, signed out,
    expired)."""
    if not session_id or len(session_id) > 128:
        raise AuthenticationError("sign in to the dashboard first (no session)")
    stored = mem.state.get_value(_NAMESPACE, _name(session_id))
    if not isinstance(stored, dict) or stored.get("ended"):
        raise AuthenticationError("the dashboard session has ended: sign in again")
    session = DashboardSession(key_id=str(stored["key_id"]), csrf_token=str(stored["csrf_token"]),
                               expires_at=float(stored["expires_at"]))
    if session.expires_at <= time.time():
        raise AuthenticationError("the dashboard session has expired: sign in again")
    return session


def check_csrf(session: DashboardSession, method: str, presented: str | None) -> None:
    """Refuse a state-changing request whose CSRF token is missing or wrong (403)."""
    if method.upper() in SAFE_METHODS:
        return
    if not presented or not hmac.compare_digest(presented.encode("utf-8"), session.csrf_token.encode("utf-8")):
        raise PermissionDeniedError(f"missing or wrong {CSRF_HEADER} header for a dashboard session")


def end_session(mem: Any, session_id: str) -> None:
    """Sign out: the session id stops working in every process."""
    mem.state.put_value(_NAMESPACE, _name(session_id), {"ended": True})
