"""The query cache (issue #15, deliverable 8): hits without running the engine, and never stale."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from services import require_redis

import engram
from engram import clock
from engram.embed import HashingEmbedder
from engram.errors import ConfigError, InvalidInputError
from engram.hashing import chunk_id
from engram.observe import CACHE_LOOKUPS, CACHE_MISSES
from engram.repo import Repository
from engram.store import Memory
from engram.store.indexing import IndexPool
from engram.store.item import SearchItem, SearchResults
from engram.store.operations import SearchOp
from engram.store.querycache import NEVER, SHARED, QueryCache, decode, encode, stats

NS = ("notes",)
ROOT = chunk_id(b"some tree")


def _fill(mem: Memory, n: int = 30) -> None:
    for i in range(n):
        mem.put(NS, f"k{i}", {"text": f"apples and pears number {i}", "n": i})


@pytest.fixture
def hmem(repo: Repository) -> Memory:
    """A hybrid-searching handle (hashing embedder) on each backend."""
    return Memory(repo, author="tester", pool=IndexPool(repo, embedder=HashingEmbedder()))


def _uncached(mem: Memory) -> Memory:
    """Another handle on the same store whose searches never touch a cache (a pool of its own)."""
    return Memory(mem.repo, branch=mem.branch, pool=IndexPool(mem.repo, embedder=mem.pool.embedder), author="x")


def _stats(mem: Memory) -> tuple[int, int]:
    cache = mem.pool.query_cache
    assert cache is not None
    found = cache.stats()
    return found.hits, found.misses


def _own(**options: Any) -> QueryCache:
    """A cache with an LRU of its own (the process-wide one outlives each test)."""
    return QueryCache(max_entries=1000, **options)


class Counting:
    """A search engine stand-in that counts its runs."""

    def __init__(self, results: SearchResults | None = None) -> None:
        self.calls = 0
        self.results = results

    def __call__(self, request: SearchOp, now: int) -> SearchResults:
        self.calls += 1
        if self.results is not None:
            return SearchResults(list(self.results), self.results.mode, self.results.requested_mode,
                                 self.results.degraded, self.results.lag)  # fmt: skip
        items = [_item(f"k{i}", float(10 - i)) for i in range(request.offset + request.limit)]
        return SearchResults(items[request.offset :], "keyword", "keyword")


def _item(key: str, score: float, expires: datetime | None = None) -> SearchItem:
    t = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    return SearchItem(NS, key, {"text": key, "tags": ["a"]}, t, t, expires, "bob", ("m1",), score, {"bm25": score})


def _metric(counter: object) -> float:
    return float(counter.labels("query")._value.get())  # type: ignore[attr-defined]


def test_querycache_identical_search_does_not_run_the_engine() -> None:
    lookups, misses = _metric(CACHE_LOOKUPS), _metric(CACHE_MISSES)
    cache, engine = _own(), Counting()
    first = cache.search(ROOT, SearchOp(NS, "apples"), 1000, engine, "ctx")
    again = cache.search(ROOT, SearchOp(NS, "apples"), 2000, engine, "ctx")
    assert engine.calls == 1
    assert again == first
    assert (cache.stats().hits, cache.stats().misses, cache.stats().hit_ratio) == (1, 1, 0.5)
    assert (_metric(CACHE_LOOKUPS) - lookups, _metric(CACHE_MISSES) - misses) == (2, 1)  # engram_cache_*{query}


def test_querycache_key_covers_root_request_and_context() -> None:
    cache, engine = _own(), Counting()
    base = SearchOp(NS, "apples")
    variants = [
        (ROOT, base, "ctx"),
        (chunk_id(b"another tree"), base, "ctx"),
        (ROOT, base, "other model"),
        (ROOT, SearchOp(NS, "pears"), "ctx"),
        (ROOT, SearchOp(("other",), "apples"), "ctx"),
        (ROOT, SearchOp(NS, "apples", filter={"n": 1}), "ctx"),
        (ROOT, SearchOp(NS, "apples", filter={"n": 2}), "ctx"),
        (ROOT, SearchOp(NS, "apples", limit=5), "ctx"),
        (ROOT, SearchOp(NS, "apples", offset=1), "ctx"),
        (ROOT, SearchOp(NS, "apples", mode="keyword"), "ctx"),
        (ROOT, SearchOp(NS, "apples", profile="quality"), "ctx"),
        (ROOT, SearchOp(NS, "apples", explain=True), "ctx"),
        (ROOT, SearchOp(NS, "apples", min_score=0.5), "ctx"),
    ]
    for root, op, context in variants:
        cache.search(root, op, 1000, engine, context)
    assert engine.calls == len(variants)
    for root, op, context in variants:
        cache.search(root, op, 1000, engine, context)
    assert engine.calls == len(variants)


def test_querycache_filter_key_ignores_dict_order_only() -> None:
    cache, engine = _own(), Counting()
    cache.search(ROOT, SearchOp(NS, "x", filter={"a": 1, "b": {"$gt": 2}}), 1, engine, "c")
    cache.search(ROOT, SearchOp(NS, "x", filter={"b": {"$gt": 2}, "a": 1}), 1, engine, "c")
    assert engine.calls == 1
    cache.search(ROOT, SearchOp(NS, "x", filter={"a": True, "b": {"$gt": 2}}), 1, engine, "c")
    assert engine.calls == 2  # true is not 1


def test_querycache_results_are_not_shared_with_callers() -> None:
    cache, engine = _own(), Counting()
    first = cache.search(ROOT, SearchOp(NS, "q"), 1, engine, "c")
    first[0].value["text"] = "changed by the caller"
    first[0].value["tags"].append("b")
    first.pop()
    again = cache.search(ROOT, SearchOp(NS, "q"), 1, engine, "c")
    again[0].value["text"] = "changed again"
    third = cache.search(ROOT, SearchOp(NS, "q"), 1, engine, "c")
    assert engine.calls == 1
    assert len(third) == 10 and third[0].value == {"text": "k0", "tags": ["a"]}


def test_querycache_encoding_round_trips_exactly() -> None:
    expires = datetime(2027, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    results = SearchResults([_item("a", 0.123456789012345), _item("b", 1 / 3, expires)], "hybrid", "hybrid")
    back = decode(encode(results))
    assert back == results and (back.mode, back.requested_mode, back.degraded) == ("hybrid", "hybrid", None)


def test_querycache_never_caches_degraded_results() -> None:
    degraded = SearchResults([_item("a", 1.0)], "keyword", "hybrid", "embedder down")
    cache, engine = _own(), Counting(degraded)
    for _ in range(2):
        assert cache.search(ROOT, SearchOp(NS, "q"), 1, engine, "c").degraded == "embedder down"
    assert engine.calls == 2 and cache.stats().uncacheable == 2


def test_querycache_never_caches_results_of_a_lagging_index() -> None:
    lagging = SearchResults([_item("a", 1.0)], "hybrid", "hybrid", lag=3)
    cache, engine = _own(), Counting(lagging)
    for _ in range(2):
        assert cache.search(ROOT, SearchOp(NS, "q"), 1, engine, "c").lag == 3
    assert engine.calls == 2 and cache.stats().uncacheable == 2


def test_querycache_page_expires_with_the_first_item_ranked_above_it() -> None:
    expiring = SearchResults(
        [_item("a", 2.0, datetime.fromtimestamp(5, tz=UTC)), _item("b", 1.0)], "keyword", "keyword"
    )
    cache, engine = _own(), Counting(expiring)
    page = cache.search(ROOT, SearchOp(NS, "q", limit=1, offset=1), 1000, engine, "c")
    assert [i.key for i in page] == ["b"]  # the engine was asked from the first result: a is on the first page
    cache.search(ROOT, SearchOp(NS, "q", limit=1, offset=1), 4999, engine, "c")
    assert engine.calls == 1
    cache.search(ROOT, SearchOp(NS, "q", limit=1, offset=1), 5000, engine, "c")  # a expired: page 2 moves
    assert engine.calls == 2 and cache.stats().expired == 1


def test_querycache_recency_profiles_key_on_a_time_bucket() -> None:
    cache, engine = _own(recency_resolution=0.001), Counting()
    bucket = int(24 * 3_600_000 * 0.001)  # "recent": 24 h half-life
    cache.search(ROOT, SearchOp(NS, "q", profile="recent"), 0, engine, "c")
    cache.search(ROOT, SearchOp(NS, "q", profile="recent"), bucket - 1, engine, "c")
    assert engine.calls == 1
    cache.search(ROOT, SearchOp(NS, "q", profile="recent"), bucket, engine, "c")
    assert engine.calls == 2
    cache.search(ROOT, SearchOp(NS, "q", profile="similarity"), 0, engine, "c")
    cache.search(ROOT, SearchOp(NS, "q", profile="similarity"), 10**12, engine, "c")
    assert engine.calls == 3  # no recency: no bucket
    week = int(168 * 3_600_000 * 0.001)  # "similarity" has a 168 h half-life
    cache.search(ROOT, SearchOp(NS, "q", explain=True), 0, engine, "c")
    cache.search(ROOT, SearchOp(NS, "q", explain=True), week - 1, engine, "c")
    assert engine.calls == 4
    cache.search(ROOT, SearchOp(NS, "q", explain=True), week, engine, "c")
    assert engine.calls == 5  # explain shows the recency signal: keyed on the bucket too


def test_querycache_is_bounded_in_entries_and_bytes() -> None:
    cache, engine = QueryCache(max_entries=3), Counting()
    for i in range(5):
        cache.search(ROOT, SearchOp(NS, f"q{i}"), 1, engine, "c")
    assert cache.stats().entries == 3 and cache.stats().evictions == 2
    cache.search(ROOT, SearchOp(NS, "q0"), 1, engine, "c")
    assert engine.calls == 6  # the oldest went first
    one = len(encode(engine(SearchOp(NS, "q"), 1))) + 8
    small = QueryCache(max_bytes=2 * one + 10)
    for i in range(4):
        small.search(ROOT, SearchOp(NS, f"q{i}"), 1, engine, "c")
    assert small.stats().entries == 2 and small.stats().bytes <= 2 * one + 10
    tiny = QueryCache(max_entries=10, max_entry_bytes=10)
    tiny.search(ROOT, SearchOp(NS, "q"), 1, engine, "c")
    assert tiny.stats().entries == 0 and tiny.stats().uncacheable == 1


def test_querycache_default_caches_share_one_bounded_lru() -> None:
    one, two, engine = QueryCache(), QueryCache(), Counting()
    assert one.lru is two.lru is SHARED and QueryCache(max_entries=5).lru is not SHARED
    root = chunk_id(uuid.uuid4().bytes)
    one.search(root, SearchOp(NS, "shared"), 1, engine, "c")
    assert two.search(root, SearchOp(NS, "shared"), 1, engine, "c") == one.search(root, SearchOp(NS, "shared"), 1,
                                                                                    engine, "c")  # fmt: skip
    assert engine.calls == 1 and two.stats().hits == 1
    assert SHARED.size()[0] <= SHARED.max_entries and SHARED.size()[1] <= SHARED.max_bytes
    assert stats().entries >= 1


def test_querycache_unkeyable_filters_run_uncached() -> None:
    cache, engine = _own(), Counting()
    for _ in range(2):
        cache.search(ROOT, SearchOp(NS, "q", filter={"when": {"$gt": datetime(2026, 1, 1)}}), 1, engine, "c")
    assert engine.calls == 2 and cache.stats().uncacheable == 2


def test_querycache_rejects_bad_bounds() -> None:
    for kwargs in ({"max_entries": 0}, {"max_bytes": -1}, {"max_entry_bytes": 0}, {"recency_resolution": 0.0},
                   {"repo": "a:b"}):  # fmt: skip
        with pytest.raises(ConfigError):
            QueryCache(**kwargs)  # type: ignore[arg-type]


def test_querycache_stats_sum_every_cache() -> None:
    before = stats()
    cache, engine = QueryCache(), Counting()
    root = chunk_id(uuid.uuid4().bytes)
    cache.search(root, SearchOp(NS, "q"), 1, engine, "c")
    cache.search(root, SearchOp(NS, "q"), 1, engine, "c")
    after = stats()
    assert (after.hits - before.hits, after.misses - before.misses) == (1, 1)


# ------------------------------------------------------------------------------ through the memory API


def test_memory_search_hits_then_sees_every_write(hmem: Memory) -> None:
    _fill(hmem)
    first = hmem.search(NS, "apples number 7", limit=3)
    hits, misses = _stats(hmem)
    assert hmem.search(NS, "apples number 7", limit=3) == first
    assert _stats(hmem) == (hits + 1, misses)
    hmem.put(NS, "new", {"text": "apples number 7 number 7 apples"})
    assert hmem.search(NS, "apples number 7", limit=3)[0].key == "new"
    hmem.delete(NS, "new")
    assert hmem.search(NS, "apples number 7", limit=3) == first
    hmem.put(NS, "k7", {"text": "bananas"})
    assert "k7" not in [i.key for i in hmem.search(NS, "apples number 7", limit=3)]
    assert hmem.search(NS, "apples number 7", limit=3) == _uncached(hmem).search(NS, "apples number 7", limit=3)


def test_memory_search_in_the_past_and_on_branches_keys_on_their_roots(hmem: Memory) -> None:
    _fill(hmem, 10)
    hmem.create_branch("exp")
    exp = hmem.handle("exp")
    exp.put(NS, "k3", {"text": "cherries only"})
    hmem.put(NS, "k4", {"text": "plums only"})
    for query in ("cherries", "plums", "apples number 3"):
        for _ in range(2):
            assert exp.search(NS, query) == _uncached(exp).search(NS, query)
            assert hmem.search(NS, query) == _uncached(hmem).search(NS, query)
            assert hmem.search(NS, query, at="HEAD~1") == _uncached(hmem).search(NS, query, at="HEAD~1")
            assert hmem.at("exp").search(NS, query) == exp.search(NS, query)
    assert hmem.search(NS, "plums")[0].key == "k4"
    assert "k4" not in [i.key for i in hmem.search(NS, "plums", at="HEAD~1")]
    assert exp.search(NS, "cherries")[0].key == "k3"


def test_memory_search_explain_and_paging_are_part_of_the_key(hmem: Memory) -> None:
    _fill(hmem, 12)
    plain = hmem.search(NS, "apples", limit=4)
    explained = hmem.search(NS, "apples", limit=4, explain=True)
    assert all(i.explain is None for i in plain) and all(i.explain for i in explained)
    pages = [hmem.search(NS, "apples", limit=4, offset=o) for o in (0, 4, 8)]
    again = [hmem.search(NS, "apples", limit=4, offset=o) for o in (0, 4, 8)]
    assert pages == again
    keys = [i.key for page in pages for i in page]
    assert len(set(keys)) == 12
    assert keys == [i.key for i in _uncached(hmem).search(NS, "apples", limit=12)]


def test_memory_search_results_can_be_mutated_safely(hmem: Memory) -> None:
    _fill(hmem, 5)
    found = hmem.search(NS, "apples")
    found[0].value["text"] = "scribbled"
    found.clear()
    again = hmem.search(NS, "apples")
    assert len(again) == 5 and all(i.value["text"].startswith("apples") for i in again)


def test_memory_search_drops_expired_items_from_cached_results(repo: Repository) -> None:
    start = datetime.now(UTC) - timedelta(days=1)
    with clock.simulated(start) as sim:
        mem = Memory(repo, author="tester", pool=IndexPool(repo, embedder=HashingEmbedder()))
        mem.put(NS, "short", {"text": "apples apples apples"}, ttl=1)  # one minute
        mem.put(NS, "long", {"text": "apples"})
        assert [i.key for i in mem.search(NS, "apples")] == ["short", "long"]
        assert [i.key for i in mem.search(NS, "apples", limit=1, offset=1)] == ["long"]
        hits, _ = _stats(mem)
        assert [i.key for i in mem.search(NS, "apples")] == ["short", "long"]
        assert _stats(mem)[0] == hits + 1
        sim.advance(minutes=2)
        assert [i.key for i in mem.search(NS, "apples", refresh_ttl=False)] == ["long"]
        assert mem.search(NS, "apples", limit=1, offset=1, refresh_ttl=False) == []


def test_memory_search_uncached_without_a_cache(hmem: Memory) -> None:
    _fill(hmem, 3)
    hmem.pool.query_cache = None
    assert [i.key for i in hmem.search(NS, "apples number 2")][:1] == ["k2"]


def test_memory_search_bad_input_still_raises_through_the_cache(hmem: Memory) -> None:
    _fill(hmem, 2)
    with pytest.raises(InvalidInputError):
        hmem.search(NS, "apples", profile="nope")
    with pytest.raises(InvalidInputError):
        hmem.search(NS, "apples", limit=-1)
    with pytest.raises(InvalidInputError):
        hmem.search(NS, "apples", offset="2")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        hmem.search(NS, "apples", min_score=float("nan"))


def test_querycache_is_shared_through_redis() -> None:
    from engram.backends.redis import RedisHealth

    health = RedisHealth(require_redis())
    repo = "qc" + uuid.uuid4().hex[:12]
    try:
        one, two, engine = _own(redis=health, repo=repo), _own(redis=health, repo=repo), Counting()
        first = one.search(ROOT, SearchOp(NS, "q"), 1, engine, "c")
        assert two.search(ROOT, SearchOp(NS, "q"), 1, engine, "c") == first
        assert engine.calls == 1 and two.stats().redis_hits == 1
        assert two.search(ROOT, SearchOp(NS, "q"), 1, engine, "c") == first  # now from its own LRU
        assert two.stats().redis_hits == 1 and two.stats().hits == 2
        expiring = Counting(SearchResults([_item("a", 1.0, datetime.fromtimestamp(5, tz=UTC))], "keyword", "keyword"))
        one.search(ROOT, SearchOp(NS, "e"), 1000, expiring, "c")
        key = one.key(ROOT, SearchOp(NS, "e"), 1000, "c")
        assert key is not None
        pxat = health.client.pexpiretime(f"engram:{repo}:q:{key.hex()}")
        assert pxat in (5000, -2)  # the entry dies with the item (already gone: the time is in the past)
        assert _own(redis=health, repo=repo).search(ROOT, SearchOp(NS, "e"), 6000, expiring, "c") is not None
        assert expiring.calls == 2
        never = one.key(ROOT, SearchOp(NS, "q"), 1, "c")
        assert never is not None and health.client.pttl(f"engram:{repo}:q:{never.hex()}") == -1  # no TTL
        assert NEVER > 10**15
    finally:
        for name in health.client.scan_iter(f"engram:{repo}:q:*"):
            health.client.delete(name)
        health.close()


def test_open_with_redis_shares_search_results(postgres_url: str, pg_repo_id: str) -> None:
    redis_url = require_redis()
    url = f"{postgres_url}?repo={pg_repo_id}&redis={redis_url}"
    first = engram.open(url, embedder="hashing", search="local")
    try:
        assert first.pool.query_cache is not None and first.pool.query_cache.redis is not None
        _fill(first, 5)
        found = first.search(NS, "apples number 3")
        second = engram.open(url, embedder="hashing", search="local")
        try:  # another process would have an LRU of its own: so does this second store
            shared = second.pool.query_cache
            assert shared is not None and shared.redis is not None
            second.pool.query_cache = QueryCache(max_entries=10, redis=shared.redis, repo=pg_repo_id)
            assert second.search(NS, "apples number 3") == found
            assert second.pool.query_cache is not None and second.pool.query_cache.stats().redis_hits == 1
        finally:
            second.close()
    finally:
        first.close()


def test_search_cache_on_every_engine_is_never_stale(smem: Memory) -> None:
    for i in range(6):
        smem.put(NS, f"k{i}", {"text": f"plums and figs {i}"})
    first = smem.search(NS, "figs 3", limit=3)
    hits, misses = _stats(smem)
    assert smem.search(NS, "figs 3", limit=3) == first and _stats(smem) == (hits + 1, misses)
    smem.put(NS, "k3", {"text": "nothing to see"})
    after = smem.search(NS, "figs 3", limit=3)
    assert all(i.value["text"] != "plums and figs 3" for i in after)
    past = smem.search(NS, "figs 3", limit=3, at="HEAD~1")
    assert past == first
