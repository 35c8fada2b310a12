"""A deterministic retrieval-quality data set: four tenants, each with facts worth finding, two queries per
fact (a *lexical* one sharing content words with the fact, and a *semantic* paraphrase sharing almost none),
and 1,200 realistic distractor memories per tenant that share vocabulary with the facts (so the keyword leg
is noisy, as it is in real use). Generated from templates with a fixed seed; no network, no files."""

from __future__ import annotations

import random
from collections.abc import Iterator

import attrs

__all__ = ["DISTRACTORS_PER_TENANT", "Fact", "Query", "TENANTS", "distractors", "facts", "queries"]

DISTRACTORS_PER_TENANT = 1200


@attrs.frozen
class Fact:
    tenant: str
    key: str
    content: str
    lexical: str
    semantic: str


@attrs.frozen
class Query:
    tenant: str
    text: str
    kind: str  # "lexical" | "semantic"
    answer_key: str


# tenant -> [(key, fact, lexical query, semantic query)]
_FACTS: dict[str, list[tuple[str, str, str, str]]] = {
    "dev-alice": [
        ("pref:typescript", "Prefers TypeScript over plain JavaScript for frontend code",
         "does she prefer TypeScript or JavaScript for the frontend?", "which typed language should the web UI be written in?"),
        ("decision:postgres", "Decided to use Postgres as the database for the invoicing service",
         "what database did we choose for the invoicing service?", "where will billing records be stored?"),
        ("pattern:commit", "Always commits before pushing and writes small commits",
         "how does she handle commits before pushing?", "what is her version control habit?"),
        ("aversion:python", "Dislikes Python for large projects because of dynamic typing",
         "what does she think of Python for large projects?", "which scripting language does she avoid for big codebases?"),
        ("pref:vim", "Uses Neovim with the LazyVim configuration as her editor",
         "which Neovim configuration does she use?", "what text editor setup does she code in?"),
        ("fact:timezone", "Lives in Lisbon and works on Western European Time",
         "which city does Alice live in, Lisbon?", "what time zone should meetings be scheduled in?"),
        ("pref:tabs", "Prefers two-space indentation and no tabs in source files",
         "what indentation does she prefer, two-space?", "how should code be formatted regarding whitespace?"),
        ("decision:kubernetes", "Chose to deploy the API on Kubernetes with Helm charts",
         "how is the API deployed, Kubernetes with Helm?", "what container orchestration runs the backend?"),
        ("pattern:review", "Reviews pull requests every morning before standup",
         "when does she review pull requests?", "what does she do first thing in the workday?"),
        ("pref:dark", "Likes dark themes in every tool and terminal",
         "does she like dark themes?", "what color scheme should the interface use?"),
        ("fact:allergy", "Is allergic to peanuts",
         "is Alice allergic to peanuts?", "are there any foods she must never eat?"),
        ("pref:testing", "Prefers pytest fixtures over unittest classes when testing Python",
         "pytest fixtures or unittest classes?", "how does she like to structure test code?"),
        ("decision:rust", "Decided to rewrite the image resizer in Rust for speed",
         "which component is being rewritten in Rust?", "what part of the system is getting a faster low-level reimplementation?"),
        ("fact:cat", "Has a cat named Miso",
         "what is the name of her cat?", "does she have any pets at home?"),
        ("pref:coffee", "Drinks flat white coffee with oat milk",
         "how does she take her coffee, oat milk?", "what should I order for her at the cafe?"),
    ],
    "chef-bob": [
        ("pref:knife", "Prefers a Japanese gyuto knife for most kitchen prep",
         "which knife does he prefer for prep, the gyuto?", "what blade does he reach for when chopping vegetables?"),
        ("aversion:cilantro", "Hates cilantro and never puts it in dishes",
         "does Bob hate cilantro?", "which herb should be left out of his food?"),
        ("decision:menu", "Decided the autumn menu will feature roasted squash risotto",
         "what will the autumn menu feature?", "which seasonal dish is planned for the fall?"),
        ("pattern:stock", "Makes chicken stock every Sunday morning",
         "when does he make chicken stock?", "what is his weekend kitchen routine?"),
        ("fact:restaurant", "Runs a small bistro called Le Petit Four in Lyon",
         "what is the name of Bob's bistro in Lyon?", "where does he work and what is the place called?"),
        ("pref:cast-iron", "Likes cooking steak in a cast iron skillet",
         "what skillet does he use for steak, cast iron?", "how does he sear red meat?"),
        ("fact:lactose", "Is lactose intolerant",
         "is he lactose intolerant?", "can he drink milk without problems?"),
        ("decision:supplier", "Chose Ferme Dubois as the new vegetable supplier",
         "who is the new vegetable supplier?", "which farm delivers his produce now?"),
        ("pattern:sharpen", "Always sharpens his knives on a whetstone on Fridays",
         "when does he sharpen knives on the whetstone?", "how does he maintain his cutting tools?"),
        ("pref:wine", "Enjoys natural Beaujolais wine with dinner",
         "which wine does he enjoy with dinner?", "what should be poured for him at the evening meal?"),
        ("fact:staff", "Employs four line cooks and one pastry chef",
         "how many line cooks does he employ?", "how big is his kitchen team?"),
        ("aversion:microwave", "Avoids using the microwave for reheating sauces",
         "does he use the microwave for sauces?", "how should leftovers of gravy be warmed up?"),
        ("pref:salt", "Prefers flaky sea salt for finishing dishes",
         "what salt does he use for finishing?", "what goes on top of a plate right before serving?"),
        ("decision:closed", "Decided the bistro will be closed on Mondays",
         "which day is the bistro closed?", "when can staff take their weekly rest?"),
        ("fact:book", "Is writing a cookbook about regional French soups",
         "what is his cookbook about?", "what publishing project is he working on?"),
    ],
    "runner-carol": [
        ("goal:marathon", "Is training for the Berlin marathon in September",
         "which marathon is she training for?", "what long race is on her calendar this autumn?"),
        ("pref:shoes", "Prefers Hoka Clifton shoes for long runs",
         "which shoes does she prefer for long runs?", "what footwear does she wear for endurance training?"),
        ("pattern:intervals", "Does interval training on the track every Tuesday",
         "when does she do interval training on the track?", "what is her weekly speed workout?"),
        ("fact:injury", "Recovered from a stress fracture in her left foot last year",
         "what injury did she have in her left foot?", "has she had any bone problems from running?"),
        ("aversion:gels", "Dislikes sugary energy gels during races",
         "does she like energy gels during races?", "what fuel should not be offered to her mid-race?"),
        ("pref:morning", "Likes running early in the morning before sunrise",
         "when does she like running, early morning?", "at what time of day does she usually train?"),
        ("decision:coach", "Decided to hire a coach named Sam for the season",
         "who did she hire as a coach?", "is anyone guiding her training plan?"),
        ("fact:pb", "Has a half marathon personal best of 1 hour 38 minutes",
         "what is her half marathon personal best?", "how fast can she cover twenty-one kilometres?"),
        ("pattern:stretch", "Always stretches for ten minutes after every run",
         "does she stretch after every run?", "what does she do to cool down?"),
        ("pref:watch", "Uses a Garmin Forerunner watch to track pace",
         "which watch tracks her pace, the Garmin?", "what device records her training data?"),
        ("fact:vegetarian", "Is vegetarian and gets protein from lentils and tofu",
         "is Carol vegetarian?", "what should her post-workout meal not contain?"),
        ("decision:trail", "Chose to run a trail ultra in the Alps next summer",
         "which ultra will she run in the Alps?", "what mountain race is planned for next year?"),
        ("pref:music", "Listens to podcasts rather than music while running",
         "does she listen to podcasts or music while running?", "what does she have in her earbuds during training?"),
        ("pattern:rest", "Takes a full rest day every Friday",
         "which day is her rest day?", "when does she skip training completely?"),
        ("fact:club", "Is a member of the Riverside Striders running club",
         "which running club is she a member of?", "does she train with a group?"),
    ],
    "student-dan": [
        ("fact:major", "Studies mechanical engineering at Delft University",
         "what does Dan study at Delft?", "what degree programme is he enrolled in?"),
        ("pref:notes", "Prefers taking handwritten notes on a reMarkable tablet",
         "does he take handwritten notes on the reMarkable?", "how does he record what is said in lectures?"),
        ("decision:thesis", "Decided his thesis topic is wind turbine blade fatigue",
         "what is his thesis topic about wind turbine blades?", "what will his final research project investigate?"),
        ("pattern:library", "Studies in the university library every evening",
         "where does he study every evening?", "where can he usually be found after dinner?"),
        ("aversion:group", "Dislikes group projects with unclear roles",
         "what does he think of group projects?", "what kind of teamwork frustrates him?"),
        ("fact:job", "Works part time as a bicycle mechanic on weekends",
         "what is his part time job on weekends?", "how does he earn money besides studying?"),
        ("pref:matlab", "Likes MATLAB for simulations more than Excel",
         "does he prefer MATLAB or Excel for simulations?", "which tool does he use to model systems numerically?"),
        ("fact:dorm", "Lives in student housing with three roommates",
         "how many roommates does he live with?", "what is his living situation?"),
        ("decision:exchange", "Chose to do an exchange semester in Tokyo",
         "where will he do his exchange semester?", "which foreign city will he study in?"),
        ("pattern:flashcards", "Reviews Anki flashcards every day for Japanese",
         "does he review Anki flashcards?", "how is he learning the language for his trip abroad?"),
        ("pref:tea", "Drinks green tea instead of coffee when studying",
         "does he drink green tea or coffee?", "what hot drink keeps him going during exams?"),
        ("fact:scholarship", "Received a merit scholarship covering half of his tuition",
         "what scholarship did he receive?", "how is his education being funded?"),
        ("aversion:mornings", "Hates early morning lectures",
         "how does he feel about early morning lectures?", "which classes does he find hardest to attend?"),
        ("decision:laptop", "Decided to buy a ThinkPad laptop running Linux",
         "which laptop did he decide to buy?", "what computer will he use for coursework?"),
        ("fact:sister", "Has an older sister who is a doctor in Utrecht",
         "what does his sister do in Utrecht?", "does he have siblings and what are their careers?"),
    ],
}

