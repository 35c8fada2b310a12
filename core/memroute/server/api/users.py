"""``/api/users``: the end users of an app tenant, and erasing one of them (GDPR-style).

An app key (``--end-users``) lists and erases the end users of its own tenant; an admin key names the tenant
with ``?tenant=``. Any other key is refused (403). Reading or changing one end user's memories needs no route
of its own: every ``/api/memory`` route acts for the end user the request names (``x-memroute-user``)."""

from __future__ import annotations

from typing import Annotated

import attrs
from fastapi import Query, Request

from memroute.errors import PermissionDeniedError
from memroute.reports import EndUserErasure
from memroute.server.api.memory import asvc, ok
from memroute.server.auth import CurrentPrincipal, Principal, ScopedRouter
from memroute.server.schema import wire_model

router = ScopedRouter(prefix="/api/users", tags=["end users"])

TenantParam = Annotated[str | None, Query(max_length=256, description="the app tenant (admin keys only; default: "
                                                                       "the app key's own)")]
_ERASURE_EXAMPLE = {"tenant": "shop", "endUser": "u1", "apiKeyId": "shop/u1", "dryRun": False, "matched": 2,
                    "deleted": 2,
                    "ids": ["0b6f4c1e-6a8e-4c36-9d1e-2f6f1f0d8a11", "5d0e8a11-1c2b-4f3a-9e8d-7c6b5a4f3e2d"],
                    "remaining": {"main": 0}, "vectorsRemaining": 0, "replicationPending": 0, "historiesDeleted": 1,
                    "changeHistoryDeleted": 4, "complete": True}


@attrs.frozen(kw_only=True)
class EndUserList:
    tenant: str
    """The app tenant."""
    data: tuple[str, ...]
    """Its end users that hold memories, sorted."""


def _app_tenant(principal: Principal, tenant: str | None, end_user: str | None = None) -> str:
    """The app tenant a request may manage: an app key's own (a request narrowed to one end user may only touch
    that one), or any named by an admin key."""
    if principal.is_admin:
        return tenant or principal.tenant
    if not principal.end_users:
        raise PermissionDeniedError("only an app key (--end-users) or an admin key manages end users")
    if tenant not in (None, "", principal.tenant):
        raise PermissionDeniedError("this app key may only manage the end users of its own tenant")
    if end_user is not None and principal.end_user not in (None, end_user):
        raise PermissionDeniedError("this request acts for another end user (x-memroute-user)")
    return principal.tenant


@router.get("", scope="read", response_model=wire_model(EndUserList), summary="End users of an app tenant",
            responses=ok({"tenant": "shop", "data": ["u1", "u2"]}))
async def list_end_users(request: Request, principal: CurrentPrincipal, tenant: TenantParam = None) -> EndUserList:
    app = _app_tenant(principal, tenant)
    return EndUserList(tenant=app, data=tuple(await asvc(request).end_users(app)))


@router.delete("/{end_user}", scope="write", response_model=wire_model(EndUserErasure),
               summary="Erase every memory of one end user (vectors and replicas too), with a report",
               responses=ok(_ERASURE_EXAMPLE))
async def erase_end_user(request: Request, principal: CurrentPrincipal, end_user: str, tenant: TenantParam = None,
                         dry_run: Annotated[bool, Query(alias="dryRun")] = False) -> EndUserErasure:
    """Deletes each memory through the normal delete path (replicated to every fallback through the outbox, its
    vector removed), waits for the replication, and reports what each place still holds (``complete`` when
    nothing). Other end users, the app's own tenant and other tenants are untouched."""
    app = _app_tenant(principal, tenant, end_user)
    erasure: EndUserErasure = await asvc(request).forget_end_user(app, end_user, dry_run=dry_run)
    return erasure
