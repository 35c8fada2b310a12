"""The rules of the ``everyday`` extractor, in the order they are tried on a clause.

Each rule is a pattern and a handler that turns a match into :class:`Fact` (content as a sentence about the
user, a slot key, a category) or ``None`` when the words matched are not a fact after all ("I have a
question"). The first rule to claim a stretch of a clause wins it, so specific rules come before general ones:
"I don't eat meat" is a diet fact before it could be a dislike, "I always want short answers" an instruction
to the assistant before it could be a routine.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

import attrs

from memroute.models import MemoryType
from memroute_builtins.extractors.everyday_words import (
    CONDITIONS,
    DIETS,
    EVENTS,
    LANGUAGES,
    NATIONALITIES,
    OCCUPATIONS,
    PETS,
    POSSESSIONS,
    RELATIVES,
    RELIGIONS,
)

__all__ = ["RULES", "Fact", "Rule", "first_person", "is_blocked"]

FACTUAL = MemoryType.FACTUAL
EPISODIC = MemoryType.EPISODIC


@attrs.frozen(kw_only=True)
class Fact:
    category: str
    key: str
    content: str
    type: MemoryType = FACTUAL
    polarity: str = "positive"


Handler = Callable[[re.Match[str], str], "Fact | list[Fact] | None"]


@attrs.frozen(kw_only=True)
class Rule:
    pattern: re.Pattern[str]
    handler: Handler
    negated: bool = False
    """The pattern states a negation itself ("I don't eat X"): a "not" before it does not block it."""


RULES: list[Rule] = []


def rule(*patterns: str, negated: bool = False) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for pattern in patterns:
            RULES.append(Rule(pattern=re.compile(pattern, re.IGNORECASE), handler=handler, negated=negated))
        return handler
    return register


# --- reading a clause ------------------------------------------------------------------------------------
_FIRST_PERSON = re.compile(r"\b(?:I|me|my|mine|we|our|us)\b|^(?:(?:from\s+now\s+on|in\s+(?:the\s+)?future|going\s+"
                           r"forward)[\s,]+)?(?:please\s+)?(?:always\s+|never\s+|don't\s+|"
                           r"do\s+not\s+|stop\s+|just\s+)?(?:keep|make|answer|respond|reply|write|talk|speak|use|"
                           r"give|show|call|add|include)\b", re.IGNORECASE)
_NOT_SAID_BY_ME = re.compile(
    r"\b(?:if|suppose|supposing|imagine|pretend|hypothetically|assuming|unless|wish|wished|when|whenever|whether|"
    r"said|says|told|tells|asked|asks|wrote|writes|claims|claimed|according|joked|pretending|let's\s+say|"
    r"in\s+case|what\s+if|as\s+if|would|could|should|might)\b",
    re.IGNORECASE,
)
_QUESTION_START = re.compile(r"^\W*(?:do|does|did|can|could|would|should|will|shall|is|are|am|was|were|what|"
                             r"where|why|how|which|who|whom|whose|have|has|had|isn't|aren't)\b", re.IGNORECASE)
_NEGATION_BEFORE = re.compile(r"(?:n't|\bnot|\bnever|\bno\s+longer)\s*(?:\w+\s+)?$", re.IGNORECASE)


def first_person(clause: str) -> bool:
    """Whether ``clause`` can say something about its author (a first-person word, or an instruction)."""
    return _FIRST_PERSON.search(clause) is not None


def is_blocked(clause: str, start: int, found_by: Rule) -> bool:
    """A match is not the author's own statement when what comes before it in the clause makes it a question,
    a hypothetical or someone else's words ("if I lived…", "she said I…", "do I like…"), or negates it."""
    before = clause[max(start - 120, 0):start]  # the words just before: "if", "she said", "don't"
    if _NOT_SAID_BY_ME.search(before) or _QUESTION_START.match(clause):
        return True
    return not found_by.negated and _NEGATION_BEFORE.search(before) is not None


# --- building contents and keys ------------------------------------------------------------------------
_CUT = re.compile(r"\s+(?:because|since|although|though|but|so\s+that|so|which|whereas|unless|if|when|while|"
                  r"whenever|as\s+long\s+as)\b.*$", re.IGNORECASE)
_TRAILING = re.compile(r"(?:[\s,]+(?:too|as\s+well|lol|haha|btw|actually|anyway|honestly|by\s+the\s+way|"
                       r"though|now|right\s+now|these\s+days|lately|I\s+guess|I\s+think|any\s*more|at\s+all|either|"
                       r"no\s+more))+\s*$", re.IGNORECASE)
_NOT_AN_OBJECT = re.compile(r"^(?:you|your|yours|yourself|it|that|this|those|these|them|him|her|something|"
                            r"anything|nothing|everything|how|what|when|why|where|whether|if|the\s+way\s+you)\b",
                            re.IGNORECASE)
_MENTIONS_YOU = re.compile(r"\b(?:you|your|yours|yourself)\b", re.IGNORECASE)
_PRONOUNS = {"my": "their", "mine": "theirs", "me": "them", "myself": "themself", "i": "they",
             "i'm": "they're", "i've": "they've", "i'll": "they'll", "i'd": "they'd", "we": "they",
             "our": "their", "ours": "theirs", "us": "them", "ourselves": "themselves"}
_PRONOUN = re.compile(r"\b(?:i'm|i've|i'll|i'd|my|mine|me|myself|i|we|our|ours|us|ourselves)\b", re.IGNORECASE)
_LEADING = re.compile(r"^(?:(?:a|an|the|my|our|some|his|her|their)\s+)+", re.IGNORECASE)
_SLUG = re.compile(r"\W+")


def obj(text: str | None) -> str | None:
    """The object of a statement, cut at the next clause-like connector and stripped of fillers; ``None``
    when it is empty, a bare pronoun, or about the assistant ("your answer")."""
    if not text:
        return None
    text = _TRAILING.sub("", _CUT.sub("", text)).strip(" ,.;:!-\"'()")
    if not text or _NOT_AN_OBJECT.match(text) or _MENTIONS_YOU.search(text):
        return None
    return text


def third(text: str) -> str:
    """First person to third: "walk my dog" → "walk their dog"."""
    return _PRONOUN.sub(lambda m: _PRONOUNS[m.group(0).lower()], text)


