"""Many-tenant stores in process: a search scoped to one tenant never crashes, scores its scope exactly when it is
small (the same page the whole index gives), and breaks ties the same way on every path."""

from __future__ import annotations

import itertools
import random
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import engram
from engram.index import engine
from engram.index.docs import DocIndex
from engram.index.keyword import KeywordIndex
from engram.index.ranking import Hits, Request, get_profile
from engram.store import Memory

QUERIES = ["topic 7", "note about topic 12", "alpha beta", "rare words nobody wrote"]


def _fill(mem: Memory, items: int, users: int, *, first: int = 0) -> None:
    with mem.transaction("load") as tx:
        for i in range(first, first + items):
            words = "alpha" if i % 3 else "beta"
            tx.put(("users", f"u{i % users}"), f"m{i}", {"text": f"note {i} about topic {i % 500} {words}"})


def _page(found: Hits) -> list[tuple[tuple[str, ...], str, float | None]]:
    return [(h.namespace, h.key, h.score) for h in found.hits]


def _index(mem: Memory, **options: Any) -> DocIndex:
    index = DocIndex(mem.repo.nodes, embedder=mem.pool.embedder, **options)
    index.sync(mem.head.tree)
    return index


def test_a_tenant_search_in_a_store_of_20k_items_never_crashes(tmp_path: Path) -> None:
    """The shape of the report: 20,000 items over 200 users, searched one user at a time while the vector graph
    is built, after it, and for a user who arrives later (none of whose items the graph holds)."""
    mem = engram.open(str(tmp_path / "s"), embedder="hashing")
    _fill(mem, 20_000, 200)
    for mode in ("hybrid", "semantic", "keyword"):
        found = mem.search(("users", "u1"), query="topic 7", mode=mode)  # the graph is being built
        assert found and all(item.namespace == ("users", "u1") for item in found), mode
    vectors = mem.pool.index("main").vectors
    assert vectors is not None
    assert mem.flush_index(timeout=300)  # every vector made (in the background), then the graph built of them
    vectors.wait()
    assert vectors.approximate
    mem.put(("users", "newbie"), "m0", {"text": "topic 7 is great"})
    for mode in ("hybrid", "semantic", "keyword"):
        found = mem.search(("users", "newbie"), query="topic 7", mode=mode)
        assert [(item.namespace, item.key) for item in found] == [(("users", "newbie"), "m0")], mode
    mem.close()


@pytest.mark.parametrize("built", [False, True], ids=["graph-building", "graph-built"])
def test_small_scopes_score_exactly_the_page_the_whole_index_gives(tmp_path: Path, built: bool) -> None:
    """0, 1, few and many eligible items, inside and outside the graph: the scoped path (scope_exact) and the
    whole-index path (scope_exact=0) return the same page, byte for byte."""
    mem = engram.open(str(tmp_path / "s"), embedder="hashing", background_index=False)
    _fill(mem, 3_000, 30)  # 100 per user, in the graph once built
    later = mem.head.tree
    mem.put(("users", "late"), "m0", {"text": "topic 7 alpha arrived late"})  # outside the graph (its tail)
    mem.put(("users", "u1", "sub"), "m0", {"text": "topic 7 in a sub-namespace"})
    scoped = _index(mem, ann_min=1_000)
    whole = _index(mem, ann_min=1_000, scope_exact=0)
    for index in (scoped, whole):
        assert index.vectors is not None
        if built:
            index.vectors.wait()
            assert index.vectors.approximate
    assert later != mem.head.tree
    prefixes = [("users", "nobody"), ("users", "late"), ("users", "u1"), ("users",), ("users", "u1", "sub")]
    for prefix, query, mode, profile in itertools.product(
        prefixes, QUERIES, ("hybrid", "semantic", "keyword"), ("similarity", "balanced")
    ):
        request = Request(prefix, query, mode, get_profile(profile), limit=5)
        got = _page(engine.run(scoped, request, 10**13))
        assert got == _page(engine.run(whole, request, 10**13)), (prefix, query, mode, profile)
        if prefix == ("users", "nobody"):
            assert got == []
        if prefix == ("users", "late") and mode != "semantic" and "topic" in query:
            assert [key for _, key, _ in got] == ["m0"]


