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

Candidates: the first stage's top ``CANDIDATES`` (or the page, when longer), widened ``GROWTH``-fold (up to
``MAX_CANDIDATES``) until the page is provably the same as rescoring every item: the page's last score must beat
every unseen item's best (the last candidate's score plus the boosts). Each widening asks the first stage only for
the candidates not seen yet (scores are absolute, so they continue the list). The reader caches the stage's result
whole, keyed by :func:`signature` (the resolved windows), and runs the first stage under it uncached.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from itertools import groupby, pairwise
from operator import itemgetter
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
    names_time,
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
#: How much the candidate window grows each time the page is not yet provably exact.
GROWTH = 4


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


def plan(request: SearchOp, now: int) -> TimeQuery | None:
    """What the time stage does for ``request`` (a query with ``when`` set): its parsed windows, or None when there
    is nothing to do (no time expression, and the question asks for no time): the search then runs as usual."""
    if request.when == "auto" and isinstance(request.query, str) and not names_time(request.query):
        return None if not _asks(request) else TimeQuery((), reference_ms(request.reference_time, now))
    found = time_query(request, now)
    if found.windows or _asks(request):
        return found
    return None


def signature(parsed: TimeQuery, request: SearchOp) -> str:
    """What the time stage's result depends on beyond the search itself (a cache key part): the resolved windows,
    whether the question asks when, and the constants."""
    windows = [(w.start_ms, w.end_ms, w.range) for w in parsed.windows]
    shown = parsed.reference_ms if request.explain else None  # explain shows the reference time
    return repr((windows, _asks(request), TIME_WEIGHT, HALF_LIFE_DAYS, ANSWER_WEIGHT, shown))


def _asks(request: SearchOp) -> bool:
    return request.when == "auto" and isinstance(request.query, str) and asks_when(request.query)


def run(request: SearchOp, inner: First, parsed: TimeQuery | None = None) -> SearchResults:
    """Run ``request`` (a query with ``when`` set; its page is ``offset``/``limit``): ``inner`` runs the first
    stage, and its top candidates are rescored by time. ``parsed``: the request's :func:`plan`, when already
    made."""
    plain = replace(request, when=None, reference_time=None)
    found_time = parsed if parsed is not None else plan(request, now_ms())
    if found_time is None:
        return inner(plain)
    boosts = tuple(w for w in found_time.windows if not w.range)
    weights = (TIME_WEIGHT if boosts else 0.0, ANSWER_WEIGHT if _asks(request) else 0.0)
    want = request.offset + request.limit
    size = max(CANDIDATES, want)
    candidates: list[SearchItem] = []
    scored: list[tuple[float, int]] = []
    while True:
        # only the candidates not seen yet: scores are absolute, so the next ones continue the list
        found = inner(replace(plain, offset=len(candidates), limit=size - len(candidates), min_score=None))
        scored += _rescored(found, len(candidates), boosts, found_time.ranges, weights)
        candidates += found
        scored = _ordered(scored, candidates)
        if len(candidates) < size or size >= MAX_CANDIDATES:
            break
        unseen = -((candidates[-1].score or 0.0) + sum(weights))
        if len(scored) >= want and scored[want - 1][0] < unseen:
            break
        size = min(GROWTH * size, MAX_CANDIDATES)
    if request.min_score is not None:
        scored = [entry for entry in scored if -entry[0] >= request.min_score]
    page = []
    for negative, position in scored[request.offset : want]:
        item = candidates[position]
        shown = _explain(item, found_time, weights) if request.explain else None
        page.append(replace(item, score=-negative, explain=shown))
    return SearchResults(page, found.mode, found.requested_mode, found.degraded, found.lag)


def _rescored(
    found: SearchResults, first: int, boosts: tuple[TimeWindow, ...], ranges: tuple[TimeWindow, ...],
    weights: tuple[float, float],
) -> list[tuple[float, int]]:  # fmt: skip
    """The candidates inside every range, each as (minus its new score, its position in the candidate list,
    ``first`` being the position of ``found``'s first). ``weights``: the time match's and the stated time's (0
    when the question asks for no time)."""
    out: list[tuple[float, int]] = []
    for position, item in enumerate(found, first):
        score = _score(item, boosts, ranges, weights)
        if score is not None:
            out.append((-score, position))
    return out


def _ordered(scored: list[tuple[float, int]], candidates: list[SearchItem]) -> list[tuple[float, int]]:
    """``scored`` best first, ties by namespace and key (as every search orders them): sorted by score, then each
    run of equal scores by its entry keys (encoded for ties only: they are rare)."""
    scored.sort()
    if all(a[0] != b[0] for a, b in pairwise(scored)):
        return scored
    out: list[tuple[float, int]] = []
    for _, tied in groupby(scored, key=itemgetter(0)):
        run = list(tied)
        run.sort(key=lambda entry: codec.encode_key(candidates[entry[1]].namespace, candidates[entry[1]].key))
        out += run
    return out


def _score(
    item: SearchItem, boosts: tuple[TimeWindow, ...], ranges: tuple[TimeWindow, ...], weights: tuple[float, float]
) -> float | None:  # fmt: skip
    """An item's score with its time (None: outside a range)."""
    if any(match(item_time_ms(item), w) < 1.0 for w in ranges):
        return None
    _, best, stated = _signal(item, boosts, weights)
    return (item.score or 0.0) + weights[0] * best + stated


def _signal(item: SearchItem, boosts: Sequence[TimeWindow], weights: tuple[float, float]) -> tuple[int, float, float]:
    """An item's time, its best match among ``boosts`` (0 when the time weight is), and its answer boost (the
    answer weight when it states a time, else 0): what the score adds and ``explain`` shows."""
    weight, answer = weights
    at = item_time_ms(item)
    best = max((match(at, w) for w in boosts), default=0.0) if weight else 0.0
    return at, best, answer * states_time(words(item)) if answer else 0.0


def words(item: SearchItem) -> str:
    """An item's own words: its value's top-level strings but its time fields."""
    return " ".join(v for k, v in item.value.items() if isinstance(v, str) and k not in TIME_FIELDS)


def _explain(item: SearchItem, parsed: TimeQuery, weights: tuple[float, float]) -> dict[str, Any]:
    """The first stage's explanation, with the time signal: the windows, the item's time, the match and the boost,
    and whether the item states the time the question asks for."""
    weight, answer = weights
    at, best, stated = _signal(item, [w for w in parsed.windows if not w.range], weights)
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
           "TIME_WEIGHT", "check", "effective", "item_time_ms", "match", "plan", "run", "signature", "time_query",
           "when_of_json", "words"]  # fmt: skip
