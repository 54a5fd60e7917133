"""Shard map changes and tenant moves against real PostgreSQL databases (two shards and a catalog)."""

from __future__ import annotations

import threading
import time

import pytest

# at import time: later, `conftest` may name another folder's (each folder's conftest is loaded as `conftest`)
from conftest import Cluster, drop_databases, make_databases

from engram.errors import ConfigError, InvalidInputError, NotFoundError, ReadOnlyError
from engram.ops.shards import (
    ShardCatalog,
    ShardRouter,
    TenantMovedError,
    add_shard,
    all_tenants,
    collect,
    leftovers,
    misplaced,
    move_tenant,
    rebalance,
    set_status,
)
from engram.ops.tenants import TenantPool, store_opener
from engram.store import Memory

OPTIONS = {"embedder": "hashing", "author": "tester"}


def _other(cluster: Cluster, tenant: str) -> str:
    here = cluster.router.route(tenant).name
    return next(name for name in cluster.shards if name != here)


def _write(router: ShardRouter, memories: dict[str, Memory], tenant: str, key: str, attempts: int = 20) -> None:
    """Put one item the way a server does: through the tenant's store, reopened when the tenant moved."""
    for _ in range(attempts):
        memory = memories.get(tenant)
        if memory is None or not router.current(tenant, memory):
            if memory is not None:
                memory.close()
            memory = memories[tenant] = router.open(tenant, **OPTIONS)
        try:
            memory.put(("notes",), key, {"text": f"note {key}"})
            return
        except TenantMovedError:
            continue
    raise AssertionError(f"write {key} kept failing")


def test_move_copies_history_verifies_and_switches(cluster: Cluster) -> None:
    router = cluster.router
    mem = router.open("acme", **OPTIONS)
    for i in range(30):
        mem.put(("notes",), f"k{i}", {"text": f"note {i}"})
    mem.tag("v1")
    mem.create_branch("draft")
    head, log = mem.head.id, mem.repo.refs.reflog()
    source, target = router.route("acme").name, _other(cluster, "acme")

    seen: list[dict[str, str]] = []
    report = move_tenant(cluster.catalog, "acme", target, progress=lambda _: seen.append(cluster.catalog.load().moving))

    assert seen[0] == {"acme": target} and seen[-1] == {}  # marked moving during the copies, placed after
    assert (report.source, report.target, report.head) == (source, target, head.hex())
    assert report.chunks > 0 and report.reflog == len(log) and report.frozen_seconds < 5
    router.refresh()
    assert router.route("acme").name == target
    assert not router.current("acme", mem)
    with pytest.raises(TenantMovedError):  # the old copy takes no more writes
        mem.put(("notes",), "late", {"text": "late"})
    mem.close()
    moved = router.open("acme", **OPTIONS)
    assert moved.head.id == head and moved.fsck().ok
    assert [(e.name, e.old, e.new, e.time) for e in moved.repo.refs.reflog()] == [
        (e.name, e.old, e.new, e.time) for e in log
    ]
    assert moved.get(("notes",), "k7").value == {"text": "note 7"}  # type: ignore[union-attr]
    assert "v1" in moved.tags() and "draft" in moved.branches()
    assert [r.key for r in moved.search(("notes",), "note 12", mode="keyword", limit=1)] == ["k12"]
    moved.put(("notes",), "after", {"text": "after the move"})
    moved.close()

    assert leftovers(cluster.catalog) == {source: ["acme"]}
    assert collect(cluster.catalog) == {source: ["acme"]}  # a dry run by default
    assert "acme" in all_tenants(cluster.catalog)
    collect(cluster.catalog, dry_run=False)
    assert leftovers(cluster.catalog) == {}
    back = router.open("acme", **OPTIONS)
    assert back.get(("notes",), "after") is not None
    back.close()


