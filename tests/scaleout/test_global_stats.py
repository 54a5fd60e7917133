"""Global keyword statistics for a search fanned out over several repositories (dfs_query_then_fetch): the merged
results are one repository's, item for item, score for score, in process and on PostgreSQL, now and at a tag."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Cluster, drop_databases, make_databases

import engram
from engram import clock
from engram.embed import HashingEmbedder
from engram.errors import InvalidInputError
from engram.index.corpus import CorpusStats
from engram.ops.shards import RoutedMemory, ShardCatalog, ShardRouter, add_shard, by_month, by_type
from engram.ops.shards.routing import merge
from engram.store import Memory, tenant_url
from engram.store.indexing import IndexPool
from engram.store.item import SearchResults

#: Each month leans on its own words, so each repository's statistics differ from the tenant's.
MONTHS = [
    ["alpha", "bravo", "charlie", "delta"],
    ["delta", "echo", "foxtrot", "alpha"],
    ["golf", "hotel", "alpha", "echo"],
]
COMMON = ["memory", "note", "meeting", "tea", "alpha"]
START = datetime(2026, 1, 10, tzinfo=UTC)

#: (prefix, query, options) compared between a fan-out and one repository.
SEARCHES: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    ((), "alpha echo", {"mode": "keyword"}),
    ((), "delta tea meeting", {"mode": "keyword", "limit": 7, "offset": 3}),
    (("notes",), "foxtrot alpha", {"mode": "hybrid"}),
    ((), "golf charlie note", {"mode": "hybrid", "profile": "balanced", "explain": True}),
    (("notes", "u1"), "alpha bravo", {"mode": "keyword", "filter": {"rank": {"$gte": 3}}}),
    ((), "echo memory", {"mode": "keyword", "min_score": 0.3, "limit": 50}),
    (("episodes",), "hotel tea", {}),
]


def _value(month: int, i: int) -> dict[str, Any]:
    words = MONTHS[month]
    body = " ".join(words[(i * k) % 4] for k in range(1, 2 + i % 5))  # 1 to 5 words: lengths differ
    return {"text": f"{body} {COMMON[i % 5]} {i}", "rank": i % 7, "confidence": (i % 10) / 10}


def _items() -> Iterator[tuple[int, tuple[str, ...], str, dict[str, Any]]]:
    for month in range(3):
        for i in range(30):
            namespace = ("notes", f"u{i % 3}") if i % 4 else ("episodes", f"u{i % 3}")
            yield month, namespace, f"m{month}k{i}", _value(month, i)


def _same(merged: SearchResults, alone: SearchResults, what: object) -> None:
    assert [(r.namespace, r.key) for r in merged] == [(r.namespace, r.key) for r in alone], what
    assert [r.score for r in merged] == pytest.approx([r.score for r in alone], rel=1e-6, abs=1e-9), what
    assert merged.mode == alone.mode, what


def _fan_out(stores: list[Memory], prefix: tuple[str, ...], query: str, options: dict[str, Any]) -> SearchResults:
    """Both phases by hand over plain stores: sum the statistics, search each with the sum, merge."""
    stats = CorpusStats.total(store.corpus_stats(query) for store in stores)
    limit, offset = options.get("limit", 10), options.get("offset", 0)
    asked = {**options, "limit": offset + limit, "offset": 0}
    return merge([store.search(prefix, query, stats=stats, **asked) for store in stores], offset, limit)


@pytest.fixture(params=["memory", "sqlite", "pgvector"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[list[Memory], Memory]]:
    """Three stores holding a month each and one holding everything: searched in process (memory and SQLite
    backends), or in PostgreSQL's search tables (``search="postgres"``)."""
    if request.param == "memory":
        opened = [engram.open(":memory:", embedder="hashing") for _ in range(4)]
    elif request.param == "sqlite":
        opened = [engram.open(f"sqlite:///{tmp_path / f's{i}.db'}", embedder="hashing") for i in range(4)]
    else:
        url = request.getfixturevalue("pgvector_url")
        opened = [
            engram.open(tenant_url(url, "g" + uuid.uuid4().hex[:12]), embedder="hashing", search="postgres")
            for _ in range(4)
        ]
        assert all(store.pool.sql is not None for store in opened)
    *parts, single = opened
    with clock.simulated(START) as sim:  # a copy has its original's timestamps: ties go newest first in both
        for month, namespace, key, value in _items():
            parts[month].put(namespace, key, value)
            single.put(namespace, key, value)
            sim.advance(seconds=1)
    try:
        yield parts, single
    finally:
        for store in opened:
            store.close()


