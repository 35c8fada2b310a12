"""End users under one app key: how the memories of one end user of an app are addressed.

An app serving many people holds **one** memroute key, created as an *app key* for its tenant
(``memroute keys create --name shop --tenant shop --end-users``). Every request made with it names an end user,
and that end user's memories belong to the **composite tenant** ``<tenant>/<end user>`` (``shop/u1``): an
ordinary ``api_key_id`` as far as storage is concerned, so every backend and vector store isolates one end user
from another exactly as it isolates tenants (owner filters, row-level security, per-tenant vault folders), with
no storage change. ``shop`` itself, ``shop/u1`` and ``shop/u2`` are three tenants that see nothing of each other.

Why ``/``: an end user id may not contain it (its charset is ``[A-Za-z0-9._@:+=-]``), so a composite splits in
exactly one way; and no key may be created for a tenant that contains it (:func:`require_key_tenant`), so no
ordinary key's tenant can collide with an end user's. The Python API keeps ``api_key_id`` as its one scope
argument: ``mem.add(api_key_id=end_user_tenant("shop", "u1"), ...)``.

Within one tenant (an end user's included) memories can also be tagged with an **agent** (``agent="planner"``,
stored as ``metadata["agent"]``) and searched or listed for one agent only; the session stays the run scope.
"""

from __future__ import annotations

import re
from typing import Final

from memroute.errors import ValidationError
from memroute.models import MAX_ID_CHARS, require_tenant

__all__ = [
    "END_USER_SEPARATOR",
    "MAX_APP_TENANT_CHARS",
    "MAX_END_USER_CHARS",
    "end_user_tenant",
    "require_agent",
    "require_end_user",
    "require_key_tenant",
    "split_end_user",
]

END_USER_SEPARATOR: Final = "/"
"""Between the app's tenant and the end user in a composite tenant (``shop/u1``)."""
MAX_END_USER_CHARS: Final = 128
MAX_APP_TENANT_CHARS: Final = MAX_ID_CHARS - len(END_USER_SEPARATOR) - MAX_END_USER_CHARS
"""127: the longest tenant of an app key, so that every composite fits the 256 characters of an ``api_key_id``."""
_END_USER: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+=-]*")


def require_end_user(value: object, field: str = "endUser") -> str:
    """``value`` when it is a valid end user id: 1 to 128 characters of ``A-Z a-z 0-9 . _ @ : + = -``, starting
    with a letter or digit (an app's user ids, emails, UUIDs and hashes all fit); else a
    :class:`~memroute.errors.ValidationError` naming ``field``."""
    return _require_label(value, field, "an end user id")


def require_agent(value: object, field: str = "agent") -> str:
    """A valid agent name (the agent scope: ``metadata["agent"]``, like mem0's ``agent_id``), with the charset and
    length of an end user id."""
    return _require_label(value, field, "an agent name")


def _require_label(value: object, field: str, what: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{field}: expected a string, got {type(value).__name__}", [(field, "type")])
    if not 0 < len(value) <= MAX_END_USER_CHARS or not _END_USER.fullmatch(value):
        raise ValidationError(
            f"{field}: {what} is 1 to {MAX_END_USER_CHARS} characters of A-Z a-z 0-9 . _ @ : + = -, starting "
            f"with a letter or digit (got {value!r:.60})", [(field, f"invalid {what.split(' ', 1)[1]}")])
    return value


def require_key_tenant(value: object, *, end_users: bool, field: str = "tenant") -> str:
    """A tenant a new key may be created for: a valid ``api_key_id`` without the separator (so it can never
    be another app's end user), at most :data:`MAX_APP_TENANT_CHARS` characters for an app key."""
    tenant = require_tenant(value) if isinstance(value, str) and value.strip() else None
    if tenant is None:
        raise ValidationError(f"{field}: expected a non-empty string", [(field, "empty")])
    if END_USER_SEPARATOR in tenant:
        raise ValidationError(
            f"{field}: must not contain {END_USER_SEPARATOR!r} (it separates an app's tenant from its end users; "
            f"create an app key with end users instead)", [(field, "invalid")])
    if end_users and len(tenant) > MAX_APP_TENANT_CHARS:
        raise ValidationError(f"{field}: an app key's tenant is at most {MAX_APP_TENANT_CHARS} characters",
                              [(field, "too long")])
    return tenant


def end_user_tenant(tenant: str, end_user: str) -> str:
    """The ``api_key_id`` of ``end_user``'s memories in the app tenant ``tenant``: ``"shop", "u1"`` →
    ``"shop/u1"``. Both parts are validated."""
    app = require_key_tenant(tenant, end_users=True)
    return f"{app}{END_USER_SEPARATOR}{require_end_user(end_user)}"


def split_end_user(api_key_id: str) -> tuple[str, str] | None:
    """``(tenant, end user)`` when ``api_key_id`` is a composite (``"shop/u1"`` → ``("shop", "u1")``), else None."""
    app, separator, user = api_key_id.rpartition(END_USER_SEPARATOR)
    if not separator or not app or END_USER_SEPARATOR in app or not _END_USER.fullmatch(user) \
            or len(user) > MAX_END_USER_CHARS:
        return None
    return app, user
