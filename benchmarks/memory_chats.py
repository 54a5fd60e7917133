"""A second conversational-memory data set, generated: an assistant's chats with its users (not friends' chit-chat).

No public conversational-memory data set ships in a PyPI package: the benchmark harnesses there (LongMemEval and
LoCoMo loaders) download their data from a hub at run time. So this one is generated, deterministically (a seeded
``random.Random``: the same seed gives the same bytes), to be *of another kind* than LoCoMo, where two friends chat
and questions are asked about them in the third person:

- **speakers**: a user and an assistant; the assistant's turns are long and generic, the user's are mostly requests
  (an email to draft, a recipe, a bug), and now and then a personal fact said in passing;
- **questions**: asked by the user in the first person ("What is my dog called?"), as LongMemEval asks them;
- **hard negatives**: the same subject about someone else ("my colleague's dog, a beagle called Rex"), the same
  words in requests ("write a birthday card for my dog walker"), and facts that change (a second move);
- **evidence**: the user turns that state the fact (both turns for a fact that changed).

Each question has a kind: ``lexical`` (shares a content word with its evidence), ``paraphrase`` (shares none: only
meaning links them), ``update`` (the fact changed; both statements are evidence) or ``temporal`` (about a request
the user made in several sessions, asked with a time: "What did I ask you about compound interest in March?", "...
on 5 March?", "... three weeks ago?"; the evidence is the request's turns whose session date falls in that day, that
month, or the calendar week, Monday to Sunday, holding the day that many weeks before the question's date, which is
the user's last session). Memories are stored like LoCoMo's turns (``"user: text"``, with the session's date), one
namespace per user. The temporal questions draw from a generator of their own, so the turns and the other
questions are the same bytes as before they were added.

    python benchmarks/memory_chats.py [--users 20] [--seed 7]     # prints counts per kind
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from engram.index.text import terms

NAMES = ["Max", "Luna", "Biscuit", "Pepper", "Nala", "Otis", "Mochi", "Juniper", "Ziggy", "Hazel", "Clover", "Rocco"]
PEOPLE = ["Priya", "Tomasz", "Amara", "Diego", "Ingrid", "Kenji", "Fatima", "Lucas", "Olga", "Samir", "Elena", "Noah"]
BREEDS = ["golden retriever", "border collie", "dachshund", "corgi", "greyhound", "shiba inu", "poodle", "husky"]
CITIES = ["Lisbon", "Denver", "Montreal", "Edinburgh", "Osaka", "Melbourne", "Austin", "Copenhagen", "Valencia"]
JOBS = [
    ("data analyst", "a logistics firm"),
    ("nurse", "the children's hospital"),
    ("architect", "a small studio"),
    ("teacher", "a primary school"),
    ("product designer", "a fintech startup"),
    ("paramedic", "the city"),
]
HOBBIES = ["pottery", "salsa dancing", "rock climbing", "watercolour painting", "woodworking", "fencing"]
ALLERGENS = ["peanuts", "shellfish", "sesame", "gluten", "kiwi", "dairy"]
CARS = ["a used Honda Civic", "an electric Kia", "a Subaru Outback", "a Vespa scooter", "a Volvo estate"]
LANGUAGES = ["Portuguese", "Japanese", "Korean", "Italian", "Turkish", "Dutch"]
BOOKS = ["Middlemarch", "The Overstory", "Piranesi", "Station Eleven", "Beloved", "The Remains of the Day"]
INSTRUMENTS = ["cello", "ukulele", "drums", "trumpet", "harp", "saxophone"]
MONTHS = ["March", "April", "June", "August", "September", "October"]
TEAMS = ["the Celtics", "Arsenal", "the Yankees", "Bayern", "the Packers", "the Lakers"]
#: The kinds of question (LoCoMo's categories here).
KINDS = ("lexical", "paraphrase", "update", "temporal")
DRINKS = ["oat milk flat whites", "green tea", "cold brew", "chai", "decaf espresso"]


@dataclass
class Fact:
    """A personal fact: the user turns that state it, and the questions it answers."""

    statements: list[str]
    questions: list[tuple[str, str]]  # (question, the kind meant; the one reported is measured: _kind)
    negatives: list[str] = field(default_factory=list)  # turns about the same subject that are not the answer


def _facts(rng: random.Random) -> list[Fact]:
    """One user's facts (a different draw of values per user)."""
    pet, other_pet = rng.sample(NAMES, 2)
    city, city2 = rng.sample(CITIES, 2)
    job, employer = rng.choice(JOBS)
    sister, colleague, friend = rng.sample(PEOPLE, 3)
    hobby, other_hobby = rng.sample(HOBBIES, 2)
    breed, other_breed = rng.sample(BREEDS, 2)
    return [
        Fact(
            [f"Quick aside, we adopted a {breed} puppy last weekend and named her {pet}."],
            [("What is my dog called?", "paraphrase"), ("What breed is my puppy?", "lexical")],
            [
                f"My colleague {colleague} brought her {other_breed}, {other_pet}, to the office today.",
                "Can you write a thank-you card for my dog walker?",
            ],
        ),
        Fact(
            [
                f"I just accepted an offer to work as a {job} at {employer}.",
                f"Update on the career front: I left {employer} and I'm freelancing now.",
            ],
            [("What do I do for a living these days?", "update"), ("Which job offer did I accept?", "lexical")],
            [f"My friend {friend} keeps asking whether her company is hiring."],
        ),
        Fact(
            [
                f"Big news, we are relocating to {city} in the spring.",
                f"Change of plans: the move to {city} fell through, we're heading to {city2} instead.",
            ],
            [("Which city am I moving to?", "update"), ("Where will I be living after the spring?", "update")],
            [f"Can you suggest a weekend itinerary for a trip to {rng.choice(CITIES)}?"],
        ),
        Fact(
            [f"I signed up for {hobby} classes on Thursday evenings."],
            [("What do I do on Thursday nights?", "lexical"), ("Which new pastime did I take up?", "paraphrase")],
            [f"{friend} wants me to try {other_hobby} with her some time."],
        ),
        Fact(
            [f"Just so you know, I'm allergic to {rng.choice(ALLERGENS)}."],
            [
                ("What ingredients should recipes for me leave out?", "paraphrase"),
                ("What am I allergic to?", "lexical"),
            ],
            ["Can you suggest a quick dinner recipe for tonight?"],
        ),
        Fact(
            [f"My sister {sister} is getting married in {rng.choice(MONTHS)}."],
            [("When is my sibling's wedding?", "paraphrase"), ("Who is getting married in my family?", "lexical")],
            [f"I'm invited to {colleague}'s wedding but I don't know what to wear."],
        ),
        Fact(
            [f"I finally sold my old car and bought {rng.choice(CARS)}."],
            [("What do I drive now?", "paraphrase"), ("Which car did I buy?", "lexical")],
            ["My car needs an oil change, how often should that happen?"],
        ),
        Fact(
            [f"I've been practising {rng.choice(LANGUAGES)} on an app every morning before work."],
            [("Which language am I learning?", "paraphrase"), ("What do I practise every morning?", "lexical")],
            [],
        ),
        Fact(
            [f"Our book club picked {rng.choice(BOOKS)} for this month, I'm halfway through it."],
            [("Which novel is my reading group on?", "paraphrase"), ("What did my book club pick?", "lexical")],
            ["Can you recommend a book for a long flight?"],
        ),
        Fact(
            [f"I started taking {rng.choice(INSTRUMENTS)} lessons with a teacher near my flat."],
            [("What instrument am I learning to play?", "paraphrase"), ("What lessons did I start?", "lexical")],
            [],
        ),
        Fact(
            [f"I'm a huge {rng.choice(TEAMS)} fan, I never miss a game."],
            [("Which team do I support?", "paraphrase"), ("Whose games do I never miss?", "lexical")],
            [f"{colleague} supports {rng.choice(TEAMS)}, we argue about it every Monday."],
        ),
        Fact(
            [f"Every morning I need my {rng.choice(DRINKS)} before I can think straight."],
            [("What do I drink to wake up?", "paraphrase"), ("What do I need every morning?", "lexical")],
            [],
        ),
    ]


