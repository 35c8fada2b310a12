"""Questions with more than one answer, for fitting and checking the relevance floor
(:mod:`memroute.bench.calibrate`): written for the facts of :mod:`memroute.bench.facts`, after the floor was
found hiding real answers to questions like these.

* **indirect**: a question that asks for a category the answer is an instance of ("what do I do for a
  living?" for "I work at a fintech startup called Ledgerly"), often with several facts that answer it;
* **mixed**: one chat message about two or three things at once ("I need a dinner idea. Also, when is my
  thesis due?"), each part answered by a different fact;
* **off-topic**: a message about nothing a tenant holds (every memory it returns is unrelated).

Every indirect or mixed question's answers fall in one split of the quality benchmark (its facts' split:
:func:`memroute.bench.quality.split_of`), so the dev half is fitted and the test half reported; the
off-topic probes alternate between the halves. None of these were written from the tests' fixtures.
"""

from __future__ import annotations

__all__ = ["INDIRECT", "MIXED", "OFF_TOPIC"]

# tenant -> [(question, the keys of every fact that answers it)]
INDIRECT: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "dana": [
        ("What does our tech stack look like?", ("work:language", "work:database", "work:queue")),
        ("What are the team's engineering rules?", ("work:review", "pref:commit", "pref:tests", "work:security")),
        ("What's coming up on my calendar?", ("travel:trip", "work:oncall")),
        ("What do I drink in the morning?", ("pref:coffee",)),
        ("Which country do I live in?", ("home:city",)),
        ("What do I do for a living?", ("work:employer",)),
        ("What's my routine outside work?", ("hobby:climbing", "learning:rust")),
        ("What medical things should a doctor know about me?", ("health:allergy", "food:diet")),
        ("What kind of vehicle do I have?", ("car:ev",)),
        ("How does our infrastructure run in production?", ("work:deploy", "work:observability", "work:api")),
        ("Tell me about my family.", ("family:kids",)),
    ],
    "marco": [
        ("Who supervises my research?", ("study:advisor",)),
        ("What's on my schedule this year?", ("study:deadline", "study:fieldwork", "study:conference")),
        ("Where should I process the big image dataset?", ("tools:compute", "study:data")),
        ("What do I do for fun?", ("hobby:music",)),
        ("Can I get a kitten?", ("pet:none",)),
        ("How do I like charts to look?", ("pref:plots",)),
        ("What is my research about?", ("study:field",)),
        ("Where is home for me?", ("home:city", "home:flat")),
        ("How do I get to work?", ("hobby:cycling",)),
        ("Who is my significant other?", ("family:partner",)),
        ("Any health issue I should tell a diving instructor?", ("health:asthma",)),
        ("What time of day am I most productive?", ("sleep:schedule",)),
    ],
    "priya": [
        ("How big is my team?", ("biz:staff",)),
        ("Where do my customers find us?", ("marketing:channel",)),
        ("What are my business's money worries?", ("money:loan", "biz:rent")),
        ("What are my plans for growth?", ("goal:expansion",)),
        ("Where did the menu ideas come from?", ("family:mother",)),
        ("What happens to leftover loaves?", ("biz:waste",)),
        ("What business do I run?", ("biz:bakery",)),
        ("What is our most popular product?", ("biz:bestseller",)),
        ("When can customers come in?", ("biz:hours",)),
        ("Who handles our accounts?", ("family:husband",)),
        ("What do I grow at home?", ("hobby:garden",)),
        ("What's my next festival event?", ("biz:event",)),
    ],
    "sam": [
        ("What is my profession?", ("work:job",)),
        ("What race am I preparing for?", ("sport:marathon", "sport:pace")),
        ("What does my partner do?", ("family:wife",)),
        ("What computer do I have?", ("tools:laptop",)),
        ("Any injury I should watch?", ("health:knee",)),
        ("What's my side project?", ("hobby:gamedev", "game:project")),
        ("Which students do I teach?", ("work:grades",)),
        ("Where is our house?", ("home:city",)),
        ("Is our pet healthy?", ("pet:cat",)),
        ("Who makes the music for my game?", ("game:music",)),
        ("Where do we spend the holidays?", ("travel:family",)),
        ("What language am I studying?", ("learning:spanish",)),
    ],
}

