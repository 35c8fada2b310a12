"""The conversation benchmark's questions of time and people: for each pair of friends of
:data:`memroute.bench.dialogues.DIALOGUES`, turns that tell the same kind of thing twice, and questions that
only the time or the person they name tells apart.

Written for memroute's benchmark, before the retrieval code that reads times and people was tuned (on the dev
half; the split is the same hash rule as the other questions, per tenant and category). Each turn is ``(id,
speaker, session, text)`` as in :mod:`memroute.bench.dialogues`; sessions are 14 days apart from Sunday 7
January 2024 (session 13 is 7 July 2024). Each question is ``(text, evidence ids, category, asked)``:
``category`` is ``time`` (the question names when it was said; the *confuser*, the same speaker on the same
topic in an earlier session, is outside that time) or ``person`` (the question names who said it; the confuser is
the other friend on the same topic). ``asked`` is ``(session, days after it)``: the question is asked at noon
that day, and its time words are relative to that moment; a ``person`` question is asked after the last session.
"""

from __future__ import annotations

__all__ = ["CUE_QUESTIONS", "CUE_TURNS", "CueQuestion"]

Turn = tuple[str, str, int, str]
CueQuestion = tuple[str, tuple[str, ...], str, tuple[int, int]]
AFTER_LAST = (25, 0)
"""When a ``person`` question is asked: the day the 26th session would be, after every session."""

