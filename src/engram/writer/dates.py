"""Relative dates made absolute, against the moment a turn was said.

"I went hiking yesterday", said on 8 May 2023, is remembered as "I went hiking yesterday (7 May 2023)": a memory is
read long after its turn, when "yesterday" means another day. Expressions are found by a closed pattern (so words
such as "may" or "we" are never read as dates) and resolved by ``dateparser`` against the turn's time, at the
precision the expression has: a day ("7 May 2023"), a week ("the week of 1 May 2023"), a weekend, a month ("June
2023"), a season ("summer 2022") or a year ("2022"). A vague one ("a few days ago") is anchored to the day it was
said ("before 8 May 2023").
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from dateparser.date import DateDataParser

_NUMBER = r"(?:an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\d{1,2})"
_VAGUE = r"(?:a\s+few|few|a\s+couple(?:\s+of)?|couple\s+of|several|some)"
_UNIT = r"(?:days?|weeks?|months?|years?)"
_DAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_SEASON = r"(?:spring|summer|fall|autumn|winter)"
RELATIVE = re.compile(
    r"\b(?:the\s+day\s+(?:before\s+yesterday|after\s+tomorrow)|yesterday|today|tonight|tomorrow|last\s+night"
    rf"|this\s+(?:morning|afternoon|evening)|(?:last|next|this|past|coming)\s+(?:week(?:end)?|month|year|{_DAY}"
    rf"|{_SEASON})|(?:{_NUMBER}|{_VAGUE})\s+{_UNIT}\s+(?:ago|back|from\s+now)|in\s+(?:{_NUMBER}|{_VAGUE})\s+{_UNIT})"
    r"\b(?!\s*\()",
    re.IGNORECASE,
)


def _day(moment: datetime) -> str:
    return f"{moment.day} {moment:%B %Y}"


def _season(expression: str, base: datetime) -> str:
    words = expression.lower().split()
    season = "autumn" if words[-1] == "fall" else words[-1]
    start = {"spring": 3, "summer": 6, "autumn": 9, "winter": 12}[season]
    year = base.year
    if words[0] in ("last", "past"):
        year -= 0 if base.month >= start + 3 else 1
    elif words[0] in ("next", "coming"):
        year += 0 if base.month < start else 1
    return f"{season} {year}"


def absolute(expression: str, base: datetime) -> str | None:
    """The absolute date ``expression`` (a match of :data:`RELATIVE`) names when said at ``base``, in words at the
    expression's precision; None when it names no date."""
    text = re.sub(r"\s+", " ", expression.lower().strip())
    if re.search(_SEASON + "$", text):
        return _season(text, base)
    if re.search(_VAGUE, text):
        return f"{'before' if text.endswith(('ago', 'back')) else 'after'} {_day(base)}"
    weekend = text.endswith("weekend")
    query = re.sub(r"\bpast\b", "last", re.sub(r"\bcoming\b", "next", text))
    query = re.sub(r"\bweekend$", "saturday", query)
    settings = {
        "RELATIVE_BASE": base.replace(tzinfo=None),
        "RETURN_TIME_AS_PERIOD": True,
        "PREFER_DATES_FROM": "past" if text.startswith("last") else "future",
    }
    parser = DateDataParser(languages=["en"], settings=settings)
    found = parser.get_date_data(query)
    moment = found.date_obj
    if moment is None:
        return None
    period = found.period
    if weekend:
        return f"the weekend of {_day(moment)}"
    if period == "week":
        return f"the week of {_day(moment - timedelta(days=moment.weekday()))}"
    if period == "month":
        return f"{moment:%B %Y}"
    if period == "year":
        return str(moment.year)
    return _day(moment)


def resolve(text: str, created_at: int) -> str:
    """``text`` with each relative date followed by the absolute one, in parentheses, as said at ``created_at`` (UTC
    milliseconds; 0 or less means unknown, and ``text`` is returned as it is)."""
    if created_at <= 0:
        return text
    base = datetime.fromtimestamp(created_at / 1000, tz=UTC)
    out: list[str] = []
    last = 0
    for match in RELATIVE.finditer(text):
        when = absolute(match.group(0), base)
        if when is None:
            continue
        out += [text[last : match.end()], f" ({when})"]
        last = match.end()
    return "".join(out) + text[last:]
