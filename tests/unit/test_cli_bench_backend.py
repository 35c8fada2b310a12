"""``memroute bench --backend postgres`` refuses incomplete options with one clear line, before any work (the
run itself, against a real PostgreSQL, is tests/bench/test_postgres_bench.py)."""

from __future__ import annotations

import pytest

from memroute.cli import main


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def test_postgres_needs_a_dsn(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMROUTE_BENCH_DSN", raising=False)
    code, err = _run(capsys, "bench", "--backend", "postgres", "--quick")
    assert code == 2 and "--dsn" in err and "Traceback" not in err


def test_postgres_and_http_do_not_mix(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "bench", "--backend", "postgres", "--dsn", "postgresql://127.0.0.1:1/x", "--http")
    assert code == 2 and "--http" in err


def test_an_unknown_backend_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "bench", "--backend", "qdrant")
    assert code == 2 and "qdrant" in err
