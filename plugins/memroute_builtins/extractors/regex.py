"""The built-in ``regex`` fact extractor (reference §6, with the defects of §17.1 fixed).

It finds first-person statements of preference, decision and habit in conversation text:

* preference (``I prefer / like / love / enjoy X``, ``my favorite … is X``) → category ``preference``, type
  ``factual``;
* aversion (``I don't like / dislike / hate / avoid / can't stand X``) → category ``aversion``, type
  ``factual``, polarity ``negative``, content ``Dislikes X`` / ``Avoids X``: never the same memory as
  ``I like X``;
* decision (``I'll / I will use X``, ``I chose / picked / selected / went with X``, ``I decided to X``,
  ``I'm / I am going to use / going with X``) → category ``decision``, type ``episodic``; ``I won't use X``
  keeps its polarity;
* habit (``I usually / always / typically / often / tend to X``; ``I never X``) → category ``pattern``, type
  ``factual``.

What it fixes relative to the reference: curly apostrophes are read as straight ones; "I will use" and
"I am going to use" match while the word "ill" does not; questions ("Do I like X?") and conditionals
("if I like X") are skipped; captures stop at a sentence end but not inside ``3.12`` or ``Node.js``; keys are
Unicode-aware with a short hash whenever the readable slug would lose information, so different facts never
share a key; ``source`` says whose text it was.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any, Final

import attrs

import memroute
from memroute.interfaces import ComponentContext, ExtractedFact, Extractor
from memroute.models import MemoryType
from memroute.specs import ExtractorSpec

__all__ = [
    "MAX_EXTRACTION_TEXT_LENGTH",
    "MAX_FACT_LENGTH",
    "MIN_FACT_LENGTH",
    "RegexExtractor",
    "RegexExtractorSettings",
    "extract_facts",
    "fact_key",
]

MAX_FACT_LENGTH: Final = 500
MIN_FACT_LENGTH: Final = 3
MAX_EXTRACTION_TEXT_LENGTH: Final = 65_536
"""Longer input keeps its last 64 KiB characters: the newest part of a conversation matters most."""
_SLUG_CHARS: Final = 40

# Apostrophe look-alikes people (and phone keyboards) type; all read as "'".
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\uff07": "'", "\u00b4": "'", "`": "'"})

# A fact runs to the end of its clause: a comma, newline, ';', or a sentence end ('.', '!', '?' followed by
# space or the end). '.' inside a token ("3.12", "Node.js") does not end it, and neither does text before
# "and I …" / "but I …" (which starts the next statement, matched on its own).
_NEXT_STATEMENT = r"\s+(?:and|but|so|because|although|though|while|whereas|then)\s+I(?:\b|')"
_FACT = rf"((?:(?!{_NEXT_STATEMENT})(?:[^.,;!?\n]|[.!?](?=[^\s.!?])))+)"
_I = r"\bI"  # matched case-insensitively, like the reference: people type "i prefer"
_ADVERBS = r"(?:(?:really|also|personally|definitely|truly|still|just|much|do|actually|kind\s+of|sort\s+of)\s+)*"


@attrs.frozen(kw_only=True)
class _Rule:
    category: str
    type: MemoryType
    regex: re.Pattern[str]
    polarity: str = "positive"
    content_prefix: str = ""
    """Prepended to the captured text to make the content say what the fact is (``Dislikes Python``)."""
    key_prefix: str = ""
    """Prepended to the captured text before deriving the key (keeps ``never X`` apart from ``X``)."""
    strip_leading: re.Pattern[str] | None = None
    """Removed from the start of the captured text (``decided to use X`` → ``X``)."""


def _rule(category: str, type_: MemoryType, pattern: str, **kwargs: Any) -> _Rule:
    return _Rule(category=category, type=type_, regex=re.compile(pattern + _FACT, re.IGNORECASE), **kwargs)


_STRIP_USE = re.compile(r"^(?:use|using|go\s+with|going\s+with)\s+", re.IGNORECASE)
_NEG = r"(?:don't|dont|do\s+not|didn't|did\s+not)"

# Order matters twice: negative rules come before the positive ones that could match inside the same clause,
# and when two rules match at the same "I", the first one listed wins.
_RULES: Final[tuple[_Rule, ...]] = (
    # aversions (polarity kept: reference §17.1)
    _rule("aversion", MemoryType.FACTUAL, rf"{_I}\s+{_ADVERBS}{_NEG}\s+{_ADVERBS}(?:like|love|enjoy|prefer)\s+",
          polarity="negative", content_prefix="Dislikes "),
    _rule("aversion", MemoryType.FACTUAL,
          rf"{_I}\s+{_ADVERBS}(?:hate|detest|loathe|can't\s+stand|cannot\s+stand|can\s+not\s+stand)\s+",
          polarity="negative", content_prefix="Strongly dislikes "),
    _rule("aversion", MemoryType.FACTUAL, rf"{_I}\s+{_ADVERBS}dislike\s+", polarity="negative",
          content_prefix="Dislikes "),
    _rule("aversion", MemoryType.FACTUAL, rf"{_I}\s+{_ADVERBS}(?:avoid|steer\s+clear\s+of)\s+", polarity="negative",
          content_prefix="Avoids "),
    # preferences
    _rule("preference", MemoryType.FACTUAL, rf"{_I}\s+{_ADVERBS}prefer\s+"),
    _rule("preference", MemoryType.FACTUAL, rf"{_I}\s+{_ADVERBS}like\s+"),
    _rule("preference", MemoryType.FACTUAL, r"\bmy\s+(?:favorite|favourite)\s+(?:is|are)\s+"),
    _rule("preference", MemoryType.FACTUAL, rf"{_I}\s+{_ADVERBS}enjoy\s+"),
    _rule("preference", MemoryType.FACTUAL, rf"{_I}\s+{_ADVERBS}love\s+"),
    # decisions; negative ones first so "I will not use X" is not read as "I will use …"
    _rule("decision", MemoryType.EPISODIC,
          rf"{_I}(?:\s+won't|\s+will\s+not|'ll\s+not|\s+shall\s+not|(?:'ve|\s+have)?\s+decided\s+not\s+to)\s+"
          r"(?:use\s+|go\s+with\s+)?",
          polarity="negative", content_prefix="Will not use ", key_prefix="not "),
    _rule("decision", MemoryType.EPISODIC, rf"{_I}(?:'ll|\s+will|\s+shall)\s+{_ADVERBS}use\s+"),
    _rule("decision", MemoryType.EPISODIC,
          rf"{_I}(?:'ve|\s+have)?\s+{_ADVERBS}(?:chose|chosen|selected|picked|went\s+with|gone\s+with|opted\s+for"
          r"|settled\s+on)\s+"),
    _rule("decision", MemoryType.EPISODIC, rf"{_I}(?:'ve|\s+have)?\s+{_ADVERBS}decided\s+(?:to\s+|on\s+)?",
          strip_leading=_STRIP_USE),
    _rule("decision", MemoryType.EPISODIC,
          rf"{_I}(?:'m|\s+am)\s+going\s+(?:with|to\s+(?:use|adopt|go\s+with|pick|choose))\s+"),
    # habits
    _rule("pattern", MemoryType.FACTUAL, rf"{_I}\s+never\s+", polarity="negative", content_prefix="Never ",
          key_prefix="never "),
    _rule("pattern", MemoryType.FACTUAL,
          rf"{_I}\s+(?:usually|always|typically|normally|generally|often|frequently|regularly|tend\s+to)\s+"),
)

# A statement introduced by one of these words is a question or a condition, not a fact about the user:
# "Do I like X?", "if I prefer X", "what I like is …".
_NOT_A_STATEMENT = frozenset(
    {"do", "does", "did", "should", "would", "could", "can", "will", "shall", "may", "might", "must", "am",
     "if", "whether", "unless", "when", "where", "what", "why", "how", "which", "who", "whom", "wonder"}
)
_PREVIOUS_WORD = re.compile(r"([\w']+)\W*$")
_HORIZONTAL_SPACE = re.compile(r"[^\S\n]+")


def _between(low: int, high: int) -> Any:
    return attrs.validators.and_(attrs.validators.ge(low), attrs.validators.le(high))


@attrs.frozen(kw_only=True)
class RegexExtractorSettings:
    """Options of the ``regex`` extractor (``[extraction.regex]``)."""

    max_fact_length: int = attrs.field(default=MAX_FACT_LENGTH, validator=_between(10, 10_000))
    min_fact_length: int = attrs.field(default=MIN_FACT_LENGTH, validator=_between(1, 100))
    max_input_chars: int = attrs.field(
        default=MAX_EXTRACTION_TEXT_LENGTH, validator=_between(100, 10_000_000)
    )
    skip_questions: bool = True
    """Skip "Do I like X?" and "if I like X" (the reference stores them as facts)."""


def clean(text: str, max_length: int = MAX_FACT_LENGTH) -> str:
    """Trim, collapse whitespace, cut to ``max_length`` characters (reference §6.2)."""
    return " ".join(text.split())[:max_length].strip()


def _weight(text: str) -> int:
    """Length for the minimum-length rule: wide (CJK) characters count two, since one of them carries about as
    much as a Latin word's two letters ("寿司" is a fact; "ab" is not)."""
    return sum(2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)