def test_writes_during_a_move_are_never_lost(cluster: Cluster) -> None:
    router = cluster.router
    seed = router.open("busy", **OPTIONS)
    for i in range(200):
        seed.put(("notes",), f"seed{i}", {"text": f"seed {i}"})
    seed.close()
    acknowledged: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    failures: list[BaseException] = []

    def writer(n: int) -> None:
        writer_router = ShardRouter(cluster.catalog, ttl=0.2)  # one "server" each, with its own cached map
        memories: dict[str, Memory] = {}
        i = 0
        try:
            while not stop.is_set():
                key = f"w{n}-{i}"
                _write(writer_router, memories, "busy", key)
                with lock:
                    acknowledged.append(key)
                i += 1
        except BaseException as exc:
            failures.append(exc)
        finally:
            for memory in memories.values():
                memory.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    before = len(acknowledged)
    report = move_tenant(cluster.catalog, "busy", _other(cluster, "busy"))
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures, failures
    after_switch = len(acknowledged)
    assert before > 0 and after_switch > before  # writes ran before, during and after the move
    router.refresh()
    assert router.route("busy").name == report.target
    moved = router.open("busy", **OPTIONS)
    stored = {item.key for item in moved.iter_items(("notes",))}
    missing = [key for key in acknowledged if key not in stored]
    assert not missing, f"{len(missing)} acknowledged write(s) lost: {missing[:5]}"
    assert moved.fsck().ok
    moved.close()


def test_adding_a_shard_pins_tenants_and_rebalance_moves_them(cluster: Cluster) -> None:
    router = cluster.router
    tenants = [f"t{i}" for i in range(12)]
    for tenant in tenants:
        mem = router.open(tenant, **OPTIONS)
        mem.put(("notes",), "k", {"text": tenant})
        mem.close()
    planned = add_shard(cluster.catalog, cluster.extra["s3"], name="s3", dry_run=True)
    assert cluster.catalog.load().shards.keys() == {"s1", "s2"}  # a plan changes nothing
    added = add_shard(cluster.catalog, cluster.extra["s3"], name="s3")
    assert added == planned and {new for _, new in added.values()} <= {"s3"}
    router.refresh()
    for tenant in tenants:  # nobody lost their data: the tenants that now hash to s3 are pinned where they were
        mem = router.open(tenant, **OPTIONS)
        assert mem.get(("notes",), "k").value == {"text": tenant}  # type: ignore[union-attr]
        mem.close()
    assert misplaced(cluster.catalog) == added
    moved = rebalance(cluster.catalog)
    assert sorted(r.tenant for r in moved) == sorted(added)
    assert misplaced(cluster.catalog) == {}
    router.refresh()
    for tenant in tenants:
        mem = router.open(tenant, **OPTIONS)
        assert mem.get(("notes",), "k").value == {"text": tenant}  # type: ignore[union-attr]
        mem.close()
    assert all(router.route(t).name == "s3" for t in added)


def test_readonly_shard_refuses_writes_and_draining_pins(cluster: Cluster) -> None:
    router = cluster.router
    mem = router.open("ro", **OPTIONS)
    mem.put(("notes",), "k", {"text": "x"})
    shard = router.route("ro").name
    pinned = set_status(cluster.catalog, shard, "readonly")
    assert "ro" in pinned  # its tenants no longer hash there: pinned where they are
    router.refresh()
    with pytest.raises(ReadOnlyError):
        mem.put(("notes",), "k2", {"text": "y"})
    assert mem.get(("notes",), "k") is not None  # reads go on
    set_status(cluster.catalog, shard, "active")
    router.refresh()
    mem.put(("notes",), "k2", {"text": "y"})
    mem.close()


def test_bad_input_is_refused_clearly(cluster: Cluster) -> None:
    catalog = cluster.catalog
    with pytest.raises(InvalidInputError, match="PostgreSQL"):
        add_shard(catalog, "sqlite:///x.db")
    with pytest.raises(InvalidInputError, match="already"):
        add_shard(catalog, cluster.shards["s1"], name="s1")
    with pytest.raises(InvalidInputError, match="weight"):
        add_shard(catalog, cluster.extra["s3"], weight=0)
    with pytest.raises(InvalidInputError, match="status"):
        set_status(catalog, "s1", "gone")
    with pytest.raises(NotFoundError):
        set_status(catalog, "nope", "active")
    here = cluster.router.route("x").name
    with pytest.raises(InvalidInputError, match="already"):
        move_tenant(catalog, "x", here)
    with pytest.raises(NotFoundError):
        move_tenant(catalog, "x", "nope")
    elsewhere = next(name for name in cluster.shards if name != here)
    with pytest.raises(NotFoundError, match="no tenant 'x'"):  # a tenant that was never written is not pinned
        move_tenant(catalog, "x", elsewhere)
    assert "x" not in catalog.load().overrides
    set_status(catalog, "s1", "readonly")
    set_status(catalog, "s2", "readonly")
    with pytest.raises(ConfigError, match="no active shard"):
        cluster.catalog.load().route("brand-new")
    assert catalog.load().moving == {}


