"""Questions about time: a search stage that favours items whose time matches the query's time expressions.

A search with ``when="auto"`` (the default for a search with a query: :data:`DEFAULT_WHEN`) parses its query
(:func:`engram.store.timeq.parse_time`, relative to ``reference_time``, the question's own date; now when not
given). A query with no time expression runs as usual. Otherwise the first stage (the usual search, reranked
when asked) gives its top candidates and each is rescored by its time::

    match = 1 inside a window, else 0.5 ^ (days outside it / HALF_LIFE_DAYS)     (the best of the windows)
    score = first-stage score + TIME_WEIGHT * match

and a window the query states as a range ("between", "since", "before", "after", "until") keeps only the items
inside it. A question that asks for a time ("When did ...?", :func:`engram.store.timeq.asks_when`) also favours
the items that state one in their own words ("yesterday", "last May", "in 2022";
:func:`~engram.store.timeq.states_time` of the value's strings but its time fields): ``+ ANSWER_WEIGHT``;
``when="auto"`` only. The score of an item still depends on the query and that item only (absolute, ADR 0002);
ties go by namespace and key. ``when`` may also be an expression to use instead of the query's own ("in May 2023"), or a
``(start, end)`` pair of datetimes (either may be None): a range.

An item's time is the first of its value's :data:`TIME_FIELDS` that reads as a date (an ISO string, any date
``dateparser`` reads such as "1:56 pm on 8 May, 2023", or epoch seconds or milliseconds), else its
``created_at``.

Candidates: the first stage's top ``CANDIDATES`` (or the page, when longer), widened four-fold (up to
``MAX_CANDIDATES``) until the page is provably the same as rescoring every item: the page's last score must
beat every unseen item's best (the last candidate's score plus the boost).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from engram import codec
from engram.backends.base import now_ms
from engram.errors import InvalidInputError
from engram.store.item import SearchItem, SearchResults
from engram.store.operations import SearchOp, When
from engram.store.timeq import (
    DAY_MS,
    TimeQuery,
    TimeWindow,
    asks_when,
    parse_time,
    reference_ms,
    states_time,
    text_time_ms,
    to_ms,
)

First = Callable[[SearchOp], SearchResults]

#: Value fields read, in order, for an item's time (else its ``created_at``).
TIME_FIELDS = ("date", "time", "timestamp", "datetime")
#: Weight of the time match in the score (a hybrid similarity is in [0, 1)), and the days outside a window at which
#: the match halves: chosen together by cross-validation over LoCoMo and the generated chats (split by conversation,
#: 2 and 5 folds; ``bench_retrieval.py --cv-time --chats``, benchmarks/RESULTS.md). The chats answer the same at
#: every pair of the grid since habits and questions about the future no longer read as dates.
TIME_WEIGHT = 0.15
HALF_LIFE_DAYS = 7.0
#: Added to the score of an item that states a time in its own words ("yesterday", "last May", "in 2022") when the
#: question asks for one ("When did ...?"): chosen with the two above by the same cross-validation over LoCoMo and
#: the chats (benchmarks/RESULTS.md).
ANSWER_WEIGHT = 0.1
#: What a search with a query does about time when it names no ``when`` (``None``): favour what its time expressions
#: name. A listing (no query) has no score to favour a time with, so it is always off.
DEFAULT_WHEN = "auto"
#: Candidates rescored at first, and at most.
CANDIDATES = 100
MAX_CANDIDATES = 3200


def effective(when: When, query: str | None) -> When:
    """The ``when`` a search runs with: its own, else :data:`DEFAULT_WHEN` for a query and ``"off"`` for a listing."""
    if when is not None:
        return when
    return DEFAULT_WHEN if query is not None else "off"


def check(when: Any, reference_time: Any, query: str | None) -> None:
    """Validate ``when`` and ``reference_time`` of a search (raise :class:`InvalidInputError`)."""
    if when is None or when == "off":
        return
    if isinstance(when, tuple):
        if len(when) != 2 or not all(w is None or isinstance(w, datetime) for w in when) or when == (None, None):
            raise InvalidInputError("when=(start, end) takes two datetimes (one may be None)")
    elif not isinstance(when, str):
        raise InvalidInputError(f"when must be 'auto', 'off', a time expression or (start, end), got {when!r}")
    if query is None:
        raise InvalidInputError("when needs a query: a listing has no score to favour a time with")
    reference_ms(reference_time, 0)  # raises on a bad reference


def when_of_json(when: Any) -> When:
    """``when`` as a JSON door (HTTP, MCP) takes it, as the library takes it: a string as is, and an object
    ``{"start": ISO, "end": ISO}`` (either null or absent; ``end`` exclusive) as the ``(start, end)`` range. Raises
    :class:`InvalidInputError` for a bound that is no ISO datetime or a range without either."""
    if not isinstance(when, dict):
        return when  # type: ignore[no-any-return]  # None or a string; anything else fails the library's check
    unknown = sorted(set(when) - {"start", "end"})
    if unknown:
        raise InvalidInputError(f"when's range takes start and end, not {', '.join(map(repr, unknown))}")
    bounds = tuple(_iso_bound(name, when.get(name)) for name in ("start", "end"))
    if bounds == (None, None):
        raise InvalidInputError('when\'s range needs a start or an end (an ISO datetime), e.g. {"start": "2023-05-01"}')
    return bounds  # type: ignore[return-value]  # two bounds


def _iso_bound(name: str, value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.strip())
        except ValueError:
            pass
    raise InvalidInputError(f"when's {name} must be an ISO datetime such as 2023-05-01T00:00:00Z, got {value!r}")


def time_query(request: SearchOp, now: int) -> TimeQuery:
    """The time windows of a search: parsed from its query (``when="auto"``) or from ``when``."""
    when = request.when
    if isinstance(when, tuple):
        start, end = (None if w is None else to_ms(w) for w in when)
        return TimeQuery((TimeWindow("when", start, end, True),), reference_ms(request.reference_time, now))
    text = request.query if when == "auto" else when
    assert isinstance(text, str)
    found = parse_time(text, request.reference_time, now_ms=now)
    if when != "auto" and not found.windows:
        raise InvalidInputError(f"when={when!r} is not a time expression engram understands (see docs/search.md)")
    return found


def item_time_ms(item: SearchItem) -> int:
    """An item's time: the first of its :data:`TIME_FIELDS` that reads as a date, else its ``created_at``."""
    for name in TIME_FIELDS:
        value = item.value.get(name)
        if isinstance(value, str):
            found = text_time_ms(value)
            if found is not None:
                return found
        elif isinstance(value, int | float) and not isinstance(value, bool):
            return int(value if abs(value) >= 1e11 else value * 1000)  # ms, else seconds
    return to_ms(item.created_at)