def _normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def fact_key(category: str, content: str) -> str:
    """``<category>:<slug>``: a readable, Unicode-aware slug of ``content`` (at most 40 characters).

    When the slug loses information (it is empty, was cut, or dropped punctuation such as the ``++`` of
    ``C++``) an 8-hex-digit hash of the whole normalised text is appended, so different facts never share a
    key, while plain ones keep the reference's shape (``preference:typescript``).
    """
    normalised = _normalise(content)
    full_slug = re.sub(r"\W+", "_", normalised).strip("_")
    slug = full_slug[:_SLUG_CHARS].rstrip("_")
    lossless = normalised.replace(" ", "_")
    if slug and slug == lossless:
        return f"{category}:{slug}"
    digest = hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:8]
    return f"{category}:{slug}_{digest}" if slug else f"{category}:{digest}"


def _opposite_key(rule: _Rule, subject: str) -> str:
    """The key of the opposite statement about the same thing: ``preference:x`` ↔ ``aversion:x``,
    ``pattern:x`` ↔ ``pattern:never_x``, ``decision:x`` ↔ ``decision:not_x``. The pipeline uses it so that a
    newer statement supersedes an older, contradicting one."""
    if rule.category in ("preference", "aversion"):
        return fact_key("aversion" if rule.category == "preference" else "preference", subject)
    if rule.polarity == "negative":
        return fact_key(rule.category, subject)
    return fact_key(rule.category, ("never " if rule.category == "pattern" else "not ") + subject)


