"""The plugin manager: discovers plugins through the ``memroute`` entry-point group, collects their specs,
and isolates failures (a broken plugin is skipped with a warning, or is fatal under
``MEMROUTE_STRICT_PLUGINS=1``). Callers use the typed methods, never ``pm.hook.*``."""

from __future__ import annotations

import importlib.metadata
import os
import threading
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, overload

import attrs
import pluggy

from memroute import hookspecs
from memroute.errors import DuplicatePluginError, PluginLoadError, UnknownComponentError
from memroute.specs import (
    SUPPORTED_API_VERSIONS,
    BackendSpec,
    ComponentSpec,
    EmbeddingSourceSpec,
    ExtractorSpec,
    RerankerSpec,
    VectorStoreSpec,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "MemroutePluginManager",
    "PluginInfo",
    "PluginWarning",
    "get_plugin_manager",
    "make_plugin_manager",
    "reset_plugin_manager",
]

if TYPE_CHECKING:
    import click

ENTRY_POINT_GROUP: Final = "memroute"
BUILTIN_DISTRIBUTION: Final = "memroute"
"""The distribution whose components win a name clash (docs/plugins/installing.md, "Duplicate names")."""
SpecT = TypeVar("SpecT", bound=ComponentSpec[Any])

_DISCOVERY_HOOKS: Final[dict[str, tuple[str, type[ComponentSpec[Any]]]]] = {
    "backend": ("memroute_backends", BackendSpec),
    "embedding": ("memroute_embedding_sources", EmbeddingSourceSpec),
    "vector-store": ("memroute_vector_stores", VectorStoreSpec),
    "extractor": ("memroute_extractors", ExtractorSpec),
    "reranker": ("memroute_rerankers", RerankerSpec),
}


class PluginWarning(UserWarning):
    """A plugin was skipped; the message names the entry point and its distribution."""


@attrs.frozen(kw_only=True)
class PluginInfo:
    """One row of ``memroute plugins``: a component, or a plugin that failed before yielding any."""

    name: str
    kind: str
    plugin: str
    distribution: str | None
    version: str | None
    status: str  # "ok" | "failed" | "disabled" | "shadowed" (a built-in has the name) | "conflict"
    error: str | None = None
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class _Origin:
    plugin: str
    distribution: str | None
    version: str | None


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _disabled_names() -> frozenset[str]:
    raw = os.environ.get("MEMROUTE_DISABLE_PLUGINS", "")
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


