"""Routing rules within a tenant: items split over repositories on several shards, reads fanned out and merged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from conftest import Cluster

import engram
from engram import clock
from engram.errors import InvalidInputError, RefNotFoundError
from engram.ops.shards import RoutedMemory, by_hash, by_month, by_time, by_type
from engram.ops.shards.routing import RoutingRule

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def _text(i: int) -> str:
    return f"{WORDS[i % 8]} {WORDS[(i * 3) % 8]} memory number {i}"


def test_by_month_fans_out_and_merges_like_one_repository(cluster: Cluster) -> None:
    routed = RoutedMemory(cluster.router, "acme", by_month(), embedder="hashing", author="tester")
    single = engram.open(":memory:", embedder="hashing", author="tester")
    try:
        with clock.simulated(datetime(2026, 1, 10, tzinfo=UTC)) as sim:
            for i in range(60):  # 20 items a month over three months, written to both in the same order
                routed.put(("notes", f"u{i % 3}"), f"k{i}", {"text": _text(i), "confidence": (i % 10) / 10})
                single.put(("notes", f"u{i % 3}"), f"k{i}", {"text": _text(i), "confidence": (i % 10) / 10})
                if i % 20 == 19:
                    sim.advance(days=31)
            routed.put(("notes", "u0"), "k0", {"text": "alpha rewritten", "confidence": 0.1})  # stays in January
            single.put(("notes", "u0"), "k0", {"text": "alpha rewritten", "confidence": 0.1})
        assert routed.routing_keys() == ["2026-01", "2026-02", "2026-03"]
        assert {cluster.router.route(routed.repository(k)).name for k in routed.routing_keys()} <= set(cluster.shards)
        assert routed.memory("2026-01").get(("notes", "u0"), "k0").value["text"] == "alpha rewritten"  # type: ignore[union-attr]

        def keys(results: list[engram.SearchItem]) -> list[str]:
            return [r.key for r in results]

        for query, options in [
            (None, {}),  # a listing: newest first
            ("bravo memory", {"mode": "semantic"}),
            ("charlie", {"mode": "semantic", "profile": "quality"}),
            ("delta echo", {"mode": "semantic", "offset": 3, "limit": 4}),
            ("golf memory in February 2026", {"mode": "semantic", "reference_time": "2026-04-01"}),  # time stage
            ("hotel", {"mode": "semantic", "when": "in March 2026", "offset": 2, "limit": 3}),
        ]:
            merged = routed.search(("notes",), query, **options)  # type: ignore[arg-type]
            alone = single.search(("notes",), query, **options)  # type: ignore[arg-type]
            assert keys(merged) == keys(alone), (query, options)
            assert [r.score for r in merged] == pytest.approx([r.score for r in alone])
        february = routed.search(("notes",), "golf memory in February 2026", reference_time="2026-04-01", limit=5)
        assert [r.created_at.month for r in february] == [2] * 5  # the time stage ran in every repository
        keyword = routed.search(("notes",), "foxtrot", mode="keyword", limit=5)
        assert keyword and all("foxtrot" in r.value["text"] for r in keyword)
        assert keyword.mode == "keyword"
        assert routed.get(("notes", "u1"), "k31").value["text"] == _text(31)  # type: ignore[union-attr]
        assert routed.delete(("notes", "u1"), "k31") is not None
        assert routed.get(("notes", "u1"), "k31") is None
        assert routed.delete(("notes", "u1"), "absent") is None
    finally:
        routed.close()
        single.close()


def test_by_type_routes_by_namespace_label_and_reads_one_repository(cluster: Cluster) -> None:
    routed = RoutedMemory(cluster.router, "team", by_type(), embedder="hashing")
    try:
        routed.put(("facts", "alice"), "f1", {"text": "alice likes tea"})
        routed.put(("episodes", "alice"), "e1", {"text": "alice asked about tea"})
        routed.put(("prefs", "alice"), "p1", {"text": "dark mode"})
        assert routed.routing_keys() == ["episodes", "facts", "prefs"]
        assert [r.key for r in routed.search(("facts",), "tea", mode="keyword")] == ["f1"]
        assert {r.key for r in routed.search((), "tea", mode="keyword")} == {"f1", "e1"}
        assert routed.memory("facts").get(("episodes", "alice"), "e1") is None  # each type is its own repository
        assert routed.get(("prefs", "alice"), "p1").value == {"text": "dark mode"}  # type: ignore[union-attr]
        assert routed.search(("unknown",), "tea") == []
        with pytest.raises(InvalidInputError, match="at least 2"):
            RoutedMemory(cluster.router, "team2", by_type(level=1)).put(("flat",), "k", {"a": 1})
    finally:
        routed.close()


def test_tag_across_shards_reads_every_repository_at_the_tag(cluster: Cluster) -> None:
    routed = RoutedMemory(cluster.router, "snap", by_hash(buckets=6), embedder="hashing")
    try:
        for i in range(40):
            routed.put(("docs",), f"d{i}", {"text": _text(i)})
        used = routed.routing_keys()
        assert len(used) == 6 and len({cluster.router.route(routed.repository(k)).name for k in used}) == 2
        tagged = routed.tag("before")
        assert set(tagged) == set(used)
        for i in range(40):
            routed.put(("docs",), f"d{i}", {"text": "changed"})
        routed.put(("docs",), "new", {"text": "added later"})
        past = routed.at("before")
        assert past.get(("docs",), "d5").value == {"text": _text(5)}  # type: ignore[union-attr]
        assert past.get(("docs",), "new") is None
        assert len(past.search(("docs",), limit=100)) == 40
        assert {r.value["text"] for r in routed.search(("docs",), limit=100)} == {"changed", "added later"}
        with pytest.raises(RefNotFoundError):
            routed.at("never")
    finally:
        routed.close()


def test_routing_rules_reject_bad_input(cluster: Cluster) -> None:
    with pytest.raises(InvalidInputError):
        RoutingRule("weekday")
    with pytest.raises(InvalidInputError):
        by_hash(buckets=0)
    with pytest.raises(InvalidInputError):
        RoutedMemory(cluster.router, "bad tenant", by_month())
    routed = RoutedMemory(cluster.router, "pager", by_hash(buckets=2))
    try:
        with pytest.raises(InvalidInputError):
            routed.search((), "x", limit=-1)
    finally:
        routed.close()


def test_month_key_is_utc_month_of_creation() -> None:
    rule = by_month()
    when = datetime(2026, 3, 31, 23, 30, tzinfo=UTC)
    assert rule.key(("a",), "k", int(when.timestamp() * 1000)) == "2026-03"
    assert rule.key(("a",), "k", int((when + timedelta(hours=1)).timestamp() * 1000)) == "2026-04"
    assert by_type().key(("a b.c",), "k", 0).startswith("t")  # unsafe labels become a hash


def test_time_keys_by_period_and_by_the_items_own_time() -> None:
    when = datetime(2026, 11, 28, 23, 30, tzinfo=UTC)
    ms = int(when.timestamp() * 1000)
    assert [by_time(period).key(("a",), "k", ms) for period in ("day", "week", "month")] == [
        "2026-11-28", "2026-W48", "2026-11",
    ]  # fmt: skip
    assert by_time("week").key(("a",), "k", int(datetime(2027, 1, 1, tzinfo=UTC).timestamp() * 1000)) == "2026-W53"
    event = by_time("day", field="event.at")
    assert event.key(("a",), "k", ms, {"event": {"at": "2026-03-01T10:00:00Z"}}) == "2026-03-01"
    assert event.key(("a",), "k", ms, {"event": {"at": "2026-03-01T23:30:00-05:00"}}) == "2026-03-02"  # in UTC
    assert event.key(("a",), "k", ms, {"event": {"at": 1_772_000_000}}) == "2026-02-25"  # Unix seconds
    assert event.key(("a",), "k", ms, {"event": {"at": 1_772_000_000_000}}) == "2026-02-25"  # milliseconds
    for bad in ({}, {"event": {"at": "yesterday"}}, {"event": "x"}, {"event": {"at": True}}):
        with pytest.raises(InvalidInputError, match=r"event\.at"):
            event.key(("a",), "k", ms, bad)
    with pytest.raises(InvalidInputError, match="period"):
        by_time("quarter")
    with pytest.raises(InvalidInputError, match="field"):
        by_time("day", field="")
    assert not event.addressed and not by_time().addressed


def test_by_time_of_an_item_field_routes_by_event_time(cluster: Cluster) -> None:
    routed = RoutedMemory(cluster.router, "events", by_time("day", field="at"), embedder="hashing")
    try:
        routed.put(("logs",), "a", {"text": "deploy started", "at": "2026-11-01T09:00:00Z"})
        routed.put(("logs",), "b", {"text": "deploy failed", "at": "2026-11-02T09:00:00Z"})
        routed.put(("logs",), "c", {"text": "rollback", "at": "2026-11-02T10:00:00Z"})
        assert routed.routing_keys() == ["2026-11-01", "2026-11-02"]
        assert [i.key for i in routed.memory("2026-11-02").search(("logs",))] == ["c", "b"]
        routed.put(("logs",), "a", {"text": "deploy started (edited)", "at": "2026-11-05T09:00:00Z"})
        assert routed.routing_keys() == ["2026-11-01", "2026-11-02"]  # an existing item stays where it is
        assert routed.get(("logs",), "a").value["text"] == "deploy started (edited)"  # type: ignore[union-attr]
        with pytest.raises(InvalidInputError, match="'at'"):
            routed.put(("logs",), "d", {"text": "no time"})
        assert routed.get(("logs",), "d") is None
    finally:
        routed.close()


def test_a_routing_key_repository_moves_like_a_tenant(cluster: Cluster) -> None:
    from engram.ops.shards import move_tenant

    routed = RoutedMemory(cluster.router, "mover", by_type(), embedder="hashing")
    try:
        routed.put(("facts",), "f1", {"text": "before the move"})
        repository = routed.repository("facts")
        here = cluster.router.route(repository).name
        move_tenant(cluster.catalog, repository, "s1" if here != "s1" else "s2")
        cluster.router.refresh()
        routed.put(("facts",), "f2", {"text": "after the move"})  # reopened on its new shard
        assert {r.key for r in routed.search(("facts",))} == {"f1", "f2"}
        assert cluster.router.route(repository).name != here
    finally:
        routed.close()
