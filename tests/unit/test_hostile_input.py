"""Hostile input through the Python API and the CLI (issue 16, items 1, 9, 10 and the size caps).

Each case here failed before the fix: a lone surrogate or a NUL reached SQLite and counted against the
primary's circuit breaker (three calls opened it for every tenant), deep nesting escaped as RecursionError,
undecodable input as UnicodeError, ``path = 123`` created a database named ``./123``, and a 10 MB metadata
string was stored.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import memroute
from memroute.cli import main
from memroute.config.settings import load_settings
from memroute.errors import ConfigError, ValidationError

SURROGATE = "x \ud800"
NUL = "x\x00y"


@pytest.fixture
def mem(tmp_path):
    with memroute.open({"embedding": {"source": "none"}, "vectors": {"store": "none"}}, use_env=False,
                       data_dir=str(tmp_path / "data")) as service:
        yield service


def _manager(service: Any) -> Any:
    return getattr(service, "_manager", None) or service.manager


def _breakers_untouched(service: Any) -> None:
    manager = _manager(service)
    for backend in manager.backends:
        breaker = manager.breaker(backend.name)
        assert breaker.state == "closed" and breaker.consecutive_failures == 0, (backend.name, breaker.last_error)


def _total(service: Any, tenant: str = "a") -> int:
    return service.list(api_key_id=tenant).total


ADD_CASES = {
    "content-surrogate": {"content": SURROGATE},
    "content-nul": {"content": NUL},
    "key-surrogate": {"key": SURROGATE},
    "key-nul": {"key": NUL},
    "tenant-surrogate": {"api_key_id": SURROGATE},
    "tenant-nul": {"api_key_id": NUL},
    "session-surrogate": {"session_id": SURROGATE},
    "session-nul": {"session_id": NUL},
    "metadata-key-surrogate": {"metadata": {SURROGATE: 1}},
    "metadata-key-nul": {"metadata": {NUL: 1}},
    "metadata-value-surrogate": {"metadata": {"k": SURROGATE}},
    "metadata-value-nul": {"metadata": {"k": NUL}},
    "metadata-nested-surrogate": {"metadata": {"k": [{"deep": ["ok", SURROGATE]}]}},
    "metadata-1500-deep": {"metadata": "deep"},
    "metadata-10MB": {"metadata": {"big": "x" * 10_000_000}},
}


def _deep(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(levels):
        node["a"] = {}
        node = node["a"]
    return root


@pytest.mark.parametrize("fields", list(ADD_CASES.values()), ids=list(ADD_CASES))
def test_unstorable_add_is_a_validation_error_and_never_trips_a_breaker(mem, fields):
    arguments: dict[str, Any] = {"api_key_id": "a", "content": "fine content", **fields}
    if arguments.get("metadata") == "deep":
        arguments["metadata"] = _deep(1500)
    for _ in range(5):  # more than breaker_failures (3): before the fix the third call opened the breaker
        with pytest.raises(ValidationError):
            mem.add(**arguments)
    _breakers_untouched(mem)
    assert _total(mem) == 0
    assert mem.add(api_key_id="a", content="the store still works").content == "the store still works"


@pytest.mark.parametrize("query", [SURROGATE, NUL, "\udfff"])
def test_unstorable_queries_are_validation_errors(mem, query):
    mem.add(api_key_id="a", content="some memory")
    for _ in range(5):
        with pytest.raises(ValidationError, match="query"):
            mem.search(query, api_key_id="a")
        with pytest.raises(ValidationError, match="query"):
            mem.list(api_key_id="a", query=query)
        with pytest.raises(ValidationError):
            mem.search("fine", api_key_id=SURROGATE)
    _breakers_untouched(mem)


def test_control_characters_other_than_nul_are_stored(mem):
    text = "bell \x07 escape \x1b[31m tab\t newline\n del \x7f rtl \u202e"
    stored = mem.add(api_key_id="a", content=text, metadata={"ctl\x01": "v\x1f"})
    assert stored.content == text and stored.metadata == {"ctl\x01": "v\x1f"}


def test_configured_limits_are_applied_before_the_backend(tmp_path):
    config = {"embedding": {"source": "none"}, "vectors": {"store": "none"},
              "limits": {"max_content_chars": 100, "max_metadata_bytes": 64, "max_metadata_depth": 2}}
    with memroute.open(config, use_env=False, data_dir=str(tmp_path / "d")) as service:
        with pytest.raises(ValidationError, match=r"content: 101 characters.*max_content_chars"):
            service.add(api_key_id="a", content="x" * 101)
        with pytest.raises(ValidationError, match=r"metadata: \d+ bytes.*max_metadata_bytes"):
            service.add(api_key_id="a", content="ok", metadata={"k": "v" * 100})
        with pytest.raises(ValidationError, match=r"metadata: nested 3 levels.*max_metadata_depth"):
            service.add(api_key_id="a", content="ok", metadata={"a": {"b": {"c": 1}}})
        stored = service.add(api_key_id="a", content="x" * 100, metadata={"a": {"b": 1}})
        with pytest.raises(ValidationError, match="max_content_chars"):
            service.update(stored.id, content="y" * 101, **_tenant_kw(service))
        with pytest.raises(ValidationError, match="max_metadata_bytes"):
            service.update(stored.id, metadata={"k": "v" * 100}, **_tenant_kw(service))
        assert service.list(api_key_id="a").total == 1
        _breakers_untouched(service)


def _tenant_kw(service: Any) -> dict[str, str]:
    """``update`` names the tenant once the one-door service contract lands."""
    import inspect

    return {"api_key_id": "a"} if "api_key_id" in inspect.signature(service.update).parameters else {}


@pytest.mark.parametrize("limits", [{"max_content_chars": 0}, {"max_metadata_bytes": 10**9},
                                    {"max_metadata_depth": 33}, {"max_content_chars": "many"}])
def test_limits_out_of_range_are_config_errors(limits):
    with pytest.raises(ConfigError, match="limits"):
        load_settings({"limits": limits}, use_env=False)


# --- configuration -------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [{"path": 123}, {"path": 1.5}, {"path": True}, {"busy_timeout_ms": "soon"}])
def test_a_wrong_option_type_is_a_config_error(tmp_path, options):
    config = {"backends": {"main": {"type": "sqlite", **options}}}
    with pytest.raises(ConfigError, match=r"backends\.main\.\w+: expected"):
        memroute.open(config, use_env=False, data_dir=str(tmp_path / "d"))
    assert not (tmp_path / "123").exists() and not list(tmp_path.glob("1.5*"))


# --- the CLI: one line, exit 2 ---------------------------------------------------------------------------

@pytest.fixture
def run(capsys, monkeypatch):
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")

    def invoke(*args: str, stdin: bytes | str | None = None) -> tuple[int, str, str]:
        if stdin is not None:
            import io

            data = stdin.encode("utf-8", "surrogatepass") if isinstance(stdin, str) else stdin
            monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def _one_line_exit_2(result: tuple[int, str, str], *fragments: str) -> None:
    code, _out, err = result
    assert code == 2, err
    assert err.startswith("memroute: error: ") and err.count("\n") == 1, err
    assert "internal error" not in err and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err


def test_cli_deep_metadata(run):
    deep = "[" * 5000 + "]" * 5000
    _one_line_exit_2(run("add", "--api-key", "a", "--metadata", '{"a": ' + deep + "}", "x"), "--metadata")
    _one_line_exit_2(run("add", "--api-key", "a", "--metadata", json.dumps(_deep(100)), "x"), "metadata")


def test_cli_surrogates_in_argv(run):
    # POSIX argv bytes that are not UTF-8 arrive as lone surrogates (surrogateescape).
    _one_line_exit_2(run("search", "--api-key", "a\udcff", "x"), "api_key_id")
    _one_line_exit_2(run("add", "--api-key", "a", "bad \udcfe content"), "content")
    _one_line_exit_2(run("list", "--api-key", "a", "--query", "q\udcfe"), "query")


def test_cli_augment_stdin_with_a_surrogate_or_deep_json(run):
    body = json.dumps({"messages": [{"role": "user", "content": "hi \ud800"}]})  # json escapes it: "\\ud800"
    _one_line_exit_2(run("augment", "--api-key", "a", stdin=body), "stdin", "surrogate")
    _one_line_exit_2(run("augment", "--api-key", "a", stdin="[" * 5000 + "]" * 5000), "stdin", "deep")
    _one_line_exit_2(run("augment", "--api-key", "a", stdin=b"\xff\xfe{}"), "stdin", "UTF-8")


def test_cli_import_of_random_bytes(run, tmp_path):
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(bytes(range(256)) * 4)
    _one_line_exit_2(run("import", "--all-tenants", str(junk)), "UTF-8", "offset 128")
    _one_line_exit_2(run("import", "--all-tenants", "-", stdin=b"\x80\x81"), "stdin", "UTF-8")


def test_cli_toml_nested_5000_deep(run, tmp_path):
    config = tmp_path / "deep.toml"
    config.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    _one_line_exit_2(run("--config", str(config), "list", "--api-key", "a"), "nested too deeply")


def test_cli_wrong_option_type(run, tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("[backends.main]\ntype = 'sqlite'\npath = 123\n", encoding="utf-8")
    _one_line_exit_2(run("--config", str(config), "list", "--api-key", "a"), "backends.main.path")
    assert not (tmp_path / "123").exists()
