"""engram's versioned /v1 routes: items on branches, log, show, diff, history, refs, merge, revert, reset, gc."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from engram.server import ServerConfig, create_app

from .conftest import error_of

COMMIT_KEYS = {"id", "short_id", "parents", "time", "author", "message", "metadata"}


def put(client: TestClient, key: str, value: dict[str, Any], **extra: Any) -> dict[str, Any]:
    response = client.put("/v1/items", json={"namespace": ["notes"], "key": key, "value": value, **extra})
    assert response.status_code == 200, response.text
    commit: dict[str, Any] = response.json()["commit"]
    assert set(commit) == COMMIT_KEYS
    return commit


def get(client: TestClient, key: str, **params: str) -> dict[str, Any]:
    response = client.get("/v1/items", params={"namespace": "notes", "key": key, **params})
    assert response.status_code == 200, response.text
    item: dict[str, Any] = response.json()
    return item


def test_v1_items_write_commits_with_provenance(client: TestClient) -> None:
    first = put(client, "n1", {"text": "hello"}, author="agent-7", message="remember hello", sources=["msg-1"])
    assert first["author"] == "agent-7" and first["message"] == "remember hello"
    item = get(client, "n1")
    assert item["author"] == "agent-7" and item["sources"] == ["msg-1"] and item["expires_at"] is None
    second = put(client, "n1", {"text": "hello again"})
    assert second["parents"] == [first["id"]] and second["author"] == "api"
    assert get(client, "n1", at=first["id"])["value"] == {"text": "hello"}
    assert get(client, "n1", at=first["short_id"])["value"] == {"text": "hello"}
    removed = client.delete("/v1/items", params={"namespace": "notes", "key": "n1", "message": "forget"})
    assert removed.json()["commit"]["message"] == "forget"
    error_of(client.get("/v1/items", params={"namespace": "notes", "key": "n1"}), 404, "item_not_found")
    unchanged = client.delete("/v1/items", params={"namespace": "notes", "key": "n1"}).json()["commit"]
    assert unchanged["id"] == removed.json()["commit"]["id"]  # deleting nothing makes no commit


def test_v1_items_delete_names_its_author_and_message(client: TestClient) -> None:
    put(client, "d1", {"text": "wrong"})
    params = {"namespace": "notes", "key": "d1", "author": "dana", "message": "drop the wrong colour"}
    removed = client.delete("/v1/items", params=params).json()["commit"]
    assert (removed["author"], removed["message"]) == ("dana", "drop the wrong colour")
    put(client, "d2", {"text": "also wrong"})
    only_author = client.delete("/v1/items", params={"namespace": "notes", "key": "d2", "author": "dana"}).json()
    assert only_author["commit"]["author"] == "dana"
    error_of(client.get("/v1/items", params={"namespace": "notes", "key": "d2"}), 404, "item_not_found")


def test_v1_log_show_diff_history(client: TestClient) -> None:
    a = put(client, "a", {"v": 1})
    put(client, "b", {"v": 1})
    put(client, "a", {"v": 2})
    client.put("/v1/items", json={"namespace": ["other"], "key": "x", "value": {"v": 0}})
    log = client.get("/v1/log").json()["commits"]
    assert [c["message"] for c in log] == ["put other/x", "put notes/a", "put notes/b", "put notes/a", "init"]
    assert [c["message"] for c in client.get("/v1/log", params={"limit": 2}).json()["commits"]] == [
        "put other/x", "put notes/a"]  # fmt: skip
    only_a = client.get("/v1/log", params={"namespace": "notes", "key": "a"}).json()["commits"]
    assert len(only_a) == 2
    assert len(client.get("/v1/log", params={"namespace": "notes"}).json()["commits"]) == 3
    shown = client.get(f"/v1/commits/{a['id']}").json()
    assert shown["id"] == a["id"] and [(c["key"], c["kind"]) for c in shown["changes"]] == [("a", "added")]
    assert client.get("/v1/commits/HEAD~1").json()["changes"][0]["old"]["value"] == {"v": 1}
    diff = client.get("/v1/diff", params={"old": a["id"], "new": "HEAD"}).json()["changes"]
    assert [(c["namespace"], c["key"], c["kind"]) for c in diff] == [
        (["notes"], "a", "modified"), (["notes"], "b", "added"), (["other"], "x", "added")]  # fmt: skip
    scoped = client.get("/v1/diff", params={"old": a["id"], "namespace": "other"}).json()["changes"]
    assert [c["key"] for c in scoped] == ["x"]
    versions = client.get("/v1/history", params={"namespace": "notes", "key": "a"}).json()["versions"]
    assert [v["item"]["value"] for v in versions] == [{"v": 2}, {"v": 1}]
    assert versions[1]["commit"]["id"] == a["id"]


def test_v1_branches_tags_merge_revert(client: TestClient) -> None:
    put(client, "n", {"v": 1})
    created = client.post("/v1/branches", json={"name": "fix"})
    assert created.status_code == 201 and created.json()["name"] == "fix"
    error_of(client.post("/v1/branches", json={"name": "fix"}), 409, "ref_exists")
    error_of(client.post("/v1/branches", json={"name": "bad..name"}), 422, "invalid_ref")
    assert set(client.get("/v1/branches").json()["refs"]) == {"main", "fix"}
    put(client, "n", {"v": 2}, branch="fix")
    assert get(client, "n")["value"] == {"v": 1} and get(client, "n", branch="fix")["value"] == {"v": 2}
    put(client, "n", {"v": 3})
    conflict = error_of(client.post("/v1/merge", json={"source": "fix"}), 409, "merge_conflict")
    assert conflict["details"]["conflict_count"] == 1
    (listed,) = conflict["details"]["conflicts"]
    assert (listed["namespace"], listed["key"]) == (["notes"], "n")
    sides = {side: listed[side]["value"] for side in ("base", "ours", "theirs")}
    assert sides == {"base": {"v": 1}, "ours": {"v": 3}, "theirs": {"v": 2}}
    assert listed["ours"]["author"] and listed["ours"]["updated_at"].endswith("+00:00")
    merged = client.post("/v1/merge", json={"source": "fix", "strategy": "theirs", "message": "take fix"}).json()
    assert merged["commit"]["message"] == "take fix" and len(merged["commit"]["parents"]) == 2
    assert get(client, "n")["value"] == {"v": 2}
    tagged = client.post("/v1/tags", json={"name": "v1", "at": "HEAD"})
    assert tagged.status_code == 201 and tagged.json()["commit"] == merged["commit"]["id"]
    assert client.get("/v1/tags").json() == {"refs": {"v1": merged["commit"]["id"]}}
    reverted = client.post("/v1/revert", json={"ref": "HEAD", "strategy": "theirs"}).json()["commit"]
    assert reverted["message"].startswith("revert") and get(client, "n")["value"] == {"v": 3}
    assert client.delete("/v1/tags/v1").status_code == 204
    error_of(client.delete("/v1/tags/v1"), 404, "ref_not_found")
    assert client.delete("/v1/branches/fix").status_code == 204
    error_of(client.delete("/v1/branches/main"), 409, "conflict")
    error_of(client.delete("/v1/branches/fix"), 404, "ref_not_found")


def test_v1_reset_gc_fsck(client: TestClient) -> None:
    first = put(client, "n", {"v": 1})
    put(client, "n", {"v": 2})
    reset = client.post("/v1/reset", json={"ref": first["id"]}).json()
    assert reset["branch"] == "main" and reset["commit"]["id"] == first["id"]
    assert get(client, "n")["value"] == {"v": 1}
    assert set(client.post("/v1/gc", json={}).json()) == {"kept", "removed", "reflog_pruned"}
    fsck = client.get("/v1/fsck").json()
    assert fsck["ok"] is True and fsck["missing"] == [] and fsck["commits"] >= 3


def test_v1_search_and_namespaces_on_a_branch(client: TestClient) -> None:
    put(client, "n", {"text": "coffee"})
    client.post("/v1/branches", json={"name": "exp"})
    client.put("/v1/items", json={"namespace": ["lab", "x"], "key": "k", "value": {"text": "coffee beans"},
                                  "branch": "exp"})  # fmt: skip
    main = client.post("/v1/search", json={"query": "coffee"}).json()
    assert [i["key"] for i in main["items"]] == ["n"] and main["mode"] == "hybrid" and main["degraded"] is None
    exp = client.post("/v1/search", json={"query": "coffee", "branch": "exp", "namespace_prefix": ["lab"]}).json()
    assert [i["key"] for i in exp["items"]] == ["k"]
    assert client.get("/v1/namespaces", params={"branch": "exp"}).json() == {"namespaces": [["lab", "x"], ["notes"]]}
    assert client.get("/v1/namespaces", params={"branch": "exp", "prefix": "lab", "max_depth": 1}).json() == {
        "namespaces": [["lab"]]}  # fmt: skip
    assert client.get("/v1/namespaces", params={"at": "HEAD~1"}).json() == {"namespaces": []}
    error_of(client.get("/v1/namespaces", params={"branch": "nope"}), 404, "ref_not_found")


def test_health_ready_and_root(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "checks": {}}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"]["store"]["ok"] is True
    assert client.get("/").json()["docs"] == "/docs"
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    assert {"/store/items", "/store/items/search", "/store/namespaces", "/v1/log", "/v1/merge"} <= set(spec["paths"])


def test_readyz_fails_in_the_error_shape_when_the_store_cannot_be_written(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with TestClient(create_app(ServerConfig(store=str(store), embedder="hashing"))) as client:
        assert client.get("/readyz").status_code == 200
        client.app.state.engram.tenants.pool.acquire("default").repo.chunks.close()  # type: ignore[attr-defined]
        error = error_of(client.get("/readyz"), 503, "not_ready")
        assert error["details"]["checks"]["store"]["ok"] is False


def test_server_public_surface() -> None:
    import engram.server

    assert engram.server.__all__ == ["ServerConfig", "create_app"]
    assert all(getattr(engram.server, name).__doc__ for name in engram.server.__all__)


def test_v1_concurrent_puts_to_one_key_each_land_in_history(tmp_path: Path) -> None:
    """200 concurrent PUTs of one key (the group commit's worst case): every acknowledged value is a version,
    each response names its own commit holding its value, the newest of them holds the final value, and puts of
    distinct keys sent beside them still share commits."""
    app = create_app(ServerConfig(store=str(tmp_path / "store"), embedder="hashing"))

    async def scenario() -> tuple[list[httpx.Response], list[httpx.Response]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://engram") as http:
            same = [http.put("/v1/items", json={"namespace": ["n"], "key": "k", "value": {"i": i}}) for i in range(200)]
            distinct = [http.put("/store/items", json={"namespace": ["d"], "key": f"k{i}", "value": {"i": i}})
                        for i in range(50)]  # fmt: skip
            done = await asyncio.gather(*same, *distinct)
            return list(done[:200]), list(done[200:])

    same, distinct = asyncio.run(scenario())
    assert [r.status_code for r in same] == [200] * 200 and [r.status_code for r in distinct] == [204] * 50
    with TestClient(app) as client:
        versions = client.get("/v1/history", params={"namespace": "n", "key": "k"}).json()["versions"]
        assert sorted(v["item"]["value"]["i"] for v in versions) == list(range(200))
        for i, response in enumerate(same):
            assert get(client, "k", namespace="n", at=response.json()["commit"]["id"])["value"] == {"i": i}
        assert len({r.json()["commit"]["id"] for r in same}) == 200
        assert get(client, "k", namespace="n")["value"] == versions[0]["item"]["value"]
        commits = client.get("/v1/log", params={"limit": 1000}).json()["commits"]
        assert len(commits) < 1 + 200 + 50  # the distinct keys rode along in the same-key commits