REQUESTS = [
    "Can you help me draft an email to my landlord about the broken heating?",
    "What's a good way to structure a weekly budget spreadsheet?",
    "My Python script throws a KeyError when the config file is missing, any idea why?",
    "Give me three ideas for a team offsite that doesn't involve drinking.",
    "How long should I boil eggs for a runny yolk?",
    "Can you summarise the main arguments for and against a four-day work week?",
    "What's the difference between a Roth IRA and a traditional one?",
    "Suggest a stretching routine for after a long day at the desk.",
    "How do I get red wine out of a cotton shirt?",
    "Write a short birthday message for a coworker I don't know well.",
    "What are some good podcasts about history?",
    "How do I politely decline a meeting invitation?",
    "Explain how compound interest works with a simple example.",
    "Can you make my cover letter sound less formal?",
    "Which houseplants survive in low light?",
    "What should I pack for a three-day hiking trip?",
    "How do I set up a recurring reminder on my phone?",
    "Give me a simple bread recipe that doesn't need a mixer.",
    "What are the symptoms of burnout and how do people recover?",
    "Help me plan a surprise dinner for a friend's promotion.",
    "How often should I water a fiddle leaf fig?",
    "Can you explain what a SQL join does?",
    "What's a polite way to remind a client about an unpaid invoice?",
    "Recommend a beginner workout plan for three days a week.",
]
#: What each of :data:`REQUESTS` is about, as the user recalls it in a temporal question.
TOPICS = [
    "the email to my landlord", "a weekly budget spreadsheet", "my Python script's KeyError", "a team offsite",
    "boiling eggs", "the four-day work week", "a Roth IRA", "a stretching routine", "red wine on a shirt",
    "a coworker's birthday message", "history podcasts", "declining a meeting", "compound interest",
    "my cover letter", "houseplants for low light", "packing for a hiking trip", "a recurring reminder",
    "a bread recipe", "burnout", "a surprise dinner", "watering a fiddle leaf fig", "SQL joins",
    "an unpaid invoice", "a beginner workout plan",
]  # fmt: skip
#: Temporal questions per user, of each form (a day, a month, weeks ago).
TEMPORAL_PER_FORM = 2
COUNTS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
ANSWERS = [
    "Sure, here is a draft you can adapt: start with a friendly greeting, state the problem clearly, say when it "
    "started and what you need, and close by proposing a time that works for you.",
    "Good question. The short answer is that it depends on your situation, but a few general principles help: keep "
    "it simple, write things down, and review it after a week to see what works.",
    "Here are a few options, from the simplest to the most involved, with what each one costs in time and effort.",
    "That usually happens because something expected is missing. Check the inputs first, then add a clear message "
    "for the case where they are absent, so the failure explains itself.",
    "Happy to help. I would break it into three steps: decide what matters most, plan the order, and leave some slack "
    "for the things that always take longer than expected.",
    "Most people find that a little preparation goes a long way here. Start small, be consistent, and adjust as you "
    "learn what suits you.",
]
SMALL_TALK = ["Thanks, that's really helpful!", "Perfect, I'll try that tonight.", "Hmm, let me think about it.",
              "Great, that makes sense now.", "Ok, one more question.", "You're a lifesaver."]  # fmt: skip


