"""``memroute bench --learning``: what ``observe`` learns, measured two ways on held-out data.

1. **Extraction** on the labelled sentences of :mod:`memroute.bench.statements`: precision and recall per category
   of the ``everyday`` extractor (a fact counts when it lands in the expected slot family and keeps the expected
   word) beside the reference's ``regex`` extractor (counted leniently: the expected word anywhere in a fact's
   content, since it has no slots).
2. **End to end** on the multi-session conversations of :mod:`memroute.bench.learning_data`: every user turn goes
   through ``observe`` (or, for the ceiling, straight into the store with ``add``), every question through hybrid
   ``search``; R@k is the share of questions whose evidence turn (the message itself, or a fact extracted from it)
   is in the top k (3, 5, 10).

Everything runs through the public service on fresh data directories; the docs report the ``test`` split.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from memroute.bench.learning_data import CHATTER, PEOPLE
from memroute.bench.statements import STATEMENTS, Statement

__all__ = ["MODES", "conversation_turns", "extraction_table", "learning_table", "run_learning", "score_extraction"]

MODES: dict[str, dict[str, Any]] = {
    "direct": {},
    "observe": {"extractors": ["everyday"], "keep_turns": "salient"},
    "observe, facts only": {"extractors": ["everyday"], "keep_turns": "none"},
    "regex (old)": {"extractors": ["regex"], "keep_turns": "none"},
}
"""``direct`` stores every user turn with ``add`` (the ceiling); the others are ``[extraction]`` settings for
``observe``: the default, the default without the messages themselves, and the reference's extractor."""
_START = datetime(2026, 1, 5, 18, 0, tzinfo=timezone.utc)


def score_extraction(extract: Callable[[str], Sequence[Any]], statements: Sequence[Statement], split: str, *,
                     lenient: bool = False) -> dict[str, dict[str, int]]:
    """``{category: {n, tp, fp, fn}}`` of ``extract`` on the ``split`` sentences. A fact matches an expectation
    when its content keeps the expected word and (unless ``lenient``) its key starts with the expected prefix;
    every fact matching nothing is a false positive (all of them, for a sentence that must store nothing)."""
    rows: dict[str, dict[str, int]] = defaultdict(lambda: {"n": 0, "tp": 0, "fp": 0, "fn": 0})
    for statement in statements:
        if statement.split != split:
            continue
        facts = list(extract(statement.text))
        row = rows[statement.category]
        row["n"] += 1
        used: set[int] = set()
        for expected in statement.expected:
            hit = next((i for i, fact in enumerate(facts) if i not in used
                        and expected.word.casefold() in fact.content.casefold()
                        and (lenient or fact.key.startswith(expected.key_prefix))), None)
            if hit is None:
                row["fn"] += 1
            else:
                used.add(hit)
                row["tp"] += 1
        row["fp"] += len(facts) - len(used)
    return dict(rows)


