"""A thin bridge to the tenant-scoped service contract (issue 8, ``SERVICE_CONTRACT.md``) while it lands:
:func:`service` returns the service itself when it already speaks the contract, else a view that adds the
tenant checks on top of today's methods. Delete this module (and call ``request.app.state.memroute``) once
``Memroute.get`` takes ``api_key_id`` on main."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from memroute.errors import ValidationError

__all__ = ["service"]


def service(mem: Any) -> Any:
    if "api_key_id" in inspect.signature(mem.get).parameters:
        return _Partial(mem)
    return _Compat(mem)


class _Partial:
    """The contract service, with the few methods that may still be missing filled in."""

    def __init__(self, mem: Any) -> None:
        self._mem = mem

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mem, name)

    def import_jsonl(self, lines: Iterable[str], *, api_key_id: str | None = None) -> Any:
        if "api_key_id" in inspect.signature(self._mem.import_jsonl).parameters:
            return self._mem.import_jsonl(lines, api_key_id=api_key_id)
        return self._mem.import_jsonl(_owned_lines(lines, api_key_id))

    def extract(self, text: str) -> Any:
        if hasattr(self._mem, "extract"):
            return self._mem.extract(text)
        return self._mem.conversation.extract(text)

    def clear(self, api_key_id: str, *, type: Any = None, session_id: str | None = None,
              older_than_days: int | None = None, dry_run: bool = False) -> Any:
        if hasattr(self._mem, "clear"):
            return self._mem.clear(api_key_id, type=type, session_id=session_id, older_than_days=older_than_days,
                                   dry_run=dry_run)
        from datetime import timedelta
        from types import SimpleNamespace

        from memroute.models import utcnow

        cutoff = None if older_than_days is None else utcnow() - timedelta(days=older_than_days)
        matched = [memory for memory in self._mem.export(api_key_id)
                   if (type is None or memory.type == type) and (session_id is None or memory.session_id == session_id)
                   and (cutoff is None or memory.created_at < cutoff)]
        deleted = 0 if dry_run else sum(1 for memory in matched if self._mem.delete(memory.id))
        return SimpleNamespace(api_key_id=api_key_id, dry_run=dry_run, matched=len(matched), deleted=deleted,
                               ids=tuple(memory.id for memory in matched))

    def reindex(self, *, force: bool = False, progress: Callable[[int, int], None] | None = None) -> Any:
        if hasattr(self._mem, "reindex"):
            return self._mem.reindex(force=force, progress=progress)
        return self._mem.retrieval.reindex(force=force, progress=progress)


class _Compat(_Partial):
    """Today's service plus the tenant checks of the contract."""

    def get(self, memory_id: str, *, api_key_id: str) -> Any:
        memory = self._mem.get(memory_id)
        return memory if memory is not None and memory.api_key_id == api_key_id else None

    def update(self, memory_id: str, *, api_key_id: str, **changes: Any) -> Any:
        if self.get(memory_id, api_key_id=api_key_id) is None:
            return None
        return self._mem.get(memory_id) if self._mem.update(memory_id, **changes) else None

    def delete(self, memory_id: str, *, api_key_id: str) -> bool:
        if self.get(memory_id, api_key_id=api_key_id) is None:
            return False
        return bool(self._mem.delete(memory_id))

    def export(self, api_key_id: str) -> Iterator[Any]:
        return self._mem.export(api_key_id)


def _owned_lines(lines: Iterable[str], tenant: str | None) -> list[str]:
    """Every line, checked to belong to ``tenant`` (or to name none, then given to it) before any write."""
    checked = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if tenant is not None:
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValidationError(f"line {number}: not valid JSON ({exc.msg})", [(f"line {number}", "json")]) \
                    from None
            if not isinstance(data, dict):
                raise ValidationError(f"line {number}: expected a JSON object", [(f"line {number}", "type")])
            owner = data.get("api_key_id", data.get("apiKeyId"))
            if owner not in (None, "", tenant):
                raise ValidationError(f"line {number}: api_key_id {owner!r} is not this key's tenant",
                                      [(f"line {number}", "another tenant")])
            data["api_key_id"] = tenant
            data.pop("apiKeyId", None)
            line = json.dumps(data, ensure_ascii=False)
        checked.append(line)
    return checked
