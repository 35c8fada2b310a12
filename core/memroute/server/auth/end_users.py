"""End users under one app key, at the HTTP edge: which end user a request acts for.

An app key (``memroute keys create --tenant shop --end-users``) names an end user on every request that touches
memories: the ``x-memroute-user`` header (REST, the proxy, MCP), or the request's own field (REST bodies'
``endUser``; the proxy's OpenAI ``user`` / ``metadata.user_id`` and Anthropic ``metadata.user_id``). The
principal is then *narrowed* to that end user (:func:`narrowed`) and acts on the composite tenant
``shop/u1`` only (:mod:`memroute.tenancy`). These functions are kept apart from the key check itself
(:mod:`memroute.server.auth`), which only calls :func:`from_headers`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

import attrs

from memroute.errors import PermissionDeniedError, ValidationError
from memroute.tenancy import require_end_user

if TYPE_CHECKING:
    from memroute.server.auth import Principal

__all__ = ["END_USER_HEADER", "from_body", "from_headers", "narrowed"]

END_USER_HEADER: Final = "x-memroute-user"


def narrowed(principal: Principal, end_user: object, *, field: str = END_USER_HEADER) -> Principal:
    """``principal`` acting for ``end_user`` (``None`` or ``""``: unchanged). Only an app key may name one (403
    otherwise); the id is validated (422 naming ``field``); an end user already named by another field of the
    same request must be the same one (422)."""
    if end_user is None or end_user == "":
        return principal
    if not principal.end_users:
        raise PermissionDeniedError(f"{field}: this API key is not an app key, so it cannot act for end users "
                                    "(create one with `memroute keys create --tenant NAME --end-users`)")
    user = require_end_user(end_user, field)
    if principal.end_user is not None and principal.end_user != user:
        raise ValidationError(f"{field}: names end user {user!r}, but this request already acts for "
                              f"{principal.end_user!r}", [(field, "conflicting end user")])
    return attrs.evolve(principal, end_user=user)


def from_headers(principal: Principal, headers: Mapping[str, str]) -> Principal:
    """``principal`` narrowed to the end user of the ``x-memroute-user`` header, when there is one."""
    value = headers.get(END_USER_HEADER)
    return narrowed(principal, value.strip() if value is not None else None)


def from_body(principal: Principal, body: Mapping[str, object], fields: Sequence[str]) -> Principal:
    """An app key's ``principal`` narrowed to the end user named by the first of ``fields`` (dotted paths into a
    JSON request body: ``user``, ``metadata.user_id``) that is present, unless the header already named one
    (the header wins). Other keys are returned unchanged: ``user`` is an ordinary field of an OpenAI request."""
    if not principal.end_users or principal.end_user is not None:
        return principal
    for path in fields:
        value: object = body
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None and value != "":
            return narrowed(principal, value, field=path)
    return principal