def test_scores_at_reads_the_same_numbers_as_scoring_every_slot() -> None:
    rng = random.Random(3)
    vocabulary = [f"w{i}" for i in range(40)]
    index = KeywordIndex()
    docs = {slot: [rng.choice(vocabulary) for _ in range(rng.randint(1, 12))] for slot in range(2_000)}
    index.add_many(list(docs)[:1_500], [docs[s] for s in list(docs)[:1_500]])
    for slot in list(docs)[1_500:]:
        index.add(slot, docs[slot])
    query = ["w1", "w7", "w39", "w1", "missing"]
    every = index.scores(query, 2_000)
    slots = np.array(sorted(rng.sample(range(2_000), 300)), dtype=np.int64)
    assert np.array_equal(index.scores_at(query, slots), every[slots])
    assert np.array_equal(index.scores_at(query, np.zeros(0, dtype=np.int64)), np.zeros(0, dtype=np.float32))


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_a_past_search_equals_a_store_rebuilt_from_that_version(tmp_path: Path, mode: str) -> None:
    """Searching a past version (the head index minus what differs, plus the past versions) and searching an index
    built from that version alone give the same page, byte for byte: the same keys, scores and tie order."""
    mem = engram.open(str(tmp_path / "s"), embedder="hashing", background_index=False)
    mem.pool.query_cache = None
    rng = random.Random(5)
    for round_ in range(6):
        with mem.transaction(f"round {round_}") as tx:
            for _ in range(60):
                n = rng.randrange(300)
                tx.put(("users", f"u{n % 7}"), f"k{n}", {"text": f"shared words {n % 4} round {round_} x{n % 11}"})
    past = mem.head.id
    with mem.transaction("later") as tx:
        for n in range(0, 300, 3):
            tx.delete(("users", f"u{n % 7}"), f"k{n}")
        for n in range(300, 330):
            tx.put(("users", f"u{n % 7}"), f"k{n}", {"text": f"shared words {n % 4} later"})
    mem.create_branch("rebuilt", past)
    rebuilt = mem.handle("rebuilt")
    for prefix, query in itertools.product([(), ("users",), ("users", "u3")], ["shared words", "words 2 x5", "later"]):
        for limit, offset in ((10, 0), (7, 3)):
            a = mem.search(prefix, query, mode=mode, limit=limit, offset=offset, at=past)
            b = rebuilt.search(prefix, query, mode=mode, limit=limit, offset=offset)
            assert [(i.namespace, i.key, i.score) for i in a] == [(i.namespace, i.key, i.score) for i in b], (
                prefix, query, limit, offset
            )  # fmt: skip


def test_two_stores_loaded_alike_at_different_times_answer_alike(tmp_path: Path) -> None:
    """Ties (many items with the same words) go by namespace and key, not by when each store wrote them."""
    pages = []
    for name in ("a", "b"):
        mem = engram.open(str(tmp_path / name), embedder="hashing", background_index=False)
        for n in range(40):  # one commit each: every store's updated_at differ
            mem.put(("users", f"u{n % 3}"), f"k{(n * 7) % 40}", {"text": "the very same words"})
        pages.append([
            [(i.namespace, i.key, i.score) for i in mem.search(("users",), "same words", mode=mode, limit=12)]
            for mode in ("keyword", "semantic", "hybrid")
        ])  # fmt: skip
        mem.close()
    assert pages[0] == pages[1]
    keyword = pages[0][0]
    assert [(ns, key) for ns, key, _ in keyword] == sorted((ns, key) for ns, key, _ in keyword)


def test_new_tenants_write_and_search_while_the_graph_builds_without_errors(tmp_path: Path) -> None:
    """Churn: tenants arrive and write while others search (their own and brand-new scopes) and the graph is
    built in the background; every search answers, with its own tenant's items only."""
    mem = engram.open(str(tmp_path / "s"), embedder="hashing")
    mem.pool.query_cache = None
    _fill(mem, 20_000, 400)
    errors: list[BaseException] = []
    arrived: list[str] = []
    stop = threading.Event()

    vectors = mem.pool.index("main").vectors
    assert vectors is not None

    def writer() -> None:
        after = 0  # tenants written since the graph has existed
        deadline = time.monotonic() + 240  # (the graph exists once every vector is made: seconds on a loaded machine)
        try:
            for n in itertools.count():
                tenant = f"new{n}"
                mem.put(("users", tenant), "m0", {"text": f"topic 7 from {tenant}"})
                arrived.append(tenant)
                after += vectors.approximate
                if (n >= 60 and after >= 40) or time.monotonic() > deadline:
                    break
        except BaseException as exc:
            errors.append(exc)
        finally:
            stop.set()

    def searcher(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                tenant = rng.choice(arrived[-5:]) if arrived and rng.random() < 0.5 else f"u{rng.randrange(400)}"
                found = mem.search(("users", tenant), "topic 7", mode=rng.choice(["hybrid", "semantic", "keyword"]))
                assert all(item.namespace == ("users", tenant) for item in found)
                if tenant.startswith("new"):
                    assert [item.key for item in found] == ["m0"]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=searcher, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert len(arrived) >= 60 and vectors.approximate
    mem.close()