TENANTS = tuple(_FACTS)

# Distractor templates per tenant: realistic memories sharing vocabulary with that tenant's facts.
_SHARED = [
    "Mentioned the weather in {city} was {weather} on {day}",
    "Had a call with {person} about {topic} on {day}",
    "Read an article about {topic} during lunch",
    "Bought {item} from an online shop on {day}",
    "Watched a documentary about {topic} in the evening",
    "Planned to visit {city} with {person} sometime next month",
    "Asked for a summary of {topic} news from last week",
    "Wants to learn more about {topic} eventually",
    "Noted that {person} recommended a book on {topic}",
    "Said the {item} arrived late and was damaged",
]
_TENANT_TEMPLATES: dict[str, list[str]] = {
    "dev-alice": [
        "Fixed a {lang} bug in the {service} module on {day}",
        "Paired with {person} on the {service} migration",
        "Opened a pull request to refactor the {service} tests",
        "Discussed whether {lang} is a good fit for the {service} team",
        "Reported that CI for the {service} repository was slow on {day}",
        "Upgraded the {tool} dependency in the {service} project",
        "Wrote documentation for the {service} API endpoints",
        "Benchmarked the {service} queries against the {tool} cache",
        "Reviewed a design document about {service} observability",
        "Asked how to configure {tool} for the {service} deployment",
    ],
    "chef-bob": [
        "Ordered {amount} kilos of {ingredient} for the weekend service",
        "Tested a new recipe with {ingredient} and {ingredient2}",
        "Said the {ingredient} delivery from the market was late on {day}",
        "Trained {person} on plating the {dish}",
        "Adjusted the price of the {dish} on the lunch menu",
        "Cleaned the walk-in fridge and threw out old {ingredient}",
        "Asked about wine pairings for {dish}",
        "Had a complaint that the {dish} was too salty on {day}",
        "Repaired the {equipment} in the kitchen",
        "Took inventory of {ingredient} and {ingredient2} on {day}",
    ],
    "runner-carol": [
        "Ran {km} kilometres at an easy pace on {day}",
        "Logged a {km} km tempo run with {person}",
        "Complained about sore calves after the {km} km run on {day}",
        "Looked at {gear} reviews online",
        "Registered for a {km} km charity race in {city}",
        "Tracked heart rate zones during the {km} km run",
        "Asked for a stretching routine for tight hamstrings",
        "Bought new {gear} for winter training",
        "Ran the {km} km loop around the park with the club on {day}",
        "Said the track was flooded on {day}",
    ],
    "student-dan": [
        "Submitted the {course} assignment on {day}",
        "Studied for the {course} exam with {person}",
        "Asked for help with a {course} problem set",
        "Said the {course} lecture on {day} was confusing",
        "Borrowed a {course} textbook from the library",
        "Wrote a lab report about {topic2} for {course}",
        "Missed the {course} tutorial on {day} because of work",
        "Joined a study group for {course}",
        "Got a grade of {grade} on the {course} midterm",
        "Emailed the {course} professor about the deadline",
    ],
}
_FILL = {
    "city": ["Lisbon", "Lyon", "Berlin", "Delft", "Tokyo", "Porto", "Utrecht", "Madrid", "Oslo", "Vienna"],
    "weather": ["rainy", "sunny", "windy", "foggy", "cold", "humid"],
    "day": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "person": ["Sam", "Priya", "Jonas", "Marta", "Kenji", "Lea", "Omar", "Ines", "Tom", "Yuki"],
    "topic": ["climate policy", "electric cars", "space launches", "urban gardening", "chess openings",
              "medieval history", "jazz piano", "board games", "photography", "birdwatching"],
    "item": ["a desk lamp", "headphones", "a backpack", "a water bottle", "a phone case", "a notebook"],
    "lang": ["JavaScript", "Python", "Go", "TypeScript", "Java", "Rust", "SQL"],
    "service": ["billing", "search", "auth", "notifications", "reporting", "checkout", "invoicing", "upload"],
    "tool": ["Redis", "Docker", "Terraform", "webpack", "Grafana", "Postgres", "Kafka"],
    "amount": ["five", "ten", "twenty", "three"],
    "ingredient": ["squash", "butter", "shallots", "mushrooms", "lamb", "cream", "garlic", "thyme", "leeks"],
    "ingredient2": ["lemon", "parsley", "chestnuts", "pears", "walnuts", "rice", "saffron"],
    "dish": ["onion soup", "duck confit", "tarte tatin", "beef stew", "mushroom risotto", "fish pie"],
    "equipment": ["oven door", "dishwasher", "ice machine", "extractor fan", "mixer"],
    "km": ["5", "8", "10", "12", "15", "21", "25", "30"],
    "gear": ["running socks", "a rain jacket", "trail shoes", "a headlamp", "compression tights"],
    "course": ["thermodynamics", "statics", "calculus", "materials science", "fluid mechanics", "control theory"],
    "topic2": ["beam deflection", "heat transfer", "gear ratios", "welding strength", "vibration damping"],
    "grade": ["7", "8", "6", "9"],
}


def facts() -> list[Fact]:
    return [Fact(tenant, key, content, lexical, semantic)
            for tenant, rows in _FACTS.items() for key, content, lexical, semantic in rows]


def queries() -> list[Query]:
    out = []
    for fact in facts():
        out.append(Query(fact.tenant, fact.lexical, "lexical", fact.key))
        out.append(Query(fact.tenant, fact.semantic, "semantic", fact.key))
    return out


def distractors(tenant: str, count: int = DISTRACTORS_PER_TENANT, seed: int = 7) -> Iterator[tuple[str, str]]:
    """``count`` distinct ``(key, content)`` distractors for ``tenant``."""
    rng = random.Random(f"{seed}:{tenant}")
    templates = _TENANT_TEMPLATES[tenant] + _SHARED
    seen: set[str] = set()
    while len(seen) < count:
        template = rng.choice(templates)
        text = template.format(**{name: rng.choice(values) for name, values in _FILL.items()})
        if text in seen:
            continue
        seen.add(text)
        yield f"note:{len(seen):05d}", text