def test_corpus_stats_of_parts_sum_to_the_whole(stores: tuple[list[Memory], Memory]) -> None:
    parts, single = stores
    total = CorpusStats.total(part.corpus_stats("alpha echo golf absent alpha") for part in parts)
    assert total == single.corpus_stats("alpha echo golf absent alpha")
    assert list(total.df) == ["alpha", "echo", "golf", "absent"] and total.df["absent"] == 0
    assert total.docs == 90 and total.length > 90
    assert [part.corpus_stats("golf").df["golf"] for part in parts] == [0, 0, total.df["golf"]]


def test_searches_with_summed_stats_equal_one_store(stores: tuple[list[Memory], Memory]) -> None:
    parts, single = stores
    differs = 0
    for prefix, query, options in SEARCHES:
        alone = single.search(prefix, query, **options)
        assert alone, (prefix, query)
        _same(_fan_out(parts, prefix, query, options), alone, (prefix, query, options))
        own = merge([p.search(prefix, query, **options) for p in parts], 0, options.get("limit", 10))
        differs += [r.score for r in own] != [r.score for r in alone]
    assert differs >= 4  # each store's own statistics rank differently: the sums are what make them equal


def test_searches_at_a_tag_with_summed_stats_equal_one_store(stores: tuple[list[Memory], Memory]) -> None:
    parts, single = stores
    for store in [*parts, single]:
        store.tag("before")
    with clock.simulated(START + timedelta(days=1)) as sim:
        for month, namespace, key, value in list(_items())[::7]:  # rewrite some, delete others: the past differs
            for store in (parts[month], single):
                if key.endswith("3"):
                    store.delete(namespace, key)
                else:
                    store.put(namespace, key, {**value, "text": "alpha alpha rewritten"})
            sim.advance(seconds=1)
    views = [part.at("before") for part in parts]
    past = single.at("before")
    assert CorpusStats.total(view.corpus_stats("alpha echo") for view in views) == past.corpus_stats("alpha echo")
    assert past.corpus_stats("alpha") != single.corpus_stats("alpha")
    for prefix, query, options in SEARCHES:
        stats = CorpusStats.total(view.corpus_stats(query) for view in views)
        limit, offset = options.get("limit", 10), options.get("offset", 0)
        asked = {**options, "limit": offset + limit, "offset": 0}
        merged = merge([view.search(prefix, query, stats=stats, **asked) for view in views], offset, limit)
        _same(merged, past.search(prefix, query, **options), (prefix, query, options))


def test_stats_are_part_of_the_query_cache_key() -> None:
    with engram.open(":memory:", embedder="hashing") as mem:
        for i in range(20):
            mem.put(("notes",), f"k{i}", {"text": f"alpha {'bravo ' * (i % 4)}{i}"})
        own = mem.search(("notes",), "alpha bravo", mode="keyword")
        bigger = CorpusStats(1000, 3000, {"alpha": 20, "bravo": 15})
        other = mem.search(("notes",), "alpha bravo", mode="keyword", stats=bigger)
        assert [r.score for r in other] != [r.score for r in own]  # not the cached page of the search without
        assert mem.search(("notes",), "alpha bravo", mode="keyword", stats=bigger) == other
        hits = mem.pool.query_cache.stats().hits if mem.pool.query_cache is not None else -1
        assert hits >= 1
        assert [r.score for r in mem.search(("notes",), "alpha bravo", mode="keyword")] == [r.score for r in own]


