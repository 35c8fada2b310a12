"""``memroute notion init`` / ``check`` read the configured notion backend (token, base_url, database_id);
against the loopback Notion fake with the real notion-client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from memroute_builtins.backends.notion import schema as ns
from tests.servers.notion_fake import NotionFake, running_notion_fake


@pytest.fixture
def fake() -> Iterator[NotionFake]:
    with running_notion_fake() as server:
        yield server


@pytest.fixture(autouse=True)
def _no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTION_TOKEN", raising=False)


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from memroute.cli import main

    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def write_config(path: Path, backends: dict[str, dict[str, str]], primary: str) -> Path:
    lines = ["[backends]", f'primary = "{primary}"']
    for name, options in backends.items():
        lines.append(f"[backends.{name}]")
        lines.extend(f'{key} = "{value}"' for key, value in options.items())
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def notion_table(fake: NotionFake, database_id: str, token: str | None = None) -> dict[str, str]:
    return {"type": "notion", "token": token or fake.token, "base_url": fake.base_url, "database_id": database_id,
            "allow_private": "true"}  # the fake listens on loopback


def test_check_and_init_use_the_configured_token_base_url_and_database(
    fake: NotionFake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = fake.add_database(ns.database_properties())
    config = write_config(tmp_path / "memroute.toml", {"notes": notion_table(fake, db)}, primary="notes")
    code, out, err = run_cli(["--config", str(config), "notion", "check", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["database_id"].replace("-", "") == db.replace("-", "")
    code, out, err = run_cli(["--config", str(config), "notion", "init", "--parent", fake.add_parent_page()], capsys)
    assert code == 0, err
    assert "[backends.notes]" in out  # the snippet names the configured instance
    assert len(fake.databases) == 2


def test_the_token_may_come_from_the_environment_through_the_config(
    fake: NotionFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = fake.add_database(ns.database_properties())
    monkeypatch.setenv("NOTION_TOKEN", fake.token)
    write_config(tmp_path / "memroute.toml", {"notes": notion_table(fake, db, token="${NOTION_TOKEN}")},
                 primary="notes")  # ./memroute.toml: found without --config
    code, out, err = run_cli(["notion", "check"], capsys)
    assert code == 0 and "OK" in out, err


def test_an_option_on_the_command_line_beats_the_config(
    fake: NotionFake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = fake.add_database(ns.database_properties())
    config = write_config(tmp_path / "c.toml", {"notes": notion_table(fake, db)}, primary="notes")
    code, _, err = run_cli(["--config", str(config), "notion", "check", "--token", "wrong"], capsys)
    assert code == 1 and "check `token`" in err and "Traceback" not in err
    code, _, err = run_cli(["--config", str(config), "notion", "check", "--database", "1" * 32], capsys)
    assert code in (1, 2) and "Traceback" not in err


def test_several_notion_backends_need_a_choice(
    fake: NotionFake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = fake.add_database(ns.database_properties())
    config = write_config(tmp_path / "c.toml", {
        "main": {"type": "sqlite", "path": str(tmp_path / "m.db")},
        "a": notion_table(fake, "1" * 32),
        "b": notion_table(fake, good),
    }, primary="main")
    code, _, err = run_cli(["--config", str(config), "notion", "check"], capsys)
    assert code == 2 and "several notion backends are configured (a, b)" in err and "--backend" in err
    code, out, err = run_cli(["--config", str(config), "notion", "check", "--backend", "b"], capsys)
    assert code == 0 and "OK" in out, err
    code, _, err = run_cli(["--config", str(config), "notion", "check", "--backend", "main"], capsys)
    assert code == 2 and "no notion backend of that name" in err


def test_without_a_configured_backend_the_database_is_required(
    fake: NotionFake, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(["notion", "check", "--token", fake.token, "--base-url", fake.base_url], capsys)
    assert code == 2 and "give --database" in err