CUE_TURNS: dict[str, tuple[Turn, ...]] = {
    "maya-tom": (
        ("mt-c1", "Maya", 2, "Dentist visit today, just a cleaning, all fine"),
        ("mt-t1", "Maya", 13, "Ugh, the dentist says I need a root canal next week"),
        ("mt-c2", "Tom", 6, "Tried the new ramen place on King Street, pretty average"),
        ("mt-t2", "Tom", 17, "The ramen place by the station is amazing, best broth ever"),
        ("mt-c3", "Maya", 8, "My laptop keeps crashing whenever I open big files"),
        ("mt-t3", "Maya", 19, "Finally replaced my laptop, got a refurbished one with 32 gigs of RAM"),
        ("mt-c4", "Tom", 3, "Went to my cousin's wedding, the band was terrible"),
        ("mt-t4", "Tom", 11, "Jake's wedding was beautiful, they danced to Elvis"),
        ("mt-c5", "Maya", 5, "Watched an old Hitchcock film at home, Rear Window still holds up"),
        ("mt-t5", "Maya", 21, "Saw Dune Part Two at the cinema, the sound was incredible"),
        ("mt-c6", "Tom", 9, "Cooked a lasagna for the team lunch, it disappeared in minutes"),
        ("mt-t6", "Tom", 23, "Made my grandmother's goulash recipe for the first time, took five hours"),
        ("mt-c7", "Maya", 10, "My phone screen cracked when I dropped it on the tram"),
        ("mt-t7", "Tom", 10, "I dropped my phone in the lake, it's totally dead"),
        ("mt-t8", "Maya", 14, "I'm reading a thriller about a heist in Lisbon"),
        ("mt-c8", "Tom", 16, "Reading a biography of Nikola Tesla, fascinating guy"),
        ("mt-t9", "Tom", 7, "My parents are visiting for Easter, need to clean everything"),
        ("mt-c9", "Maya", 8, "My parents want to come over for my birthday in May"),
        ("mt-t10", "Maya", 20, "I've been doing yoga every morning before work"),
        ("mt-c10", "Tom", 18, "Started going to the gym at lunchtime, leg day is brutal"),
    ),
    "priya-daniel": (
        ("pd-c1", "Priya", 3, "Had a flat tyre on the way to work, changed it in the rain"),
        ("pd-t1", "Priya", 14, "Someone scratched my car in the hospital car park"),
        ("pd-c2", "Daniel", 5, "The kids had chickenpox, a week of itching and crying"),
        ("pd-t2", "Daniel", 18, "Both kids caught the flu, we're all on the sofa"),
        ("pd-c3", "Priya", 6, "Went to a Carnatic music concert with my aunt"),
        ("pd-t3", "Priya", 22, "Saw Coldplay at the stadium, I lost my voice from singing"),
        ("pd-c4", "Daniel", 2, "Painted the kids' room blue, took the whole weekend"),
        ("pd-t4", "Daniel", 12, "Retiled the bathroom myself, my knees are wrecked"),
        ("pd-c5", "Priya", 9, "My cousin got engaged in Bangalore"),
        ("pd-t5", "Priya", 20, "My cousin Meera had her baby, a little boy"),
        ("pd-c6", "Daniel", 7, "Our team lost the five-a-side final on penalties"),
        ("pd-t6", "Daniel", 15, "We won the five-a-side league, first trophy in ten years"),
        ("pd-c7", "Priya", 12, "I'm thinking of learning to play the sitar"),
        ("pd-t7", "Daniel", 12, "I bought a cheap ukulele to learn over the summer"),
        ("pd-c8", "Daniel", 19, "My dad had a knee operation, he's recovering at our place"),
        ("pd-t8", "Priya", 20, "My dad retired from the bank after 35 years"),
        ("pd-c9", "Priya", 10, "We're planning a road trip along the coast to Goa"),
        ("pd-t9", "Daniel", 11, "Thinking of a camping trip in the Rockies with the kids"),
        ("pd-c10", "Daniel", 22, "I gave up coffee, switched to green tea"),
        ("pd-t10", "Priya", 23, "Trying to drink less coffee, down to one cup a day"),
    ),
    "lena-marco": (
        ("lm-c1", "Lena", 2, "Hiked up the Untersberg, the view was all fog"),
        ("lm-t1", "Lena", 13, "Did the Grossglockner trail with my brother, stunning glacier views"),
        ("lm-c2", "Marco", 4, "Pitched to three investors, none of them bit"),
        ("lm-t2", "Marco", 17, "Signed our biggest customer yet, a logistics company in Hamburg"),
        ("lm-c3", "Lena", 6, "Repainted my bike frame mint green"),
        ("lm-t3", "Lena", 19, "My bike got stolen from outside the library"),
        ("lm-c4", "Marco", 3, "Started a Korean drama, ten episodes in one weekend"),
        ("lm-t4", "Marco", 11, "Binged the whole new season of The Bear in two nights"),
        ("lm-c5", "Lena", 9, "My sister visited from Graz for a weekend"),
        ("lm-t5", "Lena", 21, "My sister announced she's moving to Canada"),
        ("lm-c6", "Marco", 5, "Burned the risotto, the smoke alarm went off"),
        ("lm-t6", "Marco", 23, "Made fresh pasta from scratch for the first time, tagliatelle"),
        ("lm-t7", "Lena", 15, "I switched to a standing desk, my back is thankful"),
        ("lm-c7", "Marco", 15, "Got an ergonomic chair for the office, finally"),
        ("lm-t8", "Marco", 9, "My nephew is staying with me for the summer"),
        ("lm-c8", "Lena", 10, "My niece learned to ride a bike"),
        ("lm-t9", "Lena", 17, "I'm allergic to penicillin, found out the hard way"),
        ("lm-c9", "Marco", 18, "Turns out I'm allergic to wasps, had a scary reaction"),
        ("lm-t10", "Marco", 21, "I'm learning chess online, mostly losing"),
        ("lm-c10", "Lena", 22, "Joined a chess club that meets on Tuesday nights"),
    ),
    "sam-aiko": (
        ("sa-c1", "Aiko", 4, "Our car failed its inspection, the brakes again"),
        ("sa-t1", "Aiko", 14, "We finally bought a hybrid and traded in the old car"),
        ("sa-c2", "Sam", 5, "Catered a wedding for 200 people, never again"),
        ("sa-t2", "Sam", 18, "We got a glowing review in the city paper for the tasting menu"),
        ("sa-c3", "Aiko", 7, "My students put on a tea ceremony demo"),
        ("sa-t3", "Aiko", 22, "My class won the regional speech contest in Japanese"),
        ("sa-c4", "Sam", 3, "Our band played a bar gig, six people came"),
        ("sa-t4", "Sam", 12, "The band opened for a bigger act at the Commodore, packed house"),
        ("sa-c5", "Aiko", 20, "Hana has her first tooth"),
        ("sa-t5", "Aiko", 23, "Hana took her first steps today!"),
        ("sa-c6", "Sam", 9, "Went fishing at dawn, caught nothing but a cold"),
        ("sa-t6", "Sam", 16, "Caught a huge salmon off the pier, enough for the whole staff"),
        ("sa-c7", "Sam", 13, "My knee is acting up, the doctor says it's tendinitis"),
        ("sa-t7", "Aiko", 13, "My wrist hurts from grading, probably carpal tunnel"),
        ("sa-c8", "Aiko", 9, "Kenji and I are redoing the garden, lots of vegetables"),
        ("sa-t8", "Sam", 10, "Started growing chillies and herbs on the restaurant roof"),
        ("sa-c9", "Sam", 20, "Thinking about going back to school for a business degree"),
        ("sa-t9", "Aiko", 21, "I might do a master's in linguistics next year"),
        ("sa-c10", "Aiko", 24, "We're visiting my parents in Osaka for New Year"),
        ("sa-t10", "Sam", 24, "Spending the holidays at my brother's in Seattle"),
    ),
}

