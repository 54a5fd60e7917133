"""Time expressions in a query: found by a small grammar, resolved by ``dateparser``, turned into windows.

A query such as "What did Maria donate in December 2023?" or "Where was Tim in the week before 16 November 2023?"
names a time. :func:`parse_time` finds such expressions and resolves each to a window ``[start, end)`` in UTC,
relative to the question's own date (``reference``: "last Tuesday" is the Tuesday before it; a month without a
year is its latest occurrence at or before it). A search then favours items whose time falls in a window
(:mod:`engram.store.timerank`); a window the query states as a range ("between ... and ...", "since ...",
"before ...", "after ...") filters.

What is understood (English; case-insensitive; ``DATE`` is any of the first three lines):

=============================================  =======================================================
expression                                     window
=============================================  =======================================================
``8 May 2023``, ``May 8, 2023``, ``2023-05-08``   that day
``May 2023``, ``in May``, ``2023-05``             that month (a month alone: its latest at the reference)
``in 2022``, ``during 2021``                      that year (a bare year needs a preposition before it)
``yesterday``, ``today``, ``last Tuesday``,       that day, relative to the reference
``on Friday``, ``3 days ago``
``last week``, ``two weeks ago``                  that week (7 days)
``last month``, ``this year``, ``a year ago``     that month, that year
``summer 2021``, ``last summer``,                 the season (northern: Dec-Feb winter, Mar-May spring, ...);
``after the spring``                              also in ranges, offsets and parts ("early summer 2023")
``the first week of April 2023``, ``early May``   a part of a month or year: ``first|second|third|fourth|last
``the second half of 2022``                       week|weekend``, ``first|second half``, ``beginning|early|
                                                  mid|middle|late|end``
``the week before 16 November 2023``,             the span before or after the date (``day|week|weekend|
``two weeks after May 1, 2023``,                  month|year``, a count in digits or words, ``a few``; a
``the Friday before 17 September 2023``           weekday: the 7 days before)
``between May 1 and May 15 2023``,                a range: filters (a missing year is the second date's)
``from March to June 2023``
``since March 2023``, ``before 2023``,            an open range: filters
``after June 2023``, ``until May 2023``
=============================================  =======================================================

Not windows, on purpose: habits ("on Thursdays", "Thursday nights", "every Monday", "on weekends"), and every
expression in a question about the future ("Where will I live after the spring?": the spring is when the move
happens, not when it was said). Not understood: anchors that are events, not dates ("two weeks before my
trip"), holidays, times of day, other languages. Each found expression is resolved by ``dateparser``
(``DateDataParser``, loaded on the first query that holds one); a query with none costs one regular-expression
scan.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from engram.errors import InvalidInputError

DAY_MS = 86_400_000

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")  # fmt: skip
_MONTH = r"(?:january|february|march|april|may|june|july|august|sept(?:ember)?|october|november|december)"
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
# A part of the day after a weekday ("Friday night") or alone.
_DAYPART = r"(?:mornings?|afternoons?|evenings?|nights?)"
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d\d"
_NUMBER = r"(?:\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a\s+few|few|several)"
_UNIT = r"(?:days?|weeks?|weekends?|months?|years?)"
_SEASON = r"(?:spring|summer|fall|autumn|winter)"
_PREP = r"(?:in|during|of|since|until|till|by|before|after|from|to|through|as\s+of|and)"
# A date: a day (either order, optional year), a month with a year, an ISO date or month.
_DATE = (
    rf"(?:{_DAY}\s*(?:of\s+)?{_MONTH},?(?:\s*{_YEAR})?"
    rf"|{_MONTH}\s+{_DAY}(?:\s*,\s*{_YEAR}|\s+{_YEAR})?(?!\d)"
    rf"|{_MONTH},?\s+{_YEAR}"
    rf"|{_YEAR}-\d\d(?:-\d\d)?)"
)
# Relative expressions dateparser resolves against the reference.
_RELATIVE = (
    rf"(?:yesterday|today|tonight|(?:last|this|past|previous|next)\s+(?:week|weekend|month|year|{_WEEKDAY})"
    rf"|{_NUMBER}\s+{_UNIT}\s+ago|on\s+{_WEEKDAY})"
)
# A month or a year standing alone needs a preposition (bare "may" is a verb; bare numbers are counts).
_LONE = rf"(?:{_PREP}\s+(?:the\s+year\s+)?(?:{_DATE}|{_MONTH}|{_YEAR}))"
_POINT = rf"(?:{_DATE}|{_RELATIVE}|{_LONE})"
_ANY = rf"(?:{_DATE}|{_RELATIVE}|{_MONTH}|{_YEAR}|(?:(?:the|last|this)\s+)?{_SEASON}(?:\s+(?:of\s+)?{_YEAR})?)"
_PART = (
    r"(?:(?:the\s+)?(?:first|second|third|fourth|last)\s+(?:week|weekend|half)\s+of"
    r"|(?:the\s+)?(?:beginning|start|middle|end)\s+of|early|mid|late)"
)

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        # A habit, not a date: "on Thursdays", "Thursday nights", "every Monday", "each week", "on weekends".
        # Claimed first, so no later pattern reads a date into it.
        ("recurring", rf"\b(?:(?:every|each)\s+(?:other\s+)?(?:{_WEEKDAY}|{_DAYPART}|day|week|weekend|month|year|"
                      rf"{_SEASON}|{_MONTH})|{_WEEKDAY}s\b|{_WEEKDAY}\s+(?:mornings|afternoons|evenings|nights)\b|"
                      rf"(?:on|at|over)\s+(?:the\s+)?weekends\b)"),
        ("between", rf"\b(?:between|from)\s+(?:the\s+)?(?P<a>{_ANY})\s+(?:and|to|until|till|through)\s+"
                    rf"(?:the\s+)?(?P<b>{_ANY})"),
        ("offset", rf"\b(?:the\s+)?(?P<n>{_NUMBER})?\s*(?P<unit>{_UNIT}|{_WEEKDAY})\s+"
                   rf"(?P<dir>before|after|prior\s+to)\s+(?P<a>{_ANY})"),
        ("open", rf"\b(?P<dir>since|before|after|until|till|prior\s+to)\s+(?P<a>{_ANY})"),
        ("part", rf"\b(?P<part>{_PART})\s*(?P<a>{_ANY})"),
        ("season", rf"\b(?:(?P<which>last|this|next|the)\s+)?(?P<season>{_SEASON})(?:\s+(?:of\s+)?(?P<year>{_YEAR}))?"),
        ("point", rf"\b(?P<a>{_POINT})"),
    )
)  # fmt: skip
# A cheap gate: a query without any of these words or a year holds no expression the grammar knows.
_GATE = re.compile(
    rf"\b(?:{_MONTH}|{_WEEKDAY}|{_SEASON}|{_YEAR}|yesterday|today|tonight|ago|last|this|past|previous|next|"
    rf"before|after|since|until|till|between|early|mid|late)\b",
    re.IGNORECASE,
)
# A question about the future ("Where will I live after the spring?") names when something will happen, not
# when a memory of it was written: its time expressions give no window.
_FUTURE = re.compile(r"\b(?:will|shall|won't|gonna|going\s+to)\b|\w'll\b", re.IGNORECASE)
_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
          "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "few": 3, "several": 3}  # fmt: skip
_SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """One time expression of a query, resolved: ``[start_ms, end_ms)`` in UTC milliseconds.

    ``range`` is True when the query states it as a range ("between", "since", "before", "after", "until"): a
    search keeps only items inside such a window. ``None`` bounds are open (``since``, ``before``)."""

    text: str
    start_ms: int | None
    end_ms: int | None
    range: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The window as plain values (ISO times), as ``explain`` shows it."""
        return {"text": self.text, "start": _iso(self.start_ms), "end": _iso(self.end_ms), "range": self.range}


