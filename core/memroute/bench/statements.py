"""A labelled set of things users tell an assistant, for measuring fact extraction (``memroute bench --learning``).

Written for memroute (not taken from any test fixture): 330 sentences in 16 categories. A positive line names
the slot family its fact must land in (a key prefix) and a word the fact's content must keep, so a fact that
loses its subject ("sushi" for "I love sushi") or lands in the wrong slot does not count. A ``none`` line must
store nothing: questions, hypotheticals, other people's words, statements about the assistant, requests,
chatter. Each sentence falls in ``dev`` or ``test`` by a hash of its text; rules are tuned on dev and the docs
report test.

Format: ``category | sentence | key prefix | word`` (several ``prefix word`` pairs separated by ``;`` when a
sentence states several facts), or ``none | sentence``.
"""

from __future__ import annotations

import hashlib
from typing import Final

import attrs

__all__ = ["STATEMENTS", "Expected", "Statement", "split_of"]


@attrs.frozen(kw_only=True)
class Expected:
    key_prefix: str
    word: str


@attrs.frozen(kw_only=True)
class Statement:
    category: str
    text: str
    expected: tuple[Expected, ...]
    split: str


def split_of(text: str) -> str:
    """``dev`` or ``test``: a fixed half of the set by a hash of the sentence."""
    return "dev" if hashlib.sha256(text.encode("utf-8")).digest()[0] % 2 == 0 else "test"


