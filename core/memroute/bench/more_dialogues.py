"""The conversation benchmark's second batch of facts questions: for each pair of friends of
:data:`memroute.bench.dialogues.DIALOGUES`, more turns worth remembering and 13 more questions, asked indirectly,
the way people ask about someone they know (52 in all: 100 facts questions with the first 48).

Written for memroute's benchmark after the first 48 had been used to tune the static model's settings, and
before multilingual-e5-small's were chosen (on the dev half). A question may be answered by a turn of the first
batch. The split follows the first batch's rule, applied to this batch apart (each tenant's new questions, ordered
by a hash of tenant and text, alternate between ``dev`` and ``test``), so no question of the first batch changes
side. Turns and questions have the shapes of :mod:`memroute.bench.dialogues`.
"""

from __future__ import annotations

from memroute.bench.dialogues import Question, Turn

__all__ = ["MORE_QUESTIONS", "MORE_TURNS"]

MORE_TURNS: dict[str, tuple[Turn, ...]] = {
    "maya-tom": (
        ("m13", "Tom", 1, "Started at the bike shop on Elm Road this week, mostly fixing gears and brakes"),
        ("m14", "Maya", 2, "My brother Felipe is sleeping on my sofa until he finds his own place"),
        ("m15", "Tom", 6, "Back from my grandpa's farm in Wales, we sheared sheep all weekend"),
        ("m16", "Maya", 11, "Passed my Portuguese B1 exam!! all those evening classes paid off"),
        ("m17", "Tom", 13, "Finally got glasses, turns out I'm really short-sighted"),
        ("m18", "Maya", 16, "I've been sketching at the botanical garden every Saturday morning"),
        ("m19", "Tom", 17, "Joined a community orchestra, we rehearse Tuesday nights in a church hall"),
        ("m20", "Maya", 19, "The landlord finally fixed the boiler after three weeks of cold showers"),
        ("m21", "Tom", 21, "Turns out I'm allergic to ibuprofen, my face swelled up at the clinic"),
        ("m22", "Maya", 23, "Got a tattoo of a swallow on my wrist, my mum is not impressed"),
        ("m23", "Tom", 24, "We're thinking about getting a second dog, maybe another greyhound"),
    ),
    "priya-daniel": (
        ("p13", "Daniel", 1, "I'm an electrician, been wiring houses for fifteen years"),
        ("p14", "Priya", 5, "My husband Arjun got a job offer in Singapore, we're thinking about it"),
        ("p15", "Daniel", 7, "Sofia lost her first tooth, the tooth fairy paid two dollars"),
        ("p16", "Priya", 10, "I switched to night shifts this month, sleeping during the day is weird"),
        ("p17", "Daniel", 13, "Doctor says my blood pressure is high, so I'm cutting down on salt"),
        ("p18", "Priya", 15, "We decided to stay, Arjun turned down the Singapore offer"),
        ("p19", "Daniel", 18, "I coach my son's under-9 basketball team on Saturdays"),
        ("p20", "Priya", 20, "I've been volunteering at the food bank on Sunday afternoons"),
        ("p21", "Daniel", 22, "Got a chocolate lab puppy for the new garden, the kids named him Bruno"),
        ("p22", "Priya", 24, "Booked a trip to Iceland in February to see the northern lights"),
    ),
    "lena-marco": (
        ("l13", "Marco", 1, "Our cofounder Ines handles sales, I do all the engineering"),
        ("l14", "Lena", 2, "I work as a physiotherapist at a sports clinic, mostly knees and shoulders"),
        ("l15", "Marco", 6, "My girlfriend Julia plays violin with the city orchestra"),
        ("l16", "Lena", 9, "My knee has been acting up since the ski trip"),
        ("l17", "Marco", 11, "Learning German properly before the move, half an hour every morning"),
        ("l18", "Lena", 13, "Finally painted my flat green, feels like living in a forest"),
        ("l19", "Marco", 19, "Hired our first three engineers, my calendar is all interviews"),
        ("l20", "Lena", 19, "Clover got sick and we had to rush her to the vet at midnight"),
        ("l21", "Marco", 21, "Bought a vintage Vespa to get around Berlin"),
        ("l22", "Lena", 23, "My brother Felix is doing his PhD in chemistry in Vienna"),
    ),
    "sam-aiko": (
        ("s12", "Sam", 1, "Culinary school was brutal but I graduated top of my class"),
        ("s13", "Aiko", 3, "I grew up on a tiny island off Okinawa, there was only one school"),
        ("s14", "Sam", 5, "Broke up with Jess, we wanted different things"),
        ("s15", "Aiko", 9, "Kenji and I are doing up an old house in the hills, the roof leaks"),
        ("s16", "Sam", 12, "Started dating a nurse called Rosa, we met at the farmers market"),
        ("s17", "Aiko", 14, "Started knitting a blanket for the baby, yellow and white"),
        ("s18", "Sam", 16, "The band is recording an EP in my friend's garage"),
        ("s19", "Aiko", 20, "Hana sleeps through the night now, finally"),
        ("s20", "Sam", 22, "Rosa and I are moving in together next month"),
        ("s21", "Aiko", 24, "I'm going back to teaching part-time in January"),
    ),
}