def match(at: int, window: TimeWindow, half_life: float = HALF_LIFE_DAYS) -> float:
    """1 inside ``window``, halving every ``half_life`` days (:data:`HALF_LIFE_DAYS`) outside it."""
    if window.start_ms is not None and at < window.start_ms:
        days = (window.start_ms - at) / DAY_MS
    elif window.end_ms is not None and at >= window.end_ms:
        days = (at - window.end_ms) / DAY_MS
    else:
        return 1.0
    return float(0.5 ** min(days / half_life, 1000.0))


def run(request: SearchOp, inner: First) -> SearchResults:
    """Run ``request`` (a query with ``when`` set; its page is ``offset``/``limit``): ``inner`` runs the first
    stage, and its top candidates are rescored by time."""
    plain = replace(request, when=None, reference_time=None)
    found_time = time_query(request, now_ms())
    asks = request.when == "auto" and isinstance(request.query, str) and asks_when(request.query)
    if not found_time.windows and not asks:
        return inner(plain)
    boosts = tuple(w for w in found_time.windows if not w.range)
    ranges = found_time.ranges
    weight = TIME_WEIGHT if boosts else 0.0
    answer = ANSWER_WEIGHT if asks else 0.0
    want = request.offset + request.limit
    size = max(CANDIDATES, want)
    while True:
        found = inner(replace(plain, offset=0, limit=size, min_score=None))
        scored = _rescored(found, boosts, ranges, (weight, answer), request.explain, found_time)
        if len(found) < size or size >= MAX_CANDIDATES:
            break
        unseen = (found[-1].score or 0.0) + weight + answer
        if len(scored) >= want and scored[want - 1][0] > unseen:
            break
        size = min(4 * size, MAX_CANDIDATES)
    if request.min_score is not None:
        scored = [entry for entry in scored if entry[0] >= request.min_score]
    page = [entry[2] for entry in scored[request.offset : want]]
    return SearchResults(page, found.mode, found.requested_mode, found.degraded, found.lag)


