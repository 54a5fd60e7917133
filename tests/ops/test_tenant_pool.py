"""The tenant pool (issue #9, item 8): a bound on open tenant stores with LRU eviction of idle ones, one sweeper
and one indexer thread for all tenants, and database connections shared per database, not per tenant."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from engram.ops.tenants import TenantPool, store_opener
from engram.store import Memory


def _threads(name: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name == name and t.is_alive())


def test_pool_keeps_at_most_max_open_idle_stores_lru_first(tmp_path: Path) -> None:
    pool = TenantPool(store_opener(str(tmp_path), local=False, embedder=None), max_open=2, index_delay=None)
    try:
        for tenant in ("a", "b", "c"):
            with pool.lease(tenant) as mem:
                mem.put(("n",), "k", {"tenant": tenant})
        assert pool.tenants() == ["b", "c"] and pool.evicted == 1
        with pool.lease("b"):
            pass  # b is now the most recently used
        with pool.lease("a") as mem:
            assert mem.get(("n",), "k").value == {"tenant": "a"}  # type: ignore[union-attr]
        assert pool.tenants() == ["b", "a"]
    finally:
        pool.close()


def test_a_leased_store_is_never_closed(tmp_path: Path) -> None:
    pool = TenantPool(store_opener(str(tmp_path), local=False, embedder=None), max_open=1, index_delay=None)
    try:
        held = pool.acquire("a")
        with pool.lease("b"), pool.lease("c"):
            assert set(pool.tenants()) == {"a", "b", "c"}  # over the bound while requests hold them
        held.put(("n",), "k", {"still": "open"})
        pool.release("a")
        assert len(pool.tenants()) == 1
    finally:
        pool.close()


def test_five_hundred_tenants_stay_within_the_bound_with_one_set_of_threads(tmp_path: Path) -> None:
    sweepers, indexers = _threads("engram-ttl-sweeper"), _threads("engram-indexer")
    pool = TenantPool(store_opener(str(tmp_path), local=False, embedder=None), max_open=16)
    try:
        for i in range(500):
            with pool.lease(f"t{i}") as mem:
                mem.put(("n",), "k", {"i": i})
            pool.written(f"t{i}", "main")
            assert len(pool.tenants()) <= 16
        assert pool.opened == 500 and pool.evicted == 484
        assert _threads("engram-ttl-sweeper") == sweepers + 1 and _threads("engram-indexer") == indexers + 1
        with pool.lease("t7") as mem:
            assert mem.get(("n",), "k").value == {"i": 7}  # type: ignore[union-attr]
    finally:
        pool.close()
    assert _threads("engram-ttl-sweeper") == sweepers


def test_concurrent_leases_of_one_tenant_open_it_once(tmp_path: Path) -> None:
    opened: list[str] = []
    base = store_opener(str(tmp_path), local=False, embedder=None)

    def opener(tenant: str) -> Memory:
        opened.append(tenant)
        return base(tenant)

    pool = TenantPool(opener, max_open=4, index_delay=None)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            with pool.lease("shared") as mem:
                mem.put(("n",), f"k{n}", {"n": n})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not errors and opened == ["shared"]
        with pool.lease("shared") as mem:
            assert len(mem.search(("n",), limit=100)) == 16
    finally:
        pool.close()


def test_postgres_tenants_share_connections_per_database(pgvector_url: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    prefix = "p" + uuid.uuid4().hex[:8]
    pool = TenantPool(store_opener(pgvector_url, local=False, embedder="hashing"), max_open=64, index_delay=None)

    def connections() -> int:
        with psycopg.connect(pgvector_url) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()").fetchone()
            return int(row[0]) - 1  # not this one

    before = connections()
    try:
        for i in range(500):
            with pool.lease(f"{prefix}_{i}") as mem:
                mem.put(("n",), "k", {"i": i})
        assert len(pool.tenants()) <= 64
        used = connections() - before
        assert used <= 20, f"{used} connections for 64 open tenants"  # one pool per database, not per tenant
        with pool.lease(f"{prefix}_3") as mem:
            assert mem.get(("n",), "k").value == {"i": 3}  # type: ignore[union-attr]
    finally:
        pool.close()
