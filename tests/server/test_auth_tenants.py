"""API keys, scopes, namespace restrictions, and tenants that can never reach each other's data."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from fastapi.testclient import TestClient

from engram.cli import cli
from engram.ops.access import KeyRing
from engram.server import ServerConfig, create_app

from .conftest import Keyed, error_of


def put(client: TestClient, headers: dict[str, str], namespace: list[str], key: str, value: dict[str, Any]) -> str:
    response = client.put("/v1/items", json={"namespace": namespace, "key": key, "value": value}, headers=headers)
    assert response.status_code == 200, response.text
    commit_id: str = response.json()["commit"]["id"]
    return commit_id


def test_auth_missing_or_unknown_key_is_401(keyed: Keyed) -> None:
    client, make_key = keyed()
    good = make_key("acme")
    error = error_of(client.get("/v1/log"), 401, "unauthorized")
    assert "Bearer" in error["message"] and client.get("/v1/log").headers["www-authenticate"] == "Bearer"
    error_of(client.get("/v1/log", headers={"Authorization": "Bearer ek_nope"}), 401, "invalid_key")
    error_of(client.get("/v1/log", headers={"X-API-Key": "ek_nope"}), 401, "invalid_key")
    assert client.get("/v1/log", headers=good).status_code == 200
    as_header = {"X-API-Key": good["Authorization"].removeprefix("Bearer ")}
    assert client.get("/v1/log", headers=as_header).status_code == 200
    assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200  # no key needed


def test_auth_scopes(keyed: Keyed) -> None:
    client, make_key = keyed()
    reader, writer, admin = make_key("acme", "read"), make_key("acme", "write"), make_key("acme", "admin")
    error_of(client.put("/v1/items", json={"namespace": ["n"], "key": "k", "value": {}}, headers=reader), 403,
             "missing_scope")  # fmt: skip
    first = put(client, writer, ["n"], "k", {"v": 1})
    put(client, writer, ["n"], "k", {"v": 2})
    error_of(client.get("/v1/log", headers=writer), 403, "missing_scope")  # write does not imply read
    assert client.get("/v1/items", params={"namespace": "n", "key": "k"}, headers=reader).json()["value"] == {"v": 2}
    assert client.post("/v1/branches", json={"name": "b"}, headers=writer).status_code == 201
    for method, path, body in (("POST", "/v1/reset", {"ref": first}), ("POST", "/v1/gc", {}), ("GET", "/v1/fsck", None),
                               ("DELETE", "/v1/branches/b", None), ("DELETE", "/v1/tags/t", None)):  # fmt: skip
        error_of(client.request(method, path, json=body, headers=writer), 403, "missing_scope")
    assert client.post("/v1/reset", json={"ref": first}, headers=admin).status_code == 200
    assert client.delete("/v1/branches/b", headers=admin).status_code == 204
    assert client.get("/v1/log", headers=admin).status_code == 200  # admin implies read and write


def test_tenants_cannot_reach_each_other_through_any_route(keyed: Keyed, tmp_path: Path) -> None:
    client, make_key = keyed()
    a, b = make_key("a", "admin"), make_key("b", "admin")
    secret_commit = put(client, a, ["users", "alice"], "ssn", {"text": "secret coffee"})
    put(client, a, ["users", "alice"], "ssn", {"text": "secret tea"})
    put(client, b, ["public"], "hello", {"text": "hi"})
    assert (tmp_path / "base" / "tenants" / "a" / "engram.db").exists()
    assert (tmp_path / "base" / "tenants" / "b" / "engram.db").exists()
    missing = {"namespace": "users.alice", "key": "ssn"}
    error_of(client.get("/store/items", params=missing, headers=b), 404, "item_not_found")
    error_of(client.get("/v1/items", params=missing, headers=b), 404, "item_not_found")
    assert client.post("/store/items/search", json={"query": "secret coffee"}, headers=b).json() == {"items": []}
    assert client.post("/v1/search", json={"query": "secret"}, headers=b).json()["items"] == []
    assert client.post("/store/namespaces", json={}, headers=b).json() == {"namespaces": [["public"]]}
    assert client.get("/v1/history", params=missing, headers=b).json() == {"versions": []}
    assert [c["message"] for c in client.get("/v1/log", headers=b).json()["commits"]] == ["put public/hello", "init"]
    assert all(c["key"] != "ssn" for c in client.get("/v1/diff", params={"old": "HEAD~1"}, headers=b).json()["changes"])
    # time travel into tenant a's commits, by full and short id, through every route that takes a ref
    for ref in (secret_commit, secret_commit[:10]):
        at_routes = [
            client.get("/store/items", params={**missing, "at": ref}, headers=b),
            client.get("/v1/items", params={**missing, "at": ref}, headers=b),
            client.post("/store/items/search", json={"query": "secret", "at": ref}, headers=b),
            client.post("/v1/search", json={"query": "secret", "at": ref}, headers=b),
            client.post("/store/namespaces", json={"at": ref}, headers=b),
            client.get("/v1/namespaces", params={"at": ref}, headers=b),
            client.get("/v1/log", params={"ref": ref}, headers=b),
            client.get(f"/v1/commits/{ref}", headers=b),
            client.get("/v1/diff", params={"old": ref}, headers=b),
            client.get("/v1/diff", params={"old": "HEAD", "new": ref}, headers=b),
            client.get("/v1/history", params={**missing, "ref": ref}, headers=b),
            client.post("/v1/branches", json={"name": "steal", "at": ref}, headers=b),
            client.post("/v1/tags", json={"name": "steal", "at": ref}, headers=b),
            client.post("/v1/merge", json={"source": ref}, headers=b),
            client.post("/v1/revert", json={"ref": ref}, headers=b),
            client.post("/v1/reset", json={"ref": ref}, headers=b),
        ]
        for response in at_routes:
            error_of(response, 404, "ref_not_found")
    # and tenant a still sees its own data
    assert client.get("/v1/items", params=missing, headers=a).json()["value"] == {"text": "secret tea"}


def test_namespace_prefix_restricts_every_route(keyed: Keyed) -> None:
    client, make_key = keyed()
    admin = make_key("acme", "admin")
    alice = make_key("acme", "admin", prefix=("users", "alice"))
    put(client, admin, ["users", "bob"], "b", {"text": "coffee bob"})
    put(client, alice, ["users", "alice"], "a", {"text": "coffee alice"})
    put(client, admin, ["users", "bob"], "b", {"text": "coffee bob 2"})
    bob = {"namespace": "users.bob", "key": "b"}
    for response in (
        client.get("/store/items", params=bob, headers=alice),
        client.get("/v1/items", params=bob, headers=alice),
        client.put("/store/items", json={"namespace": ["users", "bob"], "key": "x", "value": {}}, headers=alice),
        client.request("DELETE", "/store/items", json={"namespace": ["users", "bob"], "key": "b"}, headers=alice),
        client.delete("/v1/items", params=bob, headers=alice),
        client.get("/v1/history", params=bob, headers=alice),
        client.get("/v1/log", params={**bob}, headers=alice),
        client.post("/store/items/search", json={"namespace_prefix": ["users", "bob"]}, headers=alice),
        client.post("/store/namespaces", json={"prefix": ["users", "bob"]}, headers=alice),
        client.get("/v1/diff", params={"old": "HEAD~3", "namespace": "users.bob"}, headers=alice),
        client.post("/v1/merge", json={"source": "main"}, headers=alice),
        client.post("/v1/revert", json={"ref": "HEAD"}, headers=alice),
        client.post("/v1/reset", json={"ref": "HEAD~1"}, headers=alice),
        client.post("/v1/gc", json={}, headers=alice),
        client.delete("/v1/branches/main", params={"branch": "dev"}, headers=alice),
        client.delete("/v1/tags/v1", headers=alice),
    ):
        error_of(response, 403, "namespace_forbidden")
    assert "main" in client.get("/v1/branches", headers=admin).json()["refs"]
    found = client.post("/store/items/search", json={"query": "coffee"}, headers=alice).json()["items"]
    assert [(i["namespace"], i["key"]) for i in found] == [(["users", "alice"], "a")]
    assert client.post("/store/namespaces", json={}, headers=alice).json() == {"namespaces": [["users", "alice"]]}
    assert client.post("/store/namespaces", json={"prefix": ["*", "alice"]}, headers=alice).json() == {
        "namespaces": [["users", "alice"]]}  # fmt: skip
    assert client.get("/v1/namespaces", params={"prefix": "users"}, headers=alice).json() == {
        "namespaces": [["users", "alice"]]}  # fmt: skip
    changes = client.get("/v1/diff", params={"old": "HEAD~3"}, headers=alice).json()["changes"]
    assert [c["key"] for c in changes] == ["a"]
    log = client.get("/v1/log", headers=alice).json()["commits"]
    assert [c["message"] for c in log] == ["put users/alice/a"]
    assert client.get("/v1/commits/HEAD", headers=alice).json()["changes"] == []  # bob's change is hidden
    assert client.get("/v1/history", params={"namespace": "users.alice", "key": "a"}, headers=alice).status_code == 200


def test_revoked_key_stops_working_on_a_running_server(keyed: Keyed, tmp_path: Path) -> None:
    client, make_key = keyed()
    headers = make_key("acme")
    assert client.get("/v1/log", headers=headers).status_code == 200
    ring = KeyRing(tmp_path / "keys.json")
    [key] = ring.keys()
    assert ring.revoke(key.id) and not ring.revoke(key.id)
    error_of(client.get("/v1/log", headers=headers), 401, "invalid_key")
    error_of(client.get("/v1/log", headers=headers), 401)  # still refused once every key is gone


def test_keys_file_holds_only_hashes(tmp_path: Path) -> None:
    ring = KeyRing(tmp_path / "keys.json")
    key, secret = ring.create("acme", ["read"], ["users"])
    text = (tmp_path / "keys.json").read_text()
    assert secret.startswith("ek_") and len(secret) > 40 and secret not in text
    assert json.loads(text)["keys"][0]["sha256"] == key.sha256 and key.namespace_prefix == ("users",)
    assert stat.S_IMODE((tmp_path / "keys.json").stat().st_mode) == 0o600


def test_server_without_keys_is_local_with_every_scope(tmp_path: Path) -> None:
    config = ServerConfig(store=str(tmp_path / "s"), embedder="hashing")
    assert config.keys_path() == tmp_path / "s" / "keys.json"
    assert ServerConfig(store=":memory:").keys_path() is None
    with TestClient(create_app(config)) as client:
        assert client.post("/v1/gc", json={}).status_code == 200
        put(client, {}, ["n"], "k", {"v": 1})
    assert (tmp_path / "s" / "engram.db").exists() and not (tmp_path / "s" / "tenants").exists()
    KeyRing(config.keys_path()).create("acme", ["read"])
    with TestClient(create_app(config)) as client:  # a keys file with keys: keys are required
        error_of(client.get("/v1/log"), 401, "unauthorized")


def test_keys_cli_create_list_revoke(tmp_path: Path) -> None:
    runner = CliRunner()
    store = str(tmp_path / "store")

    def run(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, ["--store", store, "keys", *args], obj={})
        return result.exit_code, result.output

    code, output = run("create", "--tenant", "acme", "--scope", "read", "--scope", "write", "--namespace-prefix",
                       "users/alice")  # fmt: skip
    assert code == 0
    secret = output.strip().splitlines()[-1]
    assert secret.startswith("ek_")
    code, output = run("list", "--json")
    [listed] = json.loads(output)
    assert listed["tenant"] == "acme" and listed["scopes"] == ["read", "write"] and "sha256" not in listed
    assert listed["namespace_prefix"] == ["users", "alice"] and secret not in output
    assert run("create", "--tenant", "bad name", "--scope", "read")[0] == 1
    assert run("revoke", listed["id"])[0] == 0
    assert run("revoke", listed["id"])[0] == 1
    assert json.loads(run("list", "--json")[1]) == []
    no_file = runner.invoke(cli, ["--store", ":memory:", "keys", "list"], obj={})
    assert no_file.exit_code == 1 and "--keys-file" in no_file.output
