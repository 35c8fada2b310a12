"""The word lists the ``everyday`` extractor checks a phrase's head word against.

A rule such as "I'm a X" or "I have a X" fires on far more chatter than facts ("I'm a bit tired", "I have a
question"); it becomes a fact only when X is a known occupation, relative, pet, condition, possession or
event. The lists are small and plain on purpose: a word missing here loses one fact, a word too many stores
chatter.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CONDITIONS", "DIETS", "EVENTS", "LANGUAGES", "NATIONALITIES", "OCCUPATIONS", "PETS", "POSSESSIONS",
    "RELATIVES", "RELIGIONS", "TRAITS", "plural_of",
]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


OCCUPATIONS: Final = _words("""
    accountant actor actress administrator analyst anesthesiologist architect artist assistant astronaut athlete
    attorney auditor author baker banker barber barista bartender biologist blogger bookkeeper builder butcher
    carpenter cashier ceo cfo chef chemist cleaner clerk coach consultant contractor cook counselor counsellor
    courier cto dancer dentist designer detective developer dietitian director doctor driver economist editor
    electrician engineer entrepreneur farmer firefighter fisherman florist founder freelancer gardener geologist
    graduate hairdresser historian illustrator instructor intern janitor journalist judge lawyer lecturer
    librarian lifeguard linguist machinist manager marketer mathematician mechanic midwife miner musician
    nanny nurse officer optician painter paralegal paramedic pastor pharmacist photographer physician
    physicist physiotherapist pilot plumber poet policeman policewoman politician postdoc priest principal
    producer professor programmer psychiatrist psychologist publisher rabbi realtor receptionist recruiter
    reporter researcher retiree salesman saleswoman scientist secretary senator singer soldier
    sommelier student surgeon surveyor tailor teacher technician therapist trader translator tutor
    undergrad vet veterinarian waiter waitress welder writer youtuber streamer sysadmin devops
    """)

RELATIVES: Final = {
    # word → the slot (singular) it fills
    **{w: w for w in _words("wife husband partner spouse fiance fiancee boyfriend girlfriend mother "
                            "father mom dad mum son daughter brother sister grandmother grandfather "
                            "grandma grandpa aunt uncle cousin niece nephew stepson stepdaughter "
                            "stepmother stepfather baby twin roommate flatmate best-friend")},
    "fiancé": "fiance", "fiancée": "fiancee", "kid": "children", "kids": "children", "child": "children",
    "children": "children", "sons": "son", "daughters": "daughter", "brothers": "brother", "sisters": "sister",
    "parents": "parents", "grandparents": "grandparents", "grandkids": "grandchildren",
    "grandchildren": "grandchildren", "twins": "twins", "cousins": "cousin", "siblings": "siblings",
    "sibling": "siblings", "boss": "boss", "manager": "boss", "best friend": "best-friend",
}

PETS: Final = {
    **{w: w for w in _words("dog cat puppy kitten rabbit bunny hamster parrot turtle tortoise horse "
                            "goldfish fish snake lizard ferret budgie guinea-pig gecko chicken pony")},
    **{w + "s": w for w in _words("dog cat puppy rabbit bunny hamster parrot turtle tortoise horse "
                                  "snake lizard ferret budgie gecko chicken pony")},
    "kittens": "kitten", "puppies": "puppy", "guinea pig": "guinea-pig", "guinea pigs": "guinea-pig",
}

CONDITIONS: Final = _words("""
    asthma diabetes migraines migraine adhd add autism dyslexia epilepsy arthritis anxiety depression
    insomnia eczema psoriasis celiac coeliac crohn's ibs hypertension tinnitus scoliosis endometriosis pcos
    lupus gout sciatica vertigo fibromyalgia ptsd ocd bipolar hypothyroidism cancer covid glaucoma anemia
    """)

POSSESSIONS: Final = _words("""
    car truck van motorbike motorcycle scooter bike bicycle boat house apartment flat condo cabin cottage
    garden piano guitar violin drum drums kayak canoe tesla camper rv laptop macbook iphone android pixel
    tablet ipad kindle telescope camera drone 3d-printer printer espresso synthesizer farm yard pool
    """)

EVENTS: Final = _words("""
    meeting appointment interview exam test flight wedding party trip presentation deadline surgery
    operation date concert recital game match race marathon conference vacation holiday checkup
    appointment birthday anniversary graduation move reunion dinner lunch call review defense defence
    """)

LANGUAGES: Final = _words("""
    english spanish portuguese french german italian dutch swedish norwegian danish finnish polish czech
    russian ukrainian greek turkish arabic hebrew persian farsi hindi urdu bengali punjabi tamil telugu
    japanese chinese mandarin cantonese korean vietnamese thai indonesian malay tagalog swahili romanian
    hungarian catalan basque galician irish welsh latin esperanto icelandic croatian serbian bulgarian
    """)

NATIONALITIES: Final = _words("""
    american british english scottish welsh irish canadian mexican brazilian argentinian argentine chilean
    colombian peruvian venezuelan cuban spanish portuguese french german italian dutch belgian swiss austrian
    swedish norwegian danish finnish icelandic polish czech slovak hungarian romanian bulgarian greek turkish
    russian ukrainian georgian armenian israeli lebanese egyptian moroccan nigerian kenyan ghanaian ethiopian
    south-african indian pakistani bangladeshi nepali sri-lankan chinese japanese korean vietnamese thai
    filipino indonesian malaysian singaporean australian kiwi croatian serbian slovenian estonian latvian
    lithuanian iranian iraqi syrian jordanian saudi emirati tunisian algerian
    """)

RELIGIONS: Final = _words("""
    christian catholic protestant orthodox muslim jewish hindu buddhist sikh atheist agnostic mormon
    quaker jain pagan
    """)

DIETS: Final = _words("""
    vegetarian vegan pescatarian pescetarian keto paleo halal kosher gluten-free dairy-free flexitarian
    carnivore lacto-vegetarian plant-based
    """)

TRAITS: Final = _words("""
    left-handed right-handed ambidextrous introvert introverted extrovert extroverted night-owl
    early-bird morning-person colorblind colourblind deaf blind vegetarian diabetic asthmatic epileptic
    dyslexic autistic pregnant retired unemployed self-employed freelancing
    """)


def plural_of(word: str) -> str:
    """``cat`` → ``cats``, ``puppy`` → ``puppies`` (enough for the slot words above)."""
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("s", "sh", "ch", "x")):
        return word + "es"
    return word + "s"