def conversation_turns(person: str, evidence: Sequence[tuple[str, str]], filler: Sequence[str], *,
                       sessions: int = 4) -> list[tuple[str, str, datetime, int | None]]:
    """``(text, session id, said at, evidence index or None)`` for each user turn of ``person``: the evidence in
    order over ``sessions`` sessions a week apart, with the shared chatter and ``filler`` mixed in
    deterministically."""
    rng = random.Random(person)
    turns: list[tuple[str, str, datetime, int | None]] = []
    per_session = -(-len(evidence) // sessions)
    filler_per_session = -(-len(filler) // sessions) if filler else 0
    for number in range(sessions):
        mine: list[tuple[str, int | None]] = [
            (text, index) for index, (text, _q) in enumerate(evidence)
            if number * per_session <= index < (number + 1) * per_session]
        others: list[tuple[str, int | None]] = [(text, None) for text in rng.sample(CHATTER, 6)]
        others += [(text, None) for text in filler[number * filler_per_session:(number + 1) * filler_per_session]]
        rng.shuffle(others)
        # Evidence keeps its order; the others fall around it.
        slots = sorted(rng.sample(range(len(others) + len(mine)), len(mine)))
        merged: list[tuple[str, int | None]] = []
        mine_iter, others_iter = iter(mine), iter(others)
        for position in range(len(others) + len(mine)):
            merged.append(next(mine_iter) if position in slots else next(others_iter))
        day = _START + timedelta(days=7 * number)
        for offset, (text, index) in enumerate(merged):
            turns.append((text, f"{person}-{number + 1}", day + timedelta(minutes=offset), index))
    return turns


def split_of_person(person: str) -> str:
    """Users alternate between ``dev`` and ``test`` in name order."""
    return "dev" if sorted(PEOPLE).index(person) % 2 == 0 else "test"


def run_learning(open_fresh: Callable[[Path, dict[str, Any]], Any], root: Path, *,
                 filler: dict[str, list[str]] | None = None,
                 progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run both measurements. ``open_fresh(path, extraction)`` opens the service on a fresh data directory with
    those ``[extraction]`` settings; ``filler``: real chat turns per user (``quality.chat_distractors``)."""
    say = progress or (lambda _m: None)
    report: dict[str, Any] = {"extraction": {}, "conversations": {}}
    for name, extraction in (("everyday", {"extractors": ["everyday"]}), ("regex", {"extractors": ["regex"]})):
        with open_fresh(root / f"extract-{name}", extraction) as mem:
            for split in ("dev", "test"):
                report["extraction"].setdefault(split, {})[name] = score_extraction(
                    mem.extract, STATEMENTS, split, lenient=name == "regex")
    filler = filler or {}
    turns = {person: conversation_turns(person, evidence, filler.get(person, ()))
             for person, evidence in PEOPLE.items()}
    report["turns"] = sum(len(t) for t in turns.values())
    for mode, extraction in MODES.items():
        say(f"{mode}: {report['turns']} turns of {len(PEOPLE)} users")
        with open_fresh(root / f"e2e-{len(report['conversations'])}", extraction or {"keep_turns": "none"}) as mem:
            report["conversations"][mode] = _conversation_recall(mem, mode, turns)
    return report


def _conversation_recall(mem: Any, mode: str, turns: dict[str, list[tuple[str, str, datetime, int | None]]]
                         ) -> dict[str, dict[str, float]]:
    origin: dict[str, int] = {}  # memory id -> the turn it holds now (an upsert moves a slot to the newer turn)
    for person, person_turns in turns.items():
        for position, (text, session, said, _evidence) in enumerate(person_turns):
            if mode == "direct":
                memories = [mem.add(api_key_id=person, content=text, key=f"turn:{position}", session_id=session,
                                    type="episodic", metadata={"said_at": said.isoformat()})]
            else:
                memories = mem.observe({"messages": [{"role": "user", "content": text}]}, api_key_id=person,
                                       session_id=session, said_at=said, wait=True)
            for memory in memories:
                origin[memory.id] = position
    mem.flush()
    stored = {person: sum(1 for _ in mem.export(person)) for person in turns}
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for person, person_turns in turns.items():
        split = split_of_person(person)
        evidence_at = {index: position for position, (*_rest, index) in enumerate(person_turns) if index is not None}
        for index, (_text, question) in enumerate(PEOPLE[person]):
            hits = mem.search(question, api_key_id=person, strategy="hybrid", limit=10, record_access=False).hits
            positions = [origin.get(hit.memory.id) for hit in hits]
            rank = positions.index(evidence_at[index]) + 1 if evidence_at[index] in positions else None
            row = sums[split]
            row[0] += 1
            row[1] += rank is not None and rank <= 3
            row[2] += rank is not None and rank <= 5
            row[3] += rank is not None
    out = {split: {"questions": int(n), "R@3": r3 / n, "R@5": r5 / n, "R@10": r10 / n}
           for split, (n, r3, r5, r10) in sums.items()}
    for split in out:
        people = [p for p in turns if split_of_person(p) == split]
        out[split]["memories per user"] = sum(stored[p] for p in people) / len(people)
        out[split]["turns per user"] = sum(len(turns[p]) for p in people) / len(people)
    return out


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}" if b else "-"


def _cells(row: dict[str, int]) -> str:
    """Precision and recall cells of one row."""
    return f"{_ratio(row['tp'], row['tp'] + row['fp'])} | {_ratio(row['tp'], row['tp'] + row['fn'])}"


def extraction_table(report: dict[str, Any], split: str = "test") -> str:
    """Markdown: precision and recall per category, ``everyday`` beside ``regex``."""
    rows = report["extraction"][split]
    lines = ["| category | sentences | everyday precision | everyday recall | regex precision | regex recall |",
             "|---|---|---|---|---|---|"]
    empty = {"n": 0, "tp": 0, "fp": 0, "fn": 0}
    totals = {name: dict(empty) for name in rows}
    for category in sorted(rows["everyday"], key=lambda c: (c == "none", c)):
        ours, theirs = rows["everyday"][category], rows["regex"].get(category, empty)
        for name, row in (("everyday", ours), ("regex", theirs)):
            for field in totals[name]:
                totals[name][field] += row[field]
        if category == "none":
            lines.append(f"| none (must store nothing) | {ours['n']} | {ours['fp']} stored | | "
                         f"{theirs['fp']} stored | |")
        else:
            lines.append(f"| {category} | {ours['n']} | {_cells(ours)} | {_cells(theirs)} |")
    ours, theirs = totals["everyday"], totals["regex"]
    lines.append(f"| **all** | {ours['n']} | {_cells(ours)} | {_cells(theirs)} |")
    return "\n".join(lines)


def learning_table(report: dict[str, Any], split: str = "test") -> str:
    """Markdown: R@5 / R@10 of the evidence turns per mode."""
    lines = ["| what is stored | memories per user | R@3 | R@5 | R@10 |", "|---|---|---|---|---|"]
    for mode, splits in report["conversations"].items():
        row = splits[split]
        lines.append(f"| {mode} | {row['memories per user']:.0f} of {row['turns per user']:.0f} turns | "
                     f"{row['R@3']:.2f} | {row['R@5']:.2f} | {row['R@10']:.2f} |")
    questions = next(iter(report["conversations"].values()))[split]["questions"]
    return "\n".join(lines) + f"\n\n({questions} questions, {split} split)"
