"""The conversation itself: which user messages ``observe`` keeps as ``episodic`` memories, and when they were said.

A message is kept when it says something about the user or their world: self-disclosure ("My daughter starts
school in September"), plans, events, opinions, a request that reveals a need ("Help me plan my trip to Japan
next month"). It is not kept when it is a greeting or an acknowledgement ("thanks!", "ok, got it"), a one- or
two-word reply, or a pure request or question to the assistant with nothing about the user in it ("Explain how a
hash map works", "How do I reverse a list in Python?"). ``[extraction] keep_turns`` chooses: ``salient`` (that
rule, the default), ``all`` (every user message), ``none`` (facts only, as before).

A kept message is one memory while it fits ``[extraction] turn_max_chars``; a longer one is split at sentence
boundaries into parts that each stay searchable. Its key is a hash of its words (:func:`turn_key`: case,
punctuation, spacing, contractions, word order and a few fillers set aside), so saying the same thing again, in
nearly the same words, updates the memory (its ``said_at``) instead of adding another; a message that differs in
one word that carries something ("Berlin" for "Lisbon", "not") is another memory.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from typing import Final

from memroute.errors import ValidationError
from memroute.models import utcnow

__all__ = [
    "KEEP_TURNS",
    "TURN_CATEGORY",
    "is_salient",
    "legacy_turn_key",
    "parse_said_at",
    "split_turn",
    "turn_key",
]

KEEP_TURNS: Final = ("salient", "all", "none")
TURN_CATEGORY: Final = "conversation"
"""The ``metadata.category`` of a kept message (the label injection shows)."""
_FUTURE_SLACK: Final = timedelta(days=1)

_WORD = re.compile(r"[\w']+")
_SMALL_TALK = re.compile(
    r"^(?:(?:hi|hello|hey|hiya|yo|howdy|good\s+(?:morning|afternoon|evening|night)|thanks?(?:\s+(?:you|a\s+lot|so\s+"
    r"much|again))?|thank\s+you(?:\s+(?:so|very)\s+much)?|thx|ty|ok(?:ay)?|k|sure|yes|yeah|yep|yup|no|nope|nah|"
    r"cool|great|awesome|nice|perfect|got\s+it|sounds\s+good|makes\s+sense|i\s+see|right|lol|haha|bye|goodbye|"
    r"see\s+you|cheers|cool\s+thanks|that's\s+(?:great|helpful|perfect|it|all)|you're\s+(?:welcome|right|the\s+best)"
    r"|no\s+worries|never\s+mind|all\s+good|will\s+do|understood|exactly|agreed|fine|wow|oh|hmm+|ah)[\s,.!?:;)(-]*)+$",
    re.IGNORECASE,
)
# Phrases that address the assistant and say nothing about the user ("can you", "tell me", "how do I").
_REQUEST_FORMULA = re.compile(
    r"\b(?:(?:can|could|would|will)\s+you|(?:tell|give|show|help|let|send|remind|teach|get|find|walk)\s+me|"
    r"(?:how|what|where|when|why|which)\s+(?:do|can|should|would|could|did)\s+I|(?:can|should|could|may|do|shall)\s+I|"
    r"I\s+(?:want|need|would\s+like|'d\s+like)\s+(?:you\s+to|to\s+know|to\s+understand)|I\s+wonder|"
    r"I\s+(?:don't|do\s+not)\s+(?:understand|get\s+it|know)|I\s+(?:mean|see|guess)|for\s+me|to\s+me)\b",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|me|my|mine|myself|we|we're|we've|our|ours|us)\b",
                           re.IGNORECASE)
_REQUEST_START = re.compile(
    r"^\W*(?:please\s+)?(?:explain|write|translate|summari[sz]e|list|create|generate|make|fix|debug|convert|"
    r"rewrite|refactor|draft|compose|describe|define|compare|calculate|compute|solve|find|show|give|tell|help|"
    r"suggest|recommend|check|review|proofread|implement|optimi[sz]e|outline|format|continue|go\s+on|try|"
    r"what|how|why|when|where|which|who|is|are|can|could|would|will|does|do|did|should)\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_NORMALISE = re.compile(r"[^\w]+")


def is_salient(text: str) -> bool:
    """Whether a user message says something about the user or their world (see the module docstring)."""
    stripped = text.strip()
    words = _WORD.findall(stripped)
    if len(words) < 3 or _SMALL_TALK.match(stripped):
        return False
    about_user = _FIRST_PERSON.search(_REQUEST_FORMULA.sub(" ", stripped)) is not None
    if about_user:
        return True
    if _REQUEST_START.match(stripped) or stripped.endswith("?"):
        return False  # a request or a question to the assistant, with nothing about the user in it
    return len(words) >= 5  # a statement about the world: an event, an opinion ("The move went well.")


def split_turn(text: str, max_chars: int) -> list[str]:
    """``text`` whole when it fits ``max_chars``, else parts of at most ``max_chars`` cut at sentence ends (a
    sentence longer than that is cut at a space)."""
    text = text.strip()
    if len(text) <= max_chars:
        return [text] if text else []
    parts: list[str] = []
    current = ""
    for sentence in _pieces(text, max_chars):
        if current and len(current) + 1 + len(sentence) > max_chars:
            parts.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}" if current else sentence
    if current:
        parts.append(current)
    return parts


def _pieces(text: str, max_chars: int) -> Iterator[str]:
    for sentence in _SENTENCE_END.split(text):
        sentence = sentence.strip()
        while len(sentence) > max_chars:
            cut = sentence.rfind(" ", 0, max_chars)
            cut = cut if cut > max_chars // 2 else max_chars
            yield sentence[:cut].strip()
            sentence = sentence[cut:].strip()
        if sentence:
            yield sentence


# Contractions written out, with or without the apostrophe ("I'm", "Im" -> "i am"): only forms that are not
# also words of their own ("ill", "were", "its", "id" and "well" are left alone).
_WRITTEN_OUT: Final = {
    "im": "i am", "ive": "i have", "dont": "do not", "doesnt": "does not", "didnt": "did not", "cant": "can not",
    "cannot": "can not", "wont": "will not", "isnt": "is not", "arent": "are not", "wasnt": "was not",
    "werent": "were not", "havent": "have not", "hasnt": "has not", "hadnt": "had not", "couldnt": "could not",
    "wouldnt": "would not", "shouldnt": "should not", "youre": "you are", "theyre": "they are", "thats": "that is",
    "whats": "what is", "lets": "let us",
}
_SUFFIXES: Final = (("n't", " not"), ("'m", " am"), ("'re", " are"), ("'ve", " have"), ("'ll", " will"),
                    ("'d", " would"))
_IS: Final = frozenset(("it", "that", "what", "he", "she", "there", "here", "who", "where", "how"))
"""Words whose ``'s`` is "is" ("it's" -> "it is"); after any other word it is a possessive, and dropped."""
_FILLERS: Final = frozenset(("please", "pls", "plz", "so", "just", "really", "actually", "basically", "um", "umm",
                             "uh", "oh", "anyway", "anyways", "btw", "lol", "haha"))
