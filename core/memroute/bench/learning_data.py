"""Multi-session conversations for ``memroute bench --learning``, written for memroute.

Eight users talk to an assistant over four sessions each. Their turns are of three kinds: *evidence* (something
about themselves or their world that a later question asks about), *requests and chatter* to the assistant
(shared by every user), and real chat turns from the ``chitchat-dataset`` package mixed in as everyday filler
(``pip install 'memroute[bench]'``). Each evidence turn has one question in other words. Users alternate
between ``dev`` and ``test``; the docs report test.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CHATTER", "PEOPLE"]

# (evidence turn, question whose answer is in it); the order is the order they are said in.
PEOPLE: Final[dict[str, list[tuple[str, str]]]] = {
    "maya": [
        ("Hi, I'm Maya. I live in Lisbon and I work as a nurse at the children's hospital.", "What is my job?"),
        ("I'm allergic to peanuts, so please never suggest satay.", "Which nut am I allergic to?"),
        ("My daughter Ana starts primary school in September.", "When does Ana begin school?"),
        ("We finally adopted a cat last weekend, a grey one called Mochi.", "What is the name of our pet?"),
        ("I've been doing night shifts all month and I'm exhausted.", "What kind of shifts have I been working?"),
        ("My husband Rui is a chef and he hates when I cook pasta.", "What does my husband do for a living?"),
        ("I'm learning Japanese for our trip to Kyoto in April.", "Which language am I studying?"),
        ("The dentist said I need a crown on a back tooth.", "What did the dentist say I need?"),
        ("We moved to Berlin in January because Rui got a job there.", "Which city do we live in now?"),
        ("My favorite band is Radiohead, I saw them live twice.", "Which group do I like most?"),
        ("I run 5k along the river every Saturday morning.", "What do I do on Saturday mornings?"),
        ("My mother is coming to stay with us for Christmas.", "Who is visiting for the holidays?"),
    ],
    "omar": [
        ("I'm Omar, a data engineer at Acme, mostly working with Spark.", "Where do I work?"),
        ("I'm vegetarian since college, no meat or fish.", "Do I eat fish?"),
        ("My wife Leila is expecting twins in May!", "When are the babies due?"),
        ("I play the oud in a small band on Thursday nights.", "What instrument do I play?"),
        ("I drive an old Volvo that keeps breaking down.", "What car do I have?"),
        ("I'm training for the Berlin marathon in September.", "Which race am I preparing for?"),
        ("Our landlord raised the rent by 15 percent this year.", "How much did the rent go up?"),
        ("I speak Arabic, French and some German.", "Which languages do I speak?"),
        ("I have mild asthma, so I carry an inhaler when I run.", "Do I have any medical condition?"),
        ("My brother Karim just opened a falafel shop in Lyon.", "What business did my brother start?"),
        ("I switched our pipelines from Airflow to Dagster last quarter.", "Which orchestration tool do we use now?"),
        ("I hate flying, I take the train whenever I can.", "How do I prefer to travel?"),
    ],
    "lena": [
        ("My name is Lena and I'm a high school chemistry teacher in Graz.", "What subject do I teach?"),
        ("I'm lactose intolerant, oat milk only for me.", "What milk can I drink?"),
        ("My son Felix broke his arm skateboarding yesterday.", "What happened to Felix?"),
        ("We're renovating the kitchen, the contractor starts in two weeks.",
         "What part of the house is being redone?"),
        ("I sing in a choir every Tuesday evening.", "What do I do on Tuesday evenings?"),
        ("I've been reading a lot of Ursula Le Guin lately.", "Which author have I been reading?"),
        ("My birthday is on November 12th.", "When is my birthday?"),
        ("I'm thinking about switching to teaching online next year.", "What career change am I considering?"),
        ("My dog Bruno is a twelve year old beagle with bad hips.", "What breed is my dog?"),
        ("I grew up on a farm near Salzburg.", "Where did I spend my childhood?"),
        ("I can't stand horror movies, comedies are more my thing.", "What kind of films do I dislike?"),
        ("Please keep your answers short, I read them on my phone.", "How long should the answers be?"),
    ],
    "jun": [
        ("I'm Jun, I just started a PhD in marine biology in Hobart.", "What am I studying?"),
        ("I'm allergic to shellfish, which is ironic for a marine biologist.", "What seafood can't I eat?"),
        ("My girlfriend Mei lives in Taipei so we do long distance.", "Where does my girlfriend live?"),
        ("I go diving at the reef every other weekend for my research.", "How often do I dive?"),
        ("I bought a second-hand kayak for paddling on the Derwent.", "What boat did I buy?"),
        ("My supervisor wants the first chapter draft by March 1st.", "When is my chapter draft due?"),
        ("I'm a terrible cook, I mostly live on instant noodles.", "What do I usually eat?"),
        ("My parents run a tea shop in Tainan.", "What business do my parents have?"),
        ("I speak Mandarin and Taiwanese at home.", "What languages do I use with family?"),
        ("I'm flying home to Taiwan for Lunar New Year.", "Where am I going for the new year?"),
        ("I love bouldering, I go to the climbing gym three times a week.", "Which sport do I do at the gym?"),
        ("My laptop died and I lost two weeks of data.", "What happened to my computer?"),
    ],
    "sofia": [
        ("Hey, I'm Sofia. I work for a small architecture firm in Milan.", "What kind of company employs me?"),
        ("I'm pregnant with our first child, due in August.", "When is my baby due?"),
        ("My partner Luca is a cyclist and races on weekends.", "What sport does Luca do?"),
        ("I have celiac disease, so everything must be gluten-free.", "What do I need to avoid in food?"),
        ("We're buying a flat in the Navigli district.", "Which neighbourhood are we buying in?"),
        ("I restore old furniture as a hobby.", "What is my hobby?"),
        ("My grandmother taught me to make gnocchi when I was six.", "Who taught me to cook gnocchi?"),
        ("I'm terrible with deadlines when I'm stressed.", "What do I struggle with under stress?"),
        ("My favorite architect is Lina Bo Bardi.", "Which architect do I admire most?"),
        ("I take the tram to work every day.", "How do I get to work?"),
        ("My sister Giulia is getting married in Sicily in June.", "Whose wedding is in June?"),
        ("From now on, always answer in Italian please.", "Which language should replies be in?"),
    ],
    "kwame": [
        ("I'm Kwame, a software developer at a fintech in Accra.", "What industry do I work in?"),
        ("I'm diabetic, type 2, diagnosed last spring.", "What condition was I diagnosed with?"),
        ("My daughter Esi plays the violin in the school orchestra.", "What instrument does Esi play?"),
        ("I coach a youth football team on Sunday afternoons.", "What do I do on Sunday afternoons?"),
        ("We're planning a family trip to Cape Coast in December.", "Where is the family trip going?"),
        ("I used to live in Manchester for eight years.", "Which English city did I live in?"),
        ("My wife Ama runs a small catering business.", "What does Ama do?"),
        ("I prefer TypeScript for everything on the backend.", "Which language do I favour for backend work?"),
        ("I don't drink alcohol at all.", "Do I drink beer?"),
        ("My car got stolen from the office parking lot last month.", "What happened to my car?"),
        ("I'm reading a biography of Kwame Nkrumah.", "Whose biography am I reading?"),
        ("I wake up at 5am to pray and then go for a walk.", "What time do I get up?"),
    ],
    "ines": [
        ("I'm Ines, a retired judge living in Seville.", "What was my profession?"),
        ("I have three grandchildren, the youngest is two.", "How many grandchildren do I have?"),
        ("My knee replacement surgery is scheduled for October 3rd.", "When is my operation?"),
        ("I paint watercolours of the river most mornings.", "What do I paint?"),
        ("My late husband Manuel loved flamenco.", "What music did Manuel love?"),
        ("I volunteer at the food bank on Wednesdays.", "Where do I volunteer?"),
        ("I don't eat red meat anymore, doctor's orders.", "What meat do I avoid?"),
        ("My son Pablo lives in Boston and works at a hospital.", "Where does Pablo live?"),
        ("I'm learning English with an app every evening.", "What language am I practising?"),
        ("I have a parrot called Lola who whistles tangos.", "What bird do I keep?"),
        ("We're going to Portugal for Easter, to Porto.", "Where am I going at Easter?"),
        ("I find modern art completely baffling.", "What kind of art don't I understand?"),
    ],
    "dev": [
        ("I'm Dev, a freelance illustrator working from home in Pune.", "Where do I work from?"),
        ("I'm vegan and I mostly cook South Indian food.", "What diet do I follow?"),
        ("My roommate Arjun is moving out at the end of the month.", "Who is moving out?"),
        ("I have two cats, Pixel and Byte.", "What are my cats called?"),
        ("I draw comics for a webzine every week.", "What do I draw every week?"),
        ("My grandfather taught me chess, I still play online daily.", "Which board game do I play online?"),
        ("I'm saving up for a new drawing tablet.", "What am I saving for?"),
        ("My sister Priya is a doctor in Chennai.", "What does Priya do?"),
        ("I got a commission from a publisher for a children's book!", "What project did the publisher give me?"),
        ("I have migraines when I stare at screens too long.", "What health problem do screens give me?"),
        ("I'm going to Goa next week with college friends.", "Where am I travelling next week?"),
        ("Don't use emojis in your replies, please.", "What should be left out of replies?"),
    ],
}

CHATTER: Final[tuple[str, ...]] = (
    "Hi!", "Hello again", "thanks", "Thanks, that helps a lot!", "ok", "got it", "sounds good", "great, thank you",
    "Explain how a hash map works", "Translate 'good morning' into German", "Write a haiku about rain",
    "What is the capital of Canada?", "How do I reverse a list in Python?", "Summarize that in one line",
    "Can you give me a recipe for pancakes?", "Why is the sky blue?", "Tell me a joke", "What's 15% of 80?",
    "Define entropy in simple terms", "How many ounces are in a pound?", "Give me three synonyms for happy",
    "lol", "perfect", "ok, next question", "Never mind.", "Can you check this sentence for typos?",
)
