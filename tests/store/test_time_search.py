"""Questions about time: ``search(..., when=...)`` favours items whose time matches, filters by a stated range,
explains both, and answers the same on every engine."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

import engram
from engram import Memory
from engram.errors import InvalidInputError
from engram.store import timerank
from engram.store.item import SearchItem, SearchResults
from engram.store.operations import SearchOp
from engram.store.timeq import DAY_MS, TimeWindow, to_ms

NS = ("trips",)
REFERENCE = "2023-10-20"
#: One hiking memory a month, May to September 2023, the same words each; "e" has no date field.
DATED = {
    "a": ("Went hiking in the hills with Sam", "1:56 pm on 8 May, 2023"),
    "b": ("Went hiking in the hills with Sam", "2023-06-12"),
    "c": ("Went hiking in the hills with Sam", "12 July, 2023"),
    "d": ("Went hiking in the hills with Sam", "2023-08-20T09:00:00Z"),
}


def fill(mem: Memory) -> None:
    with mem.transaction("trips") as tx:
        for key, (text, date) in DATED.items():
            tx.put(NS, key, {"text": text, "date": date}, index=["text"])
        tx.put(NS, "e", {"text": "Went hiking in the hills with Sam"})  # its time is its created_at: now
        tx.put(NS, "f", {"text": "Baked bread", "date": "2023-07-13"}, index=["text"])
    mem.flush_index()


def keys(results: list[SearchItem]) -> list[str]:
    return [item.key for item in results]


def test_when_auto_favours_the_item_of_the_named_month_on_every_engine(smem: Memory) -> None:
    fill(smem)
    plain = smem.search(NS, "hiking in the hills in July 2023", when="off")
    assert keys(plain)[:5] == ["a", "b", "c", "d", "e"]  # equal scores: by key
    timed = smem.search(NS, "hiking in the hills in July 2023", when="auto", reference_time=REFERENCE)
    assert keys(timed)[0] == "c"
    assert timed[0].score == pytest.approx(plain[2].score + timerank.TIME_WEIGHT)
    # the next best are the nearest months: August 20 (19 days after the window) before June 12 (19 days before)
    assert keys(timed)[1:3] == ["b", "d"]
    assert timed[1].score == pytest.approx(
        plain[1].score + timerank.TIME_WEIGHT * 0.5 ** (19 / timerank.HALF_LIFE_DAYS)
    )
    assert "f" not in keys(timed)[:5]  # the right date is no match for other words


def test_auto_is_the_default_of_a_search_and_a_listing_reads_no_time(smem: Memory) -> None:
    fill(smem)
    query = "hiking in the hills in July 2023"
    default = smem.search(NS, query, reference_time=REFERENCE, explain=True)
    auto = smem.search(NS, query, when="auto", reference_time=REFERENCE, explain=True)
    assert [(i.key, i.score) for i in default] == [(i.key, i.score) for i in auto] and keys(default)[0] == "c"
    assert default[0].explain is not None and "time" in default[0].explain
    assert keys(smem.search(NS, query, when="off"))[0] == "a"  # off: equal scores, by key
    assert sorted(keys(smem.search(NS))) == ["a", "b", "c", "d", "e", "f"]  # a listing: no query, no time


def test_relative_expressions_count_from_reference_time(smem: Memory) -> None:
    fill(smem)
    june = smem.search(NS, "hiking yesterday", when="auto", reference_time="2023-06-13T10:00:00Z")
    assert keys(june)[0] == "b"
    may = smem.search(NS, "hiking yesterday", when="auto", reference_time=datetime(2023, 5, 9, tzinfo=UTC))
    assert keys(may)[0] == "a"


def test_a_stated_range_filters(smem: Memory) -> None:
    fill(smem)
    found = smem.search(NS, "hiking between June 1 and July 31 2023", when="auto", reference_time=REFERENCE)
    assert keys(found) == ["b", "c"]
    since = smem.search(NS, "hiking since August 2023", when="auto", reference_time=REFERENCE)
    assert keys(since) == ["d", "e"]  # e's created_at is now
    given = smem.search(NS, "hiking", when=(datetime(2023, 5, 1), datetime(2023, 6, 30)))
    assert keys(given) == ["a", "b"]
    assert given[0].score == pytest.approx(smem.search(NS, "hiking")[0].score)  # a range filters, never boosts


def test_when_as_an_expression_replaces_the_query_own(smem: Memory) -> None:
    fill(smem)
    found = smem.search(NS, "hiking in the hills", when="in May 2023", reference_time=REFERENCE)
    assert keys(found)[0] == "a"


def test_a_query_without_a_time_expression_runs_as_without_when(smem: Memory) -> None:
    fill(smem)
    plain = smem.search(NS, "hiking with Sam", explain=True)
    timed = smem.search(NS, "hiking with Sam", when="auto", explain=True)
    assert [(i.key, i.score, i.explain) for i in timed] == [(i.key, i.score, i.explain) for i in plain]


def test_explain_shows_the_window_the_item_time_and_the_boost(smem: Memory) -> None:
    fill(smem)
    top = smem.search(NS, "hiking in July 2023", when="auto", reference_time=REFERENCE, explain=True)[0]
    assert top.key == "c" and top.explain is not None
    shown = top.explain["time"]
    assert shown["windows"] == [
        {"text": "in July 2023", "start": "2023-07-01T00:00:00Z", "end": "2023-08-01T00:00:00Z", "range": False}
    ]
    assert shown["item_time"] == "2023-07-12T00:00:00Z" and shown["reference"] == "2023-10-20T00:00:00Z"
    assert shown["match"] == 1.0 and shown["boost"] == pytest.approx(timerank.TIME_WEIGHT)
    assert top.explain["components"]["time"] == pytest.approx(timerank.TIME_WEIGHT)
    assert sum(top.explain["components"].values()) == pytest.approx(top.score)
    assert "time = " in top.explain["formula"]


def test_pages_and_min_score_apply_after_the_time_boost(smem: Memory) -> None:
    fill(smem)
    query = {"when": "auto", "reference_time": REFERENCE}
    whole = keys(smem.search(NS, "hiking in July 2023", limit=10, **query))  # type: ignore[arg-type]
    first = smem.search(NS, "hiking in July 2023", limit=2, **query)  # type: ignore[arg-type]
    second = smem.search(NS, "hiking in July 2023", limit=2, offset=2, **query)  # type: ignore[arg-type]
    assert keys(first) + keys(second) == whole[:4] and first.has_more
    best = smem.search(NS, "hiking in July 2023", limit=1, **query)[0].score  # type: ignore[arg-type]
    assert best is not None
    assert keys(smem.search(NS, "hiking in July 2023", min_score=best, **query)) == ["c"]  # type: ignore[arg-type]


def test_the_candidate_window_widens_until_the_page_is_exact() -> None:
    with engram.open(":memory:", embedder="hashing:64") as mem, mem.transaction("many") as tx:
        for n in range(40):  # the best keyword matches, all dated May
            tx.put(NS, f"k{n:02d}", {"text": "hiking hiking hiking hills", "date": "2023-05-10"})
        tx.put(NS, "z", {"text": "hiking", "date": "2023-07-10"})  # a weak match from July
    mem.flush_index()
    old = timerank.CANDIDATES
    timerank.CANDIDATES = 4  # a window far smaller than the ranked candidates
    try:
        found = mem.search(NS, "hiking in July 2023", mode="keyword", when="auto", reference_time=REFERENCE, limit=3)
    finally:
        timerank.CANDIDATES = old
    mem.pool.query_cache.clear()  # not the cached result of the search above
    expected = mem.search(NS, "hiking in July 2023", mode="keyword", when="auto", reference_time=REFERENCE, limit=3)
    assert [(i.key, i.score) for i in found] == [(i.key, i.score) for i in expected]


def test_item_time_reads_fields_in_order_then_created_at() -> None:
    created = datetime(2024, 1, 2, tzinfo=UTC)

    def item(value: dict[str, object]) -> SearchItem:
        return SearchItem(namespace=NS, key="k", value=value, created_at=created, updated_at=created)

    assert timerank.item_time_ms(item({"date": "8 May 2023", "time": "2020-01-01"})) == to_ms(datetime(2023, 5, 8))
    assert timerank.item_time_ms(item({"date": "not a date", "time": "2020-01-01"})) == to_ms(datetime(2020, 1, 1))
    assert timerank.item_time_ms(item({"timestamp": 1_700_000_000})) == 1_700_000_000_000  # seconds
    assert timerank.item_time_ms(item({"timestamp": 1_700_000_000_123})) == 1_700_000_000_123  # milliseconds
    assert timerank.item_time_ms(item({"text": "x"})) == to_ms(created)


def test_match_is_one_inside_and_halves_every_half_life_outside() -> None:
    window = TimeWindow("w", 10 * DAY_MS, 20 * DAY_MS)
    assert timerank.match(15 * DAY_MS, window) == 1.0
    assert timerank.match(20 * DAY_MS + int(timerank.HALF_LIFE_DAYS * DAY_MS), window) == pytest.approx(0.5)
    assert timerank.match(10 * DAY_MS - int(2 * timerank.HALF_LIFE_DAYS * DAY_MS), window) == pytest.approx(0.25)
    assert timerank.match(0, TimeWindow("open", None, DAY_MS, True)) == 1.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"when": 5}, "when must be"),
        ({"when": (datetime(2023, 1, 1),)}, "two datetimes"),
        ({"when": (None, None)}, "two datetimes"),
        ({"when": "auto", "reference_time": "whenever"}, "not a date"),
        ({"when": "sometime soon"}, "not a time expression"),
    ],
)
def test_bad_when_is_refused_clearly(options: dict[str, object], message: str) -> None:
    with engram.open(":memory:", embedder="hashing:64") as mem:
        mem.put(NS, "a", {"text": "hiking"})
        with pytest.raises(InvalidInputError, match=message):
            mem.search(NS, "hiking", **options)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="needs a query"):
            mem.search(NS, when="auto")


def test_async_twin_and_past_versions_take_when() -> None:
    with engram.open(":memory:", embedder="hashing:64") as mem:
        fill(mem)
        head = mem.log()[0].id
        mem.delete(NS, "c")
        past = mem.search(NS, "hiking in July 2023", when="auto", reference_time=REFERENCE, at=head)
        assert keys(past)[0] == "c"

        async def run() -> list[str]:
            amem = await engram.aopen(":memory:", embedder="hashing:64")
            await amem.aput(NS, "x", {"text": "hiking", "date": "2023-07-02"}, index=["text"])
            await amem.aput(NS, "y", {"text": "hiking", "date": "2023-03-02"}, index=["text"])
            found = await amem.asearch(NS, "hiking in March 2023", when="auto", reference_time=REFERENCE)
            await amem.aclose()
            return keys(found)

        assert asyncio.run(run()) == ["y", "x"]


def test_a_question_asking_when_favours_memories_that_state_a_time() -> None:
    with engram.open(":memory:", embedder="hashing:64") as mem:
        mem.put(NS, "habit", {"text": "Sam loves the support group"})
        mem.put(NS, "went", {"text": "Sam went to the support group yesterday", "date": "2023-05-08"})
        mem.flush_index()
        question = "When did Sam go to the support group?"
        off = {i.key: i.score for i in mem.search(NS, question, when="off")}
        found = mem.search(NS, question, reference_time=REFERENCE, explain=True)  # the default: auto
        assert keys(found)[0] == "went"
        scores = {i.key: i.score for i in found}
        assert scores["went"] == pytest.approx(off["went"] + timerank.ANSWER_WEIGHT)
        assert scores["habit"] == pytest.approx(off["habit"])  # states no time: as without when
        shown = found[0].explain
        assert shown is not None and shown["time"]["states_time"] is True
        assert shown["time"]["answer_boost"] == pytest.approx(timerank.ANSWER_WEIGHT)
        assert "answer = " in shown["formula"]
        other = "Did Sam go to the support group?"  # no question of time: nothing changes
        plain = mem.search(NS, other, reference_time=REFERENCE)
        assert [(i.key, i.score) for i in plain] == [(i.key, i.score) for i in mem.search(NS, other, when="off")]


def test_widening_asks_only_for_the_candidates_not_seen_yet() -> None:
    at = datetime(2023, 1, 1, tzinfo=UTC)
    ranked = [  # a first stage of 60 candidates; the best 50 dated May, the rest July
        SearchItem(NS, f"k{n:02d}", {"date": "2023-05-10" if n < 50 else "2023-07-10"}, at, at, score=1 - n / 1000)
        for n in range(60)
    ]
    asked: list[tuple[int, int]] = []

    def inner(op: SearchOp) -> SearchResults:
        assert op.limit is not None
        asked.append((op.offset, op.limit))
        return SearchResults(ranked[op.offset : op.offset + op.limit], "keyword", "keyword")

    request = SearchOp(NS, "hiking in July 2023", limit=3, when="auto", reference_time=REFERENCE)
    old = timerank.CANDIDATES
    timerank.CANDIDATES = 4
    try:
        found = timerank.run(request, inner)
    finally:
        timerank.CANDIDATES = old
    assert asked == [(0, 4), (4, 12), (16, 48)]  # each call continues where the last ended
    parsed = timerank.plan(request, 0)
    assert parsed is not None
    july = [w for w in parsed.windows if not w.range]
    rescored = sorted(ranked, key=lambda i: -((i.score or 0.0) + timerank.TIME_WEIGHT * max(
        timerank.match(timerank.item_time_ms(i), w) for w in july)))  # fmt: skip
    assert keys(found) == keys(rescored[:3]) and keys(found)[0] == "k50"


def test_a_time_search_is_cached_whole_and_keyed_by_its_resolved_windows(smem: Memory) -> None:
    fill(smem)
    cache = smem.pool.query_cache
    if cache is None:
        pytest.skip("this engine has no query cache")
    cache.clear()
    first = smem.search(NS, "hiking last month", reference_time="2023-08-15")
    misses = cache.stats().misses
    again = smem.search(NS, "hiking last month", reference_time="2023-08-15")
    assert cache.stats().misses == misses  # a hit: no first stage ran again
    assert [(i.key, i.score) for i in again] == [(i.key, i.score) for i in first] and keys(first)[0] == "c"
    later = smem.search(NS, "hiking last month", reference_time="2023-09-15")  # another month: another result
    assert cache.stats().misses == misses + 1 and keys(later)[0] == "d"


def test_equal_scores_after_the_boost_go_by_namespace_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timerank, "TIME_WEIGHT", 0.25)  # exact in binary: 0.5 + 0.25 == 0.75
    at = datetime(2023, 1, 1, tzinfo=UTC)
    ranked = [  # first stage: "z" (2000: no boost left) above "a" (July, 0.5); July's boost makes them equal
        SearchItem(NS, "z", {"date": "2000-05-01"}, at, at, score=0.75),
        SearchItem(NS, "m", {"date": "2000-05-01"}, at, at, score=0.7),
        SearchItem(NS, "a", {"date": "2023-07-10"}, at, at, score=0.5),
    ]

    def inner(op: SearchOp) -> SearchResults:
        return SearchResults(ranked[op.offset : op.offset + op.limit], "keyword", "keyword")

    request = SearchOp(NS, "hiking in July 2023", limit=3, when="auto", reference_time=REFERENCE)
    found = timerank.run(request, inner)
    assert [(i.key, i.score) for i in found] == [("a", 0.75), ("z", 0.75), ("m", 0.7)]