class MemroutePluginManager(pluggy.PluginManager):
    """A pluggy manager with memroute's discovery rules and typed accessors."""

    def __init__(self, *, strict: bool | None = None, disabled: Iterable[str] | None = None) -> None:
        super().__init__(ENTRY_POINT_GROUP)
        self.add_hookspecs(hookspecs)
        self.strict = _env_flag("MEMROUTE_STRICT_PLUGINS") if strict is None else strict
        self.disabled = _disabled_names() if disabled is None else frozenset(disabled)
        self._origins: dict[str, _Origin] = {}
        self._infos: list[PluginInfo] = []
        self._specs: dict[str, dict[str, ComponentSpec[Any]]] = {kind: {} for kind in _DISCOVERY_HOOKS}
        self._spec_origin: dict[tuple[str, str], _Origin] = {}
        self._conflicts: dict[tuple[str, str], str] = {}
        self._collected = False
        self._lock = threading.RLock()

    # --- registration --------------------------------------------------------------------------------
    def load_entrypoints(self) -> None:
        """Load every ``memroute`` entry point, one at a time, recording failures.

        memroute's own entry points load first, then the others by name. An entry point whose name another
        distribution already uses is loaded too, registered as ``"<name> (<distribution>)"``: it is listed
        and its components take part in the duplicate-name rules, never dropped silently. (The same entry
        point seen twice - one distribution found on two paths - is one plugin.)"""
        seen: set[tuple[str, str | None, str]] = set()
        registered: set[str] = set()

        def order(ep: importlib.metadata.EntryPoint) -> tuple[bool, str, str]:
            return (_dist_name(ep) != BUILTIN_DISTRIBUTION, ep.name, _dist_name(ep) or "")

        for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=order):
            dist = getattr(ep, "dist", None)
            key = (ep.name, _dist_name(ep), ep.value)
            if key in seen:
                continue
            seen.add(key)
            name = ep.name if ep.name not in registered else f"{ep.name} ({_dist_name(ep) or ep.value})"
            registered.add(name)
            origin = _Origin(ep.name, dist.name if dist else None, dist.version if dist else None)
            if ep.name in self.disabled:
                self._record(origin, ep.name, "plugin", "disabled", "blocked by MEMROUTE_DISABLE_PLUGINS")
                continue
            try:
                module = ep.load()
                self.add_plugin(module, name=name, origin=origin)
            except Exception as exc:
                self._fail(origin, ep.name, "plugin", f"failed to load: {type(exc).__name__}: {exc}", exc)

    def add_plugin(self, plugin: object, *, name: str, origin: _Origin | None = None) -> None:
        """Register one plugin object or module (built-ins and tests use this too)."""
        with self._lock:
            origin = origin or _Origin(name, None, None)
            try:
                self.register(plugin, name=name)
            except Exception as exc:
                self._fail(origin, name, "plugin", f"failed to register: {type(exc).__name__}: {exc}", exc)
                return
            self._origins[name] = origin
            self._collected = False

    def remove_plugin(self, name: str) -> None:
        with self._lock:
            plugin = self.get_plugin(name)
            if plugin is not None:
                self.unregister(plugin)
            self._origins.pop(name, None)
            self._collected = False

    # --- collection ----------------------------------------------------------------------------------
    def _record(self, origin: _Origin, name: str, kind: str, status: str, error: str | None, desc: str = "") -> None:
        self._infos.append(
            PluginInfo(
                name=name, kind=kind, plugin=origin.plugin, distribution=origin.distribution,
                version=origin.version, status=status, error=error, description=desc,
            )
        )

    def _fail(self, origin: _Origin, name: str, kind: str, message: str, exc: BaseException | None) -> None:
        where = f"entry point {origin.plugin!r}"
        if origin.distribution:
            where += f" of distribution {origin.distribution} {origin.version or ''}".rstrip()
        full = f"memroute plugin skipped: {where}: {message}"
        self._record(origin, name, kind, "failed", message)
        if self.strict:
            raise PluginLoadError(full, entry_point=origin.plugin, distribution=origin.distribution) from exc
        warnings.warn(full, PluginWarning, stacklevel=3)

    def collect(self) -> None:
        """Call every discovery hook now (normally done lazily), so broken plugins warn at start-up."""
        self._collect()

    def _collect(self) -> None:
        with self._lock:
            if self._collected:
                return
            # keep load failures and CLI command rows recorded earlier; recompute component rows
            self._infos = [info for info in self._infos if info.kind in ("plugin", "command")]
            self._specs = {kind: {} for kind in _DISCOVERY_HOOKS}
            self._spec_origin = {}
            self._conflicts = {}
            for kind, (hook_name, spec_type) in _DISCOVERY_HOOKS.items():
                caller = getattr(self.hook, hook_name)
                for impl in caller.get_hookimpls():
                    origin = self._origin(impl.plugin_name)
                    try:
                        results = self._call_one(hook_name, impl)
                        specs = [spec for result in results for spec in result or ()]
                    except Exception as exc:
                        message = f"{hook_name}() raised {type(exc).__name__}: {exc}"
                        self._fail(origin, impl.plugin_name, kind, message, exc)
                        continue
                    for spec in specs:
                        self._add_spec(kind, spec_type, spec, origin)
            self._collected = True

    def _origin(self, plugin_name: str) -> _Origin:
        return self._origins.get(plugin_name, _Origin(plugin_name, None, None))

    def _call_one(self, hook_name: str, impl: pluggy.HookImpl, **kwargs: Any) -> list[Any]:
        """Call one plugin's implementation of ``hook_name`` the way pluggy's own hook callers do (through
        ``PluginManager._hookexec``, which ``add_hookcall_monitoring`` and ``enable_tracing`` wrap), so hook
        tracing and monitoring see the call, while a failure stays that plugin's own and every result is
        known to come from it. (pluggy's public ``subset_hook_caller`` would require hashable plugin
        objects; tests and some plugins register namespaces.)"""
        results = self._hookexec(hook_name, [impl], kwargs, False)
        assert isinstance(results, list)
        return results

    def _add_spec(self, kind: str, spec_type: type[ComponentSpec[Any]], spec: Any, origin: _Origin) -> None:
        name = getattr(spec, "name", repr(spec))
        if not isinstance(spec, spec_type):
            self._fail(origin, str(name), kind, f"yielded {type(spec).__name__}, expected {spec_type.__name__}", None)
            return
        if spec.name in self.disabled:
            self._record(origin, spec.name, kind, "disabled", "blocked by MEMROUTE_DISABLE_PLUGINS", spec.description)
            return
        if spec.api_version not in SUPPORTED_API_VERSIONS:
            supported = ", ".join(str(v) for v in sorted(SUPPORTED_API_VERSIONS))
            self._fail(origin, spec.name, kind,
                       f"{kind} {spec.name!r} targets plugin API version {spec.api_version}; "
                       f"this memroute supports {supported}", None)
            return
        key = (kind, spec.name)
        existing = self._spec_origin.get(key)
        if key in self._conflicts:
            self._conflicts[key] += f" and by {_describe(origin)}"
            self._record(origin, spec.name, kind, "conflict", self._conflicts[key], spec.description)
            self._duplicate(self._conflicts[key])
            return
        if existing is not None:
            message = (f"duplicate {kind} name {spec.name!r}: provided by {_describe(existing)} "
                       f"and by {_describe(origin)}")
            if _builtin(existing) != _builtin(origin):
                # the documented precedence: memroute's own component keeps its name
                loser = origin if _builtin(existing) else existing
                message += f"; the built-in wins, {_describe(loser)} is shadowed"
                if loser is existing:
                    self._restatus(kind, spec.name, existing, "shadowed", message)
                    self._specs[kind][spec.name] = spec
                    self._spec_origin[key] = origin
                    self._record(origin, spec.name, kind, "ok", None, spec.description)
                else:
                    self._record(origin, spec.name, kind, "shadowed", message, spec.description)
            else:
                # two third parties (or two built-ins): no silent winner; using the name is an error
                message += "; neither is used until one is uninstalled or disabled (MEMROUTE_DISABLE_PLUGINS)"
                self._conflicts[key] = message
                del self._specs[kind][spec.name]
                self._restatus(kind, spec.name, existing, "conflict", message)
                self._record(origin, spec.name, kind, "conflict", message, spec.description)
            self._duplicate(message)
            return
        self._specs[kind][spec.name] = spec
        self._spec_origin[key] = origin
        self._record(origin, spec.name, kind, "ok", None, spec.description)

    def _restatus(self, kind: str, name: str, origin: _Origin, status: str, error: str) -> None:
        target = (kind, name, origin.plugin, origin.distribution)
        self._infos = [
            attrs.evolve(info, status=status, error=error)
            if (info.kind, info.name, info.plugin, info.distribution) == target else info
            for info in self._infos
        ]

    def _duplicate(self, message: str) -> None:
        if self.strict:
            raise DuplicatePluginError(message)
        warnings.warn(f"memroute plugin name clash: {message}", PluginWarning, stacklevel=4)

    # --- typed accessors -------------------------------------------------------------------------------
    def _of_kind(self, kind: str, spec_type: type[SpecT]) -> dict[str, SpecT]:
        self._collect()
        return {name: spec for name, spec in self._specs[kind].items() if isinstance(spec, spec_type)}

    def backends(self) -> dict[str, BackendSpec]:
        return self._of_kind("backend", BackendSpec)

    def embedding_sources(self) -> dict[str, EmbeddingSourceSpec]:
        return self._of_kind("embedding", EmbeddingSourceSpec)

    def vector_stores(self) -> dict[str, VectorStoreSpec]:
        return self._of_kind("vector-store", VectorStoreSpec)

    def extractors(self) -> dict[str, ExtractorSpec]:
        return self._of_kind("extractor", ExtractorSpec)

    def rerankers(self) -> dict[str, RerankerSpec]:
        return self._of_kind("reranker", RerankerSpec)

    @overload
    def component(self, kind: Literal["backend"], name: str) -> BackendSpec: ...
    @overload
    def component(self, kind: Literal["embedding"], name: str) -> EmbeddingSourceSpec: ...
    @overload
    def component(self, kind: Literal["vector-store"], name: str) -> VectorStoreSpec: ...
    @overload
    def component(self, kind: Literal["extractor"], name: str) -> ExtractorSpec: ...
    @overload
    def component(self, kind: Literal["reranker"], name: str) -> RerankerSpec: ...
    @overload
    def component(self, kind: str, name: str) -> ComponentSpec[Any]: ...

    def component(self, kind: str, name: str) -> ComponentSpec[Any]:
        """The spec of ``kind`` named ``name``, or :class:`UnknownComponentError` listing what exists.
        Typed by ``kind``: ``component("backend", ...)`` is a :class:`BackendSpec`."""
        self._collect()
        specs = self._specs[kind]
        if name in specs:
            return specs[name]
        if (kind, name) in self._conflicts:
            raise DuplicatePluginError(self._conflicts[(kind, name)])
        failed = [i for i in self._infos if i.name == name and i.status != "ok"]
        hint = f" ({failed[0].status}: {failed[0].error})" if failed else ""
        known = ", ".join(sorted(specs)) or "none"
        raise UnknownComponentError(f"no {kind} plugin named {name!r}{hint}; installed: {known}")

    def infos(self) -> list[PluginInfo]:
        """Every component and every failed plugin, for ``memroute plugins``."""
        self._collect()
        return sorted(self._infos, key=lambda i: (i.kind, i.name, i.plugin))

    def register_commands(self, cli: click.Group) -> None:
        """Run every ``memroute_register_commands`` hook on ``cli``, one plugin at a time.

        A plugin whose hook raises, or that replaces a command ``cli`` already has, is recorded as failed
        (kind ``command``) and warned about - or raised under strict mode - and whatever it added is taken
        back; the other plugins' commands still register. Each command a plugin adds is listed by
        ``memroute plugins`` with its distribution."""
        hook_name = "memroute_register_commands"
        with self._lock:
            for impl in self.hook.memroute_register_commands.get_hookimpls():
                origin = self._origin(impl.plugin_name)
                before = dict(cli.commands)
                try:
                    self._call_one(hook_name, impl, cli=cli)
                    taken = sorted(name for name, command in before.items() if cli.commands.get(name) is not command)
                    if taken:
                        raise DuplicatePluginError(
                            f"command name(s) {', '.join(taken)} already used by memroute or an earlier plugin"
                        )
                except Exception as exc:
                    cli.commands.clear()
                    cli.commands.update(before)
                    message = f"{hook_name}() raised {type(exc).__name__}: {exc}"
                    if isinstance(exc, DuplicatePluginError):
                        message = str(exc)
                    self._fail(origin, impl.plugin_name, "command", message, exc)
                    continue
                for name in sorted(set(cli.commands) - set(before)):
                    self._record(origin, name, "command", "ok", None, cli.commands[name].get_short_help_str())

    def state_store(self, primary: Any, context: Any) -> Any:
        """The first ``memroute_state_store`` result for this primary, or None (use the SQLite default)."""
        return self.hook.memroute_state_store(primary=primary, context=context)

    def prepare_connection(self, connection: Any) -> None:
        """Run every ``memroute_prepare_connection`` hook on ``connection``."""
        self.hook.memroute_prepare_connection(connection=connection)