@dataclass(frozen=True, slots=True)
class TimeQuery:
    """The time expressions of one query, resolved against ``reference_ms`` (the question's own date)."""

    windows: tuple[TimeWindow, ...]
    reference_ms: int

    @property
    def ranges(self) -> tuple[TimeWindow, ...]:
        """The windows stated as ranges (they filter)."""
        return tuple(w for w in self.windows if w.range)


def _iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def to_ms(when: datetime) -> int:
    """A datetime as UTC milliseconds (a naive one is taken as UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def reference_ms(reference: datetime | str | int | float | None, now_ms: int) -> int:
    """The question's own date as UTC ms: a datetime, an ISO or free-text date, epoch ms, or None (``now_ms``)."""
    if reference is None:
        return now_ms
    if isinstance(reference, datetime):
        return to_ms(reference)
    if isinstance(reference, int | float) and not isinstance(reference, bool):
        return int(reference)
    if isinstance(reference, str):
        found = text_time_ms(reference)
        if found is not None:
            return found
        raise InvalidInputError(f"reference_time {reference!r} is not a date")
    raise InvalidInputError(f"reference_time must be a datetime, a date string or epoch ms, got {reference!r}")


@lru_cache(maxsize=8192)
def text_time_ms(text: str) -> int | None:
    """A date written as text (ISO, or anything ``dateparser`` reads, e.g. "1:56 pm on 8 May, 2023"), as UTC ms;
    None when it is not a date. Cached: stores repeat the same date strings."""
    stripped = text.strip()
    if not stripped or len(stripped) > 100:
        return None
    try:
        return to_ms(datetime.fromisoformat(stripped.replace("Z", "+00:00")))
    except ValueError:
        pass
    found = _parser(None).get_date_data(stripped)
    return None if found.date_obj is None else to_ms(found.date_obj)


