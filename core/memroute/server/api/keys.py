"""``/api/keys``: API key management (admin scope). The secret is in the create / rotate response only."""

from __future__ import annotations

from typing import Any, Literal

import attrs
from fastapi import Request

from memroute.deployment.fair_use import KeyLimits
from memroute.deployment.keys import ApiKey
from memroute.errors import NotFoundError
from memroute.server.auth import ScopedRouter
from memroute.server.schema import wire_model

router = ScopedRouter(prefix="/api/keys", tags=["keys"])


@attrs.frozen(kw_only=True)
class KeyCreate:
    """A new key."""

    name: str = attrs.field(metadata={"min_length": 1, "max_length": 200, "examples": ["ci-bot"]})
    """A label for people (shown by ``memroute keys list``)."""
    scopes: tuple[Literal["read", "write", "admin"], ...] = attrs.field(
        default=("read", "write"), metadata={"min_length": 1, "examples": [["read", "write"]]})
    """Any of ``read``, ``write``, ``admin`` (``admin`` implies the others and any tenant)."""
    tenant: str | None = attrs.field(default=None, metadata={"max_length": 256, "examples": [None]})
    """The ``apiKeyId`` its memories belong to; default: the new key's own id."""
    end_users: bool = False
    """An app key: every request names an end user of ``tenant`` (``x-memroute-user``) and acts on that end
    user's memories only. Cannot be ``admin``."""


@attrs.frozen(kw_only=True)
class KeyList:
    data: tuple[ApiKey, ...]
    """Every key, oldest first (revoked ones included, with ``revokedAt``)."""


@attrs.frozen(kw_only=True)
class KeyWithSecret:
    """A key and its secret: shown this once, never stored (only its hash is)."""

    key: ApiKey
    secret: str
    """``mr_…``: send as ``Authorization: Bearer <secret>``."""


KeyModel = wire_model(ApiKey, name="ApiKey")
KeyCreateBody = wire_model(KeyCreate, mode="request")
_KEY_EXAMPLE = {"id": "key_4f1c2a9e0b7d3a61", "name": "ci-bot", "tenant": "key_4f1c2a9e0b7d3a61",
                "scopes": ["read", "write"], "createdAt": "2026-01-01T00:00:00+00:00", "lastUsedAt": None,
                "revokedAt": None, "endUsers": False}
_SECRET_EXAMPLE = {"key": _KEY_EXAMPLE, "secret": "mr_Qm9vZ3VzLWV4YW1wbGUtc2VjcmV0LW5vdC1yZWFs"}


def _ok(example: Any) -> dict[int | str, dict[str, Any]]:
    return {200: {"content": {"application/json": {"example": example}}}}


@router.get("", scope="admin", response_model=wire_model(KeyList), summary="List API keys",
            responses=_ok({"data": [_KEY_EXAMPLE]}))
def list_keys(request: Request) -> KeyList:
    return KeyList(data=tuple(request.app.state.memroute.keys.list()))


@router.post("", scope="admin", response_model=wire_model(KeyWithSecret), status_code=201,
             summary="Create an API key (the secret is shown once)",
             responses={201: {"content": {"application/json": {"example": _SECRET_EXAMPLE}}}})
def create_key(request: Request, body: KeyCreateBody) -> KeyWithSecret:  # type: ignore[valid-type]
    key, secret = request.app.state.memroute.keys.create(body.name, scopes=body.scopes,  # type: ignore[attr-defined]
                                                         tenant=body.tenant,  # type: ignore[attr-defined]
                                                         end_users=body.end_users)  # type: ignore[attr-defined]
    return KeyWithSecret(key=key, secret=secret)


@router.get("/{key_id}", scope="admin", response_model=KeyModel, summary="One API key",
            responses={**_ok(_KEY_EXAMPLE), 404: {"description": "no such key"}})
def get_key(request: Request, key_id: str) -> ApiKey:
    key: ApiKey | None = request.app.state.memroute.keys.get(key_id)
    if key is None:
        raise NotFoundError(f"no API key with id {key_id!r}")
    return key


@router.post("/{key_id}/revoke", scope="admin", response_model=KeyModel, summary="Revoke an API key",
             responses={**_ok({**_KEY_EXAMPLE, "revokedAt": "2026-01-02T00:00:00+00:00"}),
                        404: {"description": "no such key"}})
def revoke_key(request: Request, key_id: str) -> ApiKey:
    """Revoked at once for every process of the deployment. Revoking twice is harmless."""
    key: ApiKey = request.app.state.memroute.keys.revoke(key_id)
    return key


@router.delete("/{key_id}", scope="admin", response_model=KeyModel, summary="Revoke an API key (same as POST …/revoke)",
               responses={**_ok({**_KEY_EXAMPLE, "revokedAt": "2026-01-02T00:00:00+00:00"}),
                          404: {"description": "no such key"}})
def delete_key(request: Request, key_id: str) -> ApiKey:
    key: ApiKey = request.app.state.memroute.keys.revoke(key_id)
    return key


@router.post("/{key_id}/rotate", scope="admin", response_model=wire_model(KeyWithSecret),
             summary="Rotate an API key: a new secret and id, same name, scopes and tenant",
             responses={**_ok(_SECRET_EXAMPLE), 404: {"description": "no such key"},
                        409: {"description": "the key is revoked"}})
def rotate_key(request: Request, key_id: str) -> KeyWithSecret:
    key, secret = request.app.state.memroute.keys.rotate(key_id)
    return KeyWithSecret(key=key, secret=secret)


KeyLimitsModel = wire_model(KeyLimits, name="KeyLimits")
KeyLimitsBody = wire_model(KeyLimits, mode="request", name="KeyLimitsRequest")
_LIMITS_EXAMPLE = {"requestsPerMinute": 600, "concurrentRequests": None}


def _existing(request: Request, key_id: str) -> ApiKey:
    key: ApiKey | None = request.app.state.memroute.keys.get(key_id)
    if key is None:
        raise NotFoundError(f"no API key with id {key_id!r}")
    return key


@router.get("/{key_id}/limits", scope="admin", response_model=KeyLimitsModel, summary="A key's own fair-use limits",
            responses={**_ok(_LIMITS_EXAMPLE), 404: {"description": "no such key"}})
def get_key_limits(request: Request, key_id: str) -> KeyLimits:
    """``null``: the deployment's default (``[server] requests_per_minute`` / ``concurrent_requests``); 0:
    unlimited."""
    _existing(request, key_id)
    limits: KeyLimits = request.app.state.memroute.fair_use.own_limits(key_id)
    return limits


@router.put("/{key_id}/limits", scope="admin", response_model=KeyLimitsModel, summary="Set a key's fair-use limits",
            responses={**_ok(_LIMITS_EXAMPLE), 404: {"description": "no such key"}})
def put_key_limits(request: Request, key_id: str, body: KeyLimitsBody) -> KeyLimits:  # type: ignore[valid-type]
    """Every server process of the deployment applies them within 5 seconds."""
    _existing(request, key_id)
    limits: KeyLimits = request.app.state.memroute.fair_use.set_limits(
        key_id, KeyLimits(**body.model_dump(by_alias=False)))  # type: ignore[attr-defined]
    return limits