def slug(text: str, limit: int = 40) -> str:
    """A key part: lower-case words joined by ``_`` without leading articles ("a Honda Civic" → "honda_civic")."""
    cleaned = _SLUG.sub("_", _LEADING.sub("", text.strip()).casefold()).strip("_")
    return cleaned[:limit].rstrip("_") or "x"


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def verb3(verb: str) -> str:
    """Third person singular of a present-tense verb: go → goes, study → studies."""
    lower = verb.lower()
    irregular = {"have": "has", "do": "does", "go": "goes", "am": "is", "be": "is", "'m": "is"}
    if lower in irregular:
        return irregular[lower]
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return verb[:-1] + "ies"
    if lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    return verb + "s"


def article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def items(text: str) -> list[str]:
    """"peanuts, shellfish and sesame" → three items."""
    return [part.strip() for part in re.split(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or|&)\s+", text) if part.strip()]


def _alternation(words: object) -> str:
    return "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in sorted(words, key=len, reverse=True))  # type: ignore[arg-type]


_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|"
           "apr|jun|jul|aug|sep|sept|oct|nov|dec")
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend"
TIME: Final = re.compile(
    rf"\b(?:tomorrow|tonight|today|this\s+(?:morning|afternoon|evening|week|weekend|month|year|summer|winter|"
    rf"spring|fall|autumn|{_DAYS})|next\s+(?:\w+)|on\s+(?:{_DAYS})|on\s+the\s+\d+\w*|in\s+(?:{_MONTHS})|"
    rf"(?:{_MONTHS})\s+\d{{1,2}}(?:st|nd|rd|th)?|in\s+(?:a|two|three|four|few|\d+)\s+(?:\w+\s+)?"
    r"(?:days?|weeks?|months?|years?)|soon|later\s+this\s+\w+|over\s+the\s+(?:holidays|summer|weekend))\b",
    re.IGNORECASE,
)
FREQUENCY: Final = re.compile(
    rf"\b(?:every\s+(?:single\s+|other\s+)?(?:day|morning|evening|night|week|weekend|month|year|{_DAYS}|"
    rf"lunch|summer|winter)|each\s+(?:day|morning|evening|night|week|{_DAYS})|daily|weekly|nightly|"
    rf"on\s+(?:weekends|weekdays|(?:{_DAYS})s)|(?:once|twice|three\s+times|\d+\s+times)\s+a\s+"
    r"(?:day|week|month|year)|most\s+(?:days|mornings|evenings|nights|weekends))\b",
    re.IGNORECASE,
)


def _without(pattern: re.Pattern[str], text: str) -> str:
    return " ".join(pattern.sub(" ", text).split())


NAME: Final = r"(?-i:[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)?)"
IM: Final = r"\bI(?:'m|\s+am|m)\s+"
WE_ARE: Final = r"\b(?:I(?:'m|\s+am)|we(?:'re|\s+are))\s+"
ADV: Final = (r"(?:(?:really|also|actually|still|currently|now|just|absolutely|totally|definitely|honestly|"
              r"kind\s+of|sort\s+of|very|so|pretty|quite|recently|finally|originally|truly|seriously|"
              r"genuinely|deeply)\s+)*")
_REL = _alternation(RELATIVES)
_PET = _alternation(PETS)


def _fact(category: str, key: str, content: str, **kwargs: object) -> Fact:
    return Fact(category=category, key=key, content=cap(third(content)), **kwargs)  # type: ignore[arg-type]


# --- identity and names ---------------------------------------------------------------------------------
@rule(rf"\bcall\s+me\s+(?P<x>{NAME})")
def _call_me(m: re.Match[str], clause: str) -> Fact:
    return _fact("identity", "profile:preferred_name", f"Prefers to be called {m['x']}")


@rule(rf"\bmy\s+name(?:'s|\s+is)\s+(?P<x>{NAME})", rf"{IM}called\s+(?P<x>{NAME})",
      rf"\b(?:hi|hello|hey)\b[\s,!]+(?:there[\s,!]+)?I(?:'m|\s+am)\s+(?P<x>{NAME})",
      rf"{IM}(?P<x>{NAME})(?=,?\s+(?:nice|pleased|good|glad)\s+to\s+meet)")
def _name(m: re.Match[str], clause: str) -> Fact:
    return _fact("identity", "profile:name", f"Is named {m['x']}")


@rule(r"\bmy\s+pronouns\s+are\s+(?P<x>\w+\s*/\s*\w+(?:\s*/\s*\w+)?|\w+)")
def _pronouns(m: re.Match[str], clause: str) -> Fact:
    return Fact(category="identity", key="profile:pronouns", content=f"Uses the pronouns {m['x']}")


@rule(rf"{IM}(?P<x>\d{{1,3}})(?:\s*(?:years?\s+old|yrs?\s+old|y/?o))?\s*$",
      r"\bI\s+(?:just\s+)?turned\s+(?P<x>\d{1,3})\b")
def _age(m: re.Match[str], clause: str) -> Fact | None:
    return _fact("identity", "profile:age", f"Is {m['x']} years old") if 0 < int(m["x"]) < 120 else None


@rule(r"\bmy\s+birthday\s+is\s+(?:on\s+)?(?P<x>.+)")
def _birthday(m: re.Match[str], clause: str) -> Fact | None:
    when = obj(m["x"])
    return _fact("dates", "profile:birthday", f"Birthday is {when}") if when else None


@rule(r"\bI\s+was\s+born\s+(?P<prep>on|in)\s+(?P<x>.+)")
def _born(m: re.Match[str], clause: str) -> Fact | None:
    when = obj(m["x"])
    if not when:
        return None
    if m["prep"].lower() == "on" or re.match(rf"(?:{_MONTHS})\b", when, re.IGNORECASE):
        return _fact("dates", "profile:birthday", f"Was born on {when}")
    if re.fullmatch(r"\d{4}", when):
        return _fact("identity", "profile:birth_year", f"Was born in {when}")
    return _fact("place", "profile:birthplace", f"Was born in {when}")


@rule(rf"{IM}(?:a\s+)?(?:proud\s+)?(?P<x>[\w-]+)(?:\s+(?:citizen|national))?\s*(?:,.*)?$")
def _nationality(m: re.Match[str], clause: str) -> Fact | None:
    word = m["x"].lower()
    if word in NATIONALITIES:
        return _fact("identity", "profile:nationality", f"Is {m['x']}")
    if word in RELIGIONS:
        return _fact("identity", "profile:religion", f"Is {m['x']}")
    return None