def test_corpus_stats_reject_bad_input() -> None:
    with pytest.raises(InvalidInputError, match="non-negative"):
        CorpusStats(-1, 0)
    with pytest.raises(InvalidInputError, match="more documents"):
        CorpusStats(2, 10, {"a": 3})
    with pytest.raises(InvalidInputError, match="non-negative"):
        CorpusStats(2, 10, {"a": True})
    with engram.open(":memory:") as mem:
        with pytest.raises(InvalidInputError, match="query must be a string"):
            mem.corpus_stats(None)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="stats must be CorpusStats"):
            mem.search((), "a", stats={"docs": 1})  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- routed (both phases built in)


def _fill(routed: RoutedMemory, single: Memory) -> None:
    with clock.simulated(START) as sim:
        for n, (month, namespace, key, value) in enumerate(_items()):
            routed.put(namespace, key, value)
            single.put(namespace, key, value)
            sim.advance(seconds=1)
            if n % 30 == 29 and month < 2:
                sim.advance(days=31)


def _check_routed(routed: RoutedMemory, single: Memory) -> None:
    assert routed.routing_keys() == ["2026-01", "2026-02", "2026-03"]
    assert routed.corpus_stats("alpha golf") == single.corpus_stats("alpha golf")
    for prefix, query, options in SEARCHES:
        _same(routed.search(prefix, query, **options), single.search(prefix, query, **options), (prefix, query))
    own = routed.search((), "alpha echo", mode="keyword", global_stats=False)
    assert [r.score for r in own] != [r.score for r in single.search((), "alpha echo", mode="keyword")]
    routed.tag("v1")
    single.tag("v1")
    with clock.simulated(START + timedelta(days=100)) as sim:
        for _, namespace, key, value in list(_items())[::5]:
            routed.put(namespace, key, {**value, "text": "echo echo changed"})
            single.put(namespace, key, {**value, "text": "echo echo changed"})
            sim.advance(seconds=1)
    assert routed.search((), "echo", mode="keyword", limit=3)[0].value["text"] == "echo echo changed"
    past, alone = routed.at("v1"), single.at("v1")
    assert past.corpus_stats("echo") == alone.corpus_stats("echo") != routed.corpus_stats("echo")
    for prefix, query, options in SEARCHES:
        _same(past.search(prefix, query, **options), alone.search(prefix, query, **options), ("v1", prefix, query))


def test_routed_search_ranks_as_one_repository(cluster: Cluster) -> None:
    routed = RoutedMemory(cluster.router, "dfs", by_month(), embedder="hashing")
    single = engram.open(":memory:", embedder="hashing")
    try:
        _fill(routed, single)
        _check_routed(routed, single)
    finally:
        routed.close()
        single.close()


def test_routed_search_by_type_uses_every_repository_statistics(cluster: Cluster) -> None:
    routed = RoutedMemory(cluster.router, "types", by_type(), embedder="hashing")
    single = engram.open(":memory:", embedder="hashing")
    try:
        for _, namespace, key, value in _items():
            routed.put(namespace, key, value)
            single.put(namespace, key, value)
        assert routed.routing_keys() == ["episodes", "notes"]
        for prefix, query, options in SEARCHES:
            _same(routed.search(prefix, query, **options), single.search(prefix, query, **options), (prefix, query))
        alone = routed.memory("episodes").search(("episodes",), "hotel tea", mode="keyword")
        own = routed.search(("episodes",), "hotel tea", mode="keyword", global_stats=False)
        assert [r.score for r in own] == [r.score for r in alone]  # one repository searched, with its own
    finally:
        routed.close()
        single.close()


