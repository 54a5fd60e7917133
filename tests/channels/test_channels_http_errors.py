"""Every error code docs/http.md documents for channels, sent through HTTP: its status and its code."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from engram.ops.access import KeyRing
from engram.server import ServerConfig, create_app

DOCS = Path(__file__).resolve().parents[2] / "docs" / "http.md"
LIMIT = 100  # the server's channel content limit in these tests


def documented() -> dict[str, int]:
    """Code -> status, from the table of the channels section of docs/http.md (parenthesised notes left out)."""
    text = DOCS.read_text()
    section = text.split("## Channels, messages, notes and events", 1)[1].split("\n## ", 1)[0]
    table = section.split("| status | channels codes |", 1)[1].split("\n\n", 1)[0]
    codes: dict[str, int] = {}
    for row in table.strip().splitlines()[1:]:
        status, cell = (part.strip() for part in row.strip("|").split("|", 1))
        for code in re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", cell)):
            codes[code] = int(status)
    return codes


def test_channels_http_every_documented_error_code(tmp_path: Path) -> None:
    ring = KeyRing(tmp_path / "keys.json")
    _, admin_secret = ring.create("acme", ("admin",))
    alice_key, alice_secret = ring.create("acme", ("read", "write"))
    bob_key, bob_secret = ring.create("acme", ("read", "write"))
    config = ServerConfig(store=str(tmp_path / "base"), embedder="hashing", keys_file=ring.path, require_keys=True,
                          channel_max_content=LIMIT)  # fmt: skip
    admin = {"Authorization": f"Bearer {admin_secret}"}
    alice = {"Authorization": f"Bearer {alice_secret}"}
    bob = {"Authorization": f"Bearer {bob_secret}"}
    with TestClient(create_app(config)) as client, TestClient(create_app(ServerConfig(":memory:", "hashing"))) as bare:
        assert client.post("/v1/projects", json={"id": "acme"}, headers=admin).status_code == 201
        for agent, policy in (("alice", "open"), ("bob", "open"), ("carol", "closed")):
            made = client.post("/v1/agents", json={"id": agent, "project": "acme", "dm_policy": policy}, headers=admin)
            assert made.status_code == 201, made.text
        for key, agent in ((alice_key, "alice"), (bob_key, "bob")):
            bound = client.post("/v1/agents/keys", json={"key_id": key.id, "agents": [agent]}, headers=admin)
            assert bound.status_code == 200, bound.text
        for name in ("debugging", "old"):
            assert client.post("/v1/channels", json={"name": name, "access": "members"}, headers=alice).is_success
        assert client.post("/v1/channels/old/archive", headers=alice).is_success

        as_alice = {"X-Engram-Agent": "alice"}

        def post(path: str, body: object, who: dict[str, str] = alice) -> httpx.Response:
            return client.post(path, json=body, headers=who)

        requests: dict[str, Callable[[], httpx.Response]] = {
            "invalid_cursor": lambda: client.get("/v1/events/stream", headers={**bob, "Last-Event-ID": "abc"}),
            "not_a_member": lambda: post("/v1/channels/debugging/messages", {"content": "hello"}, bob),
            "dm_blocked": lambda: post("/v1/messages/direct", {"to": "carol", "content": "hello"}),
            "agent_forbidden": lambda: post("/v1/channels/debugging/messages", {"content": "hi"}, {**bob, **as_alice}),
            "agent_required": lambda: bare.get("/v1/channels"),
            "missing_scope": lambda: client.get("/v1/notes/peek/alice", headers=bob),
            "channel_not_found": lambda: post("/v1/channels/nope/messages", {"content": "hello"}),
            "agent_not_found": lambda: post("/v1/channels/debugging/invite", {"agent": "ghost"}),
            "message_not_found": lambda: client.get("/v1/messages/acme:debugging%23999", headers=alice),
            "channel_exists": lambda: post("/v1/channels", {"name": "debugging"}),
            "channel_archived": lambda: post("/v1/channels/old/messages", {"content": "hello"}),
            "invalid_channel_name": lambda: post("/v1/channels", {"name": "Bad Name"}),
            "invalid_confidence": lambda: post("/v1/channels/debugging/messages", {"content": "x", "confidence": 1.7}),
            "content_too_large": lambda: post("/v1/channels/debugging/messages", {"content": "x" * (LIMIT + 1)}),
            "invalid_filter": lambda: post("/v1/messages/search", {"filter": {"a": {"$bogus": 1}}}),
            "invalid_input": lambda: post("/v1/channels/debugging/messages", {"content": " \n\t"}),
            "invalid_request": lambda: post("/v1/channels/debugging/messages", {"content": "x", "bogus": 1}),
        }
        codes = documented()
        assert set(codes) == set(requests), "every documented code has a request here, and only those"
        for code, status in codes.items():
            response = requests[code]()
            body = response.json()
            assert (response.status_code, body["error"]["code"]) == (status, code), body
            assert set(body) == {"error"} and body["error"]["message"]
        # the limit is the server's: content at the limit is accepted
        assert post("/v1/channels/debugging/messages", {"content": "x" * LIMIT}).status_code == 201


def test_channels_http_confidence_is_checked_on_every_body(tmp_path: Path) -> None:
    with TestClient(create_app(ServerConfig(":memory:", "hashing"))) as client:
        me = {"X-Engram-Agent": "alice"}
        client.post("/v1/projects", json={"id": "acme"})
        client.post("/v1/agents", json={"id": "alice", "project": "acme"})
        assert client.post("/v1/channels", json={"name": "c"}, headers=me).status_code == 201
        sent = client.post("/v1/channels/c/messages", json={"content": "x"}, headers=me).json()
        refused = [
            client.post("/v1/channels/c/messages", json={"content": "x", "confidence": -0.1}, headers=me),
            client.patch(f"/v1/messages/{sent['id'].replace('#', '%23')}", json={"confidence": 1.7}, headers=me),
            client.post("/v1/notes", json={"content": "x", "confidence": 2}, headers=me),
            client.post("/v1/messages/search", json={"min_confidence": 1.5}, headers=me),
        ]
        assert [(r.status_code, r.json()["error"]["code"]) for r in refused] == [(422, "invalid_confidence")] * 4


def test_channels_http_empty_content_is_refused_everywhere() -> None:
    with TestClient(create_app(ServerConfig(":memory:", "hashing"))) as client:
        me = {"X-Engram-Agent": "alice"}
        client.post("/v1/projects", json={"id": "acme"})
        for agent in ("alice", "bob"):
            client.post("/v1/agents", json={"id": agent, "project": "acme"})
        assert client.post("/v1/channels", json={"name": "c"}, headers=me).status_code == 201
        sent = client.post("/v1/channels/c/messages", json={"content": "fine"}, headers=me).json()
        refused = [
            client.post("/v1/channels/c/messages", json={"content": ""}, headers=me),
            client.post("/v1/channels/c/messages", json={"content": "  \n "}, headers=me),
            client.post("/v1/messages/direct", json={"to": "bob", "content": ""}, headers=me),
            client.post("/v1/notes", json={"content": "\t"}, headers=me),
            client.patch(f"/v1/messages/{sent['id'].replace('#', '%23')}", json={"content": " "}, headers=me),
        ]
        for response in refused:
            assert response.status_code == 422, response.text
            error = response.json()["error"]
            assert error["code"] == "invalid_input" and "empty" in error["message"]
        assert [m["content"] for m in client.get("/v1/channels/c/messages", headers=me).json()] == ["fine"]