def _is_question_or_condition(text: str, start: int, end: int) -> bool:
    # The clause is a question when it ends with '?'.
    if text[end:end + 1] == "?" or text[end:end + 2].strip() == "?":
        return True
    # Only the word right before "I" matters: look at a short window, never the whole (maybe 64 KiB) sentence.
    window_start = max(start - 40, 0)
    sentence_start = max(text.rfind(c, window_start, start) for c in ".!?\n") + 1
    previous = _PREVIOUS_WORD.search(text[max(sentence_start, window_start):start])
    return previous is not None and previous.group(1).lower() in _NOT_A_STATEMENT


def _matches(text: str, skip_questions: bool) -> Iterator[tuple[int, _Rule, str]]:
    for rule in _RULES:
        for match in rule.regex.finditer(text):
            if skip_questions and _is_question_or_condition(text, match.start(), match.end()):
                continue
            yield match.start(), rule, match.group(1)


def extract_facts(
    text: object,
    *,
    source: str = "user",
    now: datetime | None = None,
    settings: RegexExtractorSettings | None = None,
) -> list[ExtractedFact]:
    """Facts found in ``text``, in the order they appear, one per key. Pure: never raises, ``[]`` for
    non-string or empty input."""
    if not isinstance(text, str) or not text.strip():
        return []
    settings = settings or RegexExtractorSettings()
    if len(text) > settings.max_input_chars:
        text = text[-settings.max_input_chars:]
    # Collapse horizontal whitespace first: besides cleaning, it keeps every pattern linear (a 64 KiB run of
    # spaces would otherwise make the "next statement" look-ahead quadratic).
    text = _HORIZONTAL_SPACE.sub(" ", text.translate(_APOSTROPHES))
    extracted_at = (now or datetime.now(timezone.utc)).isoformat()
    claimed_starts: set[int] = set()
    found: list[tuple[int, ExtractedFact]] = []
    seen_keys: set[str] = set()
    for start, rule, captured in _matches(text, settings.skip_questions):
        if start in claimed_starts:
            continue  # another rule already read this statement (e.g. "I don't like" before "I like")
        subject = clean(captured, settings.max_fact_length)
        if rule.strip_leading is not None:
            subject = rule.strip_leading.sub("", subject)
        if _weight(subject) < settings.min_fact_length:
            continue
        claimed_starts.add(start)
        key = fact_key(rule.category, rule.key_prefix + subject)
        if key in seen_keys:
            continue
        seen_keys.add(key)
        content = clean(rule.content_prefix + subject, settings.max_fact_length)
        metadata = {"category": rule.category, "extracted_at": extracted_at, "source": source,
                    "polarity": rule.polarity, "extractor": "regex", "opposite_key": _opposite_key(rule, subject)}
        found.append((start, ExtractedFact(key=key, content=content, type=rule.type, category=rule.category,
                                           metadata=metadata)))
    found.sort(key=lambda item: item[0])
    return [fact for _, fact in found]


class RegexExtractor(Extractor):
    """The ``regex`` extractor: first-person preferences, aversions, decisions and habits."""

    def __init__(self, settings: RegexExtractorSettings | None = None) -> None:
        self.settings = settings or RegexExtractorSettings()

    @classmethod
    def from_settings(cls, settings: RegexExtractorSettings, context: ComponentContext) -> RegexExtractor:
        return cls(settings)

    def extract(self, text: str, *, source: str = "user") -> list[ExtractedFact]:
        return extract_facts(text, source=source, settings=self.settings)


@memroute.hookimpl
def memroute_extractors() -> Iterator[ExtractorSpec]:
    yield ExtractorSpec(
        name="regex",
        factory=RegexExtractor.from_settings,
        settings_class=RegexExtractorSettings,
        description="First-person preferences, aversions, decisions and habits found by regular expressions.",
    )
