"""The one cattrs converter memroute uses (never the global one), and JSON helpers for models.

Extra keys are forbidden everywhere, so a typo in configuration or in an API body is an error that names
the field, not a silently ignored value.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError
from cattrs.gen import make_dict_unstructure_fn

from memroute.errors import ConfigError, MemrouteError, ValidationError
from memroute.models import Memory, MemoryType, as_utc

__all__ = [
    "converter",
    "dumps_memory",
    "loads_memory",
    "make_converter",
    "memory_from_dict",
    "memory_to_dict",
    "structure_config",
    "structure_input",
    "to_jsonable",
    "write_jsonl",
]

T = TypeVar("T")


def _datetime(value: Any) -> datetime:
    try:
        return as_utc(value)
    except ValidationError as exc:
        raise ValueError(str(exc).split(": ", 1)[-1]) from None


def make_converter() -> cattrs.Converter:
    """A fresh converter with every memroute hook and extra keys forbidden."""
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook(datetime, lambda value, _t: _datetime(value))
    conv.register_unstructure_hook(datetime, lambda value: value.isoformat().replace("+00:00", "Z"))
    conv.register_structure_hook(MemoryType, lambda value, _t: MemoryType(value))
    conv.register_unstructure_hook(MemoryType, lambda value: value.value)
    conv.register_structure_hook(Path, lambda value, _t: Path(str(value)).expanduser())
    conv.register_unstructure_hook(Path, str)

    def structure_bool(value: Any, _t: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
            return value.strip().lower() in {"1", "true", "yes", "on"}
        raise ValueError(f"expected a boolean, got {value!r}")

    def structure_int(value: Any, _t: Any) -> int:
        if isinstance(value, bool):
            raise ValueError(f"expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ValueError(f"expected an integer, got {value!r}")

    def structure_float(value: Any, _t: Any) -> float:
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise ValueError(f"expected a number, got {value!r}")

    def structure_str(value: Any, _t: Any) -> str:
        # No coercion from numbers: `path = 123` must be an error, not a database file named "./123".
        # (Environment variables arrive as strings already.)
        if isinstance(value, str):
            return value
        raise ValueError(f"expected a string, got {type(value).__name__} {value!r:.40}")

    def unstructure_attrs(cls: type) -> Any:
        # Reports list the computed properties their JSON carries (memroute.reports, ``_json_properties``).
        base: Any = make_dict_unstructure_fn(cls, conv)
        extra: tuple[str, ...] = getattr(cls, "_json_properties", ())
        if not extra:
            return base

        def unstructure(value: Any) -> dict[str, Any]:
            data: dict[str, Any] = base(value)
            for name in extra:
                data[name] = conv.unstructure(getattr(value, name))
            return data

        return unstructure

    conv.register_unstructure_hook_factory(attrs.has, unstructure_attrs)
    conv.register_structure_hook(bool, structure_bool)
    conv.register_structure_hook(int, structure_int)
    conv.register_structure_hook(float, structure_float)
    conv.register_structure_hook(str, structure_str)
    return conv


converter = make_converter()


def _walk(exc: BaseException, path: str, out: list[tuple[str, str]]) -> None:
    """Flatten a cattrs error tree into ``(field path, message)`` pairs, keeping memroute's own messages."""
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        for sub in exc.exceptions:
            notes = getattr(sub, "__notes__", None) or []
            name = next((getattr(n, "name", None) for n in notes if hasattr(n, "name")), None)
            index = next((getattr(n, "index", None) for n in notes if hasattr(n, "index")), None)
            if name is not None:
                _walk(sub, f"{path}.{name}", out)
            elif index is not None:
                _walk(sub, f"{path}[{index!r}]", out)
            else:
                _walk(sub, path, out)
        return
    if isinstance(exc, ForbiddenExtraKeysError):
        for key in sorted(exc.extra_fields):
            out.append((f"{path}.{key}", "unknown field"))
        return
    if isinstance(exc, MemrouteError) and getattr(exc, "problems", None):
        for field, _ in exc.problems:  # type: ignore[attr-defined]
            message = str(exc).removeprefix(f"{field}: ").rstrip(":")
            out.append((f"{path}.{field}", message))
        return
    if isinstance(exc, KeyError):
        out.append((path, "required field missing"))
        return
    out.append((path, str(exc) or type(exc).__name__))


