"""Rendezvous hashing from tenant to shard: balanced by weight, stable, and minimal when the map changes."""

from __future__ import annotations

from collections import Counter

import pytest

from engram.ops.shards import Shard, rendezvous
from engram.ops.shards._rendezvous import changes, route

TENANTS = [f"tenant-{i}" for i in range(10_000)]


def _map(*shards: Shard) -> dict[str, Shard]:
    return {s.name: s for s in shards}


def test_rendezvous_spreads_tenants_by_weight() -> None:
    shards = _map(Shard("a", "u1"), Shard("b", "u2"), Shard("c", "u3", weight=2.0))
    counts = Counter(rendezvous(t, shards.values()).name for t in TENANTS)  # type: ignore[union-attr]
    assert abs(counts["a"] / len(TENANTS) - 0.25) < 0.02
    assert abs(counts["b"] / len(TENANTS) - 0.25) < 0.02
    assert abs(counts["c"] / len(TENANTS) - 0.50) < 0.02


def test_adding_a_shard_moves_about_one_in_n_and_only_to_it() -> None:
    three = _map(Shard("a", "u1"), Shard("b", "u2"), Shard("c", "u3"))
    four = {**three, "d": Shard("d", "u4")}
    moved = changes(TENANTS, three, {}, four)
    assert abs(len(moved) / len(TENANTS) - 0.25) < 0.02  # ~1/N of the tenants, N = 4
    assert {new for _, new in moved.values()} == {"d"}  # nothing moves between the old shards
    assert {old for old, _ in moved.values()} == {"a", "b", "c"}  # each old shard gives some


def test_draining_a_shard_moves_only_its_tenants() -> None:
    shards = _map(Shard("a", "u1"), Shard("b", "u2"), Shard("c", "u3"))
    drained = {**shards, "b": Shard("b", "u2", status="draining")}
    moved = changes(TENANTS, shards, {}, drained)
    on_b = [t for t in TENANTS if rendezvous(t, shards.values()).name == "b"]  # type: ignore[union-attr]
    assert sorted(moved) == sorted(on_b)
    assert {old for old, _ in moved.values()} == {"b"}


def test_rendezvous_is_deterministic_and_ignores_inactive_shards() -> None:
    shards = [Shard("a", "u1"), Shard("b", "u2", status="readonly"), Shard("c", "u3", status="draining")]
    assert {rendezvous(t, shards).name for t in TENANTS[:200]} == {"a"}  # type: ignore[union-attr]
    assert rendezvous("x", [Shard("b", "u2", status="readonly")]) is None
    again = [Shard("c", "u3"), Shard("a", "u1")]
    assert [rendezvous(t, again) for t in TENANTS[:50]] == [rendezvous(t, again[::-1]) for t in TENANTS[:50]]


def test_override_wins_over_the_hash_and_pinned_tenants_never_move() -> None:
    shards = _map(Shard("a", "u1"), Shard("b", "u2"))
    home = rendezvous("acme", shards.values())
    assert home is not None
    other = "b" if home.name == "a" else "a"
    assert route("acme", shards, {"acme": other}).name == other  # type: ignore[union-attr]
    bigger = {**shards, "c": Shard("c", "u3", weight=100.0)}
    assert "acme" not in changes(["acme"], shards, {"acme": other}, bigger)


@pytest.mark.parametrize("weight", [0.5, 3.0])
def test_weighted_new_shard_takes_its_share(weight: float) -> None:
    two = _map(Shard("a", "u1"), Shard("b", "u2"))
    moved = changes(TENANTS, two, {}, {**two, "n": Shard("n", "u3", weight=weight)})
    assert abs(len(moved) / len(TENANTS) - weight / (2 + weight)) < 0.02
