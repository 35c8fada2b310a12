"""Wire models generated from memroute's attrs classes: the one mechanism behind every request body, every
response body and therefore ``/openapi.json``. Nothing in the server writes a JSON schema by hand.

:func:`wire_model` turns an attrs class into a pydantic model with camelCase aliases (the reference REST API's
style: ``apiKeyId``, ``createdAt``), the field docstrings as descriptions and the constraints from each field's
``metadata`` (``{"ge": 1, "le": 200, "min_length": 1, "examples": [...]}``; ``"wire": "name"`` replaces the
camelCase name where the reference API used another, e.g. ``totalTokensUsed``). Nested attrs classes, enums,
``tuple[X, ...]`` / ``frozenset[X]`` (as arrays), optional and ``Literal`` types are followed. Response models
read attributes (``from_attributes``), so a route returns the typed report itself and FastAPI validates and
serialises it against the same model the schema shows; they also carry the computed properties a report lists
in ``_json_properties`` (the same ones :func:`memroute.config.serialization.to_jsonable` adds), typed from the
property's return annotation. Request models forbid unknown fields.
"""

from __future__ import annotations

import ast
import datetime
import enum
import inspect
import itertools
import sys
import textwrap
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

import attrs
import pydantic
from pydantic import ConfigDict, Field

__all__ = ["camel", "field_docs", "wire_model"]

_CACHE: dict[tuple[type, str], type[pydantic.BaseModel]] = {}


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# JSON bodies: "yes" is not a bool, "3" is not an int; but 289.0 is the integer 289, as JSON Schema's "integer"
# (what /openapi.json promises) says, and as clients that only have floats (JavaScript) send it.
_JSON_INT = Annotated[int, pydantic.BeforeValidator(_integral), pydantic.Strict()]
_STRICT: dict[Any, Any] = {bool: pydantic.StrictBool, int: _JSON_INT, str: pydantic.StrictStr}
_CONSTRAINTS = ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern", "examples", "description")


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def field_docs(cls: type) -> dict[str, str]:
    """The docstrings written under attrs fields (``x: int = 0`` then ``\"\"\"what x is\"\"\"``), by field name."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    docs: dict[str, str] = {}
    body = ast.parse(source).body[0]
    if not isinstance(body, ast.ClassDef):
        return docs
    statements = body.body
    for current, following in itertools.pairwise(statements):
        if (isinstance(current, ast.AnnAssign) and isinstance(current.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[current.target.id] = " ".join(following.value.value.split())
    return docs


def _hints(cls: type) -> dict[str, Any]:
    module = sys.modules.get(cls.__module__)
    namespace = dict(vars(module)) if module else {}
    return typing.get_type_hints(cls, globalns=namespace, include_extras=False)


def _translate(tp: Any, mode: str) -> Any:
    """A pydantic-friendly annotation for an attrs field type."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is type(None) or tp is Any:
        return tp
    if attrs.has(tp):
        return wire_model(tp, mode=mode)
    if origin in (Union, types.UnionType):
        translated = tuple(_translate(arg, mode) for arg in args)
        return Union[translated]  # noqa: UP007 - built at run time from a tuple
    if origin in (tuple, frozenset, set, list) or tp in (tuple, frozenset, set, list):
        item = args[0] if args else Any
        return list[_translate(item, mode)]  # type: ignore[misc]
    if origin in (dict, Mapping) or tp is dict:
        key, value = args if len(args) == 2 else (str, Any)
        return dict[key, _translate(value, mode)]  # type: ignore[valid-type,misc]
    if origin is Literal:
        return tp
    if mode == "request" and tp in _STRICT:
        return _STRICT[tp]  # JSON bodies: "yes" is not a bool, "3" is not an int
    if isinstance(tp, type) and issubclass(tp, (str, int, float, bool, enum.Enum, datetime.datetime)):
        return tp
    return Any


def _property_type(cls: type, name: str, mode: str) -> Any:
    getter = getattr(cls, name).fget
    module = sys.modules.get(cls.__module__)
    hints = typing.get_type_hints(getter, globalns=dict(vars(module)) if module else {})
    return _translate(hints.get("return", Any), mode)


def _first_line(doc: str | None) -> str | None:
    return " ".join(doc.split()) if doc else None


