"""Numbers and content at a glance over HTTP: item counts per timeline commit (after it, and the change from its
first parent), the namespaces and keys it touched (bounded), namespace counts at any point, and the commits a
diff compared (a three-dot diff's merge base); in the library and in the routes the web UI calls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import engram
from engram.server import ServerConfig, create_app
from engram.store import Memory
from engram.store.timeline import TOUCHED_KEYS, TOUCHED_NAMESPACES, timeline

from .conftest import Keyed, error_of


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(ServerConfig(store=str(tmp_path / "s"), embedder="hashing"))) as test_client:
        yield test_client


def put(client: TestClient, ns: list[str], key: str, **extra: Any) -> dict[str, Any]:
    body = {"namespace": ns, "key": key, "value": {"text": f"{'.'.join(ns)} {key}"}, **extra}
    response = client.put("/v1/items", json=body)
    assert response.status_code == 200, response.text
    commit: dict[str, Any] = response.json()["commit"]
    return commit


def commits(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    response = client.get("/v1/timeline", params=params)
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["commits"]
    return found


def test_timeline_counts_items_after_each_commit_and_the_change(client: TestClient) -> None:
    put(client, ["users", "a"], "k1")
    put(client, ["users", "a"], "k2")
    put(client, ["users", "b"], "k1")
    put(client, ["users", "a"], "k1")  # modified: the count stays
    client.delete("/v1/items", params={"namespace": "users.a", "key": "k2"})
    rows = commits(client)
    assert [(c["items"], c["items_delta"]) for c in rows] == [(2, -1), (3, 0), (3, 1), (2, 1), (1, 1), (0, 0)]
    # under a namespace filter: the prefix's items only
    only_a = commits(client, namespace="users.a")
    assert [(c["items"], c["items_delta"]) for c in only_a] == [(1, -1), (2, 0), (2, 1), (1, 1)]


def test_timeline_merge_counts_against_its_first_parent_and_names_what_it_touched(client: TestClient) -> None:
    put(client, ["base"], "x")
    assert client.post("/v1/branches", json={"name": "side", "at": "main"}).status_code == 201
    for i in range(1, 13):
        put(client, ["side", "errors"], f"error_{i}", branch="side")
    for n in range(1, 7):
        put(client, ["side", f"n{n}"], "only", branch="side")
    put(client, ["base"], "y")  # main moves on: the merge is a real merge
    merged = client.post("/v1/merge", json={"source": "side", "into": "main"})
    assert merged.status_code == 200, merged.text
    head = commits(client, limit=1)[0]
    assert len(head["parents"]) == 2 and head["items"] == 2 + 18 and head["items_delta"] == 18
    assert head["changed"] == 18 and head["touched_namespaces"] == 7
    touched = head["touched"]
    assert len(touched) == TOUCHED_NAMESPACES  # bounded: the first five, in key order
    assert touched[0] == {"namespace": ["side", "errors"], "changed": 12, "keys": ["error_1", "error_10", "error_11"]}
    assert len(touched[0]["keys"]) == TOUCHED_KEYS
    assert [t["namespace"] for t in touched[1:]] == [["side", f"n{n}"] for n in range(1, 5)]
    assert all(t["changed"] == 1 and t["keys"] == ["only"] for t in touched[1:])


def test_timeline_library_entries_and_hidden_system_namespaces(tmp_path: Path) -> None:
    with engram.open(str(tmp_path / "lib"), embedder="hashing") as mem:
        mem.put(("_svc",), "state", {"text": "a service's own"})
        mem.put(("notes",), "a", {"text": "a"})
        hidden: Memory = mem.handle(system=False)
        seen = {e.commit.message: e for e in timeline(hidden).entries}
        assert "put _svc/state" not in seen  # a service's commit is not shown to a caller without the scope
        assert (seen["put notes/a"].items, seen["put notes/a"].delta) == (1, 1)  # the system item is not counted
        everything = timeline(mem).entries
        assert [(e.items, e.delta) for e in everything] == [(2, 1), (1, 1), (0, 0)]
        assert everything[0].touched[0].namespace == ("notes",) and everything[0].namespaces == 1


def test_namespaces_with_counts_at_any_point(client: TestClient) -> None:
    put(client, ["users", "a"], "k1")
    first = put(client, ["users", "a", "prefs"], "color")
    put(client, ["users", "b"], "k1")
    put(client, ["users", "b"], "k2")
    plain = client.get("/v1/namespaces").json()
    assert plain == {"namespaces": [["users", "a"], ["users", "a", "prefs"], ["users", "b"]]}  # unchanged by default
    counted = client.get("/v1/namespaces", params={"counts": "true"}).json()
    assert counted["counts"] == [2, 1, 2] and counted["total"] == 4  # a namespace's count includes its children's
    then = client.get("/v1/namespaces", params={"counts": "true", "at": first["id"]}).json()
    assert then["counts"] == [2, 1] and then["total"] == 2
    top = client.get("/v1/namespaces", params={"counts": "true", "max_depth": 1}).json()
    assert top == {"namespaces": [["users"]], "counts": [4], "total": 4}
    under = client.get("/v1/namespaces", params={"counts": "true", "prefix": "users.b", "limit": 0}).json()
    assert under == {"namespaces": [], "counts": [], "total": 2}
    starred = client.get("/v1/namespaces", params={"counts": "true", "prefix": "users.*"}).json()
    assert starred["total"] is None and starred["counts"] == [2, 1, 2]


def test_namespace_counts_of_a_restricted_key(keyed: Keyed) -> None:
    client, make_key = keyed()
    admin = make_key("t1", "read", "write", "admin")
    for ns in (["users", "alice"], ["users", "alice"], ["users", "bob"]):
        body = {"namespace": ns, "key": f"k{len(ns)}-{ns[1]}-{id(ns)}", "value": {"text": "x"}}
        assert client.put("/v1/items", json=body, headers=admin).status_code == 200
    alice = make_key("t1", "read", prefix=("users", "alice"))
    counted = client.get("/v1/namespaces", params={"counts": "true"}, headers=alice).json()
    assert counted == {"namespaces": [["users", "alice"]], "counts": [2], "total": 2}  # bob's item is not counted
    rows = client.get("/v1/timeline", headers=alice).json()["commits"]
    assert rows[0]["items"] == 2 and all(t["namespace"] == ["users", "alice"] for r in rows for t in r["touched"])
    error_of(client.get("/v1/namespaces", params={"counts": "maybe"}, headers=alice), 422)


def test_diff_names_the_commits_compared_and_the_merge_base(client: TestClient) -> None:
    base = put(client, ["notes"], "doomed")
    assert client.post("/v1/branches", json={"name": "fix", "at": "main"}).status_code == 201
    gone = client.delete("/v1/items", params={"namespace": "notes", "key": "doomed", "branch": "fix"})
    fix = gone.json()["commit"]
    head = put(client, ["notes"], "doomed", value={"text": "main's own change"})
    three = client.get("/v1/diff", params={"old": "main...fix"}).json()
    assert three["old_commit"] == base["id"] and three["new_commit"] == fix["id"]
    assert [(c["key"], c["kind"], c["old"]["value"]) for c in three["changes"]] == [
        ("doomed", "removed", {"text": "notes doomed"})]  # fmt: skip
    two = client.get("/v1/diff", params={"old": "main..fix"}).json()
    assert two["old_commit"] == head["id"] and two["new_commit"] == fix["id"]
    plain = client.get("/v1/diff", params={"old": "main~1", "new": "main"}).json()
    assert (plain["old_commit"], plain["new_commit"]) == (base["id"], head["id"])
    assert [c["kind"] for c in plain["changes"]] == ["modified"]
    error_of(client.get("/v1/diff", params={"old": "main...fix", "new": "main"}), 422, "invalid_input")


def test_diff_sides_in_the_library(tmp_path: Path) -> None:
    with engram.open(str(tmp_path / "lib"), embedder="hashing") as mem:
        base = mem.put(("notes",), "a", {"text": "a"})
        mem.create_branch("fix")
        fix = mem.handle("fix").put(("notes",), "b", {"text": "b"})
        head = mem.put(("notes",), "c", {"text": "c"})
        start, end = mem.diff_sides("main...fix")
        assert start is not None and (start.id, end.id) == (base.id, fix.id)
        start, end = mem.diff_sides("main", "fix")
        assert start is not None and (start.id, end.id) == (head.id, fix.id)