@lru_cache(maxsize=64)
def _parser(base: datetime | None) -> Any:
    """A ``dateparser`` parser resolving relative dates against ``base`` (naive UTC; None: now), preferring the
    past ("June" is the latest June)."""
    # dateparser is loaded on first use on purpose: a query without a time expression never pays for it
    from dateparser.date import DateDataParser

    settings: dict[str, Any] = {"RETURN_TIME_AS_PERIOD": True, "PREFER_DATES_FROM": "past", "TIMEZONE": "UTC",
                                "TO_TIMEZONE": "UTC", "RETURN_AS_TIMEZONE_AWARE": False}  # fmt: skip
    if base is not None:
        settings["RELATIVE_BASE"] = base
    return DateDataParser(languages=["en"], settings=settings)


# A question that asks for a time ("When did Caroline go to the support group?"): its answer is a memory that
# states one, in its own words ("I went yesterday", "last May", "in 2022").
_ASKS = re.compile(
    r"^\W*(?:when|what\s+(?:date|day|month|year|time)|how\s+long\s+ago|(?:in|on)\s+(?:which|what)\s+"
    r"(?:date|day|month|year))\b",
    re.IGNORECASE,
)
# A time in a memory's words: a relative day, week, month or year, a month's name (not "may", a verb far more often)
# or a year; and a count back ("two weeks ago"), looked for only when "ago" is there (a cheap test first: a
# memory's words are read for every candidate of a question that asks when).
_STATES = re.compile(
    rf"\b(?:yesterday|today|tonight|tomorrow|recently|(?:last|this|next|past)\s+(?:night|week|weekend|month|year|"
    rf"{_SEASON}|{_WEEKDAY})|january|february|march|april|june|july|august|sept(?:ember)?|october|november|"
    rf"december|{_YEAR})\b",
    re.IGNORECASE,
)
_AGO = re.compile(rf"\b(?:{_NUMBER}|couple\s+of)\s+{_UNIT}\s+ago\b", re.IGNORECASE)


def names_time(query: str) -> bool:
    """Whether ``query`` may hold a time expression :func:`parse_time` reads (a cheap test: False means its windows
    are surely empty, without resolving its reference time)."""
    return bool(_GATE.search(query)) and not _FUTURE.search(query)


def asks_when(query: str) -> bool:
    """Whether ``query`` asks for a time: it starts with "when", "what date/day/month/year/time", "how long ago",
    "in which month/year"."""
    return bool(_ASKS.search(query))


def states_time(text: str) -> bool:
    """Whether ``text`` states a time in its own words: "yesterday", "last week", "two days ago", "in July", "2022"
    (not the word "may"). Cached for texts up to 2,000 characters: the same memories are candidates of many
    questions."""
    return _states(text) if len(text) <= 2_000 else _states.__wrapped__(text)


