"""memroute's hook specifications. Every hook is documented in ``docs/plugins/hooks.md`` (a test checks it).

A plugin is a module (or object) with functions decorated by :data:`memroute.hookimpl` whose names match
these specs. Discovery hooks take no arguments and yield frozen spec records.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pluggy

from memroute.specs import BackendSpec, EmbeddingSourceSpec, ExtractorSpec, RerankerSpec, VectorStoreSpec

if TYPE_CHECKING:
    import click

hookspec = pluggy.HookspecMarker("memroute")
hookimpl = pluggy.HookimplMarker("memroute")


@hookspec
def memroute_backends() -> Iterable[BackendSpec]:  # type: ignore[empty-body]
    """Called once when the plugin manager is built. Yield a :class:`~memroute.specs.BackendSpec` for each
    storage backend the plugin provides; configuration selects one with ``type = "<name>"``.

    Example::

        @memroute.hookimpl
        def memroute_backends():
            yield BackendSpec(name="jsonl", factory=JsonlBackend.from_settings, settings_class=JsonlSettings)
    """


@hookspec
def memroute_embedding_sources() -> Iterable[EmbeddingSourceSpec]:  # type: ignore[empty-body]
    """Called once when the plugin manager is built. Yield an :class:`~memroute.specs.EmbeddingSourceSpec`
    for each embedding source; ``[embedding] source = "<name>"`` selects it.

    Example::

        @memroute.hookimpl
        def memroute_embedding_sources():
            yield EmbeddingSourceSpec(name="hashing", factory=HashingSource.from_settings)
    """


@hookspec
def memroute_vector_stores() -> Iterable[VectorStoreSpec]:  # type: ignore[empty-body]
    """Called once when the plugin manager is built. Yield a :class:`~memroute.specs.VectorStoreSpec` for
    each vector store; ``[vectors] store = "<name>"`` selects it.

    Example::

        @memroute.hookimpl
        def memroute_vector_stores():
            yield VectorStoreSpec(name="faiss", factory=FaissStore.from_settings, settings_class=FaissSettings)
    """


@hookspec
def memroute_extractors() -> Iterable[ExtractorSpec]:  # type: ignore[empty-body]
    """Called once when the plugin manager is built. Yield an :class:`~memroute.specs.ExtractorSpec` for
    each fact extractor; ``[extraction] extractors = ["<name>", ...]`` chains them.

    Example::

        @memroute.hookimpl
        def memroute_extractors():
            yield ExtractorSpec(name="llm", factory=LlmExtractor.from_settings, settings_class=LlmSettings)
    """



@hookspec
def memroute_rerankers() -> Iterable[RerankerSpec]:  # type: ignore[empty-body]
    """Called once when the plugin manager is built. Yield a :class:`~memroute.specs.RerankerSpec` for each
    reranker; ``[memory] rerank_enabled = true`` with ``[rerank] reranker = "<name>"`` selects one, and
    retrieval re-scores its top fused candidates with it.

    Example::

        @memroute.hookimpl
        def memroute_rerankers():
            yield RerankerSpec(name="cross-encoder", factory=CrossEncoderReranker.from_settings,
                               settings_class=CrossEncoderSettings)
    """

@hookspec
def memroute_prepare_connection(connection: Any) -> None:
    """Called for every ``apsw.Connection`` memroute opens, right after it is configured (WAL, busy
    timeout, foreign keys) and before any statement runs. Load extensions or register SQL functions here.
    Return nothing. The built-in sqlite-vec plugin loads the extension this way.

    Example::

        @memroute.hookimpl
        def memroute_prepare_connection(connection):
            connection.create_scalar_function("reverse", lambda s: s[::-1], 1, deterministic=True)
    """


@hookspec
def memroute_register_commands(cli: click.Group) -> None:
    """Called when the ``memroute`` command line first looks past its own commands (running a command it
    does not define, or listing commands for ``--help``). Add click commands or groups to ``cli``; return
    nothing. A command may not replace one of memroute's own (the plugin is then reported as failed), and a
    plugin whose hook raises is skipped with a warning: the rest of the CLI keeps working.

    A command reads the configuration the user selected with ``memroute.cli.load_cli_settings(ctx)`` or
    ``memroute.cli.configured_backends(ctx, "<type>")``, and opens the service with
    ``memroute.cli.open_service(ctx)``.

    Example::

        @memroute.hookimpl
        def memroute_register_commands(cli):
            @cli.command("jsonl-compact")
            @click.argument("path")
            def jsonl_compact(path):
                "Rewrite a JSON-lines memory file without deleted rows."
                click.echo(compact(path))
    """


@hookspec(firstresult=True)
def memroute_state_store(primary: Any, context: Any) -> Any:
    """Called once per service, the first time it needs the deployment's shared state (API keys, runtime
    settings, maintenance leases). ``primary`` is the primary :class:`~memroute.interfaces.MemoryBackend`
    instance; ``context`` a :class:`~memroute.deployment.state.StateStoreContext` (``state_dir``,
    ``prepare_connection``). Return a :class:`~memroute.deployment.state.StateStore` when your backend keeps that state
    itself (so every process of a deployment sees one store), or None to let the next plugin (and finally the
    SQLite ``state.db`` in ``state_dir``) handle it. The first non-None result wins.

    Example::

        @memroute.hookimpl
        def memroute_state_store(primary, context):
            if isinstance(primary, PostgresBackend):
                return PostgresStateStore(primary.pool)
            return None
    """