def _rescored(
    found: SearchResults, boosts: tuple[TimeWindow, ...], ranges: tuple[TimeWindow, ...],
    weights: tuple[float, float], explain: bool, parsed: TimeQuery,
) -> list[tuple[float, bytes, SearchItem]]:  # fmt: skip
    """The candidates inside every range, rescored, best first (ties by namespace and key). ``weights``: the time
    match's and the stated time's (0 when the question asks for no time)."""
    weight, answer = weights
    out: list[tuple[float, bytes, SearchItem]] = []
    for item in found:
        at = item_time_ms(item)
        if any(match(at, w) < 1.0 for w in ranges):
            continue
        best = max((match(at, w) for w in boosts), default=0.0)
        stated = answer * states_time(words(item)) if answer else 0.0
        score = (item.score or 0.0) + weight * best + stated
        shown = _explain(item, at, (best, weight, answer, stated), parsed) if explain else None
        out.append((score, codec.encode_key(item.namespace, item.key), replace(item, score=score, explain=shown)))
    out.sort(key=lambda entry: (-entry[0], entry[1]))
    return out


def words(item: SearchItem) -> str:
    """An item's own words: its value's top-level strings but its time fields."""
    return " ".join(v for k, v in item.value.items() if isinstance(v, str) and k not in TIME_FIELDS)


def _explain(
    item: SearchItem, at: int, signal: tuple[float, float, float, float], parsed: TimeQuery
) -> dict[str, Any]:  # fmt: skip
    """The first stage's explanation, with the time signal: the windows, the item's time, the match and the boost,
    and whether the item states the time the question asks for."""
    best, weight, answer, stated = signal
    first: dict[str, Any] = item.explain or {}
    formula = (f"; time = {weight:g} * 0.5^(days outside the window / {HALF_LIFE_DAYS:g})" if weight else "") + (
        f"; answer = {answer:g} if the item states a time (the question asks when)" if answer else "") + (
        "; kept: inside every range" if parsed.ranges else "")  # fmt: skip
    return {
        **first,
        "formula": f"{first.get('formula', '')}{formula}",
        "time": {
            "windows": [w.as_dict() for w in parsed.windows],
            "reference": TimeWindow("", parsed.reference_ms, None).as_dict()["start"],
            "item_time": TimeWindow("", at, None).as_dict()["start"],
            "match": best,
            "boost": weight * best,
            "states_time": stated > 0,
            "answer_boost": stated,
        },
        "components": {**first.get("components", {}), "time": weight * best + stated},
    }


__all__ = ["ANSWER_WEIGHT", "CANDIDATES", "DEFAULT_WHEN", "HALF_LIFE_DAYS", "MAX_CANDIDATES", "TIME_FIELDS",
           "TIME_WEIGHT", "check", "effective", "item_time_ms", "match", "run", "time_query", "when_of_json",
           "words"]  # fmt: skip