def _problems(exc: BaseException, path: str) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    _walk(exc, path, problems)
    return problems


def _clean_path(path: str) -> str:
    return path.replace("$.", "").replace("$", "").strip(".") or "(root)"


def _structure(data: Any, cls: type[T], path: str, error: type[ConfigError] | type[ValidationError]) -> T:
    try:
        return converter.structure(data, cls)
    except MemrouteError as exc:
        if isinstance(exc, error):
            raise
        raise error(f"{_clean_path(path)}: {exc}", [(_clean_path(path), str(exc))]) from None
    except (ClassValidationError, IterableValidationError, ForbiddenExtraKeysError, ValueError, TypeError,
            KeyError) as exc:
        problems = [(_clean_path(p), m) for p, m in _problems(exc, path)]
        text = "; ".join(f"{p}: {m}" for p, m in problems)
        raise error(f"invalid {(error is ConfigError and 'configuration') or 'input'}: {text}", problems) from None


def structure_config(data: Any, cls: type[T], path: str = "$") -> T:
    """Structure configuration into ``cls``; any problem is a :class:`ConfigError` naming the field."""
    return _structure(data, cls, path, ConfigError)


def structure_input(data: Any, cls: type[T], path: str = "$") -> T:
    """Structure user input into ``cls``; any problem is a :class:`ValidationError` naming the field."""
    return _structure(data, cls, path, ValidationError)


@functools.lru_cache(maxsize=1)
def _memory_fields() -> frozenset[str]:
    return frozenset(f.name for f in attrs.fields(Memory))


@functools.lru_cache(maxsize=1)
def _required_memory_fields() -> frozenset[str]:
    return frozenset(f.name for f in attrs.fields(Memory) if f.default is attrs.NOTHING)


def memory_to_dict(memory: Memory) -> dict[str, Any]:
    """A JSON-able dict of a memory (ISO-8601 UTC timestamps with ``Z``)."""
    data: dict[str, Any] = converter.unstructure(memory)
    data["metadata"] = dict(memory.metadata)
    return data


def memory_from_dict(data: Mapping[str, Any], path: str = "$") -> Memory:
    """A memory from a dict such as :func:`memory_to_dict` makes; bad data raises ValidationError."""
    if not isinstance(data, Mapping):
        raise ValidationError(f"{_clean_path(path)}: expected an object", [(_clean_path(path), "type")])
    if _required_memory_fields() <= data.keys() <= _memory_fields():
        # Fast path for well-formed documents (bulk import, files from before a field existed): the model's
        # own converters and validators do all the checking; any problem is re-run through cattrs for an error
        # that names the field.
        try:
            return Memory(**data)
        except (ValidationError, TypeError, ValueError):
            pass
    return structure_input(dict(data), Memory, path)


def to_jsonable(value: Any) -> Any:
    """``value`` (a report of :mod:`memroute.reports`, a model of :mod:`memroute.models`, or plain data
    holding them) as JSON-able data: dicts, lists, strings, numbers, booleans and ``None``. Timestamps become
    ISO-8601 UTC with ``Z``, enums their value, tuples lists, and a report's computed properties are added.
    The one converter every surface uses (the CLI's ``--json``, the server's responses)."""
    return converter.unstructure(value)


def dumps_memory(memory: Memory) -> str:
    return json.dumps(memory_to_dict(memory), ensure_ascii=False, sort_keys=True)


def loads_memory(text: str) -> Memory:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"not valid JSON: {exc}", [("(root)", "invalid JSON")]) from None
    return memory_from_dict(data)


def write_jsonl(out: IO[str], memories: Iterable[Memory]) -> int:
    """Write one JSON object a line (what ``memroute import`` and ``Memroute.import_jsonl`` read); returns how
    many were written."""
    count = 0
    for memory in memories:
        out.write(json.dumps(memory_to_dict(memory), ensure_ascii=False) + "\n")
        count += 1
    return count