@lru_cache(maxsize=8_192)
def _states(text: str) -> bool:
    if _STATES.search(text):
        return True
    return "ago" in text.lower() and bool(_AGO.search(text))


def parse_time(query: str, reference: datetime | str | int | None = None, *, now_ms: int | None = None) -> TimeQuery:
    """The time expressions of ``query`` resolved against ``reference`` (the question's own date; None: now).

    Returns a :class:`TimeQuery` whose ``windows`` are empty when the query names no time this module understands
    (see the table above)."""
    now = to_ms(datetime.now(UTC)) if now_ms is None else now_ms
    ref = reference_ms(reference, now)
    if not isinstance(query, str) or not names_time(query):
        return TimeQuery((), ref)
    return TimeQuery(tuple(_windows(query, ref)), ref)


def _windows(query: str, ref: int) -> list[TimeWindow]:
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, TimeWindow]] = []
    for name, pattern in _PATTERNS:
        for match in pattern.finditer(query):
            start, end = match.span()
            if any(start < e and s < end for s, e in taken):
                continue
            if name == "recurring":
                taken.append((start, end))  # a habit: no window, and no other pattern reads a date in it
                continue
            window = _resolve(name, match, ref)
            if window is not None:
                taken.append((start, end))
                found.append((start, window))
    return [w for _, w in sorted(found, key=lambda entry: entry[0])]


def _resolve(name: str, match: re.Match[str], ref: int) -> TimeWindow | None:
    text = " ".join(match.group(0).split())
    groups = match.groupdict()
    if name == "season":
        return _season(text, groups, ref)
    if name == "between":
        b = _span(groups["b"], ref)
        if b is None:
            return None
        a = _span(groups["a"], b[1] - 1)  # "May 1 and May 15 2023": the first date takes the second's year
        return None if a is None else TimeWindow(text, a[0], b[1], True)
    a = _span(groups["a"], ref)
    if a is None:
        return None
    if name == "point":
        return TimeWindow(text, a[0], a[1])
    if name == "open":
        direction = groups["dir"].lower()
        if direction == "since":
            return TimeWindow(text, a[0], None, True)
        if direction == "after":
            return TimeWindow(text, a[1], None, True)
        if direction in ("until", "till"):
            return TimeWindow(text, None, a[1], True)
        return TimeWindow(text, None, a[0], True)  # before, prior to
    if name == "offset":
        count = _count(groups["n"])
        length = count * _unit_ms(groups["unit"])
        if groups["dir"].lower() == "after":
            return TimeWindow(text, a[1], a[1] + length)
        return TimeWindow(text, a[0] - length, a[0])
    return _part(text, groups["part"], a)


def _count(word: str | None) -> int:
    if word is None:
        return 1
    word = " ".join(word.lower().split()).removeprefix("a ")
    return int(word) if word.isdigit() else _WORDS.get(word, 1)


def _unit_ms(unit: str) -> int:
    unit = unit.lower().rstrip("s")
    return {"day": 1, "month": 30, "year": 365}.get(unit, 7) * DAY_MS  # a week, weekend or weekday: 7 days


_SEASON_ALONE = re.compile(
    rf"(?:(?P<which>the|last|this|next)\s+)?(?P<season>{_SEASON})(?:\s+(?:of\s+)?(?P<year>{_YEAR}))?", re.IGNORECASE
)


def _span(text: str, ref: int) -> tuple[int, int] | None:
    """The window of one date expression: the day, week, month, season or year it names."""
    season = _SEASON_ALONE.fullmatch(" ".join(text.split()))
    if season:
        return _season_span(season.groupdict(), ref)
    cleaned = re.sub(rf"^(?:on|{_PREP})\s+(?:the\s+year\s+)?", "", " ".join(text.split()), flags=re.IGNORECASE)
    cleaned = re.sub(r"(\d)(?:st|nd|rd|th)\b", r"\1", cleaned)
    cleaned = re.sub(r"(\d)([a-zA-Z])", r"\1 \2", cleaned)  # "24June" as the data writes it
    return _resolved(cleaned.lower(), ref)


