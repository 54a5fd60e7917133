"""The HTTP doors after the hardening of issue #9: read-only keys never write, tenants live in a bounded pool,
the index is brought up to date in the background after writes, and every door renders one JSON shape."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient

import engram
from engram.ops.access import KeyRing
from engram.server import ServerConfig, create_app

from .conftest import Keyed, error_of


def test_a_read_key_never_creates_a_commit_even_with_refresh_ttl(keyed: Keyed) -> None:
    client, make_key = keyed()
    writer, reader = make_key("acme", "read", "write"), make_key("acme", "read")
    body = {"namespace": ["n"], "key": "k", "value": {"text": "expiring"}, "ttl": 0.05}  # 3 s
    assert client.put("/store/items", json=body, headers=writer).status_code == 204
    log = client.get("/v1/log", headers=reader).json()["commits"]
    time.sleep(0.5)  # past a tenth of the TTL: a read by a key that may write would now refresh it
    params = {"namespace": "n", "key": "k", "refresh_ttl": "true"}
    assert client.get("/store/items", params=params, headers=reader).status_code == 200
    search = {"namespace_prefix": ["n"], "refresh_ttl": True}
    assert client.post("/store/items/search", json=search, headers=reader).status_code == 200
    assert client.get("/v1/items", params={"namespace": "n", "key": "k"}, headers=reader).status_code == 200
    assert client.get("/v1/log", headers=reader).json()["commits"] == log  # no "ttl: refresh on read" commit
    assert client.get("/store/items", params=params, headers=writer).status_code == 200
    refreshed = client.get("/v1/log", headers=reader).json()["commits"]
    assert len(refreshed) == len(log) + 1 and refreshed[0]["message"] == "ttl: refresh on read"
    error_of(client.put("/store/items", json=body, headers=reader), 403, "missing_scope")


def test_tenant_stores_stay_within_the_pool_bound(keyed: Keyed) -> None:
    client, make_key = keyed(max_tenants=3)
    keys = [make_key(f"t{i}", "read", "write") for i in range(8)]
    for i, headers in enumerate(keys):
        body = {"namespace": ["n"], "key": "k", "value": {"tenant": i}}
        assert client.put("/store/items", json=body, headers=headers).status_code == 204
    pool = client.app.state.engram.tenants.pool  # type: ignore[attr-defined]
    assert len(pool.tenants()) <= 3 and pool.evicted >= 5
    for i, headers in enumerate(keys):  # evicted tenants reopen with their data
        found = client.get("/store/items", params={"namespace": "n", "key": "k"}, headers=headers).json()
        assert found["value"] == {"tenant": i}
    assert len(pool.tenants()) <= 3


def test_the_server_indexes_in_the_background_after_writes(tmp_path: Path) -> None:
    config = ServerConfig(store=str(tmp_path / "s"), embedder="hashing", index_delay=0.05)
    with TestClient(create_app(config)) as client:
        for i in range(20):
            body = {"namespace": ["docs"], "key": f"d{i}", "value": {"text": f"document {i}"}}
            assert client.put("/store/items", json=body).status_code == 204
        pool = client.app.state.engram.tenants.pool  # type: ignore[attr-defined]
        with pool.lease("default") as memory:
            head = memory.head.tree
            deadline = time.monotonic() + 10
            while memory.pool.index("main").root != head:  # no search has run: the indexer brought it up
                assert time.monotonic() < deadline, "the background indexer did not catch up"
                time.sleep(0.02)


def test_every_door_renders_commits_and_items_in_one_shape(tmp_path: Path) -> None:
    ring = KeyRing(None)
    assert ring.keys() == []
    with TestClient(create_app(ServerConfig(store=str(tmp_path / "s"), embedder="hashing"))) as client:
        made = client.put("/v1/items", json={"namespace": ["n"], "key": "k", "value": {"v": 1}, "sources": ["m1"],
                                             "author": "alice"}).json()["commit"]  # fmt: skip
        assert set(made) == {"id", "short_id", "parents", "time", "author", "message", "metadata"}
        assert made["time"].endswith("+00:00") and made["author"] == "alice"
        item = client.get("/v1/items", params={"namespace": "n", "key": "k"}).json()
        assert item["sources"] == ["m1"] and item["author"] == "alice" and item["updated_at"].endswith("+00:00")
        found = client.post("/v1/search", json={"namespace_prefix": ["n"]}).json()["items"][0]
        assert found["sources"] == ["m1"] and found["author"] == "alice"  # search results carry provenance too
        version = client.get("/v1/history", params={"namespace": "n", "key": "k"}).json()["versions"][0]
        assert version["commit"] == made and version["item"] == item


def test_relative_times_read_the_past_over_http(tmp_path: Path) -> None:
    """Issue #12: ``main@{3 days ago}`` works in every door, as in the library and the CLI."""
    from datetime import UTC, datetime, timedelta

    from engram import clock

    store = str(tmp_path / "s")
    with clock.simulated(datetime.now(UTC) - timedelta(days=4)) as sim:
        memory = engram.open(store, embedder="hashing")
        memory.put(("users", "alice"), "prefs", {"theme": "dark"})
        sim.advance(days=2)
        memory.put(("users", "alice"), "prefs", {"theme": "light"})
        memory.close()
    with TestClient(create_app(ServerConfig(store=store, embedder="hashing"))) as client:
        params = {"namespace": "users.alice", "key": "prefs"}
        then = client.get("/v1/items", params={**params, "at": "main@{3 days ago}"}).json()
        assert then["value"] == {"theme": "dark"}
        now = client.get("/v1/items", params={**params, "at": "main@{yesterday}"}).json()
        assert now["value"] == {"theme": "light"}
        bad = client.get("/v1/items", params={**params, "at": "main@{3 parsecs ago}"})
        assert bad.status_code == 422 and "3 days ago" in bad.text