def _kind(question: str, fact: Fact) -> str:
    """``update`` for a fact that changed, else ``lexical`` when the question shares an index term (engram's
    analyser: stop words out, stems) with the statement, ``paraphrase`` when it shares none."""
    if len(fact.statements) > 1:
        return "update"
    shared = set(terms(question)) & set(terms(fact.statements[0]))
    return "lexical" if shared else "paraphrase"


def _temporal(
    rng: random.Random, asked: dict[str, list[tuple[datetime, str]]], reference: datetime
) -> list[dict[str, Any]]:
    """One user's temporal questions: ``asked`` maps each request to its (session date, turn id)s; ``reference``
    is the question's date. Only requests asked in two sessions or more, and windows holding some of them (not all):
    the time is what tells them apart."""

    def week_of(day: datetime) -> tuple[int, int]:
        return day.isocalendar()[:2]

    out: list[dict[str, Any]] = []
    repeated = sorted(r for r, seen in asked.items() if len({d.date() for d, _ in seen}) > 1)
    for request in rng.sample(repeated, len(repeated)):
        seen = asked[request]
        topic = TOPICS[REQUESTS.index(request)]
        at = rng.choice(seen)[0]
        weeks = (reference.date() - at.date()).days // 7
        back = reference - timedelta(weeks=weeks)
        options = [
            ("day", f"What did I ask you about {topic} on {at.day} {at:%B}?", lambda d, a=at: d.date() == a.date()),
            ("month", f"What did I ask you about {topic} in {at:%B}?",
             lambda d, a=at: (d.year, d.month) == (a.year, a.month)),
            ("weeks", f"What did I ask you about {topic} {COUNTS[weeks - 1] if 0 < weeks <= 12 else ''} weeks ago?",
             lambda d, b=back: week_of(d) == week_of(b)),
        ]  # fmt: skip
        form, question, inside = options[len(out) % 3]
        if form == "weeks" and not 1 < weeks <= 12:
            continue
        evidence = [dia for d, dia in seen if inside(d)]
        if not evidence or len(evidence) == len(seen):
            continue
        out.append({"question": question, "evidence": evidence, "category": "temporal"})
        if len(out) == 3 * TEMPORAL_PER_FORM:
            break
    return out


