"""The conversation benchmark's evidence: four pairs of friends, the turns in which they told each other
something worth remembering, and the questions those turns answer.

Written for memroute's benchmark (never tuned on by the retrieval code it measures; the split is fixed by a
hash, :func:`memroute.bench.conversations.split_of`). The rest of each conversation is real chat from the
``chitchat-dataset`` package. Each evidence turn is ``(id, speaker, session, text)``: ``session`` is the
0-based session it is said in. Each question is ``(text, evidence ids)``; a question may need two turns
(both count in recall). Questions name the person, as a user of a memory system asks about someone.
"""

from __future__ import annotations

__all__ = ["DIALOGUES", "Dialogue"]

Turn = tuple[str, str, int, str]
Question = tuple[str, tuple[str, ...]]
Dialogue = tuple[tuple[str, str], tuple[Turn, ...], tuple[Question, ...]]

DIALOGUES: dict[str, Dialogue] = {
    "maya-tom": (
        ("Maya", "Tom"),
        (
            ("m1", "Maya", 3, "Big news, I finally signed the lease on a flat in Porto, moving there in April!"),
            ("m2", "Maya", 9, "The new place is tiny but the balcony looks right over the river"),
            ("m3", "Tom", 5, "I started cello lessons last week, my teacher says my bowing is a disaster lol"),
            ("m4", "Tom", 12, "Recital went fine! Played the Bach prelude without stopping once"),
            ("m5", "Maya", 7, "I can't have gluten anymore, the doctor confirmed it's celiac"),
            ("m6", "Tom", 4, "My sister Hannah just had twins, a boy and a girl"),
            ("m7", "Maya", 15, "Quit the agency today. Going freelance as an illustrator from next month"),
            ("m8", "Maya", 18, "First freelance client is a children's book publisher, so excited"),
            ("m9", "Tom", 10, "We adopted a greyhound from the rescue, her name is Pepper"),
            ("m10", "Tom", 20, "Pepper hates the rain, she refuses to go out when it pours"),
            ("m11", "Maya", 22, "Booked two weeks in Japan for October, Kyoto then Osaka"),
            ("m12", "Tom", 14, "Ran my first half marathon on Sunday, 1:52, my legs are dead"),
        ),
        (
            ("Which city did Maya move to?", ("m1",)),
            ("What does Maya's new flat overlook?", ("m2",)),
            ("What instrument is Tom learning?", ("m3",)),
            ("What piece did Tom perform at his recital?", ("m4",)),
            ("Why does Maya avoid bread and pasta?", ("m5",)),
            ("Who in Tom's family had twins?", ("m6",)),
            ("What does Maya do for work now?", ("m7", "m8")),
            ("What kind of dog did Tom get?", ("m9",)),
            ("What does Tom's dog dislike?", ("m10",)),
            ("Where is Maya travelling in the autumn?", ("m11",)),
            ("How fast did Tom run his half marathon?", ("m12",)),
            ("What is the name of Tom's dog?", ("m9", "m10")),
        ),
    ),
    "priya-daniel": (
        ("Priya", "Daniel"),
        (
            ("p1", "Priya", 2, "I got the job at the hospital! Starting as a pharmacist on the oncology ward"),
            ("p2", "Daniel", 6, "Sold my old Corolla, I'm biking to work every day now"),
            ("p3", "Priya", 8, "My parents are flying in from Chennai for Diwali"),
            ("p4", "Daniel", 11, "I've been learning Portuguese on the app for 200 days straight"),
            ("p5", "Priya", 13, "I'm allergic to cats, my eyes swell up in minutes"),
            ("p6", "Daniel", 16, "Finally finished building the treehouse for the kids"),
            ("p7", "Priya", 4, "Joined a climbing gym near work, bouldering twice a week"),
            ("p8", "Priya", 19, "Sent my first V4 problem yesterday!!"),
            ("p9", "Daniel", 9, "Our landlord is selling, so we have to move out by June"),
            ("p10", "Daniel", 21, "We bought a house in the suburbs with a big garden"),
            ("p11", "Priya", 17, "Started reading Middlemarch for book club, it's massive"),
            ("p12", "Daniel", 23, "My brother Luis is getting married in Mexico City in December"),
        ),
        (
            ("What is Priya's job?", ("p1",)),
            ("How does Daniel get to work?", ("p2",)),
            ("Where do Priya's parents live?", ("p3",)),
            ("What language is Daniel studying?", ("p4",)),
            ("Why can't Priya stay at a friend's place with a kitten?", ("p5",)),
            ("What did Daniel build for his children?", ("p6",)),
            ("What sport does Priya do?", ("p7", "p8")),
            ("Why did Daniel have to leave his rented home?", ("p9",)),
            ("Where did Daniel end up living?", ("p10",)),
            ("Which novel is Priya reading for her book club?", ("p11",)),
            ("Whose wedding is Daniel going to?", ("p12",)),
            ("Where is Daniel's brother's wedding?", ("p12",)),
        ),
    ),
    "lena-marco": (
        ("Lena", "Marco"),
        (
            ("l1", "Lena", 3, "I'm vegetarian now, three months without meat"),
            ("l2", "Marco", 5, "Our startup closed its seed round, 2 million euros"),
            ("l3", "Lena", 7, "Started a pottery class on Thursday evenings, made a wonky mug"),
            ("l4", "Marco", 8, "Broke my wrist skateboarding, cast for six weeks"),
            ("l5", "Lena", 10, "My grandmother turned 90, the whole family went to Salzburg"),
            ("l6", "Marco", 12, "Switched the backend from Node to Go, way fewer crashes"),
            ("l7", "Lena", 14, "I'm training for a triathlon in Zell am See next summer"),
            ("l8", "Marco", 16, "I'm moving to Berlin for the new office"),
            ("l9", "Marco", 20, "The Berlin apartment is in Kreuzberg, near the canal"),
            ("l10", "Lena", 18, "Adopted two rabbits, Clover and Biscuit"),
            ("l11", "Lena", 22, "Got my driving licence on the third try haha"),
            ("l12", "Marco", 24, "I'm lactose intolerant so please no cheese board for me"),
        ),
        (
            ("What diet does Lena follow?", ("l1",)),
            ("How much money did Marco's startup raise?", ("l2",)),
            ("What hobby did Lena pick up on weeknights?", ("l3",)),
            ("How did Marco get injured?", ("l4",)),
            ("Where was Lena's grandmother's birthday celebrated?", ("l5",)),
            ("What programming language does Marco's team use now?", ("l6",)),
            ("What race is Lena preparing for?", ("l7",)),
            ("Which neighbourhood does Marco live in?", ("l9",)),
            ("Why did Marco relocate?", ("l8",)),
            ("What are the names of Lena's pets?", ("l10",)),
            ("When did Lena pass her driving test?", ("l11",)),
            ("What can't Marco eat?", ("l12",)),
        ),
    ),
    "sam-aiko": (
        ("Sam", "Aiko"),
        (
            ("s1", "Aiko", 2, "Started teaching Japanese at the community college"),
            ("s2", "Sam", 4, "I'm colorblind, red and green look the same to me"),
            ("s3", "Aiko", 6, "We're expecting a baby in March!"),
            ("s4", "Aiko", 19, "It's a girl, we named her Hana"),
            ("s5", "Sam", 8, "Bought a used sailboat, a 26 foot sloop, needs a lot of work"),
            ("s6", "Sam", 11, "Got promoted to head chef at the restaurant"),
            ("s7", "Aiko", 13, "My husband Kenji is a firefighter, the night shifts are rough"),
            ("s8", "Sam", 15, "I play bass in a punk band on weekends"),
            ("s9", "Aiko", 17, "I'm terrified of flying so we're taking the train to Vancouver"),
            ("s10", "Sam", 21, "Ran out of money for the boat repairs, so I'm selling it"),
            ("s11", "Sam", 23, "My mom moved in with us after her surgery"),
        ),
        (
            ("What subject does Aiko teach?", ("s1",)),
            ("What vision problem does Sam have?", ("s2",)),
            ("What is the name of Aiko's daughter?", ("s4",)),
            ("When is Aiko's baby due?", ("s3",)),
            ("What boat does Sam own?", ("s5",)),
            ("What is Sam's position at work?", ("s6",)),
            ("What does Aiko's husband do for a living?", ("s7",)),
            ("Which instrument does Sam play?", ("s8",)),
            ("How is Aiko getting to Vancouver, and why?", ("s9",)),
            ("What happened to Sam's sailboat?", ("s5", "s10")),
            ("Who lives with Sam now?", ("s11",)),
            ("Does Sam cook for a living?", ("s6",)),
        ),
    ),
}
