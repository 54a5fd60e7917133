"""Many-tenant stores on PostgreSQL: a small scope is scored exactly through the namespace index (the same page as
the sorted lists give), every search reads one snapshot and terminates beside writers, and closing a store stops
its threads."""

from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import engram
from engram.embed import HashingEmbedder
from engram.index import pgengine, pgquery
from engram.ops.tenants import TenantPool, store_opener
from engram.store import Memory, tenant_url


@pytest.fixture(autouse=True)
def in_postgresql(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every search of these tests runs in PostgreSQL: a silent fallback to the in-process engine (which gives the
    same results) would hide what they test."""
    fallbacks: list[str] = []
    for name in ("query", "query_past"):
        real = getattr(pgengine.PgEngine, name)

        def spy(self: Any, *args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            found = _real(self, *args, **kwargs)
            if found is None:
                fallbacks.append(_name)
            return found

        monkeypatch.setattr(pgengine.PgEngine, name, spy)
    yield
    assert fallbacks == []


def _open(url: str) -> Memory:
    mem = engram.open(
        tenant_url(url, "t" + uuid.uuid4().hex[:16]), embedder=HashingEmbedder(), search="postgres",
        background_index=False,
    )  # fmt: skip
    mem.pool.query_cache = None
    return mem


@pytest.fixture
def tenants(pgvector_url: str) -> Iterator[Memory]:
    """2,000 items over 40 users (50 each), a user with a sub-namespace, and deletes after the load."""
    mem = _open(pgvector_url)
    mem.search((), "index this branch from now on")
    with mem.transaction("load") as tx:
        for i in range(2_000):
            words = "alpha" if i % 3 else "beta"
            tx.put(("users", f"u{i % 40}"), f"m{i}", {"text": f"note {i} about topic {i % 97} {words}", "n": i % 5})
    with mem.transaction("more") as tx:
        tx.put(("users", "u1", "sub"), "s0", {"text": "topic 7 in a sub-namespace"})
        for i in range(0, 200, 7):
            tx.delete(("users", f"u{i % 40}"), f"m{i}")
    yield mem
    mem.close()


def test_small_scopes_on_postgresql_give_the_page_the_lists_give(
    tenants: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    sql = tenants.pool.sql
    assert sql is not None
    ran: list[str] = []  # which path each search took, in PostgreSQL (never a silent fallback to in process)
    for name in ("_exact", "_ranked"):
        real = getattr(pgquery.PgQuery, name)
        monkeypatch.setattr(
            pgquery.PgQuery, name, lambda self, *a, _real=real, _name=name: ran.append(_name) or _real(self, *a)
        )
    prefixes = [("users", "nobody"), ("users", "u1"), ("users", "u1", "sub"), ("users", "u7")]
    combos = itertools.product(
        prefixes, ["topic 7", "note about topic 12 alpha", "beta"], ["hybrid", "semantic", "keyword"],
        ["similarity", "recent"], [None, {"n": {"$gte": 2}}],
    )  # fmt: skip
    for prefix, query, mode, profile, spec in combos:
        args = {"mode": mode, "profile": profile, "filter": spec, "limit": 5}
        sql.scope_exact = 10_000
        ran.clear()
        scoped = [(i.namespace, i.key, i.score) for i in tenants.search(prefix, query, **args)]  # type: ignore[arg-type]
        sql.scope_exact = 0
        lists = [(i.namespace, i.key, i.score) for i in tenants.search(prefix, query, **args)]  # type: ignore[arg-type]
        sql.scope_exact = 10_000
        empty = prefix == ("users", "nobody")  # a scope of no items is exact whatever the limit
        assert ran == ["_exact", "_exact" if empty else "_ranked"], (prefix, query, mode)
        assert [(ns, key) for ns, key, _ in scoped] == [(ns, key) for ns, key, _ in lists], (prefix, query, mode)
        for (_, _, a), (_, _, b) in zip(scoped, lists, strict=True):
            assert a == pytest.approx(b, abs=1e-6)
        assert all(ns[: len(prefix)] == prefix for ns, _, _ in scoped)
        if prefix == ("users", "nobody"):
            assert scoped == []


def test_items_per_namespace_follow_writes_and_deletes(tenants: Memory) -> None:
    sql = tenants.pool.sql
    assert sql is not None
    rows = sql.db.run(
        "SELECT ns_path, docs FROM engram_index_namespaces WHERE repo = %s AND branch = 'main'", (sql.db.repo,)
    )
    counts = {path: int(n) for path, n in rows}
    expected = {f"users\x1fu{u}\x1f": tenants.count(("users", f"u{u}")) - (u == 1) for u in range(40)}
    expected["users\x1fu1\x1fsub\x1f"] = 1
    assert counts == expected
    tenants.delete(("users", "u1", "sub"), "s0")
    for i in range(4):
        tenants.put(("users", "new"), f"k{i}", {"t": "x"})
    rows = sql.db.run(
        "SELECT ns_path, docs FROM engram_index_namespaces WHERE repo = %s AND branch = 'main'", (sql.db.repo,)
    )
    counts = {path: int(n) for path, n in rows}
    assert "users\x1fu1\x1fsub\x1f" not in counts and counts["users\x1fnew\x1f"] == 4


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_a_past_search_on_postgresql_equals_a_branch_rebuilt_at_that_version(pgvector_url: str, mode: str) -> None:
    mem = _open(pgvector_url)
    try:
        mem.search((), "index this branch from now on")
        rng = random.Random(5)
        for round_ in range(5):
            with mem.transaction(f"round {round_}") as tx:
                for _ in range(50):
                    n = rng.randrange(250)
                    tx.put(("users", f"u{n % 7}"), f"k{n}", {"text": f"shared words {n % 4} round {round_} x{n % 11}"})
        past = mem.head.id
        with mem.transaction("later") as tx:
            for n in range(0, 250, 3):
                tx.delete(("users", f"u{n % 7}"), f"k{n}")
        mem.create_branch("rebuilt", past)
        rebuilt = mem.handle("rebuilt")
        for prefix, query in itertools.product([(), ("users", "u3")], ["shared words", "words 2 x5"]):
            a = mem.search(prefix, query, mode=mode, limit=8, at=past)
            b = rebuilt.search(prefix, query, mode=mode, limit=8)
            assert [(i.namespace, i.key) for i in a] == [(i.namespace, i.key) for i in b], (prefix, query)
            assert [i.score for i in a] == [i.score for i in b]  # byte for byte
    finally:
        mem.close()


def test_searches_beside_a_writer_terminate_and_never_fail(pgvector_url: str) -> None:
    """One writer and two searchers on a fresh repository (the shape that spun forever), tenants arriving as they
    search, the vector mover running: every search reads one snapshot, so it ends; a new tenant finds its item."""
    mem = _open(pgvector_url)
    mem.search((), "index this branch from now on")
    stop = threading.Event()
    errors: list[BaseException] = []
    searches = [0]
    arrived: list[str] = []

    def writer() -> None:
        try:
            for n in range(300):
                with mem.transaction(f"w{n}") as tx:
                    for i in range(5):
                        k = (n * 5 + i) % 120
                        tx.put(("users", f"u{k % 3}"), f"k{k}", {"text": f"round {n} item {k} common words w{n % 9}"})
                    if n % 4 == 0:
                        tx.delete(("users", f"u{n % 3}"), f"k{(n * 7) % 120}")
                    tx.put(("users", f"new{n}"), "m0", {"text": f"common words w{n % 9} from a new tenant"})
                arrived.append(f"new{n}")
        except BaseException as exc:
            errors.append(exc)
        finally:
            stop.set()

    def searcher(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                newest = arrived[-1] if arrived else None  # a tenant whose commit landed before this search
                prefix = rng.choice([(), ("users",), ("users", "u1"), ("users", newest or "u2")])
                mode = rng.choice(["hybrid", "keyword", "semantic"])
                found = mem.search(
                    prefix, f"common words w{rng.randrange(9)} item", mode=mode, limit=rng.choice([3, 10])
                )
                if newest is not None and prefix == ("users", newest):
                    assert [item.key for item in found] == ["m0"]
                searches[0] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, daemon=True)]
    threads += [threading.Thread(target=searcher, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 300
    for thread in threads:
        thread.join(timeout=max(1.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "a search did not end beside the writer"
    assert errors == []
    assert searches[0] > 0
    mem.close()


def test_the_rounds_of_a_search_are_bounded(tenants: Memory) -> None:
    """A search whose lists would keep deepening scores its scope exactly after MAX_ROUNDS: the same page."""
    sql = tenants.pool.sql
    assert sql is not None
    sql.scope_exact = 0
    expected = [(i.key, i.score) for i in tenants.search(("users",), "note topic alpha", limit=10)]
    bound = pgquery.MAX_ROUNDS
    try:
        pgquery.MAX_ROUNDS = 0  # the first round's page is not final: exact at once
        got = [(i.key, i.score) for i in tenants.search(("users",), "note topic alpha", limit=10)]
    finally:
        pgquery.MAX_ROUNDS = bound
    assert [k for k, _ in got] == [k for k, _ in expected]


def test_closing_postgresql_tenants_stops_their_threads(pgvector_url: str) -> None:
    """Tenants opened and evicted by the tenant pool, round after round: the vector movers and indexers end with
    their stores (they leaked one thread per reopened tenant)."""

    def threads() -> int:
        return sum(1 for t in threading.enumerate() if t.name.startswith(("engram-settle-", "engram-indexer")))

    prefix = "t" + uuid.uuid4().hex[:8]
    pool = TenantPool(store_opener(pgvector_url, local=False, embedder=HashingEmbedder()), max_open=4,
                      index_delay=None)  # fmt: skip
    before = threads()
    try:
        for round_ in range(4):
            for n in range(10):
                with pool.lease(f"{prefix}{n}") as mem:
                    mem.put(("n",), f"k{round_}", {"text": f"tenant {n} round {round_}"})
                    mem.search(("n",), "tenant round")
        time.sleep(0.5)
        assert threads() - before <= 2 * 4  # the open tenants' threads at most
    finally:
        pool.close()
    deadline = time.monotonic() + 30
    while threads() > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert threads() <= before
