"""memroute.server.jsondepth: the JSON nesting measured on the raw bytes agrees with the parsed value's depth, for
generated documents whose strings hold brackets, quotes and escapes; and the process logging of ``memroute serve``
(memroute.config.logs) is memroute's own, never a dependency's."""

from __future__ import annotations

import io
import json
import logging
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from memroute.config.limits import json_depth
from memroute.server.jsondepth import json_nesting_exceeds

TRICKY_TEXT = st.text(alphabet='[]{}"\\ab\u00e9\U0001f600', max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TRICKY_TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TRICKY_TEXT, children, max_size=3),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.integers(min_value=0, max_value=12), st.booleans())
def test_the_byte_scan_agrees_with_the_parsed_depth(value, limit, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert json_nesting_exceeds(text, limit) == (json_depth(value) > limit)


def test_deep_bodies_are_caught_without_recursion():
    assert json_nesting_exceeds(b'{"q":' + b"[" * 100_000 + b"]" * 100_000 + b"}", 64)
    assert json_nesting_exceeds(b"[" * 65, 64)  # unterminated: still too deep before any parser sees it
    assert not json_nesting_exceeds(b"[" * 64 + b"]" * 64, 64)
    assert not json_nesting_exceeds(b'["' + b"[" * 1000 + b'"]', 64)  # inside a string
    assert not json_nesting_exceeds(b'["\\"' + b"[" * 1000 + b'"]', 64)  # an escaped quote ends no string


def test_building_the_mcp_server_leaves_the_root_logger_alone(monkeypatch):
    from memroute.server.mcp import build_mcp_server

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.CRITICAL)

    from memroute.config.settings import MemrouteSettings

    class NoService:  # the tools only bind it; the aliases' switch is read from its settings
        settings = MemrouteSettings()

    build_mcp_server(NoService(), lambda: None)  # type: ignore[arg-type]
    assert root.handlers == [] and root.level == logging.CRITICAL


def test_install_logging_formats_tracebacks_on_its_own_thread():
    from memroute.config.logs import OffThreadQueueHandler, install_logging

    formatted_on: list[str] = []

    class Recording(logging.Formatter):
        def formatException(self, ei):
            formatted_on.append(threading.current_thread().name)
            return super().formatException(ei)

    root = logging.getLogger()
    saved = list(root.handlers), root.level
    stream = io.StringIO()
    try:
        listener = install_logging("INFO", stream=stream)
        assert [type(h) for h in root.handlers] == [OffThreadQueueHandler]
        listener.handlers[0].setFormatter(Recording("%(levelname)s %(name)s: %(message)s"))
        try:
            raise RecursionError("deep")
        except RecursionError:
            logging.getLogger("memroute.server").exception("unhandled error on %s", "POST /x")
        listener.stop()
    finally:
        from memroute.config import logs

        logs._listener = None
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    text = stream.getvalue()
    assert text.startswith("ERROR memroute.server: unhandled error on POST /x\nTraceback")
    assert "RecursionError: deep" in text
    assert formatted_on and threading.current_thread().name not in formatted_on