# --- family and relationships ---------------------------------------------------------------------------
def _family_slot(word: str) -> tuple[str, str] | None:
    word = " ".join(word.lower().split())
    if word in RELATIVES:
        return "family", f"family:{RELATIVES[word]}"
    if word in PETS:
        return "pets", f"pets:{PETS[word]}"
    return None


@rule(rf"\b(?:my|our)\s+(?P<rel>{_REL}|{_PET})(?:'s\s+name\s+is|\s+name\s+is|\s+is\s+(?:called|named)|'s\s+called|"
      rf"\s+goes\s+by)\s+(?P<x>{NAME}(?:\s+and\s+{NAME})?)",
      rf"\b(?:my|our)\s+(?P<rel>{_REL}|{_PET})(?:,\s*|\s+)(?P<x>{NAME})\b")
def _named_relative(m: re.Match[str], clause: str) -> Fact | None:
    slot = _family_slot(m["rel"])
    if slot is None or m["x"].split()[0].lower() in ("is", "and", "i"):
        return None
    rel = " ".join(m["rel"].lower().split())
    return _fact(slot[0], slot[1], f"Has {article(rel)} {rel} named {m['x']}")


@rule(rf"\b(?:my|our)\s+(?P<rel>{_REL}|{_PET})\s+(?P<x>(?:is|was|lives|works|has|studies|just|recently|loves|likes|"
      r"hates|plays|teaches|moved|got|goes|runs|owns|turned|died|passed|started|wants|needs)\b.+)")
def _relative_says(m: re.Match[str], clause: str) -> Fact | None:
    slot = _family_slot(m["rel"])
    what = obj(m["x"])
    if slot is None or not what or re.fullmatch(r"(?:is|was)\s+(?:called|named)\b.*", what, re.IGNORECASE):
        return None
    rel = " ".join(m["rel"].lower().split())
    return _fact(slot[0], f"{slot[1]}:{slug(what, 30)}", f"Has {article(rel)} {rel} who {what}")


_COUNT = r"(?P<n>a|an|one|two|three|four|five|six|seven|\d+|no)"
_SIZE = r"(?:(?:little|young|older|younger|big|small|twin|adult|grown|grown-up|teenage|baby|rescue|new|old|lovely)\s+)*"


@rule(rf"\b(?:I|we)\s+(?:have|'ve\s+got|have\s+got|own)\s+{_COUNT}\s+{_SIZE}(?P<rel>{_REL}|{_PET})\b(?P<rest>.*)")
def _has_relatives(m: re.Match[str], clause: str) -> Fact | None:
    slot = _family_slot(m["rel"])
    if slot is None:
        return None
    rest = _CUT.sub("", m["rest"]).rstrip(" ,.")
    polarity = "negative" if m["n"].lower() == "no" else "positive"
    return _fact(slot[0], slot[1], f"Has {clause[m.start('n'):m.end('rel')]}{rest}", polarity=polarity)


@rule(rf"{IM}(?:a\s+)?(?:proud\s+|single\s+)?(?P<w>mother|mom|mum|father|dad|parent)\s+(?:of|to)\s+(?P<x>.+)",
      rf"{IM}(?P<w>an\s+only\s+child)")
def _parent_of(m: re.Match[str], clause: str) -> Fact | None:
    if "only" in m["w"]:
        return _fact("family", "family:siblings", "Is an only child")
    what = obj(m["x"])
    return _fact("family", "family:children", f"Is a {m['w']} of {what}") if what else None


@rule(rf"{IM}(?P<x>(?:happily\s+)?(?:married|divorced|single|engaged|widowed|separated|in\s+a\s+relationship)"
      r"(?:\s+(?:to|with)\s+.+)?)")