def generate(users: int = 20, seed: int = 7, sessions: int = 24) -> list[dict[str, Any]]:
    """The data set: per user, its sessions of turns and its questions (LoCoMo's shape: ``conversation`` with
    ``session_<n>`` lists of ``{speaker, dia_id, text}`` and ``session_<n>_date_time``; ``qa`` with ``question``,
    ``evidence`` and ``category``, here the kind)."""
    rng = random.Random(seed)
    out = []
    for u in range(users):
        facts = _facts(rng)
        placed: list[tuple[int, str, Fact, int]] = []  # (session, text, fact, statement number)
        for fact in facts:
            first = rng.randrange(0, sessions - 8)
            for n, statement in enumerate(fact.statements):
                placed.append((first + 6 * n + rng.randrange(0, 3), statement, fact, n))
            for negative in fact.negatives:
                placed.append((rng.randrange(0, sessions), negative, fact, -1))
        conv: dict[str, Any] = {"speaker_a": "user", "speaker_b": "assistant"}
        evidence: dict[int, list[str]] = {}
        asked: dict[str, list[tuple[datetime, str]]] = {}  # request: (session date, turn id) of each time asked
        start = datetime(2024, 1, 8, 9, 30) + timedelta(days=3 * u)
        for s in range(1, sessions + 1):
            turns: list[tuple[str, str]] = []
            for _ in range(rng.randint(2, 4)):
                turns += [("user", rng.choice(REQUESTS)), ("assistant", rng.choice(ANSWERS))]
                if rng.random() < 0.4:
                    turns.append(("user", rng.choice(SMALL_TALK)))
            mine = [p for p in placed if p[0] == s - 1]
            for _, text, _fact, _n in mine:
                turns.insert(rng.randrange(0, len(turns) + 1), ("user", text))
            session = []
            when = start + timedelta(days=9 * (s - 1), hours=rng.randint(0, 9))
            for t, (speaker, text) in enumerate(turns, 1):
                dia = f"D{s}:{t}"
                session.append({"speaker": speaker, "dia_id": dia, "text": text})
                if speaker == "user" and text in REQUESTS:
                    asked.setdefault(text, []).append((when, dia))
                for _, said, fact, n in mine:
                    if said == text and n >= 0:
                        evidence.setdefault(id(fact), []).append(dia)
            conv[f"session_{s}"] = session
            clock = f"{when:%-I:%M} {when:%p}".lower()
            conv[f"session_{s}_date_time"] = f"{clock} on {when.day} {when:%B}, {when.year}"  # LoCoMo's form
        qa = []
        for fact in facts:
            found = evidence.get(id(fact), [])
            for question, _ in fact.questions:
                qa.append({"question": question, "evidence": found, "category": _kind(question, fact)})
        qa += _temporal(random.Random(f"temporal-{seed}-{u}"), asked, when)  # asked on the last session's date
        out.append({"sample_id": f"user-{u + 1:02d}", "conversation": conv, "qa": qa})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    data = generate(args.users, args.seed)
    turns = sum(len(v) for s in data for k, v in s["conversation"].items() if k[-1].isdigit() and "date" not in k)
    kinds: dict[str, int] = {}
    for sample in data:
        for q in sample["qa"]:
            kinds[q["category"]] = kinds.get(q["category"], 0) + 1
    print(f"{len(data)} users, {turns} turns, {sum(kinds.values())} questions: {kinds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
