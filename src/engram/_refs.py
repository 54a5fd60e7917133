"""Parsing of ref expressions and times (no I/O); the rules for branch and tag names live in :mod:`engram._names`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from engram import clock
from engram._names import refuse_nul
from engram.errors import InvalidRefError

_EXPR = re.compile(r"(?P<base>[^~^@{}]*)(?:@\{(?P<time>[^{}]*)\})?(?P<nav>(?:[~^][0-9]*)*)")
_NAV = re.compile(r"([~^])([0-9]*)")
#: The most parent steps one expression may take (``HEAD~1000000`` walks a million commits; more is a typo).
MAX_STEPS = 1_000_000


@dataclass(frozen=True, slots=True)
class RefExpr:
    """A parsed ref expression: a base name, an optional as-of time, then parent steps.

    ``steps`` is a list of parent indexes to follow, in order (0 = first parent).
    """

    base: str
    time_ms: int | None
    steps: tuple[int, ...]


def parse(expr: str) -> RefExpr:
    """Parse ``HEAD``, ``main``, ``v1``, ``a1b2c3d``, ``HEAD~3``, ``main^2``, ``main@{2026-11-20T11:15:00Z}``,
    ``main@{yesterday}``, ``main@{3 days ago}``."""
    refuse_nul(expr, "ref expression")
    match = _EXPR.fullmatch(expr.strip())
    if match is None or (not match.group("base") and match.group("time") is None):
        raise InvalidRefError(
            f"cannot parse ref {expr!r}: use a branch, tag or commit id, optionally followed by "
            "~N (N first parents back), ^N (N-th parent) or @{time}, e.g. main@{2026-11-20T11:15:00Z} or "
            "main@{3 days ago}"
        )
    steps: list[int] = []
    for op, digits in _NAV.findall(match.group("nav")):
        n = int(digits[:9]) if digits else 1  # at most 9 digits are read: the cap below is far lower
        if len(steps) + n > MAX_STEPS or len(digits) > 9:
            raise InvalidRefError(f"ref {expr!r} goes back more than {MAX_STEPS:,} commits")
        if op == "~":
            steps.extend([0] * n)
        else:
            if n == 0:
                continue
            steps.append(n - 1)
    when = match.group("time")
    return RefExpr(match.group("base") or "HEAD", None if when is None else parse_time(when), tuple(steps))


@dataclass(frozen=True, slots=True)
class RefRange:
    """Two versions named by one expression, as git spells them: ``A..B`` (from ``A`` to ``B``) or ``A...B``
    (``from_base``: from the merge base of ``A`` and ``B`` to ``B``, what ``B`` introduces). An empty side is
    ``HEAD``."""

    old: str
    new: str
    from_base: bool


def parse_range(expr: str) -> RefRange | None:
    """``main...hotfix`` or ``v1..v2`` as a :class:`RefRange`; None when ``expr`` names one version. Dots inside
    ``@{...}`` are part of a time (``main@{2.days.ago}``), not a range."""
    start = _range_dots(expr)
    if start is None:
        return None
    three = expr.startswith("...", start)
    old, new = expr[:start].strip(), expr[start + (3 if three else 2) :].strip()
    if _range_dots(new) is not None:
        raise InvalidRefError(f"cannot parse {expr!r}: a range has one '..' or '...' (e.g. main...hotfix)")
    return RefRange(old or "HEAD", new or "HEAD", three)


def _range_dots(expr: str) -> int | None:
    """Where the first ``..`` outside braces starts (None: there is none)."""
    depth = 0
    for i, char in enumerate(expr):
        if char == "{":
            depth += 1
        elif char == "}":
            depth = max(0, depth - 1)
        elif depth == 0 and expr.startswith("..", i):
            return i
    return None


#: ``3 days ago``, ``2.days.ago``, ``1 hour ago``, ``90 minutes ago`` (git's approxidate forms engram reads).
_RELATIVE = re.compile(r"(?P<n>[0-9]{1,9})[ .]*(?P<unit>[a-z]+?)s?[ .]+ago")
_UNITS_MS = {
    "second": 1000, "sec": 1000, "minute": 60_000, "min": 60_000, "hour": 3_600_000, "day": 86_400_000,
    "week": 7 * 86_400_000, "month": 30 * 86_400_000, "year": 365 * 86_400_000,
}  # fmt: skip
_TIME_HELP = (
    "use ISO 8601 (2026-11-20T11:15:00Z) or a relative time: now, yesterday, 3 days ago, 2.days.ago, "
    "3 hours ago, 1 week ago"
)


def parse_time(text: str) -> int:
    """Parse an ISO 8601 time (naive times are UTC) or a relative one (``yesterday``, ``3 days ago``,
    ``2.days.ago``, ``now``; months are 30 days, years 365) to UTC milliseconds."""
    refuse_nul(text, "time")
    cleaned = text.strip()
    relative = _relative_ms(cleaned.lower())
    if relative is not None:
        return clock.now_ms() - relative
    try:
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        raise InvalidRefError(f"cannot parse time {text!r}: {_TIME_HELP}") from None
    return datetime_ms(moment)


def _relative_ms(text: str) -> int | None:
    """How far back a relative time lies, in ms; None when ``text`` is not one."""
    if text == "now":
        return 0
    if text == "yesterday":
        return _UNITS_MS["day"]
    match = _RELATIVE.fullmatch(text)
    if match is None:
        return None
    unit = _UNITS_MS.get(match.group("unit"))
    if unit is None:
        raise InvalidRefError(f"unknown time unit {match.group('unit')!r} in {text!r}: {_TIME_HELP}")
    return int(match.group("n")) * unit


def datetime_ms(moment: datetime) -> int:
    """A datetime as UTC milliseconds (a naive datetime is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return int(moment.timestamp() * 1000)
    except (OverflowError, ValueError, OSError):
        raise InvalidRefError(f"time {moment.isoformat()} is out of range") from None


def format_ms(time_ms: int) -> str:
    """UTC milliseconds as ISO 8601 (for messages; out-of-range values are shown as numbers)."""
    try:
        return datetime.fromtimestamp(time_ms / 1000, tz=UTC).isoformat()
    except (OverflowError, ValueError, OSError):
        return f"{time_ms} ms since the epoch"