def test_server_pool_follows_a_move_without_restart(cluster: Cluster) -> None:
    router = ShardRouter(cluster.catalog, ttl=0.1)
    pool = TenantPool(store_opener(None, local=False, embedder="hashing", router=router), router=router,
                      sweep_minutes=None, index_delay=None)  # fmt: skip
    try:
        with pool.lease("web") as mem:
            mem.put(("notes",), "k", {"text": "before"})
            first = mem
        held = pool.acquire("web")  # a request still holds the old store through the move
        move_tenant(cluster.catalog, "web", _other(cluster, "web"))
        time.sleep(0.15)
        with pool.lease("web") as mem:
            assert mem is not first  # reopened on the new shard
            assert mem.get(("notes",), "k").value == {"text": "before"}  # type: ignore[union-attr]
            mem.put(("notes",), "k2", {"text": "after"})
        pool.release("web", held)  # the old store is closed once its last lease ends
        assert pool.tenants() == ["web"]
    finally:
        pool.close()
        router.close()


def test_writes_wait_for_a_freeze_bounded(cluster: Cluster) -> None:
    from engram.errors import UnavailableError

    patient = ShardRouter(cluster.catalog, write_wait=5.0)
    hasty = ShardRouter(cluster.catalog, write_wait=0.3)
    slow, quick = patient.open("frozen", **OPTIONS), hasty.open("frozen", **OPTIONS)
    held = threading.Event()
    release = threading.Event()

    def freeze() -> None:
        with cluster.catalog.freeze("frozen"):
            held.set()
            release.wait(5)

    thread = threading.Thread(target=freeze)
    thread.start()
    held.wait(5)
    began = time.monotonic()
    with pytest.raises(UnavailableError, match="frozen"):
        quick.put(("notes",), "k", {"text": "refused"})
    assert 0.25 < time.monotonic() - began < 4.5  # waited its 0.3 s, then refused: not the freeze's 5 s
    threading.Timer(0.5, release.set).start()
    slow.put(("notes",), "k", {"text": "waited"})  # waits for the freeze to end, then writes
    assert time.monotonic() - began >= 0.5
    thread.join()
    assert slow.get(("notes",), "k").value == {"text": "waited"}  # type: ignore[union-attr]
    for item in (slow, quick):
        item.close()
    patient.close()
    hasty.close()


def test_move_with_search_in_postgresql_rebuilds_the_index_on_the_new_shard(pgvector_url: str) -> None:
    made = make_databases(pgvector_url, 3)
    (_, catalog_url), (_, a_url), (_, b_url) = made
    catalog = ShardCatalog(catalog_url)
    router = ShardRouter(catalog)
    try:
        add_shard(catalog, a_url, name="a")
        add_shard(catalog, b_url, name="b")
        mem = router.open("vec", embedder="hashing", search="postgres")
        for i in range(40):
            mem.put(("docs",), f"d{i}", {"text": f"document {i} about {'tea' if i % 4 == 0 else 'coffee'}"})
        before = [(r.key, round(r.score or 0, 6)) for r in mem.search(("docs",), "tea", limit=5)]
        target = "b" if router.route("vec").name == "a" else "a"
        move_tenant(catalog, "vec", target)
        router.refresh()
        moved = router.open("vec", embedder="hashing", search="postgres")
        assert moved.pool.sql is not None  # searched in the new shard's PostgreSQL tables
        assert [(r.key, round(r.score or 0, 6)) for r in moved.search(("docs",), "tea", limit=5)] == before
        moved.put(("docs",), "new", {"text": "tea again"})
        assert "new" in {r.key for r in moved.search(("docs",), "tea", limit=20)}
        mem.close()
        moved.close()
    finally:
        router.close()
        catalog.close()
        drop_databases(pgvector_url, [name for name, _ in made])