"""Words a repeat adds or drops without saying anything else."""


def _words(text: str) -> list[str]:
    """The words of ``text`` as :func:`turn_key` compares them: NFKC, case-folded, contractions written out,
    fillers and the possessive ``'s`` dropped ("my sister's cat" is "my sister cat")."""
    folded = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    out: list[str] = []
    for word in _WORD.findall(folded):
        word = word.strip("'")
        if word == "can't" or word == "won't":
            word = word.replace("'", "")
        elif word.endswith("'s"):
            word = word[:-2] + (" is" if word[:-2] in _IS else "")
        else:
            for suffix, written in _SUFFIXES:
                if word.endswith(suffix) and len(word) > len(suffix):
                    word = word[:-len(suffix)] + written
                    break
        word = word.replace("'", "")
        out.extend(_WRITTEN_OUT.get(word, word).split())
    return [w for w in out if w not in _FILLERS]


def turn_key(text: str) -> str:
    """``turn:<hash>`` of the words of ``text`` in any order (:func:`_words`): the same message said again in
    nearly the same words ("I'm allergic to peanuts, so no satay please" / "I am allergic to peanuts, so please no
    satay!") lands on the same key, so the store's upsert keeps one memory for it. Word order is set aside, so two
    messages of the very same words in another order ("dogs, not cats" / "cats, not dogs") are one memory too, the
    latest wording kept and the earlier one in its history."""
    words = sorted(_words(text))
    return _hashed(" ".join(words)) if words else legacy_turn_key(text)  # fillers alone: as the text says them


def legacy_turn_key(text: str) -> str:
    """The key memroute gave a kept message before :func:`turn_key` set contractions, fillers and word order
    aside (case, punctuation and spacing only): a message said again is matched with a turn kept under it."""
    return _hashed(" ".join(_NORMALISE.sub(" ", text.casefold()).split()))


def _hashed(normalised: str) -> str:
    return "turn:" + hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:20]


def parse_said_at(value: object, field: str = "said_at", *, now: datetime | None = None) -> datetime:
    """The time a message was said, as an aware UTC datetime: a ``datetime`` with a time zone, an ISO 8601
    string with one (``2026-03-02T18:30:00Z``, ``2026-03-02T19:30:00+01:00``), or a date (``2026-03-02``, taken as
    midnight UTC). A naive time, another type, text that is not a time, or a time more than a day in the future
    raise :class:`~memroute.errors.ValidationError` naming ``field``."""
    moment: datetime
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    elif isinstance(value, str):
        text = value.strip()
        try:
            if len(text) == 10:
                day = date.fromisoformat(text)
                moment = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
            else:
                moment = datetime.fromisoformat(text.replace("z", "Z"))
        except ValueError:
            raise ValidationError(f"{field}: not an ISO 8601 time (expected e.g. 2026-03-02T18:30:00Z): "
                                  f"{text[:60]!r}", [(field, "format")]) from None
    else:
        raise ValidationError(f"{field}: expected an ISO 8601 time or a datetime, got {type(value).__name__}",
                              [(field, "type")])
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValidationError(f"{field}: the time needs a time zone (e.g. 2026-03-02T18:30:00Z)", [(field, "timezone")])
    moment = moment.astimezone(timezone.utc)
    if moment > (now or utcnow()) + _FUTURE_SLACK:
        raise ValidationError(f"{field}: {moment.isoformat()} is in the future", [(field, "range")])
    if moment.year < 1900:
        raise ValidationError(f"{field}: {moment.isoformat()} is before 1900", [(field, "range")])
    return moment