@lru_cache(maxsize=4096)
def _resolved(text: str, ref: int) -> tuple[int, int] | None:
    base = datetime.fromtimestamp(ref / 1000, UTC).replace(tzinfo=None)
    month_only = re.fullmatch(_MONTH, text, re.IGNORECASE)
    if month_only or re.fullmatch(_YEAR, text):
        period = "month" if month_only else "year"
        if month_only:
            number = next(i for i, m in enumerate(MONTHS, 1) if m.startswith(text[:3]))
            year = base.year if number <= base.month else base.year - 1
            day = datetime(year, number, 1)
        else:
            day = datetime(int(text), 1, 1)
    else:
        data = _parser(base).get_date_data(text)
        if data.date_obj is None:
            return None
        day, period = data.date_obj.replace(tzinfo=None), data.period or "day"
    return _period(day, period)


def _period(day: datetime, period: str) -> tuple[int, int]:
    midnight = day.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "year":
        start = midnight.replace(month=1, day=1)
        return to_ms(start), to_ms(start.replace(year=start.year + 1))
    if period == "month":
        start = midnight.replace(day=1)
        return to_ms(start), to_ms(_add_months(start, 1))
    if period == "week":
        start = midnight - timedelta(days=midnight.weekday())
        return to_ms(start), to_ms(start + timedelta(days=7))
    return to_ms(midnight), to_ms(midnight + timedelta(days=1))


def _add_months(day: datetime, months: int) -> datetime:
    total = day.month - 1 + months
    year, month = day.year + total // 12, total % 12 + 1
    return day.replace(year=year, month=month, day=min(day.day, calendar.monthrange(year, month)[1]))


def _season(text: str, groups: dict[str, Any], ref: int) -> TimeWindow | None:
    start, end = _season_span(groups, ref)
    return TimeWindow(text, start, end)


def _season_span(groups: dict[str, Any], ref: int) -> tuple[int, int]:
    """The three months of a season ("summer 2021", "last winter", "the spring": the latest begun by ``ref``)."""
    base = datetime.fromtimestamp(ref / 1000, UTC).replace(tzinfo=None)
    first = _SEASONS[groups["season"].lower()]
    which = (groups["which"] or "").lower()
    if groups["year"]:
        year = int(groups["year"]) - (1 if first == 12 else 0)  # winter 2024: Dec 2023 - Feb 2024
    else:
        year = base.year if first <= base.month else base.year - 1  # the latest that began by the reference
        start = datetime(year, first, 1)
        if which == "last" and _add_months(start, 3) > base:
            year -= 1  # "last summer" while it is still summer: the one before
        elif which == "next":
            year += 1
    start = datetime(year, first, 1)
    return to_ms(start), to_ms(_add_months(start, 3))


def _part(text: str, part: str, span: tuple[int, int]) -> TimeWindow:
    start, end = span
    length = end - start
    part = " ".join(part.lower().split()).removeprefix("the ")
    if part.endswith("half of"):
        half = length // DAY_MS // 2 * DAY_MS  # whole days
        return TimeWindow(text, start, start + half) if part.startswith("first") else TimeWindow(text, end - half, end)
    if part.endswith(("week of", "weekend of")):
        which = part.split()[0]
        if which == "last":
            return TimeWindow(text, max(start, end - 7 * DAY_MS), end)
        index = ("first", "second", "third", "fourth").index(which)
        lo = start + index * 7 * DAY_MS
        return TimeWindow(text, lo, min(end, lo + 7 * DAY_MS))
    third = length // DAY_MS // 3 * DAY_MS
    if part in ("beginning of", "start of", "early"):
        return TimeWindow(text, start, start + third)
    if part in ("middle of", "mid"):
        return TimeWindow(text, start + third, end - third)
    return TimeWindow(text, end - third, end)  # end of, late


__all__ = ["DAY_MS", "TimeQuery", "TimeWindow", "asks_when", "names_time", "parse_time", "reference_ms", "states_time",
           "text_time_ms", "to_ms"]  # fmt: skip