MIXED: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "dana": [
        ("Help me write a Kafka consumer in our main language. Also, how should you format answers for me?",
         ("work:queue", "work:language", "pref:style")),
        ("Where do I keep the database password? And remind me which Postgres we run.",
         ("work:security", "work:database")),
        ("I'm planning the June trip, who looks after Biscuit? Also which weeks am I on call?",
         ("travel:trip", "pet:dog", "work:oncall")),
        ("Set up a coffee order for the office. Also write tests for my parser.", ("pref:coffee", "pref:tests")),
        ("My boss wants a report on the dashboards migration. Which metrics tools do we use now?",
         ("work:manager", "work:observability")),
        ("Book a restaurant for the kids and me; is there anything I can't eat?", ("family:kids", "food:diet")),
        ("Set up my new laptop with the IDE I like.", ("pref:os", "work:editor")),
        ("I need a weekend plan with some exercise and some study time.", ("hobby:climbing", "learning:rust")),
    ],
    "marco": [
        ("Make me a figure of the temperature logs, and explain the math slowly.",
         ("pref:plots", "study:data", "pref:explanations")),
        ("I need a dinner idea. Also, when is my thesis due?", ("food:diet", "study:deadline")),
        ("Where do I store code and data? And which editor do I use for scripts?",
         ("tools:versioning", "pref:editor")),
        ("Plan my August dives and the poster for the conference.", ("study:fieldwork", "study:conference")),
        ("Write the methods section in my usual tool, and which statistical model do the reviewers expect?",
         ("tools:writing", "study:stats")),
        ("Suggest a cheap weekend trip from my city. Which languages can I use with locals?",
         ("money:budget", "home:city", "lang:spoken")),
        ("Analyse my survey data in my usual language. Also plan a bike route.",
         ("tools:language", "hobby:cycling")),
        ("My girlfriend's birthday is coming; gift ideas on a student budget?", ("family:partner", "money:budget")),
    ],
    "priya": [
        ("Write a post announcing our new location, and keep it in my voice.",
         ("goal:expansion", "pref:tone", "marketing:channel")),
        ("My back is killing me and I have deliveries tomorrow; which vehicle do we use?",
         ("health:back", "car:van")),
        ("Update the website with where our flour comes from.", ("tools:website", "biz:supplier")),
        ("Translate the menu into the language I read best, and list the dishes my mother inspired.",
         ("pref:language", "family:mother")),
        ("Draft a customer email about our opening times.", ("pref:email", "biz:hours")),
        ("Plan a meeting with a coffee shop client, but not in the morning.", ("biz:wholesale", "pref:schedule")),
        ("Make me a vegetarian lunch. Also, can we sell a peanut cookie?", ("food:diet", "biz:allergens")),
        ("How do we take card payments, and what does a sourdough cost?", ("tools:pos", "biz:price")),
    ],
    "sam": [
        ("Plan my long run this weekend in kilometres; my knee has been acting up.",
         ("sport:pace", "health:knee", "pref:units")),
        ("Suggest a playlist for coding tonight and a meal for my training block.", ("pref:music", "food:diet")),
        ("I need new running shoes. Which ones did I buy last time?", ("sport:shoes",)),
        ("Prepare Wednesday's after-school activity and set up Godot on my computer.",
         ("work:club", "tools:laptop", "hobby:gamedev")),
        ("Plan my Sunday: I have marking to do, and we need a cheap family day.", ("work:grading", "money:saving")),
        ("Where should I publish my game, and which tool do I draw sprites in?", ("game:publish", "game:art")),
        ("Write a physics lesson plan; explain with code examples first.", ("work:curriculum", "pref:answers")),
        ("What time do I wake up, and do we visit anyone at Christmas?", ("work:schedule", "travel:family")),
    ],
}

OFF_TOPIC: tuple[str, ...] = (
    "What's the capital of Australia?", "recommend a horror movie", "how do tides work",
    "best chess opening for beginners", "knitting patterns for a scarf", "what is the weather like on Mars",
    "spicy food", "history of the Roman empire", "how to fix a leaking faucet", "jazz albums from the 1950s",
    "origami crane instructions", "how do volcanoes erupt", "how do airplanes stay in the air",
    "who won the football world cup in 1998", "a poem about the ocean", "how many moons does Jupiter have",
)