MORE_QUESTIONS: dict[str, tuple[Question, ...]] = {
    "maya-tom": (
        ("Where does Tom work these days?", ("m13",)),
        ("Who has been crashing at Maya's place?", ("m14",)),
        ("What did Tom get up to at his grandfather's farm?", ("m15",)),
        ("Has Maya got anywhere with the local language?", ("m16",)),
        ("What did Tom find out about his eyesight?", ("m17",)),
        ("How does Maya spend her Saturday mornings?", ("m18",)),
        ("Does Tom play music with other people?", ("m19",)),
        ("What was broken in Maya's flat?", ("m20",)),
        ("Which painkiller should Tom stay away from?", ("m21",)),
        ("What did Maya get inked?", ("m22",)),
        ("Is Tom planning to add another pet?", ("m23",)),
        ("Can Maya eat regular pizza?", ("m5",)),
        ("How many babies did Tom's sister have?", ("m6",)),
    ),
    "priya-daniel": (
        ("What does Daniel do for a living?", ("p13",)),
        ("Is Priya's family moving abroad?", ("p14", "p18")),
        ("What milestone did Daniel's daughter reach?", ("p15",)),
        ("When does Priya sleep these days?", ("p16",)),
        ("What health worry does Daniel have?", ("p17",)),
        ("What is Priya's husband called?", ("p14",)),
        ("Which team does Daniel coach?", ("p19",)),
        ("How does Priya spend her Sunday afternoons?", ("p20",)),
        ("Do Daniel's kids have a pet?", ("p21",)),
        ("Where is Priya going to see the aurora?", ("p22",)),
        ("Which patients does Priya work with at the hospital?", ("p1",)),
        ("Does Daniel still own a car?", ("p2",)),
        ("Which festival are Priya's parents coming for?", ("p3",)),
    ),
    "lena-marco": (
        ("Who looks after sales at Marco's company?", ("l13",)),
        ("What is Lena's job?", ("l14",)),
        ("What does Marco's partner do?", ("l15",)),
        ("Did Lena hurt herself on holiday?", ("l16",)),
        ("How is Marco getting ready for life in Germany?", ("l17",)),
        ("What colour are the walls in Lena's flat?", ("l18",)),
        ("Is Marco's startup growing?", ("l19",)),
        ("What happened to one of Lena's rabbits?", ("l20",)),
        ("How does Marco get around the city?", ("l21",)),
        ("What is Lena's brother studying?", ("l22",)),
        ("Does Lena still eat steak?", ("l1",)),
        ("Why did Marco have his arm in a cast?", ("l4",)),
        ("Would Marco enjoy a cheese fondue?", ("l12",)),
    ),
    "sam-aiko": (
        ("Where did Sam learn to cook?", ("s12",)),
        ("Where did Aiko grow up?", ("s13",)),
        ("Is Sam seeing anyone?", ("s16", "s20")),
        ("Why did Sam's last relationship end?", ("s14",)),
        ("What's wrong with Aiko's house?", ("s15",)),
        ("What is Aiko making for the baby?", ("s17",)),
        ("What is Sam's band working on?", ("s18",)),
        ("How is Aiko's daughter sleeping?", ("s19",)),
        ("What does Sam's girlfriend do for work?", ("s16",)),
        ("When is Aiko going back to work?", ("s21",)),
        ("Can Sam tell red from green?", ("s2",)),
        ("Is Aiko a nervous flyer?", ("s9",)),
        ("Does Aiko's husband work nights?", ("s7",)),
    ),
}