def _relationship(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"]) or m["x"]
    return _fact("family", "profile:relationship_status", f"Is {what}")


@rule(r"\b(?:I|we)\s+(?:just\s+|recently\s+|finally\s+)?got\s+(?P<x>married|engaged|divorced)(?P<rest>.*)")
def _got_married(m: re.Match[str], clause: str) -> Fact:
    return _fact("family", "profile:relationship_status", f"Got {m['x']}{_CUT.sub('', m['rest']).rstrip(' ,.')}",
                 type=EPISODIC)


# --- work and study -------------------------------------------------------------------------------------
@rule(r"\bI\s+(?:currently\s+|now\s+|still\s+|also\s+)?work\s+(?P<t>(?:part|full)[\s-]time\s+)?(?P<p>at|for)\s+"
      r"(?P<org>.+?)(?:\s+as\s+(?P<role>.+))?$")
def _employer(m: re.Match[str], clause: str) -> Fact | None:
    org = obj(m["org"])
    if not org:
        return None
    role = obj(m["role"]) if m["role"] else None
    when = " ".join(m["t"].split()) + " " if m["t"] else ""
    return _fact("work", "profile:employer", f"Works {when}{m['p'].lower()} {org}" + (f" as {role}" if role else ""))


@rule(r"\bI\s+(?:currently\s+|now\s+)?work\s+as\s+(?P<x>.+)")
def _works_as(m: re.Match[str], clause: str) -> Fact | None:
    role = obj(m["x"])
    return _fact("work", "profile:occupation", f"Works as {role}") if role else None


@rule(r"\bI\s+(?:usually\s+|mostly\s+|currently\s+)?work\s+(?P<x>(?:(?:the\s+)?(?:night|day|early|late|evening|"
      r"morning|weekend|double|long|rotating|\w+-hour)\s+shifts?|from\s+home|remotely|part[\s-]time|full[\s-]time|"
      r"weekends|nights|(?:on\s+)?(?:night|day)\s+shift).*)")
def _work_schedule(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    return _fact("work", "work:schedule", f"Works {what}", type=FACTUAL) if what else None


@rule(r"\bI\s+work\s+in\s+(?P<x>.+)")
def _work_field(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    return _fact("work", "work:field", f"Works in {what}") if what else None


@rule(r"\bI\s+(?:just\s+|recently\s+)?(?:started|began)\s+(?:a\s+new\s+job|working)\s+(?:at|for)\s+(?P<x>.+)",
      r"\bI\s+(?:just\s+|recently\s+)?got\s+(?:a\s+(?:new\s+)?job|hired)\s+(?:at|by|with)\s+(?P<x>.+)")
def _new_job(m: re.Match[str], clause: str) -> Fact | None:
    org = obj(m["x"])
    return _fact("work", "profile:employer", f"Started working at {org}", type=FACTUAL) if org else None


_ROLE = r"(?P<x>(?:a|an)\s+[\w'-]+(?:\s+[\w'-]+){0,4}?)(?P<rest>(?:\s+(?:at|for|in|with|from)\s+.+)?)$"


@rule(rf"{IM}(?:now\s+|currently\s+|still\s+)?{_ROLE}", rf"\bmy\s+(?:job|profession|occupation)\s+is\s+{_ROLE}")
def _occupation(m: re.Match[str], clause: str) -> Fact | None:
    words = [w.lower().rstrip("s") if w.lower().rstrip("s") in OCCUPATIONS else w.lower() for w in m["x"].split()]
    if not any(w in OCCUPATIONS for w in words[1:]):
        return None
    rest = obj(m["rest"]) if m["rest"].strip() else ""
    return _fact("work", "profile:occupation", f"Is {m['x']}" + (f" {rest}" if rest else ""))


@rule(rf"{IM}(?:now\s+)?(?P<x>retired|unemployed|self-employed|between\s+jobs|a\s+stay-at-home\s+\w+|"
      r"on\s+(?:parental|maternity|paternity|sick)\s+leave)\b")
def _not_working(m: re.Match[str], clause: str) -> Fact:
    return _fact("work", "profile:occupation", f"Is {m['x']}")


@rule(r"\bI\s+(?:study|major\s+in)\s+(?P<x>.+)", rf"{IM}majoring\s+in\s+(?P<x>.+)")
def _study(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what or (TIME.search(what) and len(what.split()) < 3):
        return None
    return _fact("study", "education:study", f"Studies {what}")


@rule(r"\bI\s+(?P<x>graduated\s+(?:from|in)\s+.+|(?:have|hold|'ve\s+got)\s+(?:a|an)\s+(?:\w+\s+)?(?:degree|"
      r"bachelor's|master's|masters|phd|doctorate|mba)\b.*)")
def _degree(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what:
        return None
    verb, _, rest = what.partition(" ")
    lead = "Graduated" if verb.lower() == "graduated" else cap(verb3(verb))
    return _fact("study", "education:degree", f"{lead} {rest}")


@rule(r"\b(?:I(?:'m|\s+am)|I(?:'ve|\s+have)\s+been)\s+(?:currently\s+|still\s+|now\s+|slowly\s+|also\s+)?"
      r"(?P<v>learning|studying|taking\s+(?:classes|lessons|a\s+course)\s+in|practicing|practising)\s+(?P<x>.+)")
def _learning(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what:
        return None
    topic = _without(TIME, _without(re.compile(r"\b(?:for|since)\s+.+$", re.IGNORECASE), what))
    category = "languages" if topic.split()[0].lower() in LANGUAGES else "study"
    return _fact(category, f"learning:{slug(topic)}", f"Is {' '.join(m['v'].split())} {what}")


@rule(r"\bI\s+(?:can\s+)?speak\s+(?P<x>.+)", rf"{IM}(?P<how>fluent|conversational|native|bilingual)\s+in\s+(?P<x>.+)")
def _speaks(m: re.Match[str], clause: str) -> list[Fact] | None:
    what = obj(m["x"])
    if not what:
        return None
    found = []
    for item in items(what):
        language = next((w for w in item.split() if w.lower() in LANGUAGES), None)
        if language is None:
            continue
        content = f"Is {m['how']} in {item}" if m.groupdict().get("how") else f"Speaks {item}"
        found.append(_fact("languages", f"language:{language.lower()}", content))
    return found or None


@rule(r"\bmy\s+(?:native|first|mother)\s+(?:language|tongue)\s+is\s+(?P<x>\w+)",
      rf"{IM}a\s+native\s+(?P<x>\w+)\s+speaker")
def _native_language(m: re.Match[str], clause: str) -> Fact | None:
    if m["x"].lower() not in LANGUAGES:
        return None
    return _fact("languages", "language:native", f"Native language is {cap(m['x'])}")


@rule(rf"{IM}(?:really\s+|pretty\s+|very\s+|quite\s+)?(?P<v>good|great|skilled|experienced|proficient|an\s+expert|"
      r"decent)\s+(?:at|in|with)\s+(?P<x>.+)")
def _good_at(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    return _fact("skills", f"skill:{slug(what)}", f"Is {' '.join(m['v'].split())} at {what}") if what else None


@rule(r"\bI\s+know\s+how\s+to\s+(?P<x>.+)", r"\bI\s+can\s+(?P<y>(?:play|cook|code|program|swim|drive|ski|snowboard|"
      r"surf|dance|sing|knit|sew|draw|paint|juggle|fly|type)\b.*)")
def _can(m: re.Match[str], clause: str) -> Fact | None:
    if m.groupdict().get("y"):
        what = obj(m["y"])
        return _fact("skills", f"skill:{slug(what)}", f"Can {what}") if what else None
    what = obj(m["x"])
    return _fact("skills", f"skill:{slug(what)}", f"Knows how to {what}") if what else None


@rule(r"\bI(?:'ve|\s+have)\s+been\s+(?P<v>\w+ing)\s+(?P<x>.+?)\s+for\s+(?P<d>(?:over\s+|about\s+|almost\s+)?"
      r"(?:\w+|\d+)\s+(?:years?|months?|decades?))")
def _been_doing(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what or m["v"].lower() in ("learning", "studying", "practicing", "practising"):
        return None
    return _fact("skills", f"skill:{slug(m['v'] + ' ' + what)}", f"Has been {m['v']} {what} for {m['d']}")


@rule(r"\bI\s+play\s+(?P<x>.+)")
def _plays(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what or re.match(r"(?:with|around|along)\b", what, re.IGNORECASE):
        return None
    return _fact("hobbies", f"hobby:{slug(_without(FREQUENCY, what))}", f"Plays {what}")


# --- place ----------------------------------------------------------------------------------------------
@rule(r"\b(?:I|we)\s+(?:currently\s+|now\s+|still\s+|actually\s+)?(?:live|reside)\s+in\s+(?P<x>.+)",
      rf"{WE_ARE}(?:currently\s+|now\s+)?(?:living|based|located|settled)\s+in\s+(?P<x>.+)",
      r"\bmy\s+home(?:town)?\s+is\s+(?:in\s+)?(?P<x>(?-i:[A-Z]).+)",
      r"\b(?:I|we)\s+live\s+with\s+(?:my|our)\s+[\w\s]{1,30}?\s+in\s+(?P<x>(?-i:[A-Z]).+)")
def _lives_in(m: re.Match[str], clause: str) -> Fact | None:
    where = obj(m["x"])
    return _fact("place", "profile:location", f"Lives in {where}") if where else None


@rule(r"\b(?:I|we)(?:'ve|\s+have)?\s+(?:just\s+|recently\s+|finally\s+)?(?:moved|relocated)\s+(?P<p>to|into)\s+(?P<x>.+)")
def _moved(m: re.Match[str], clause: str) -> Fact | None:
    where = obj(m["x"])
    return _fact("place", "profile:location", f"Moved {m['p'].lower()} {where}") if where else None


@rule(rf"{WE_ARE}(?:moving|relocating)\s+to\s+(?P<x>.+)")
def _moving(m: re.Match[str], clause: str) -> Fact | None:
    where = obj(m["x"])
    return _fact("plans", "plan:move", f"Is moving to {where}", type=EPISODIC) if where else None


@rule(rf"{IM}(?:originally\s+)?from\s+(?P<x>.+)", r"\bI\s+(?:originally\s+)?come\s+from\s+(?P<x>.+)")
def _from(m: re.Match[str], clause: str) -> Fact | None:
    where = obj(m["x"])
    return _fact("place", "profile:origin", f"Is from {where}") if where else None


@rule(r"\bI\s+grew\s+up\s+in\s+(?P<x>.+)")
def _grew_up(m: re.Match[str], clause: str) -> Fact | None:
    where = obj(m["x"])
    return _fact("place", "profile:hometown", f"Grew up in {where}") if where else None


@rule(r"\bI\s+used\s+to\s+live\s+in\s+(?P<x>.+)")
def _used_to_live(m: re.Match[str], clause: str) -> Fact | None:
    where = obj(m["x"])
    return _fact("place", "profile:previous_location", f"Used to live in {where}") if where else None


# --- health and diet ------------------------------------------------------------------------------------
@rule(rf"{IM}(?:severely\s+|very\s+|deathly\s+|mildly\s+|highly\s+|also\s+)?allergic\s+to\s+(?P<x>.+)",
      r"\bI\s+have\s+(?:an?\s+|severe\s+|serious\s+)*(?:allergy|allergies)\s+to\s+(?P<x>.+)",
      r"\bI\s+have\s+(?:an?\s+|severe\s+|serious\s+)*(?P<x>[\w-]+(?:\s+[\w-]+)?)\s+allerg(?:y|ies)\b")
def _allergy(m: re.Match[str], clause: str) -> list[Fact] | None:
    what = obj(m["x"])
    if not what:
        return None
    return [_fact("health", f"diet:allergy:{slug(item)}", f"Is allergic to {item}") for item in items(what)]


@rule(rf"{IM}(?P<x>[\w-]+)\s+intolerant", rf"{IM}intolerant\s+to\s+(?P<y>.+)",
      r"\bI\s+(?:have|'ve\s+got)\s+(?P<z>celiac|coeliac)(?:\s+disease)?")
def _intolerance(m: re.Match[str], clause: str) -> Fact | None:
    if m.groupdict().get("z"):
        return _fact("health", "diet:intolerance:gluten", f"Has {m['z']} disease")
    if m.groupdict().get("y"):
        what = obj(m["y"])
        return _fact("health", f"diet:intolerance:{slug(what)}", f"Is intolerant to {what}") if what else None
    return _fact("health", f"diet:intolerance:{slug(m['x'])}", f"Is {m['x']} intolerant")


_DIET = _alternation(DIETS)


@rule(rf"{IM}(?:a\s+|an\s+)?(?:strict\s+|mostly\s+|now\s+|fully\s+|also\s+)?(?P<x>{_DIET})\b",
      rf"{IM}on\s+a\s+(?P<y>[\w-]+(?:\s+[\w-]+)?)\s+diet", r"\bI\s+(?:eat|keep)\s+(?P<x>halal|kosher)\b",
      rf"\bI\s+(?:eat|follow)\s+(?:a\s+)?(?P<x>{_DIET})(?:\s+diet)?\b")
def _diet(m: re.Match[str], clause: str) -> Fact:
    if m.groupdict().get("y"):
        return _fact("diet", "diet:regime", f"Is on a {m['y']} diet")
    return _fact("diet", "diet:regime", f"Is {m['x'].lower()}")


@rule(r"\bI\s+(?:don't|do\s+not|dont|never|can't|cannot|can\s+not|no\s+longer)\s+(?P<v>eat|drink)\s+(?P<x>.+)",
      negated=True)
def _does_not_eat(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what:
        return None
    return _fact("diet", f"diet:avoid:{slug(what)}", f"Does not {m['v'].lower()} {what}", polarity="negative")


_CONDITION = _alternation(CONDITIONS)


@rule(rf"\bI\s+(?:have|'ve\s+got|have\s+got)\s+(?P<x>(?:a\s+|an\s+|chronic\s+|severe\s+|mild\s+|type\s+[12]\s+)*"
      rf"(?:\w+\s+)?(?:{_CONDITION})\b.*)",
      r"\bI(?:'m|\s+am)?\s+(?P<v>suffer\s+from|was\s+diagnosed\s+with|live\s+with|struggle\s+with|"
      r"recovering\s+from)\s+(?P<y>.+)")
def _condition(m: re.Match[str], clause: str) -> Fact | None:
    if m.groupdict().get("y"):
        what = obj(m["y"])
        if what and re.match(r"(?:my|our|a|an|the|his|her|their)\s", what, re.IGNORECASE):
            return None  # "I live with my parents": people, not a condition
        verb = {"suffer from": "Suffers from", "was diagnosed with": "Was diagnosed with", "live with": "Lives with",
                "struggle with": "Struggles with"}.get(" ".join(m["v"].split()).lower(), "Is recovering from")
        return _fact("health", f"health:condition:{slug(what)}", f"{verb} {what}") if what else None
    what = obj(m["x"])
    if not what:
        return None
    head = re.search(_CONDITION, what, re.IGNORECASE)
    return _fact("health", f"health:condition:{slug(head.group(0) if head else what)}", f"Has {what}")


@rule(rf"{IM}(?P<x>diabetic|asthmatic|epileptic|pregnant|colou?r-?blind|deaf|hard\s+of\s+hearing|blind|dyslexic|"
      r"autistic|left-handed|right-handed|ambidextrous|an?\s+introvert|an?\s+extrovert|introverted|extroverted|"
      r"a\s+night\s+owl|an\s+early\s+bird|a\s+morning\s+person|in\s+a\s+wheelchair|sober)\b",
      r"\bI\s+(?P<w>wear\s+(?:glasses|contacts|contact\s+lenses|hearing\s+aids?|braces)|use\s+a\s+wheelchair)")
def _trait(m: re.Match[str], clause: str) -> Fact:
    if m.groupdict().get("w"):
        what = " ".join(m["w"].split())
        return _fact("health", f"health:{slug(what.split(None, 1)[1])}", cap(verb3(what.split()[0])) + " "
                     + what.split(None, 1)[1])
    what = " ".join(m["x"].split())
    health = {"diabetic", "asthmatic", "epileptic", "pregnant", "deaf", "blind", "dyslexic", "autistic", "sober",
              "hard of hearing", "in a wheelchair"}
    if what.lower() in health or "blind" in what.lower():
        return _fact("health", f"health:{slug(what)}", f"Is {what}")
    return _fact("identity", f"profile:trait:{slug(what)}", f"Is {what}")


# --- assistant: how to answer ---------------------------------------------------------------------------
_STANDING = re.compile(r"\b(?:always|from\s+now\s+on|in\s+(?:the\s+)?future|going\s+forward|by\s+default|every\s+time|"
                       r"each\s+time|whenever|in\s+general|generally|all\s+the\s+time|never)\b", re.IGNORECASE)
_LENGTH = re.compile(r"\b(?:short|shorter|concise|brief|long|longer|detailed|in-depth|thorough|terse|succinct|"
                     r"verbose|one-line|one\s+sentence|to\s+the\s+point)\b", re.IGNORECASE)
_LANGUAGE = _alternation(LANGUAGES)


def _assistant_key(what: str) -> str:
    language = re.search(rf"\bin\s+({_LANGUAGE})\b", what, re.IGNORECASE)
    if language:
        return "assistant:language"
    if _LENGTH.search(what):
        return "assistant:length"
    return f"assistant:style:{slug(what)}"


@rule(rf"\b(?:answer|respond|reply|write|talk|speak)\s+(?:to\s+me\s+)?in\s+(?P<x>{_LANGUAGE})\b")
def _answer_in(m: re.Match[str], clause: str) -> Fact | None:
    if not _STANDING.search(clause) and not re.search(r"\bI\s+(?:prefer|want|like|need)\b", clause, re.IGNORECASE):
        return None
    return _fact("assistant", "assistant:language", f"Wants answers in {cap(m['x'])}")


@rule(r"\bI\s+(?:much\s+|really\s+|generally\s+|always\s+)?(?:prefer|like|want|need|appreciate|love)\s+"
      r"(?P<x>(?:[\w-]+\s+){0,3}?(?:answers|responses|replies|explanations|summaries|code\s+examples|examples|"
      r"bullet\s+points|feedback|code|comments)\b.*)")
def _prefers_answers(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what or (re.match(r"(?:the|an?)\s", what, re.IGNORECASE) and not _LENGTH.search(what)):
        return None
    return _fact("assistant", _assistant_key(what), f"Prefers {what}")


@rule(r"^(?:please\s+)?(?:always\s+|just\s+)?(?:keep|make)\s+(?:your\s+|the\s+|all\s+)?(?:answers|responses|replies|"
      r"explanations|messages)\s+(?P<x>.+)")
def _keep_answers(m: re.Match[str], clause: str) -> Fact:
    what = m["x"]
    return _fact("assistant", _assistant_key(what), f"Wants answers kept {what}")


@rule(r"^(?:please\s+)?(?P<neg>don't|do\s+not|never|stop|no\s+more)\s+(?:use|using|add|adding|include|including|"
      r"send|sending|put|putting|give\s+me|giving\s+me)\s+(?P<x>emojis?|emoticons|jargon|bullet\s+points|markdown|"
      r"tables|headers|headings|exclamation\s+marks|code\s+comments|disclaimers|apologies|filler|long\s+"
      r"introductions|summaries|caveats)\b", negated=True)
def _no_format(m: re.Match[str], clause: str) -> Fact:
    what = " ".join(m["x"].split())
    return _fact("assistant", f"assistant:format:{slug(what)}", f"Does not want {what} in answers",
                 polarity="negative")


@rule(r"^(?:please\s+)?always\s+(?P<v>use|add|include|give|show|write|start|end|explain|cite|answer)\s+(?P<x>.+)")
def _always_format(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"]) if m["v"].lower() != "answer" else m["x"]
    if not what:
        return None
    return _fact("assistant", _assistant_key(f"{m['v']} {what}"), f"Wants the assistant to always {m['v']} {what}")


@rule(r"\bI(?:'d|\s+would)\s+(?:prefer|like)\s+(?:it\s+)?if\s+you\s+(?P<x>.+)",
      r"\bI\s+(?:want|need|'d\s+like|would\s+like)\s+you\s+to\s+(?P<y>.+)")
def _wants_assistant(m: re.Match[str], clause: str) -> Fact | None:
    what = m.groupdict().get("x") or m["y"]
    if m.groupdict().get("y") and not _STANDING.search(clause):
        return None  # "I want you to explain X" is a request, not a standing preference
    return _fact("assistant", _assistant_key(what), f"Wants the assistant to {what}")


# --- decisions ----------------------------------------------------------------------------------------
@rule(r"\bI(?:'ll|\s+will|\s+shall)\s+(?P<v>use|go\s+with|pick|choose|adopt|stick\s+with|switch\s+to)\s+(?P<x>.+)",
      r"\bI(?:'m|\s+am)\s+going\s+(?:with|to\s+(?P<w>use|go\s+with|adopt|switch\s+to))\s+(?P<y>.+)",
      r"\bI(?:'ve|\s+have)?\s+(?:just\s+|finally\s+)?(?P<c>chose|chosen|picked|selected|went\s+with|gone\s+with|"
      r"opted\s+for|settled\s+on|decided\s+on|decided\s+to\s+use|decided\s+to\s+go\s+with|switched\s+to)\s+(?P<z>.+)")
def _decision(m: re.Match[str], clause: str) -> Fact | None:
    groups = m.groupdict()
    what = obj(groups.get("x") or groups.get("y") or groups.get("z"))
    if not what:
        return None
    if groups.get("c"):
        verb = " ".join(groups["c"].split()).lower()
        lead = {"chosen": "Chose", "gone with": "Went with", "decided to use": "Decided to use",
                "decided to go with": "Decided to go with"}.get(verb, cap(verb))
    else:
        lead = "Will " + " ".join((groups.get("v") or groups.get("w") or "go with").split()).lower()
    return _fact("decision", f"decision:{slug(what)}", f"{lead} {what}", type=EPISODIC)


# --- plans and dates ------------------------------------------------------------------------------------
_EVENT = _alternation(EVENTS | {"wedding anniversary", "due date", "job interview", "final exam",
                                "doctor's appointment", "dentist appointment", "driving test"})


@rule(rf"\b(?:my|our)\s+(?P<e>(?:\w+\s+)?(?:{_EVENT}))\s+(?P<v>is|was|starts|begins|leaves|ends|will\s+be|is\s+going\s+to"
      r"\s+be)\s+(?P<x>.+)")
def _my_event(m: re.Match[str], clause: str) -> Fact | None:
    when = obj(m["x"])
    if not when or m["e"].split()[0].lower() in ("a", "the", "first", "favorite", "favourite", "last"):
        return None
    event = " ".join(m["e"].split())
    key = "profile:birthday" if event.lower() == "birthday" else f"date:{slug(event)}"
    return _fact("dates", key, f"{cap(event)} {' '.join(m['v'].split())} {when}",
                 type=FACTUAL if key.startswith("profile") or "anniversary" in event.lower() else EPISODIC)


@rule(rf"\b(?:I|we)\s+(?:have|'ve\s+got|have\s+got)\s+(?P<x>(?:a|an|my|our)\s+(?:\w+\s+){{0,2}}?(?:{_EVENT})\b.*)")
def _has_event(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what or not TIME.search(clause):
        return None
    event = re.search(_EVENT, what, re.IGNORECASE)
    head = what[:event.end()] if event else what
    return _fact("plans", f"plan:{slug(head)}", f"Has {what}", type=EPISODIC)


_NOT_A_GOAL = re.compile(r"^(?:know|understand|ask|see|check|find|figure|make\s+sure|be\s+sure|try|get\s+help|"
                         r"learn\s+(?:how|what|why|more\s+about)|clarify|confirm|say|tell|mention|point|add|"
                         r"thank|share|show|explain|write\s+a|draft|create\s+a|build\s+a|fix|debug|use)\b",
                         re.IGNORECASE)


@rule(rf"{WE_ARE}(?:planning|hoping|intending)\s+(?:to|on)\s+(?P<x>.+)",
      r"\b(?:I|we)\s+(?P<v>plan|intend|hope|want|aim)\s+to\s+(?P<x>.+)",
      r"\bI(?:'d|\s+would)\s+(?P<w>love|like)\s+to\s+(?P<x>.+)")
def _plan(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what or _NOT_A_GOAL.match(what):
        return None
    verb = (m.groupdict().get("v") or "plan").lower()
    if m.groupdict().get("w"):
        verb = "would like"
    lead = {"plan": "Plans", "intend": "Plans", "hope": "Hopes", "want": "Wants", "aim": "Aims",
            "would like": "Would like"}[verb]
    topic = _without(TIME, what) or what
    return _fact("plans", f"plan:{slug(topic)}", f"{lead} to {what}", type=EPISODIC)


@rule(rf"{WE_ARE}(?P<x>(?:flying|going|traveling|travelling|heading|driving|visiting|leaving|starting|getting|"
      r"having|hosting|running|taking|attending|moving|expecting|launching|meeting|seeing|celebrating|graduating|"
      r"retiring|competing|presenting|interviewing)\b.+)",
      r"\b(?:I|we)(?:'ll|\s+will)\s+(?P<y>\w+.+)")
def _dated_plan(m: re.Match[str], clause: str) -> Fact | None:
    """A plan with a time ("I'm flying to Tokyo next week", "Next month I'll start a new job")."""
    what = obj(m.groupdict().get("x") or m["y"])
    if not what or _NOT_A_GOAL.match(what):
        return None
    before = TIME.search(clause[:m.start()])
    if before is None and not TIME.search(what):
        return None
    when = f" {before.group(0).lower()}" if before is not None and not TIME.search(what) else ""
    lead = "Is" if m.groupdict().get("x") else "Will"
    return _fact("plans", f"plan:{slug(_without(TIME, what) or what)}", f"{lead} {what}{when}", type=EPISODIC)


# --- routines -------------------------------------------------------------------------------------------
@rule(r"\bI\s+(?:usually\s+|always\s+|normally\s+)?(?P<v>wake\s+up|get\s+up|go\s+to\s+bed|go\s+to\s+sleep|"
      r"start\s+work|finish\s+work|get\s+off\s+work|have\s+lunch|have\s+dinner|eat\s+dinner|have\s+breakfast)\s+"
      r"(?P<x>(?:at|around|by|before|after)\s+.+)")
def _daily_time(m: re.Match[str], clause: str) -> Fact | None:
    when = obj(m["x"])
    verb, _, rest = " ".join(m["v"].split()).partition(" ")
    return _fact("routines", f"routine:{slug(m['v'])}", f"{cap(verb3(verb))} {rest} {when}") if when else None


@rule(r"\bI\s+(?P<adv>usually|always|normally|typically|generally|often|regularly|frequently|sometimes|never|"
      r"rarely|seldom|tend\s+to)\s+(?P<v>[\w']+)\s*(?P<x>.*)", negated=True)
def _habit(m: re.Match[str], clause: str) -> Fact | None:
    verb = m["v"]
    if verb.lower() in ("am", "was", "do", "don't", "did", "can", "will", "would", "think", "feel", "forget"):
        return None
    rest = obj(m["x"]) if m["x"] else ""
    if m["x"] and rest is None:
        return None
    adverb = " ".join(m["adv"].split())
    negative = adverb.lower() in ("never", "rarely", "seldom")
    phrase = f"Tends to {verb} {rest}" if adverb.lower() == "tend to" else f"{cap(adverb)} {verb3(verb)} {rest}"
    return _fact("routines", f"routine:{slug(verb + ' ' + _without(FREQUENCY, rest or ''))}", phrase.strip(),
                 polarity="negative" if negative else "positive")


_NOT_A_ROUTINE_VERB = frozenset(re.findall(r"\S+", """am was were do don't did can could will would think guess mean
    know feel want need hope wish believe forgot forget see saw said say tell told ask asked have had got get like love
    hate"""))


@rule(r"\b(?:I|we)\s+(?P<v>[a-z]+)\s+(?P<x>.+)")
def _routine(m: re.Match[str], clause: str) -> Fact | None:
    if m["v"].lower() in _NOT_A_ROUTINE_VERB:
        return None
    frequency = FREQUENCY.search(clause)
    if frequency is None or (frequency.start() < m.start() and not re.match(r"^\W*(?:every|each|on)\b",
                                                                           clause[frequency.start():], re.IGNORECASE)):
        return None
    what = obj(m["x"])
    if not what:
        return None
    topic = _without(FREQUENCY, what)
    when = "" if frequency.start() > m.start() else f" {frequency.group(0).lower()}"
    return _fact("routines", f"routine:{slug(m['v'] + ' ' + topic)}", f"{cap(verb3(m['v']))} {what}{when}")


# --- possessions ----------------------------------------------------------------------------------------
_POSSESSION = _alternation(POSSESSIONS)


@rule(r"\b(?:I|we)\s+(?P<v>have|own|'ve\s+got|have\s+got|drive|ride)\s+(?P<x>(?:a|an|two|three|\d+|one|an\s+old|"
      r"a\s+new)\s+.+)",
      r"\b(?:I|we)(?:'ve|\s+have)?\s+(?:just\s+|finally\s+|recently\s+)?(?P<v>bought|purchased|adopted|got)\s+"
      r"(?P<x>(?:a|an|two|\d+|my\s+first|our\s+first)\s+.+)")
def _possession(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what:
        return None
    verb = " ".join(m["v"].split()).lower()
    pet = next((w for w in re.findall(r"[\w-]+", what.lower()) if w in PETS), None)
    thing = re.search(rf"\b(?:{_POSSESSION})\b", what, re.IGNORECASE)
    if pet is not None and verb in ("adopted", "got", "bought"):
        return _fact("pets", f"pets:{PETS[pet]}", f"{cap(verb)} {what}")
    if verb == "adopted":  # people adopt pets (and children) more than anything else
        return _fact("pets", f"pets:{slug(what.split()[-1])}", f"Adopted {what}")
    if verb in ("drive", "ride"):
        return _fact("possessions", "possession:car" if verb == "drive" else f"possession:{slug(what)}",
                     f"{cap(verb3(verb))} {what}")
    if thing is None and verb not in ("own", "bought", "purchased"):
        return None
    head = thing.group(0).lower() if thing else slug(what)
    lead = {"have": "Has", "'ve got": "Has", "have got": "Has", "own": "Owns", "got": "Got"}.get(verb, cap(verb))
    return _fact("possessions", f"possession:{slug(head)}", f"{lead} {what}")


# --- likes and dislikes ---------------------------------------------------------------------------------
@rule(r"\bmy\s+(?:all-time\s+|absolute\s+|current\s+)?favou?rite\s+(?P<what>[\w'-]+(?:\s+[\w'-]+){0,3}?)\s+"
      r"(?:is|are|has\s+to\s+be|would\s+be)\s+(?P<x>.+)",
      r"^(?P<x>[\w'-]+(?:\s+[\w'-]+){0,4}?)\s+(?:is|are)\s+my\s+(?:all-time\s+|absolute\s+)?favou?rite\s+"
      r"(?P<what>[\w'-]+(?:\s+[\w'-]+){0,3})")
def _favorite(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    kind = m["what"].strip()
    if not what or _NOT_AN_OBJECT.match(kind):
        return None
    return _fact("likes", f"favorite:{slug(kind)}", f"Favorite {kind} is {what}")


@rule(r"\bI\s+(?:really\s+|just\s+|honestly\s+)?(?:don't|do\s+not|dont|didn't|no\s+longer)\s+(?:really\s+|much\s+)?"
      r"(?P<v>like|love|enjoy|care\s+for)\s+(?P<x>.+)", negated=True)
def _does_not_like(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what:
        return None
    return _fact("likes", f"likes:{slug(what)}", f"Does not like {what}", polarity="negative")


@rule(r"\bI\s+(?:really\s+|absolutely\s+|kind\s+of\s+|totally\s+|just\s+|honestly\s+)?(?P<v>hate|dislike|detest|"
      r"loathe|can't\s+stand|cannot\s+stand|despise)\s+(?P<x>.+)",
      rf"{IM}not\s+(?P<w>a\s+(?:big\s+|huge\s+)?fan\s+of|into)\s+(?P<x>.+)")
def _dislikes(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what:
        return None
    if m.groupdict().get("w"):
        lead = f"Is not {' '.join(m['w'].split())}"
    else:
        verb = " ".join(m["v"].split()).lower()
        lead = {"hate": "Hates", "dislike": "Dislikes", "detest": "Hates", "loathe": "Hates",
                "despise": "Hates"}.get(verb, "Can't stand")
    return _fact("likes", f"likes:{slug(what)}", f"{lead} {what}", polarity="negative")


@rule(rf"\bI\s+{ADV}(?P<v>like|love|enjoy|adore|prefer)\s+(?P<x>.+)",
      rf"{IM}{ADV}(?P<w>a\s+(?:big\s+|huge\s+)?fan\s+of|into|obsessed\s+with|passionate\s+about|crazy\s+about)\s+(?P<x>.+)")
def _likes(m: re.Match[str], clause: str) -> Fact | None:
    what = obj(m["x"])
    if not what:
        return None
    lead = f"Is {' '.join(m['w'].split())}" if m.groupdict().get("w") else verb3(m["v"].lower()).capitalize()
    topic = re.sub(r"^to\s+", "", what)
    return _fact("likes", f"likes:{slug(_without(FREQUENCY, topic))}", f"{lead} {what}")
