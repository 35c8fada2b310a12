"""``memroute demo``: a scripted conversation on the embedded default (SQLite, the configured embedding
source), with no network and no model. The "assistant" replies are scripted; everything else — extraction,
storage, indexing, retrieval, injection — is the real pipeline."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import click

__all__ = ["DEMO_API_KEY", "DEMO_QUESTION", "DEMO_TURNS", "run_demo"]

DEMO_API_KEY: Final = "demo-user"
DEMO_SYSTEM_PROMPT: Final = "You are a concise senior engineer helping the user plan their project."
DEMO_TURNS: Final[tuple[tuple[str, str], ...]] = (
    ("Hi! I'm starting a new web app. I prefer TypeScript for everything, and I'll use Postgres for this project.",
     "Great choice. TypeScript end to end and Postgres for the data. I always recommend strict mode."),
    ("I always commit before pushing. I hate Python packaging, so no Python services please.",
     "Understood: one language, small commits."),
    ("I'm going with Fly.io for hosting. I never deploy on Fridays.",
     "Fly.io works well for that. Noted about Fridays."),
    ("My favorite is dark roast coffee. I don't like meetings before 10am.",
     "Ha, noted. I'll keep suggestions async."),
)
DEMO_QUESTION: Final = ("Plan the billing service for this project: which database and hosting, any TypeScript "
                         "libraries, and when should I deploy?")


def _heading(text: str) -> None:
    click.echo("")
    click.secho(text, bold=True)
    click.secho("-" * len(text), dim=True)


def _suggest(command: list[str], db: Path) -> str:
    return f"MEMROUTE_DB={shlex.quote(str(db))} " + " ".join(shlex.quote(part) for part in command)


def run_demo(*, config_path: str | None = None, db_path: Path | None = None,
             echo: Callable[[str], Any] = click.echo) -> Path:
    """Run the demo; returns the database path it used."""
    from memroute.config.settings import load_settings
    from memroute.service import Memroute

    db = (db_path or load_settings(config_path).data_path / "demo.db").expanduser().resolve()
    db.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    overrides: dict[str, Any] = {
        "memory": {"enabled": True},
        "backends": {"primary": "main", "fallbacks": [], "main": {"type": "sqlite", "path": str(db)}},
    }
    with Memroute.open(config_path, **overrides) as mem:
        cleared = mem.clear(DEMO_API_KEY).deleted
        click.secho("memroute demo: a scripted conversation, no network, no model", bold=True)
        echo(f"database: {db}" + (f" (cleared {cleared} memories of a previous demo run)" if cleared else ""))
        echo(f"api key:  {DEMO_API_KEY}")

        history: list[dict[str, Any]] = [{"role": "system", "content": DEMO_SYSTEM_PROMPT}]
        for number, (user_text, reply) in enumerate(DEMO_TURNS, start=1):
            _heading(f"Turn {number}")
            echo(f"user:      {user_text}")
            echo(f"assistant: {reply}  (scripted)")
            history.append({"role": "user", "content": user_text})
            request = {"model": "any-model", "messages": list(history)}
            response = {"choices": [{"message": {"role": "assistant", "content": reply}}]}
            stored = mem.observe(request, response, api_key_id=DEMO_API_KEY, session_id="demo", wait=True)
            history.append({"role": "assistant", "content": reply})
            if not stored:
                echo("  extracted: nothing")
            for memory in stored:
                verb = "kept" if memory.key.startswith("turn:") else "extracted"
                echo(f"  {verb}: [{memory.metadata.get('category')}/{memory.type.value}] {memory.key}"
                     f"  ->  {memory.content!r}")
        echo("")
        echo("(the assistant's replies were not mined: \"I always recommend strict mode\" is not a fact about "
             "the user)")
        mem.flush()

        _heading("A later conversation")
        request = {"model": "any-model", "messages": [{"role": "system", "content": DEMO_SYSTEM_PROMPT},
                                                      {"role": "user", "content": DEMO_QUESTION}]}
        echo(f"user: {DEMO_QUESTION}")
        info = mem.explain_augment(request, api_key_id=DEMO_API_KEY)
        preview = info.preview
        if preview is not None:
            r = preview.resolution
            echo(f"retrieval: strategy {r.strategy_requested} -> {r.strategy_used} via {'+'.join(r.legs) or 'none'}"
                 f" on backend {r.backend}" + (f" (degraded: {r.fallback_reason})" if r.degraded else ""))
            echo(f"{'score':>8}  {'tier':<8} {'ranks':<22} memory")
            for hit in preview.memories:
                ranks = ", ".join(f"{leg}#{rank}" for leg, rank in hit.ranks.items())
                echo(f"{hit.score:>8.4f}  {hit.tier:<8} {ranks:<22} [{hit.metadata.get('category')}] {hit.content}")
        if info.skipped:
            echo(f"nothing injected: {info.skipped}")

        _heading("The request that would be sent to the model")
        echo(json.dumps(info.request, ensure_ascii=False, indent=2))

        _heading("Explore")
        echo(f"The demo database is {db}")
        echo("Try:")
        echo("  " + _suggest(["memroute", "search", "hosting", "--api-key", DEMO_API_KEY], db))
        echo("  " + _suggest(["memroute", "list", "--api-key", DEMO_API_KEY], db))
        echo(f"  echo '{json.dumps({'messages': [{'role': 'user', 'content': 'Which hosting should I use?'}]})}' | "
             + _suggest(["memroute", "augment", "--api-key", DEMO_API_KEY], db).replace(
                 "MEMROUTE_DB=", "MEMORY_ENABLED=true MEMROUTE_DB=", 1))
        echo(f"finished in {time.perf_counter() - started:.1f} s")
    return db
