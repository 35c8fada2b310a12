"""Property-based: the Python API under hostile strings (surrogates, NULs, control characters, huge and
deeply nested values) gives only typed errors, never a partial write, and never touches a breaker."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memroute
from memroute.errors import MemrouteError, ValidationError

HOSTILE_CHARS = st.sampled_from(["\x00", "\ud800", "\udfff", "\x01", "\x1b", "\x7f", "\u202e", "\ufeff", "\n",
                                 "é", "🐍", "a", " ", '"', "*", "(", ":"])
HOSTILE_TEXT = st.one_of(
    st.text(HOSTILE_CHARS, max_size=40),
    st.text(max_size=40),  # hypothesis' own text includes surrogates
    st.just("x" * 1_100_000),
)


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


METADATA = st.one_of(
    st.none(),
    st.dictionaries(HOSTILE_TEXT.filter(lambda t: len(t) < 100), HOSTILE_TEXT.filter(lambda t: len(t) < 100),
                    max_size=3),
    st.integers(min_value=1, max_value=2000).map(lambda d: {"deep": _nested(d)}),
    st.just({"big": "y" * 2_000_000}),
)

FIELDS = st.fixed_dictionaries({
    "api_key_id": st.one_of(st.just("tenant"), HOSTILE_TEXT.filter(lambda t: len(t) < 300)),
    "content": HOSTILE_TEXT,
    "key": st.one_of(st.none(), HOSTILE_TEXT.filter(lambda t: len(t) < 600)),
    "session_id": st.one_of(st.none(), HOSTILE_TEXT.filter(lambda t: len(t) < 300)),
    "metadata": METADATA,
})


@pytest.fixture(scope="module")
def mem(tmp_path_factory):
    data = tmp_path_factory.mktemp("hostile")
    config = {"data_dir": str(data), "embedding": {"source": "none"}, "vectors": {"store": "none"},
              "manager": {"health_interval_s": 0}}
    with memroute.open(config, use_env=False) as service:
        yield service


def _breakers_closed(service: Any) -> None:
    manager = service._manager
    for backend in manager.backends:
        breaker = manager.breaker(backend.name)
        assert breaker.state == "closed" and breaker.consecutive_failures == 0, breaker.last_error


def _everything(service: Any) -> int:
    return sum(1 for _ in service.export_all())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(fields=FIELDS)
def test_add_gives_a_memory_or_a_validation_error(mem, fields):
    before = _everything(mem)
    try:
        memory = mem.add(**fields)
    except ValidationError:
        assert _everything(mem) == before, "a refused add left a partial write"
    else:
        got = mem.get(memory.id, api_key_id=memory.api_key_id)
        assert got is not None and got.content == fields["content"]
    _breakers_closed(mem)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=HOSTILE_TEXT.filter(lambda t: len(t) < 200_000), tenant=HOSTILE_TEXT.filter(lambda t: len(t) < 300),
       strategy=st.sampled_from(["exact", "semantic", "hybrid", "recent"]))
def test_search_and_list_give_results_or_a_validation_error(mem, query, tenant, strategy):
    for call in (lambda: mem.search(query, api_key_id=tenant, strategy=strategy),
                 lambda: mem.list(api_key_id=tenant, query=query)):
        try:
            call()
        except ValidationError:
            pass
        except MemrouteError as exc:  # any other memroute error would be a backend failure: not allowed
            pytest.fail(f"{type(exc).__name__}: {exc}")
    _breakers_closed(mem)