@pytest.fixture
def pg_cluster(pgvector_url: str) -> Iterator[ShardRouter]:
    """A catalog and two shards on the PostgreSQL with pgvector (search tables in PostgreSQL)."""
    made = make_databases(pgvector_url, 3)
    catalog = ShardCatalog(made[0][1])
    router = ShardRouter(catalog, ttl=0.2)
    try:
        for i, (_, url) in enumerate(made[1:]):
            add_shard(catalog, url, name=f"p{i + 1}")
        yield router
    finally:
        router.close()
        catalog.close()
        drop_databases(pgvector_url, [name for name, _ in made])


def test_routed_search_on_postgres_ranks_as_one_repository(pg_cluster: ShardRouter, pgvector_url: str) -> None:
    routed = RoutedMemory(pg_cluster, "dfs", by_month(), embedder="hashing", search="postgres")
    single = engram.open(tenant_url(pgvector_url, "g" + uuid.uuid4().hex[:12]), embedder="hashing", search="postgres")
    try:
        _fill(routed, single)
        assert all(routed.memory(key).pool.sql is not None for key in routed.routing_keys())
        _check_routed(routed, single)
    finally:
        routed.close()
        single.close()


# ------------------------------------------------------------------------- PostgreSQL's bound, other statistics


def _zipf_texts(n: int) -> list[str]:
    """Sentences of 6-20 words over a Zipf vocabulary: a few words in most items (long postings lists, read
    in rounds and cut short by the bound), most words in few."""
    rng = np.random.default_rng(11)
    vocab = [f"w{i}" + "".join(chr(97 + (i * 7 + j) % 26) for j in range(3)) for i in range(1500)]
    ranks = np.minimum(rng.zipf(1.3, size=(n, 20)), 1500) - 1
    lengths = rng.integers(6, 21, size=n)
    return [" ".join(vocab[r] for r in row[:k]) for row, k in zip(ranks, lengths, strict=True)]


def test_postgres_pruning_stays_exact_under_other_statistics(pgvector_url: str) -> None:
    """PostgreSQL's lists hold impacts at the branch's reference length and stop at a bound; with a fan-out's
    statistics (another average length, other frequencies) the page must still be the exhaustive engine's."""
    mem = engram.open(tenant_url(pgvector_url, "g" + uuid.uuid4().hex[:12]), embedder="hashing", search="postgres")
    try:
        found = _zipf_texts(2400)
        for lo in range(0, len(found), 800):
            with mem.transaction("load") as tx:
                for i in range(lo, lo + 800):
                    tx.put((f"u{i % 3}",), f"k{i}", {"text": found[i], "n": i % 5, "confidence": (i % 10) / 10})
        local = Memory(mem.repo, pool=IndexPool(mem.repo, embedder=HashingEmbedder()))
        assert mem.pool.sql is not None and local.pool.sql is None
        common = found[0].split()[0]
        own = mem.corpus_stats(common)
        assert own.df[common] > 1000  # its postings are read in rounds, not whole
        assert local.corpus_stats(common) == own
        for query in [common, f"{common} {found[7].split()[-1]}", " ".join(found[3].split()[:3])]:
            base = mem.corpus_stats(query)
            for docs, length, df in [(3, 8, 3), (3, 1, 1), (2, 2, 0)]:  # avgdl x2.7, x0.3; rarer terms
                stats = CorpusStats(docs * base.docs, length * base.length, {t: n * df for t, n in base.df.items()})
                for mode, prefix, spec in [("keyword", (), None), ("hybrid", ("u1",), {"n": {"$gte": 2}})]:
                    args: dict[str, Any] = {"mode": mode, "filter": spec, "limit": 15, "stats": stats}
                    pg, exhaustive = mem.search(prefix, query, **args), local.search(prefix, query, **args)
                    assert [r.key for r in pg] == [r.key for r in exhaustive], (query, stats, mode)
                    assert [r.score for r in pg] == pytest.approx([r.score for r in exhaustive], abs=1e-6)
                    assert pg != mem.search(prefix, query, mode=mode, filter=spec, limit=15) or df == 1
    finally:
        mem.close()