def wire_model(cls: type, *, mode: str = "response", name: str | None = None,
               exclude: tuple[str, ...] = (), camel_case: bool = True) -> type[pydantic.BaseModel]:
    """The pydantic model of attrs class ``cls`` for ``mode`` ``"response"`` (read from attributes, extra
    fields ignored) or ``"request"`` (unknown fields refused). Cached per class and mode."""
    cache_key = (cls, f"{mode}:{name}:{','.join(exclude)}:{camel_case}")
    if cache_key in _CACHE:
        return _CACHE[cache_key]
    hints = _hints(cls)
    docs = field_docs(cls)
    fields: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if field.name in exclude or field.name.startswith("_"):
            continue
        annotation = _translate(hints.get(field.name, Any), mode)
        extra = {k: v for k, v in field.metadata.items() if k in _CONSTRAINTS}
        extra.setdefault("description", docs.get(field.name))
        alias = field.metadata.get("wire") or (camel(field.name) if camel_case else field.name)
        if field.default is attrs.NOTHING or mode == "response":
            default: Any = ...
        elif isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            default = None
            extra["default_factory"] = field.default.factory
        else:
            default = field.default
        if "default_factory" in extra:
            fields[field.name] = (annotation, Field(alias=alias, **extra))
        else:
            fields[field.name] = (annotation, Field(default, alias=alias, **extra))
    if mode == "response":
        for prop in getattr(cls, "_json_properties", ()):
            if prop not in exclude:
                fields[prop] = (_property_type(cls, prop, mode),
                                Field(..., alias=camel(prop) if camel_case else prop,
                                      description=_first_line(getattr(cls, prop).__doc__)))
    config = ConfigDict(
        from_attributes=True, populate_by_name=True, serialize_by_alias=True,
        extra="forbid" if mode == "request" else "ignore",
        json_schema_extra={"description": inspect.getdoc(cls) or None} if inspect.getdoc(cls) else None,
    )
    model_name = name or (cls.__name__ + ("Request" if mode == "request" and not cls.__name__.endswith("Request")
                                          else ""))
    model = pydantic.create_model(model_name, __config__=config, **fields)
    _CACHE[cache_key] = model
    return model


# --- serialising a response without validating it ---------------------------------------------------------

_Dump = typing.Callable[[Any], Any]
_DUMPERS: dict[type[pydantic.BaseModel], _Dump] = {}


def _identity(value: Any) -> Any:
    return value


def _dumper_for(annotation: Any) -> _Dump | None:
    """How to turn a value of ``annotation`` into JSON-able data (``None``: as it is, which pydantic's JSON
    encoder then writes as the model would: datetimes, enums, tuples, sets)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return wire_dumper(annotation)
    if origin is list and args:
        item = _dumper_for(args[0])
        return None if item is None else (lambda value: [item(v) for v in value])
    if origin is dict and len(args) == 2:
        inner = _dumper_for(args[1])
        return None if inner is None else (lambda value: {k: inner(v) for k, v in value.items()})
    if origin in (Union, types.UnionType):
        options = [_dumper_for(arg) for arg in args if arg is not type(None)]
        converting = [option for option in options if option is not None]
        if not converting:
            return None
        if len(converting) == 1 and len(options) == 1:
            only = converting[0]
            return lambda value: None if value is None else only(value)
        raise TypeError(f"wire_dumper: no dumper for the union {annotation!r} (several models)")
    return None


def wire_dumper(model: type[pydantic.BaseModel]) -> _Dump:
    """A function turning a typed report into the JSON-able data ``model`` would serialise it as, without
    validating it first: ``to_json(wire_dumper(M)(report))`` is ``M.model_validate(report).model_dump_json()``
    (a test holds them equal). It reads the same attributes under the same aliases; what it skips is the
    validation of a report the service built (~0.3 ms of a 10-hit search's response). For the hot routes
    (:mod:`memroute.server.api.lean`); cached per model."""
    if model in _DUMPERS:
        return _DUMPERS[model]
    plan = tuple((name, field.alias or name, _dumper_for(field.annotation))
                 for name, field in model.model_fields.items())
    plain = tuple((name, alias) for name, alias, convert in plan if convert is None)
    nested = tuple((name, alias, convert) for name, alias, convert in plan if convert is not None)
    order = tuple(alias for _, alias, _ in plan)

    def dump(value: Any) -> dict[str, Any]:
        out = {alias: getattr(value, name) for name, alias in plain}
        for name, alias, convert in nested:
            out[alias] = convert(getattr(value, name))
        return out if not nested else {alias: out[alias] for alias in order}

    _DUMPERS[model] = dump
    return dump
