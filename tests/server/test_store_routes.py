"""LangGraph Agent Server's store routes: shapes, semantics, engram's extensions, and the real SDK client."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from engram.embed import HashingEmbedder
from engram.errors import EmbedderError
from engram.server import ServerConfig, create_app

from .conftest import error_of

ITEM_KEYS = {"namespace", "key", "value", "created_at", "updated_at"}


def put(client: TestClient, namespace: list[str], key: str, value: dict[str, Any], **extra: Any) -> None:
    response = client.put("/store/items", json={"namespace": namespace, "key": key, "value": value, **extra})
    assert response.status_code == 204 and response.content == b"", response.text


def search(client: TestClient, **body: Any) -> list[dict[str, Any]]:
    response = client.post("/store/items/search", json=body)
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"items"}
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def test_store_put_get_delete_roundtrip(client: TestClient) -> None:
    put(client, ["users", "alice"], "prefs", {"theme": "dark"})
    got = client.get("/store/items", params={"namespace": "users.alice", "key": "prefs"})
    assert got.status_code == 200
    item = got.json()
    assert set(item) == ITEM_KEYS
    assert item["namespace"] == ["users", "alice"] and item["key"] == "prefs" and item["value"] == {"theme": "dark"}
    assert datetime.fromisoformat(item["created_at"]).tzinfo is not None
    put(client, ["users", "alice"], "prefs", {"theme": "light"})
    again = client.get("/store/items", params={"namespace": "users.alice", "key": "prefs"}).json()
    assert again["created_at"] == item["created_at"] and again["updated_at"] >= item["updated_at"]
    deleted = client.request("DELETE", "/store/items", json={"namespace": ["users", "alice"], "key": "prefs"})
    assert deleted.status_code == 204 and deleted.content == b""
    error = error_of(client.get("/store/items", params={"namespace": "users.alice", "key": "prefs"}), 404)
    assert error["code"] == "item_not_found" and "prefs" in error["message"]


def test_store_get_takes_a_dotted_or_a_repeated_namespace(client: TestClient) -> None:
    put(client, ["a", "b"], "k", {"v": 1})
    dotted = client.get("/store/items", params={"namespace": "a.b", "key": "k"})
    repeated = client.get("/store/items", params=[("namespace", "a"), ("namespace", "b"), ("key", "k")])
    assert dotted.json() == repeated.json() and dotted.json()["value"] == {"v": 1}


def test_store_put_ttl_and_index(client: TestClient) -> None:
    put(client, ["s"], "short", {"text": "espresso"}, ttl=5)
    put(client, ["s"], "forever", {"text": "espresso"}, ttl=None)
    put(client, ["s"], "hidden", {"text": "espresso"}, index=False)
    put(client, ["s"], "titled", {"title": "espresso", "body": "tea"}, index=["body"])
    expiry = {k: client.get("/v1/items", params={"namespace": "s", "key": k}).json()["expires_at"]
              for k in ("short", "forever")}  # fmt: skip
    assert expiry["short"] is not None and expiry["forever"] is None
    found = {item["key"] for item in search(client, namespace_prefix=["s"], query="espresso")}
    assert found == {"short", "forever"}  # index=False is never matched; titled indexes only its body
    listed = {item["key"] for item in search(client, namespace_prefix=["s"])}
    assert listed == {"short", "forever", "hidden", "titled"}


def test_store_search_shape_filter_and_paging(client: TestClient) -> None:
    for i in range(5):
        put(client, ["docs"], f"d{i}", {"text": f"coffee note {i}", "n": i, "kind": "odd" if i % 2 else "even"})
    items = search(client, namespace_prefix=["docs"], query="coffee", limit=2)
    assert len(items) == 2 and all(set(item) == ITEM_KEYS | {"score"} for item in items)
    assert all(isinstance(item["score"], float) for item in items)
    odd = search(client, namespace_prefix=["docs"], filter={"kind": "odd", "n": {"$gt": 1}})
    assert [item["key"] for item in odd] == ["d3"]
    listing = search(client, namespace_prefix=["docs"], limit=2, offset=1)
    assert [item["key"] for item in listing] == ["d3", "d2"] and listing[0]["score"] is None  # newest first
    assert search(client, namespace_prefix=["elsewhere"], query="coffee") == []


def test_store_search_extensions_mode_explain_profile_min_score(client: TestClient) -> None:
    put(client, ["docs"], "a", {"text": "dark roast coffee"})
    put(client, ["docs"], "b", {"text": "green tea"})
    response = client.post("/store/items/search", json={"query": "coffee", "mode": "keyword", "explain": True})
    assert response.headers["x-engram-search-mode"] == "keyword" and "x-engram-degraded" not in response.headers
    [item] = response.json()["items"]
    assert item["key"] == "a" and item["explain"]["mode"] == "keyword" and "similarity" in item["explain"]
    custom = {"similarity": 1, "confidence": 0, "recency": 1, "half_life_hours": 1}
    assert [i["key"] for i in search(client, query="coffee", profile=custom)] == ["a"]
    assert [i["key"] for i in search(client, query="coffee", profile="recent")] == ["a"]
    assert search(client, query="coffee", min_score=1e5) == []


def test_store_reads_as_of_a_ref(client: TestClient) -> None:
    put(client, ["users"], "u", {"name": "old"})
    put(client, ["users"], "u", {"name": "new"})
    put(client, ["more"], "m", {"name": "x"})
    past = client.get("/store/items", params={"namespace": "users", "key": "u", "at": "HEAD~2"})
    assert past.json()["value"] == {"name": "old"}
    assert [i["value"]["name"] for i in search(client, namespace_prefix=["users"], query="old", at="HEAD~2")] == ["old"]
    namespaces = client.post("/store/namespaces", json={"at": "HEAD~1"}).json()
    assert namespaces == {"namespaces": [["users"]]}
    not_yet = client.get("/store/items", params={"namespace": "more", "key": "m", "at": "HEAD~1"})
    error_of(not_yet, 404, "item_not_found")
    error_of(client.get("/store/items", params={"namespace": "users", "key": "u", "at": "nope"}), 404, "ref_not_found")


def test_store_list_namespaces(client: TestClient) -> None:
    for ns in (["a", "b", "c"], ["a", "b"], ["a", "x"], ["z", "b"]):
        put(client, ns, "k", {"v": 1})

    def names(**body: Any) -> list[list[str]]:
        response = client.post("/store/namespaces", json=body)
        assert response.status_code == 200 and set(response.json()) == {"namespaces"}
        result: list[list[str]] = response.json()["namespaces"]
        return result

    assert names() == [["a", "b"], ["a", "b", "c"], ["a", "x"], ["z", "b"]]
    assert names(prefix=["a"], max_depth=2) == [["a", "b"], ["a", "x"]]
    assert names(suffix=["b"]) == [["a", "b"], ["z", "b"]]
    assert names(prefix=["*", "b"]) == [["a", "b"], ["a", "b", "c"], ["z", "b"]]
    assert names(limit=1, offset=1) == [["a", "b", "c"]]


class _FailingEmbedder(HashingEmbedder):
    down = False

    def embed(self, texts: Any) -> Any:
        if self.down:
            raise EmbedderError("model server unreachable")
        return super().embed(texts)


def test_store_search_says_when_it_degraded() -> None:
    embedder = _FailingEmbedder()
    with TestClient(create_app(ServerConfig(store=":memory:", embedder=embedder))) as client:
        put(client, ["docs"], "a", {"text": "coffee"})
        embedder.down = True
        response = client.post("/store/items/search", json={"query": "coffee"})
        assert response.headers["x-engram-search-mode"] == "keyword" and response.headers["x-engram-degraded"] == "true"
        assert [item["key"] for item in response.json()["items"]] == ["a"]
        v1 = client.post("/v1/search", json={"query": "coffee"}).json()
        assert v1["mode"] == "keyword" and v1["requested_mode"] == "hybrid" and "unreachable" in v1["degraded"]
        error_of(client.post("/v1/search", json={"query": "coffee", "mode": "semantic"}), 503, "embedder_unavailable")


def test_store_langgraph_sdk_client_works_unchanged(tmp_path: Any) -> None:
    sdk = pytest.importorskip("langgraph_sdk._async.client")
    from engram.ops.access import KeyRing

    ring = KeyRing(tmp_path / "keys.json")
    _, secret = ring.create("acme", ["read", "write"])
    app = create_app(ServerConfig(store=":memory:", embedder="hashing", keys_file=ring.path))

    async def scenario() -> None:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://engram",
                                 headers={"x-api-key": secret})  # fmt: skip
        async with sdk.LangGraphClient(http) as client:
            await client.store.put_item(["users", "alice"], "prefs", {"theme": "dark"})
            await client.store.put_item(["users", "bob"], "prefs", {"theme": "light"}, index=False, ttl=60)
            item = await client.store.get_item(["users", "alice"], "prefs")
            assert item["value"] == {"theme": "dark"} and item["namespace"] == ["users", "alice"]
            found = await client.store.search_items(["users"], query="dark", filter={"theme": "dark"}, limit=5)
            assert [i["key"] for i in found["items"]] == ["prefs"] and found["items"][0]["score"] is not None
            listed = await client.store.list_namespaces(prefix=["users"], max_depth=2)
            assert listed["namespaces"] == [["users", "alice"], ["users", "bob"]]
            await client.store.delete_item(["users", "alice"], "prefs")
            with pytest.raises(httpx.HTTPStatusError) as missing:
                await client.store.get_item(["users", "alice"], "prefs")
            assert missing.value.response.status_code == 404

    asyncio.run(scenario())
    app.state.engram.tenants.close()


def test_store_concurrent_writes_all_land(tmp_path: Any) -> None:
    app = create_app(ServerConfig(store=str(tmp_path / "store"), embedder="hashing"))

    async def scenario() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://engram") as http:
            puts = [http.put("/store/items", json={"namespace": ["n"], "key": f"k{i}", "value": {"i": i}})
                    for i in range(20)]  # fmt: skip
            return [r.status_code for r in await asyncio.gather(*puts)]

    assert asyncio.run(scenario()) == [204] * 20
    with TestClient(app) as client:
        assert len(search(client, namespace_prefix=["n"], limit=100)) == 20
        commits = client.get("/v1/log", params={"limit": 100}).json()["commits"]
        # concurrent writes go through the async facade: one commit per event-loop tick, not one per PUT
        assert 2 <= len(commits) <= 6, [c["message"] for c in commits]
        assert any(c["message"].startswith("batch: ") for c in commits)


def test_the_server_sweeps_expired_items_in_the_background(client: TestClient) -> None:
    client.put("/store/items", json={"namespace": ["a"], "key": "k", "value": {"v": 1}, "ttl": 1})
    pool = client.app.state.engram.tenants.pool  # type: ignore[attr-defined]
    assert pool.sweep_minutes == 5.0 and pool.tenants() == ["default"]
    assert any(t.name == "engram-ttl-sweeper" and t.is_alive() for t in threading.enumerate())