_RAW: Final = r"""
identity | My name is Priya. | profile:name | Priya
identity | Hi, I'm Tomasz, nice to meet you. | profile:name | Tomasz
identity | Please call me Jo. | profile:preferred_name | Jo
identity | You can call me Alex from now on. | profile:preferred_name | Alex
identity | Everyone calls me Bea, call me Bea too. | profile:preferred_name | Bea
identity | My pronouns are they/them. | profile:pronouns | they
identity | I'm 29 years old. | profile:age | 29
identity | I just turned 40 last week. | profile:age | 40
identity | I'm 67 | profile:age | 67
identity | I'm Brazilian. | profile:nationality | Brazilian
identity | I am Canadian, eh. | profile:nationality | Canadian
identity | I'm Muslim, so please keep that in mind. | profile:religion | Muslim
identity | I'm left-handed. | profile:trait | left-handed
identity | I'm an introvert. | profile:trait | introvert
identity | I'm a night owl. | profile:trait | night owl
identity | My name's Kofi. | profile:name | Kofi
identity | I'm a proud Nigerian. | profile:nationality | Nigerian
identity | Call me Dee, it's short for Deepika. | profile:preferred_name | Dee
identity | I was born in 1988. | profile:birth_year | 1988
identity | I'm Jewish. | profile:religion | Jewish
family | My son's name is Leo. | family:son | Leo
family | My husband is called Omar. | family:husband | Omar
family | I have two kids. | family:children | two
family | We have three daughters. | family:daughter | three
family | My mom lives in Manila. | family:mom | Manila
family | I'm married. | profile:relationship_status | married
family | I'm divorced. | profile:relationship_status | divorced
family | I got engaged last month! | profile:relationship_status | engaged
family | My girlfriend is called Sofia. | family:girlfriend | Sofia
family | I have a twin brother. | family:brother | twin
family | My dad is a retired teacher. | family:dad | teacher
family | I'm a mother of three. | family:children | three
family | I'm an only child. | family:siblings | only child
family | My brother works at Google. | family:brother | Google
family | My partner's name is Jamie. | family:partner | Jamie
family | My grandmother turned 90 yesterday. | family:grandmother | 90
family | I have a baby daughter. | family:daughter | daughter
family | My sister Clara is a vet. | family:sister | Clara
family | I'm single. | profile:relationship_status | single
family | My wife Lena is pregnant with our second child. | family:wife | Lena
work | I work at Spotify. | profile:employer | Spotify
work | I work for a small bakery downtown. | profile:employer | bakery
work | I'm a software engineer at Shopify. | profile:occupation | software engineer
work | I'm a high school teacher. | profile:occupation | teacher
work | I work as a paramedic. | profile:occupation | paramedic
work | I'm a freelance photographer. | profile:occupation | photographer
work | I'm retired. | profile:occupation | retired
work | I just got a job at Deloitte. | profile:employer | Deloitte
work | I started working at the city hospital. | profile:employer | hospital
work | I work from home. | work:schedule | home
work | I work part-time at a library. | profile:employer | library
work | I work in marketing. | work:field | marketing
work | My job is a pharmacist at Boots. | profile:occupation | pharmacist
work | I'm a PhD student in chemistry. | profile:occupation | student
work | I'm unemployed right now. | profile:occupation | unemployed
work | I work weekends at a cafe. | work:schedule | weekends
work | I'm an electrician. | profile:occupation | electrician
work | I work at the post office as a clerk. | profile:employer | post office
work | I'm a product manager at a fintech startup. | profile:occupation | product manager
work | I'm self-employed. | profile:occupation | self-employed
place | I live in Toronto. | profile:location | Toronto
place | We live in a small village near Porto. | profile:location | Porto
place | I'm based in Nairobi. | profile:location | Nairobi
place | I just moved to Denver. | profile:location | Denver
place | We relocated to Singapore in May. | profile:location | Singapore
place | I'm from Kerala. | profile:origin | Kerala
place | I'm originally from Buenos Aires. | profile:origin | Buenos Aires
place | I grew up in rural Ohio. | profile:hometown | Ohio
place | I was born in Seoul. | profile:birthplace | Seoul
place | I used to live in London. | profile:previous_location | London
place | I come from a fishing town in Norway. | profile:origin | Norway
place | I currently live in Austin, Texas. | profile:location | Austin
place | We moved into a new apartment in Lyon. | profile:location | Lyon
place | I'm living in Tokyo for now. | profile:location | Tokyo
place | I reside in Zurich. | profile:location | Zurich
place | I'm moving to Madrid next month. | plan:move | Madrid
place | We're relocating to Perth this summer. | plan:move | Perth
place | My hometown is Gdansk. | profile:location | Gdansk
place | I live with my parents in Cairo. | profile:location | Cairo
place | I've lived in Berlin for ten years. | profile:location | Berlin
health | I'm allergic to shellfish. | diet:allergy:shellfish | shellfish
health | I have a severe nut allergy. | diet:allergy | nut
health | I'm allergic to penicillin. | diet:allergy:penicillin | penicillin
health | I'm allergic to cats and dust. | diet:allergy:cats | cats; diet:allergy:dust | dust
health | I'm lactose intolerant. | diet:intolerance:lactose | lactose
health | I have celiac disease. | diet:intolerance | celiac
health | I have asthma. | health:condition:asthma | asthma
health | I have type 1 diabetes. | health:condition:diabetes | diabetes
health | I suffer from migraines. | health:condition | migraines
health | I was diagnosed with ADHD last year. | health:condition | ADHD
health | I'm diabetic. | health:diabetic | diabetic
health | I'm pregnant. | health:pregnant | pregnant
health | I wear glasses. | health:glasses | glasses
health | I have high blood pressure. | health:condition | blood pressure
health | I'm recovering from knee surgery. | health:condition | knee surgery
health | I have anxiety. | health:condition:anxiety | anxiety
health | I'm hard of hearing. | health:hard_of_hearing | hearing
health | I'm colorblind. | health:colorblind | colorblind
health | I live with chronic back pain. | health:condition | back pain
health | I have an allergy to bee stings. | diet:allergy | bee stings
diet | I'm vegan. | diet:regime | vegan
diet | I'm a vegetarian. | diet:regime | vegetarian
diet | I'm pescatarian. | diet:regime | pescatarian
diet | I eat halal. | diet:regime | halal
diet | I keep kosher. | diet:regime | kosher
diet | I'm on a keto diet. | diet:regime | keto
diet | I don't eat red meat. | diet:avoid | red meat
diet | I never eat pork. | diet:avoid | pork
diet | I don't drink alcohol. | diet:avoid | alcohol
diet | I can't eat gluten. | diet:avoid | gluten
diet | I don't drink coffee after noon. | diet:avoid | coffee
diet | I'm gluten-free. | diet:regime | gluten-free
diet | I no longer eat sugar. | diet:avoid | sugar
diet | I follow a plant-based diet. | diet:regime | plant-based
diet | I'm mostly vegetarian. | diet:regime | vegetarian
diet | I don't eat anything spicy. | diet:avoid | spicy
diet | I'm on a low-carb diet. | diet:regime | low-carb
diet | I can't drink milk. | diet:avoid | milk
diet | I eat kosher. | diet:regime | kosher
diet | I don't eat fish. | diet:avoid | fish
pets | I have a dog named Biscuit. | pets:dog | Biscuit
pets | My cat's name is Luna. | pets:cat | Luna
pets | I have two rabbits. | pets:rabbit | rabbits
pets | We adopted a rescue greyhound. | pets | greyhound
pets | I just adopted a kitten. | pets:kitten | kitten
pets | My dog is called Pepper. | pets:dog | Pepper
pets | I have a parrot that talks. | pets:parrot | parrot
pets | I own three horses. | pets:horse | horses
pets | My hamster's name is Nibbles. | pets:hamster | Nibbles
pets | I have an old cat called Whiskers. | pets:cat | Whiskers
pets | We got a puppy last week. | pets:puppy | puppy
pets | My turtle is 30 years old. | pets:turtle | 30
pets | I've got two goldfish. | pets:goldfish | goldfish
pets | I have a bearded dragon. | pets | bearded dragon
pets | Our dog Max is a golden retriever. | pets:dog | Max
possessions | I drive a Tesla Model 3. | possession:car | Tesla
possessions | I own a small sailboat. | possession | sailboat
possessions | I just bought a house in the suburbs. | possession:house | house
possessions | I have a vintage motorcycle. | possession:motorcycle | motorcycle
possessions | I bought a new MacBook. | possession | MacBook
possessions | I have a piano at home. | possession:piano | piano
possessions | We own a cabin in the mountains. | possession:cabin | cabin
possessions | I ride a Vespa to work. | possession | Vespa
possessions | I have an old Toyota truck. | possession:truck | Toyota
possessions | I have a 3D printer. | possession | printer
possessions | I own a coffee shop. | possession | coffee shop
possessions | I got a new bike for my birthday. | possession:bike | bike
possessions | I have a garden with tomatoes. | possession:garden | garden
possessions | I drive an electric Kia. | possession:car | Kia
possessions | We bought a camper van. | possession | camper
languages | I speak French. | language:french | French
languages | I speak Hindi and English. | language:hindi | Hindi; language:english | English
languages | I'm fluent in German. | language:german | German
languages | My native language is Polish. | language:native | Polish
languages | I'm a native Spanish speaker. | language:native | Spanish
languages | I'm learning Korean. | learning:korean | Korean
languages | I speak a little Italian. | language:italian | Italian
languages | I'm studying Arabic at night school. | learning | Arabic
languages | I can speak Mandarin. | language:mandarin | Mandarin
languages | I'm taking classes in Portuguese. | learning | Portuguese
languages | My first language is Tagalog. | language:native | Tagalog
languages | I'm conversational in Dutch. | language:dutch | Dutch
languages | I've been learning Swedish for two years. | learning:swedish | Swedish
languages | I speak Russian fluently. | language:russian | Russian
languages | I'm practicing my Japanese every day. | learning | Japanese
study | I'm studying nursing. | learning | nursing
study | I study computer science at McGill. | education:study | computer science
study | I'm majoring in economics. | education:study | economics
study | I graduated from Stanford in 2015. | education:degree | Stanford
study | I have a master's degree in biology. | education:degree | biology
study | I'm learning to play the guitar. | learning | guitar
study | I'm good at chess. | skill | chess
study | I know how to sail. | skill | sail
study | I can play the violin. | skill | violin
study | I'm taking a course in data science. | learning | data science
study | I'm really good at math. | skill | math
study | I've been coding in Rust for three years. | skill | Rust
study | I'm learning to drive. | learning | drive
study | I can knit. | skill | knit
study | I'm an expert in tax law. | skill | tax law
plans | I'm flying to Lisbon on Friday. | plan | Lisbon
plans | I'm planning to run a marathon next year. | plan | marathon
plans | I plan to learn to swim this summer. | plan | swim
plans | We're getting married in June. | plan | married
plans | I have a job interview tomorrow. | plan | interview
plans | I'm starting a new job next Monday. | plan | new job
plans | I want to visit Iceland someday. | plan | Iceland
plans | I'd love to open a bakery one day. | plan | bakery
plans | Next week I'm visiting my parents in Goa. | plan | Goa
plans | I'm hoping to buy a house next year. | plan | house
plans | I'll be in Paris next week. | plan | Paris
plans | I have a dentist appointment on Thursday. | plan | dentist
plans | We're expecting a baby in March. | plan | baby
plans | I'm taking the bar exam in July. | plan | bar exam
plans | I intend to retire at 60. | plan | retire
dates | My birthday is on July 4th. | profile:birthday | July
dates | My birthday is 12 May. | profile:birthday | May
dates | I was born on September 9th. | profile:birthday | September
dates | Our anniversary is October 2nd. | date:anniversary | October
dates | My wedding is in August. | date:wedding | August
dates | My exam is on the 14th. | date:exam | 14th
dates | My flight leaves at 6am tomorrow. | date:flight | 6am
dates | My surgery is next Tuesday. | date:surgery | Tuesday
dates | My daughter's birthday is in April. | family:daughter | April
dates | My graduation is on June 20. | date:graduation | June
dates | My due date is in November. | date:due_date | November
dates | My interview is at 3pm on Monday. | date:interview | Monday
dates | My wedding anniversary is December 1st. | date:wedding_anniversary | December
dates | My vacation starts on Saturday. | date:vacation | Saturday
dates | My presentation is on Wednesday. | date:presentation | Wednesday
routines | I go running every morning. | routine | running
routines | I usually wake up at 5:30. | routine:wake_up | 5:30
routines | I go to bed around midnight. | routine:go_to_bed | midnight
routines | I swim twice a week. | routine | swim
routines | I meditate every evening. | routine | meditate
routines | I always take the train to work. | routine | train
routines | I usually work out after work. | routine | work out
routines | I work night shifts. | work:schedule | night shifts
routines | Every Sunday I call my grandmother. | routine | grandmother
routines | I never drink coffee at night. | routine | coffee
routines | I go to the farmers market on Saturdays. | routine | farmers market
routines | I walk my dog twice a day. | routine | dog
routines | I often cook dinner for my roommates. | routine | cook
routines | I play football on weekends. | hobby | football
routines | I take the kids to school every morning. | routine | school
likes | I love sushi. | likes:sushi | sushi
likes | I really enjoy hiking. | likes:hiking | hiking
likes | I hate horror movies. | likes:horror_movies | horror movies
likes | I don't like cilantro. | likes:cilantro | cilantro
likes | My favorite band is Radiohead. | favorite:band | Radiohead
likes | My favourite food is ramen. | favorite:food | ramen
likes | I'm a big fan of the Lakers. | likes | Lakers
likes | I can't stand loud music. | likes | loud music
likes | I prefer tea over coffee. | likes | tea
likes | I love reading science fiction. | likes | science fiction
likes | I'm into rock climbing. | likes | rock climbing
likes | Jazz is my favorite kind of music. | favorite | Jazz
likes | I dislike crowded places. | likes | crowded places
likes | I'm not a fan of spicy food. | likes | spicy food
likes | I adore my garden. | likes | garden
assistant | Please keep your answers short. | assistant:length | short
assistant | I prefer short answers. | assistant:length | short
assistant | Always answer in Portuguese. | assistant:language | Portuguese
assistant | From now on, reply in French. | assistant:language | French
assistant | Don't use emojis. | assistant:format | emojis
assistant | Please don't use bullet points. | assistant:format | bullet points
assistant | I like detailed explanations. | assistant:length | detailed
assistant | Always include code examples. | assistant | code examples
assistant | I prefer responses in plain English. | assistant | plain English
assistant | Please never use jargon. | assistant:format | jargon
assistant | Keep responses brief. | assistant:length | brief
assistant | I'd prefer it if you asked before making changes. | assistant | asked before
assistant | I want concise answers. | assistant:length | concise
assistant | Always show your sources. | assistant | sources
assistant | I'd like you to always use metric units. | assistant | metric
decisions | I'll use Postgres for the backend. | decision | Postgres
decisions | I'm going with React for the frontend. | decision | React
decisions | I chose the blue carpet. | decision | blue carpet
decisions | I decided to go with the cheaper plan. | decision | cheaper plan
decisions | I picked the Lisbon apartment. | decision | Lisbon
decisions | I'll go with option B. | decision | option B
decisions | I've settled on a name for the shop: Crumbs. | decision | Crumbs
decisions | I switched to Linux. | decision | Linux
decisions | I opted for the train instead of flying. | decision | train
decisions | I'm going to use Stripe for payments. | decision | Stripe
none | Am I allergic to anything? | |
none | Do I live in Lisbon? | |
none | What's my name? | |
none | Where do I work? | |
none | Can you remind me what my daughter is called? | |
none | If I moved to Spain, would I need a visa? | |
none | If I were vegan, what would I eat for protein? | |
none | Suppose I have a dog, how often should I walk it? | |
none | I wish I lived by the sea. | |
none | Imagine I'm a pilot. | |
none | My friend said "I'm allergic to cats". | |
none | She told me she lives in Rome. | |
none | He says he works at Google. | |
none | My boss thinks I'm lazy. | |
none | According to my doctor I should walk more. | |
none | You are really helpful. | |
none | I like your answer. | |
none | I love how you explained that. | |
none | I think you're wrong about that. | |
none | Your last reply was too long. | |
none | Explain how a hash map works. | |
none | Translate this into Spanish. | |
none | Write a poem about autumn. | |
none | Summarize the article above. | |
none | How do I reverse a list in Python? | |
none | What is the capital of Australia? | |
none | Can you help me with my essay? | |
none | Give me three ideas for dinner. | |
none | Tell me a joke. | |
none | Fix this code please. | |
none | Thanks! | |
none | Hello there. | |
none | ok got it | |
none | Sounds good. | |
none | lol | |
none | Yes please. | |
none | Great, thanks a lot! | |
none | Good morning! | |
none | Bye for now. | |
none | I have a question. | |
none | I think so. | |
none | I'm not sure. | |
none | I love it! | |
none | I see. | |
none | I'm a bit tired today. | |
none | I guess that makes sense. | |
none | I want to know how DNS works. | |
none | I'd like you to write a cover letter. | |
none | I need you to check this spreadsheet. | |
none | I want to understand recursion. | |
none | I don't understand. | |
none | I'm confused by this error. | |
none | I'll try that. | |
none | I'm done for today. | |
none | I'm here. | |
none | I'll think about it. | |
none | Don't call me that. | |
none | What should I cook tonight? | |
none | Should I learn Rust or Go? | |
none | How can I improve my sleep? | |
none | Why does my code crash? | |
none | Is it safe to eat raw eggs? | |
none | Which laptop should I buy? | |
none | The weather is nice today. | |
none | That movie sounds interesting. | |
none | Can you call me Sam? | |
none | Would I like Japan? | |
none | What if I lived in Canada? | |
none | My brother asked "do you like sushi?" | |
none | They said I'm a natural. | |
none | I'm going to ask you something. | |
none | I want to see an example. | |
none | I'd love to hear your thoughts. | |
none | I'm happy with that. | |
none | I'm ready. | |
none | I like that idea. | |
none | I hate when this happens. | |
none | I have no idea. | |
none | I have to go. | |
none | I was wondering about that. | |
none | I need a summary of this text. | |
none | I'll send you the file. | |
none | I mean the second one. | |
none | Let me think. | |
none | Okay, next question. | |
none | Please continue. | |
none | Never mind. | |
none | Pretend I'm your customer. | |
none | If I had a cat I would call it Tom. | |
none | Do you think I should move to Berlin? | |
none | Can I use Postgres for this? | |
none | You should always use TypeScript. | |
"""


def _parse(raw: str) -> tuple[Statement, ...]:
    statements = []
    for line in raw.strip().splitlines():
        category, text, *rest = (part.strip() for part in line.split(" | "))
        expected: list[Expected] = []
        if category != "none":
            for pair in " | ".join(rest).split("; "):
                prefix, word = (part.strip() for part in pair.split(" | ")) if " | " in pair else pair.split(" ", 1)
                expected.append(Expected(key_prefix=prefix, word=word))
        statements.append(Statement(category=category, text=text, expected=tuple(expected), split=split_of(text)))
    return tuple(statements)


STATEMENTS: Final = _parse(_RAW)
