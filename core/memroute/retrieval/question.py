"""Time and people in a question: what a conversation-shaped question says besides its topic.

"What did I say yesterday about the trip?" names a **time**: the memories said yesterday (their *event time*,
:attr:`memroute.models.Memory.said_at`, else ``created_at``) are the ones it asks about. "What did Maria say
about the move?" names a **person**: the memories Maria said (``metadata.speaker``), or that name her, are.
:func:`read_question` reads both, offline and by rule (English), relative to a ``now``; the retrieval engine
then searches for the question *without* its time words (so "yesterday" or "last week" do not pull in memories
that merely contain those words) and :func:`prefer` moves the memories that fit the time and the person up its
ranking, without hiding a clear match that does not fit (see :data:`PREFER`).

The grammar of a time (case-insensitive; days begin at midnight in ``now``'s time zone, weeks on Monday; a
search's :attr:`~memroute.models.SearchQuery.now` is UTC, so a search's days are UTC days):

========================================================  ==============================================
``today``, ``tonight``, ``this morning`` / ``afternoon`` /  today
``evening``
``yesterday`` (``morning`` …), ``last night``               yesterday
``the day before yesterday``                                the day before yesterday
``N days`` / ``weeks`` / ``months`` / ``years ago``         the day / week / month / year holding ``now``
                                                            minus N of them (N: digits, ``a``, ``one`` …
                                                            ``twelve``, ``a couple of``, ``a few``)
``last`` / ``this week`` (``month``, ``year``)              the previous / current calendar week …
``last weekend``, ``this weekend``, ``over the weekend``    the latest Saturday and Sunday
``in`` / ``over`` / ``during the last`` / ``past N days``   the N days (weeks …) up to ``now``
(``weeks`` …), ``the past week``
``on Monday``, ``Monday``, ``last Monday``                  the latest Monday (``last``: before today; a
                                                            lowercase ``monday`` only after ``on`` / ``last``)
``in March``, ``last March``, ``March 2026``                that month (without a year: the latest March
                                                            that has begun; ``last``: before this month)
``in 2025``, ``during 2025``                                that year
``on 2026-03-02``, ``on March 2(nd)``, ``on 2 March 2026``  that day (without a year: the latest one)
``since`` before any of these                               from its start up to ``now``
========================================================  ==============================================

Several times in one question make one window from the earliest start to the latest end. A time that could be a
plan ("today", "this week", "on Monday", "in June", a date) is read only in a question about the past, one with a
verb like *did*, *was*, *said* or *happened*: "build me a plan for this week" and "what's due in June?" are
searched word for word; "yesterday", "ago", "last …", "the past …" and "since …" always name the past. Text
that only looks like a time (``2026-02-30``, ``in 1200``) is left as it is, as words.

A **person** is a capitalised word of the question that is not its sentence's first word, a question word, a
month or a weekday ("Maria", "Ana" in "what does my daughter Ana like"; a possessive ``'s`` is dropped; the first
:data:`MOST_NAMES`), or any word of the question that is a memory's ``metadata.speaker`` (so "what did maria
say" finds Maria's messages too). A memory fits when its speaker is one of those words or its content names one
of the capitalised ones, case-insensitive and as a whole word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, datetime, time, timedelta, timezone
from typing import Final

import attrs

from memroute.models import Memory, SearchHit
from memroute.retrieval.fusion import STOP_WORDS, content_terms

__all__ = [
    "FILLER", "MOST_NAMES", "PREFER", "QuestionCues", "TimeWindow", "event_time", "fitting", "prefer", "read_question",
]

PREFER: Final = 8.0
"""How far a memory that fits the question's time (or person) moves up the ranking: its position is divided by
this, once for the time and once for the person. A fitting memory at rank 12 is ranked as if 1.5th: ahead of
the non-fitting ones from 2nd down, behind a clear match at 1st. Chosen on the conversation benchmark's dev
questions (2, 4, 8 and 16 tried: 8 and 16 were best, 8 moves less; docs/performance.md reports the test
split)."""
MOST_NAMES: Final = 8
"""The capitalised words read as names, at most (a long message pasted as a query names no one in particular;
each name costs a test of every candidate)."""
FILLER: Final = frozenset({"say", "said", "saying", "tell", "told", "talk", "talked", "talking", "mention",
                           "mentioned", "ask", "asked", "write", "wrote", "written", "discuss", "discussed",
                           "happen", "happened", "up"})
"""Words that ask what was said, not about what: a question of only these, people and a time is open-ended."""

_MONTHS: Final = {
    name: number for number, names in enumerate((
        ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
        ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"),
        ("november", "nov"), ("december", "dec")), start=1) for name in names
}
_WEEKDAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS: Final = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                   "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2,
                   "a few": 3, "few": 3}
_MOST_DAYS: Final = 36_500
"""A span further back than this (a hundred years) is not read as a time."""

_MONTH = r"(?P<month>" + "|".join(sorted((m for m in _MONTHS if m != "may"), key=len, reverse=True)) + r"|may)"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{4})"
_COUNT = r"(?P<count>\d{1,5}|" + "|".join(sorted(map(re.escape, _NUMBERS), key=len, reverse=True)) + r")"
_UNIT = r"(?P<unit>day|week|month|year)s?"
_SINCE = r"(?P<since>since\s+)?"
_PATTERNS: Final = tuple((kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in (
    ("iso", _SINCE + r"(?:on\s+)?\b(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})\b"),
    ("day_month", _SINCE + r"(?:on\s+)?\b(?:the\s+)?" + _DAY + r"\s+(?:of\s+)?" + _MONTH + r"\b(?:,?\s+" + _YEAR
     + r"\b)?"),
    ("month_day", _SINCE + r"(?:on\s+)?\b" + _MONTH + r"\s+" + _DAY + r"\b(?:,?\s+" + _YEAR + r"\b)?"),
    ("before_yesterday", _SINCE + r"\bthe\s+day\s+before\s+yesterday\b"),
    ("ago", _SINCE + r"\b" + _COUNT + r"\s+" + _UNIT + r"\s+ago\b"),
    ("rolling", r"\b(?:in|over|during|within|for)\s+the\s+(?:last|past|previous)\s+(?:" + _COUNT + r"\s+)?"
     + _UNIT + r"\b"),
    ("rolling", r"\bthe\s+(?:last|past)\s+(?:" + _COUNT + r"\s+)?" + _UNIT + r"\b"),
    ("weekend", _SINCE + r"\b(?:(?P<which>last|this|over\s+the|on\s+the|at\s+the)\s+)weekend\b"),
    ("calendar", _SINCE + r"\b(?P<which>last|this|previous)\s+(?P<unit>week|month|year)\b"),
    ("weekday", _SINCE + r"\b(?:(?P<which>last|on)\s+)?(?P<weekday>" + "|".join(_WEEKDAYS) + r")\b"),
    ("month", _SINCE + r"\b(?:(?P<which>in|during|last|this)\s+)" + _MONTH + r"\b(?:,?\s+" + _YEAR + r"\b)?"),
    ("month", _SINCE + r"\b" + _MONTH + r",?\s+" + _YEAR + r"\b"),
    ("year", _SINCE + r"\b(?:in|during|since)\s+" + _YEAR + r"\b"),
    ("named_day", _SINCE + r"\b(?:(?P<part>today|tonight|yesterday)(?:\s+(?:morning|afternoon|evening|night))?"
     r"|this\s+(?:morning|afternoon|evening)|last\s+night)\b"),
))
_DIGIT: Final = re.compile(r"\d")
_TRIGGERS: Final = frozenset({"today", "tonight", "yesterday", "ago", "last", "this", "past", "previous",
                               "weekend", "since", "during", *_WEEKDAYS, *_MONTHS})
"""A cheap test before the patterns: most questions name no time."""
_PAST: Final = re.compile(
    r"\b(?:did|didn't|was|wasn't|were|weren't|had|hadn't|said|told|mentioned|talked|spoke|asked|wrote|happened|"
    r"went|came|saw|met|got|made|bought|started|finished|ate|took|been|discussed|decided|shared|sent|heard|felt|"
    r"thought|learned|learnt|visited|moved|booked|tried|called|watched|read|cooked|played)\b", re.IGNORECASE)
"""Words of a question about the past: a time that could also be a plan ("on Monday", "in June", "this week")
is read only in a question that has one ("what did I say on Monday")."""
_CAPITALISED: Final = re.compile(r"(?<![\w'\u2019])([A-Z][\w]*(?:[-'\u2019][A-Za-z]+)*)")
_SENTENCE_END: Final = re.compile(r"(?:^|[.!?:;\n])[\s\W]*")
_WORD: Final = re.compile(r"[\w']+")
_NOT_NAMES: Final = frozenset({*STOP_WORDS, *_MONTHS, *_WEEKDAYS, "i", "ok", "okay"})


@attrs.frozen(kw_only=True)
class TimeWindow:
    """A span of time a question names: ``start`` (included) to ``end`` (excluded), aware datetimes."""

    start: datetime
    end: datetime
    phrases: tuple[str, ...]
    """The words of the question that named it ("last week")."""

    def holds(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


@attrs.frozen(kw_only=True)
class QuestionCues:
    """What :func:`read_question` found in a question."""

    text: str
    """The question without its time phrases: what the keyword and vector legs match."""
    window: TimeWindow | None = None
    names: tuple[str, ...] = ()
    """Capitalised words that may name a person (possessive dropped), as written."""
    words: frozenset[str] = frozenset()
    """Every content word of the question, case-folded (a memory's speaker among them fits the question)."""
    open_ended: bool = False
    """Nothing to match but a time or people ("what did I say yesterday?", "what did Maria say?"): the answer
    is the memories that fit, newest first."""
    _name_pattern: re.Pattern[str] | None = attrs.field(default=None, repr=False, eq=False)

    @property
    def any(self) -> bool:
        """Whether the question names a time or a possible person at all."""
        return self.window is not None or bool(self.words)

    def in_window(self, memory: Memory) -> bool:
        return self.window is not None and self.window.holds(event_time(memory))

    def names_person(self, memory: Memory) -> bool:
        """Whether ``memory`` was said by a person the question names, or names one itself."""
        if self.said_by(memory):
            return True
        return self._name_pattern is not None and self._name_pattern.search(memory.content) is not None

    def said_by(self, memory: Memory) -> bool:
        """Whether ``memory`` was said by a person the question names."""
        speaker = memory.metadata.get("speaker")
        return isinstance(speaker, str) and speaker.casefold() in self.words

    def fits(self, memory: Memory) -> int:
        """How many of the question's cues (time, person) ``memory`` fits: 0, 1 or 2."""
        return int(self.in_window(memory)) + int(bool(self.words) and self.names_person(memory))


def event_time(memory: Memory) -> datetime:
    """When what ``memory`` holds happened: when it was said (``metadata.said_at``), else when it was stored."""
    return memory.said_at or memory.created_at


def read_question(text: str, now: datetime) -> QuestionCues:
    """The time and the people ``text`` names, relative to ``now`` (an aware datetime: calendar days are
    ``now``'s), and the text the legs should match; see the module docstring for the grammar."""
    if now.tzinfo is None or now.utcoffset() is None:
        now = now.replace(tzinfo=timezone.utc)
    folded = _WORD.findall(text.casefold())
    window, rest = _read_time(text, now, folded)
    if window is not None:
        folded = _WORD.findall(rest.casefold())
    words = {w for w in folded if w not in _NOT_NAMES}
    words.update([w[:-2] for w in words if w.endswith(("'s", "\u2019s"))])
    names = _names(rest)
    if window is None and not names:  # most questions: no time, no capitalised name; speakers may still fit
        return QuestionCues(text=rest, words=frozenset(words))
    folded_names = {name.casefold().rstrip("s") or name.casefold() for name in names}
    topic = content_terms(rest) - FILLER - folded_names
    pattern = re.compile(r"(?<![\w'])(?:" + "|".join(re.escape(n) for n in names) + r")(?![\w])",
                         re.IGNORECASE) if names else None
    return QuestionCues(text=rest, window=window, names=names, words=frozenset(words),
                        open_ended=not topic, name_pattern=pattern)


def prefer(hits: list[SearchHit], cues: QuestionCues) -> list[SearchHit]:
    """``hits`` (best first) with those that fit the question's time and person moved up: a hit's position is
    divided by :data:`PREFER` once per cue it fits (ties keep the original order). The hits that fit gain
    ``leg_scores["time"]`` / ``["person"]`` = 1.0 (their dicts are updated: ``hits`` must be the caller's own, as
    fusion's are), so a preview shows why they moved. ``hits`` itself when none fits (one metadata look-up per
    hit)."""
    if not hits or not cues.any:
        return hits
    window, words, pattern = cues.window, cues.words, cues._name_pattern
    lowered = tuple(name.lower() for name in cues.names)
    speakers: dict[object, bool] = {}  # a conversation has few speakers: each is looked up in ``words`` once
    fits: list[tuple[int, int, int]] = []  # (position, fits the time, fits the person) of the hits that fit
    for position, hit in enumerate(hits, start=1):
        memory = hit.memory
        speaker = memory.metadata.get("speaker")
        person = speakers.get(speaker)
        if person is None:
            person = speakers[speaker] = isinstance(speaker, str) and speaker.casefold() in words
        if not person and pattern is not None:
            content = memory.content
            folded = content.lower()
            person = any(name in folded for name in lowered) and pattern.search(content) is not None
        in_window = window is not None and window.holds(memory.said_at or memory.created_at)
        if person or in_window:
            fits.append((position, int(in_window), int(person)))
    if not fits:
        return hits
    keys = [(float(position), position) for position in range(1, len(hits) + 1)]
    for position, timely, named in fits:
        keys[position - 1] = (position / PREFER ** (timely + named), position)
        # The hits are this search's own (fusion made them): marked in place, not copied (half the candidates
        # of a two-person conversation fit a named speaker, and a copy each cost more than the reading).
        scores = hits[position - 1].leg_scores
        if timely:
            scores["time"] = 1.0
        if named:
            scores["person"] = 1.0
    return [hits[position - 1] for _, position in sorted(keys)]


# --- time ------------------------------------------------------------------------------------------------

def _read_time(text: str, now: datetime, folded: list[str]) -> tuple[TimeWindow | None, str]:
    if _TRIGGERS.isdisjoint(folded) and _DIGIT.search(text) is None:
        return None, text
    past = _PAST.search(text) is not None
    spans: list[tuple[int, int]] = []
    windows: list[tuple[datetime, datetime, str]] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            if any(start < match.end() and match.start() < end for start, end in spans):
                continue  # a part of a time already read ("March" in "on March 2")
            span = _window(kind, match, now)
            if span is None or not (past or _always_past(kind, match)):
                continue  # "plan my week for this Saturday", "what's due in June": not a time something was said
            start, end = span
            if match.groupdict().get("since") or match.group(0).casefold().startswith("since"):
                end = max(end, now + timedelta(microseconds=1))
            spans.append((match.start(), match.end()))
            windows.append((start, end, match.group(0).strip()))
    if not windows:
        return None, text
    rest = text
    for first, last in sorted(spans, reverse=True):
        rest = rest[:first] + " " + rest[last:]
    rest = re.sub(r"\s+([?.!,;:])", r"\1", " ".join(rest.split()))
    ordered = sorted(windows)
    return TimeWindow(start=ordered[0][0], end=max(w[1] for w in windows),
                      phrases=tuple(w[2] for w in windows)), rest


def _window(kind: str, match: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:
    groups = match.groupdict()
    today = now.date()
    zone = now.tzinfo
    try:
        if kind == "iso":
            return _days(date(int(groups["year"]), int(groups["month"]), int(groups["day"])), 1, zone)
        if kind in ("day_month", "month_day"):
            month, day = _MONTHS[groups["month"].casefold()], int(groups["day"])
            if groups.get("year"):
                return _days(date(int(groups["year"]), month, day), 1, zone)
            this_year = _valid_date(today.year, month, day)
            chosen = this_year if this_year is not None and this_year <= today else _valid_date(today.year - 1,
                                                                                                   month, day)
            return None if chosen is None else _days(chosen, 1, zone)
        if kind == "before_yesterday":
            return _days(today - timedelta(days=2), 1, zone)
        if kind == "named_day":
            said = match.group(0).casefold().removeprefix("since").strip()
            back = 1 if said.startswith(("yesterday", "last")) else 0
            return _days(today - timedelta(days=back), 1, zone)
        if kind == "ago":
            count, unit = _count(groups["count"]), groups["unit"].casefold()
            if count is None or _too_far(count, unit):
                return None
            return _unit_holding(_back(today, count, unit), unit, zone)
        if kind == "rolling":
            count = 1 if groups.get("count") is None else _count(groups["count"])
            unit = groups["unit"].casefold()
            if count is None or _too_far(count, unit):
                return None
            since = _back(today, count, unit)
            moment = datetime.combine(since, now.timetz()) if unit != "day" else now - timedelta(days=count)
            return moment, now + timedelta(microseconds=1)
        if kind == "weekend":
            which = (groups.get("which") or "").casefold()
            saturday = today - timedelta(days=(today.weekday() - 5) % 7)
            if which == "last" and today.weekday() >= 5:
                saturday -= timedelta(days=7)
            return _days(saturday, 2, zone)
        if kind == "calendar":
            unit, which = groups["unit"].casefold(), groups["which"].casefold()
            anchor = today if which == "this" else _back(today, 1, unit)
            return _unit_holding(anchor, unit, zone)
        if kind == "weekday":
            which = (groups.get("which") or "").casefold()
            back = (today.weekday() - _WEEKDAYS.index(groups["weekday"].casefold())) % 7
            if which == "last" and back == 0:
                back = 7
            if not which and not groups["weekday"][0].isupper():
                return None  # a bare lowercase weekday is read only after "on", "last" or "this"
            return _days(today - timedelta(days=back), 1, zone)
        if kind == "month":
            month = _MONTHS[groups["month"].casefold()]
            which = (groups.get("which") or "").casefold()
            if groups["month"].casefold() == "may" and groups["month"][0] != "M" and not groups.get("year"):
                return None  # "in may" is more often the verb than the month; "in May" is the month
            if groups.get("year"):
                year = int(groups["year"])
            elif which == "last":
                year = today.year if month < today.month else today.year - 1
            else:
                year = today.year if month <= today.month else today.year - 1
            return _unit_holding(date(year, month, 1), "month", zone)
        if kind == "year":
            year = int(groups["year"])
            return None if not 1900 <= year <= 2100 else _unit_holding(date(year, 1, 1), "year", zone)
    except (ValueError, OverflowError):
        return None  # "2026-02-30", a year out of range: words, not a time
    return None


def _always_past(kind: str, match: re.Match[str]) -> bool:
    """Whether the phrase names the past whatever the question's verbs ("yesterday", "two weeks ago", "last
    month", "since March"); "today", "this week", "on Monday" or "in June" may be a plan."""
    said = match.group(0).casefold()
    if said.startswith("since") or kind in ("ago", "rolling", "before_yesterday"):
        return True
    return kind in ("named_day", "calendar", "weekend", "weekday", "month") and said.startswith(("yesterday",
                                                                                                "last"))


def _count(word: str) -> int | None:
    folded = " ".join(word.casefold().split())
    if folded.isdigit():
        return int(folded)
    return _NUMBERS.get(folded)


def _too_far(count: int, unit: str) -> bool:
    return count * {"day": 1, "week": 7, "month": 31, "year": 366}[unit] > _MOST_DAYS


def _valid_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _back(today: date, count: int, unit: str) -> date:
    if unit == "day":
        return today - timedelta(days=count)
    if unit == "week":
        return today - timedelta(weeks=count)
    months = today.year * 12 + today.month - 1 - (count if unit == "month" else 12 * count)
    year, month = divmod(months, 12)
    return date(year, month + 1, min(today.day, 28))


def _unit_holding(day: date, unit: str, zone: object) -> tuple[datetime, datetime]:
    """The calendar day, week (from Monday), month or year that holds ``day``."""
    if unit == "day":
        return _days(day, 1, zone)
    if unit == "week":
        return _days(day - timedelta(days=day.weekday()), 7, zone)
    if unit == "month":
        first = day.replace(day=1)
        following = date(first.year + first.month // 12, first.month % 12 + 1, 1)
        return _days(first, (following - first).days, zone)
    first = date(day.year, 1, 1)
    return _days(first, (date(day.year + 1, 1, 1) - first).days, zone)


def _days(first: date, count: int, zone: object) -> tuple[datetime, datetime]:
    start = datetime.combine(first, time(0), tzinfo=zone)  # type: ignore[arg-type]
    return start, start + timedelta(days=count)


# --- people ------------------------------------------------------------------------------------------------

def _names(text: str) -> tuple[str, ...]:
    found: list[str] = []
    starts = {0} | {m.end() for m in _SENTENCE_END.finditer(text)}
    for match in _CAPITALISED.finditer(text):
        word = re.sub(r"['\u2019]s$", "", match.group(1))
        if len(word) < 2 or word.casefold() in _NOT_NAMES or match.start() in starts or word in found:
            continue  # a sentence's first word is capitalised whatever it is
        found.append(word)
        if len(found) == MOST_NAMES:
            break
    return tuple(found)


def fitting(memories: Iterable[Memory], cues: QuestionCues) -> list[Memory]:
    """The ``memories`` that fit every cue an open-ended question names, newest event first: the answer to "what
    did I say yesterday?" (said then), "what did I say about Maria last week?" (said then, by or naming her) or
    "what did Maria say?" (said by her: without a time, a name alone is a topic like any other, "VS Code",
    which the search ranks better)."""
    kept = []
    for memory in memories:
        if cues.window is not None and not cues.in_window(memory):
            continue
        if cues.names and not (cues.names_person(memory) if cues.window is not None else cues.said_by(memory)):
            continue
        kept.append(memory)
    return sorted(kept, key=lambda m: (-event_time(m).timestamp(), m.id))