def _dist_name(ep: importlib.metadata.EntryPoint) -> str | None:
    dist = getattr(ep, "dist", None)
    return dist.name if dist else None


def _builtin(origin: _Origin) -> bool:
    return origin.distribution == BUILTIN_DISTRIBUTION


def _describe(origin: _Origin) -> str:
    dist = f"distribution {origin.distribution}" if origin.distribution else "no distribution"
    return f"plugin {origin.plugin!r} ({dist})"


def make_plugin_manager(
    entrypoints: bool = True,
    plugins: Sequence[tuple[str, object]] = (),
    *,
    strict: bool | None = None,
    disabled: Iterable[str] | None = None,
) -> MemroutePluginManager:
    """A new plugin manager: entry points (when ``entrypoints``) plus ``plugins`` given as (name, object)."""
    pm = MemroutePluginManager(strict=strict, disabled=disabled)
    if entrypoints:
        pm.load_entrypoints()
    for name, plugin in plugins:
        pm.add_plugin(plugin, name=name)
    pm.collect()
    return pm


_default: MemroutePluginManager | None = None
_default_lock = threading.Lock()


def get_plugin_manager() -> MemroutePluginManager:
    """The process-wide plugin manager, built on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = make_plugin_manager()
        return _default


def reset_plugin_manager() -> None:
    """Forget the process-wide manager (tests, or after installing a plugin at run time)."""
    global _default
    with _default_lock:
        _default = None