CUE_QUESTIONS: dict[str, tuple[CueQuestion, ...]] = {
    "maya-tom": (
        ("What did Maya say about the dentist last week?", ("mt-t1",), "time", (13, 3)),
        ("Which ramen place did Tom talk about yesterday?", ("mt-t2",), "time", (17, 1)),
        ("What did Maya say about her computer in September?", ("mt-t3",), "time", (21, 0)),
        ("How was the wedding Tom went to two weeks ago?", ("mt-t4",), "time", (11, 10)),
        ("What film did Maya see three days ago?", ("mt-t5",), "time", (21, 3)),
        ("What did Tom cook on November 24?", ("mt-t6",), "time", (24, 0)),
        ("How did Tom break his phone?", ("mt-t7",), "person", AFTER_LAST),
        ("What book is Maya reading?", ("mt-t8",), "person", AFTER_LAST),
        ("When are Tom's parents coming to stay?", ("mt-t9",), "person", AFTER_LAST),
        ("What workout routine does Maya follow?", ("mt-t10",), "person", AFTER_LAST),
    ),
    "priya-daniel": (
        ("What happened to Priya's car last week?", ("pd-t1",), "time", (14, 3)),
        ("What were Daniel's kids sick with yesterday?", ("pd-t2",), "time", (18, 1)),
        ("Which concert did Priya go to in November?", ("pd-t3",), "time", (24, 0)),
        ("What home project did Daniel finish two weeks ago?", ("pd-t4",), "time", (12, 10)),
        ("What news about her cousin did Priya share three days ago?", ("pd-t5",), "time", (20, 3)),
        ("How did Daniel's football team do on August 4?", ("pd-t6",), "time", (16, 0)),
        ("What instrument does Daniel want to learn?", ("pd-t7",), "person", AFTER_LAST),
        ("What happened with Priya's father?", ("pd-t8",), "person", AFTER_LAST),
        ("Where is Daniel planning to travel?", ("pd-t9",), "person", AFTER_LAST),
        ("What did Priya change about her coffee habit?", ("pd-t10",), "person", AFTER_LAST),
    ),
    "lena-marco": (
        ("Where did Lena go hiking last week?", ("lm-t1",), "time", (13, 3)),
        ("What business news did Marco share yesterday?", ("lm-t2",), "time", (17, 1)),
        ("What happened to Lena's bike in September?", ("lm-t3",), "time", (21, 0)),
        ("What show was Marco watching two weeks ago?", ("lm-t4",), "time", (11, 10)),
        ("What did Lena say about her sister three days ago?", ("lm-t5",), "time", (21, 3)),
        ("What dish did Marco make on November 24?", ("lm-t6",), "time", (24, 0)),
        ("What did Lena change in her home office?", ("lm-t7",), "person", AFTER_LAST),
        ("Who is staying with Marco?", ("lm-t8",), "person", AFTER_LAST),
        ("What is Lena allergic to?", ("lm-t9",), "person", AFTER_LAST),
        ("How is Marco learning chess?", ("lm-t10",), "person", AFTER_LAST),
    ),
    "sam-aiko": (
        ("What did Aiko say about their car last week?", ("sa-t1",), "time", (14, 3)),
        ("What good news did Sam have about the restaurant yesterday?", ("sa-t2",), "time", (18, 1)),
        ("What did Aiko's students achieve in November?", ("sa-t3",), "time", (24, 0)),
        ("How did Sam's band's show go two weeks ago?", ("sa-t4",), "time", (12, 10)),
        ("What milestone did Aiko's daughter reach three days ago?", ("sa-t5",), "time", (23, 3)),
        ("What did Sam catch on August 18?", ("sa-t6",), "time", (17, 0)),
        ("What health problem did Aiko mention?", ("sa-t7",), "person", AFTER_LAST),
        ("What is Sam growing?", ("sa-t8",), "person", AFTER_LAST),
        ("What does Aiko want to study?", ("sa-t9",), "person", AFTER_LAST),
        ("Where is Sam going for the holidays?", ("sa-t10",), "person", AFTER_LAST),
    ),
}
