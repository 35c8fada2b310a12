"""``POST /api/memory/import/omniroute``: the reference system's SQLite database, uploaded by an operator, into
memroute (the REST twin of ``memroute import --from omniroute``; docs/omniroute-compatibility.md)."""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Annotated, Any, Literal

import attrs
from fastapi import Query, Request
from starlette.concurrency import run_in_threadpool

from memroute.errors import ValidationError
from memroute.server.api.memory import ok, svc
from memroute.server.auth import ScopedRouter
from memroute.server.schema import wire_model
from memroute.service.omniroute import OmnirouteImportReport

if TYPE_CHECKING:
    from memroute.service import Memroute

router = ScopedRouter(prefix="/api/memory", tags=["operations"])

_SQLITE_MAGIC = b"SQLite format 3\x00"
_EXAMPLE = {"source": "upload", "table": "memories", "dryRun": True, "rows": 3, "carried": 2, "imported": 0,
            "tenants": {"shop": 2}, "byType": {"factual": 2}, "expired": 0, "keysGenerated": 0, "keysRenamed": 0,
            "idsDerived": 0, "metadataUnreadable": 0, "replaces": 0, "skipped": 1,
            "skippedByReason": {"no owner": 1},
            "skippedRows": [{"id": "5d0c8a4e-0d7f-4e8e-8f0a-1b2c3d4e5f60", "apiKeyId": "", "key": "pref:tea",
                             "reason": "no owner: api_key_id is empty"}]}


@router.post("/import/omniroute", scope="admin", response_model=wire_model(OmnirouteImportReport),
             summary="Import an OmniRoute SQLite database (every tenant; all or nothing)",
             openapi_extra={"requestBody": {"required": True, "content": {"application/vnd.sqlite3": {
                 "schema": {"type": "string", "format": "binary"}}}}},
             responses=ok(_EXAMPLE))
async def import_omniroute(
    request: Request,
    dry_run: Annotated[bool, Query(alias="dryRun")] = False,
    skip_uncarried: Annotated[bool, Query(alias="skipUncarried")] = False,
    unowned_tenant: Annotated[str | None, Query(alias="unownedTenant", min_length=1, max_length=256)] = None,
    duplicates: Annotated[Literal["newest", "keep"], Query()] = "newest",
    skip_expired: Annotated[bool, Query(alias="skipExpired")] = False,
) -> OmnirouteImportReport:
    """The body is the reference's database file (``storage.sqlite``). Each ``api_key_id`` becomes a tenant, so
    only an admin key may import. Every row is checked before the first write; a row that cannot be carried
    is a 422 naming it (nothing written) unless ``skipUncarried=true``. ``dryRun=true`` reports the counts and
    writes nothing. The body may be as large as ``[server] max_import_bytes``."""
    raw = await request.body()
    if not raw.startswith(_SQLITE_MAGIC):
        raise ValidationError("body: not an SQLite database (send the reference's database file as the body)",
                              [("(body)", "not SQLite")])
    report = await run_in_threadpool(_import_upload, svc(request), raw, dry_run=dry_run,
                                     skip_uncarried=skip_uncarried, unowned_tenant=unowned_tenant,
                                     duplicates=duplicates, skip_expired=skip_expired)
    return attrs.evolve(report, source="upload")  # the server's temporary path means nothing to the caller


def _import_upload(mem: Memroute, raw: bytes, **options: Any) -> OmnirouteImportReport:
    """Write the upload to a private temporary file (SQLite reads files), import it, remove it."""
    handle, path = tempfile.mkstemp(prefix="omniroute-", suffix=".sqlite")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(raw)
        return mem.import_omniroute(path, **options)
    finally:
        os.unlink(path)
