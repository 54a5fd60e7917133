"""The HTTP door for channels (in process): identity from the API key, the one error shape, SSE resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from engram.ops.access import KeyRing
from engram.server import ServerConfig, create_app


def error_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    error: dict[str, Any] = body["error"]
    return error


def test_http_channels_with_keys(tmp_path: Path) -> None:
    ring = KeyRing(tmp_path / "keys.json")
    _, admin = ring.create("acme", ("admin",))
    alice_key, alice_secret = ring.create("acme", ("read", "write"))
    bob_key, bob_secret = ring.create("acme", ("read", "write"))
    auditor_key, auditor_secret = ring.create("acme", ("read", "write"))
    config = ServerConfig(store=str(tmp_path / "base"), embedder="hashing", keys_file=ring.path, require_keys=True)
    with TestClient(create_app(config)) as client:
        head = {"Authorization": f"Bearer {admin}"}
        alice = {"Authorization": f"Bearer {alice_secret}"}
        bob = {"Authorization": f"Bearer {bob_secret}"}
        auditor = {"Authorization": f"Bearer {auditor_secret}"}
        assert client.post("/v1/projects", json={"id": "acme"}, headers=head).status_code == 201
        for agent in ("alice", "bob"):
            assert client.post("/v1/agents", json={"id": agent, "project": "acme"}, headers=head).status_code == 201
        error_of(client.post("/v1/agents", json={"id": "eve"}, headers=alice), 403, "missing_scope")
        for key, agents in ((alice_key, ["alice"]), (bob_key, ["bob"])):
            body = {"key_id": key.id, "agents": agents}
            assert client.post("/v1/agents/keys", json=body, headers=head).status_code == 200
        body = {"key_id": auditor_key.id, "agents": ["bob"], "read_all_notes": True}
        assert client.post("/v1/agents/keys", json=body, headers=head).status_code == 200

        made = client.post("/v1/channels", json={"name": "debugging"}, headers=alice)
        assert made.status_code == 201 and made.json()["id"] == "acme:debugging"
        assert client.post("/v1/channels/debugging/join", headers=bob).status_code == 200
        sent = client.post("/v1/channels/debugging/messages", headers=alice, json={
            "content": "ConnectionRefusedError on 5432", "metadata": {"type": "debug_start",
            "resolution": {"status": "solved"}}, "confidence": 0.7})  # fmt: skip
        assert sent.status_code == 201 and sent.json()["sender"] == "alice"
        # the agent comes from the key: bob's key cannot act as alice, whatever the header says
        error_of(client.post("/v1/channels/debugging/messages", json={"content": "forged"},
                             headers={**bob, "X-Engram-Agent": "alice"}), 403, "agent_forbidden")  # fmt: skip
        search = {"query": "connection refused", "filter": {"resolution.status": "solved"}, "profile": "quality"}
        found = client.post("/v1/messages/search", json=search, headers=bob).json()
        assert [m["id"] for m in found["results"]] == ["acme:debugging#1"] and found["degraded"] is None
        fb = client.post("/v1/messages/acme:debugging%231/feedback", json={"worked": True}, headers=bob)
        assert fb.status_code == 200 and fb.json()["confidence"] == 0.8
        note = client.post("/v1/notes", headers=alice, json={"content": "pool restart", "tags": ["db"],
                           "breadcrumbs": [{"type": "file", "value": "pool.py"}], "confidence": 0.9})  # fmt: skip
        assert note.status_code == 201
        error_of(client.get("/v1/notes/peek/alice", headers=bob), 403, "missing_scope")
        peeked = client.get("/v1/notes/peek/alice", headers=auditor).json()
        assert [n["content"] for n in peeked["results"]] == ["pool restart"]
        # bad input: one error shape, the right status
        error_of(client.post("/v1/channels/nope/messages", json={"content": "x"}, headers=alice), 404,
                 "channel_not_found")  # fmt: skip
        error_of(client.post("/v1/channels", json={"name": "Bad Name"}, headers=alice), 422, "invalid_channel_name")
        error_of(client.post("/v1/messages/search", json={"filter": {"a": {"$bogus": 1}}}, headers=alice), 422,
                 "invalid_filter")  # fmt: skip
        assert client.post("/v1/channels/debugging/messages", json={"content": "x", "bogus": 1},
                           headers=alice).status_code == 422  # fmt: skip
        assert client.post("/v1/channels/debugging/messages", json={"content": "x", "confidence": 2},
                           headers=alice).status_code == 422  # fmt: skip
        # events as JSON and as SSE, resumed by Last-Event-ID
        events = client.get("/v1/events", params={"topics": "message.*"}, headers=bob).json()
        assert [e["topic"] for e in events] == ["message.created", "message.feedback"]
        first = events[0]["seq"]
        with client.stream("GET", "/v1/events/stream", params={"timeout": 0.5, "topics": "message.*"},
                           headers={**bob, "Last-Event-ID": str(first)}) as response:  # fmt: skip
            text = "".join(response.iter_text())
        assert response.headers["content-type"].startswith("text/event-stream")
        assert f"id: {events[1]['seq']}\nevent: message.feedback\n" in text and f"id: {first}\n" not in text
        assert "openapi" in client.get("/openapi.json", headers=head).text
        paths = client.get("/openapi.json", headers=head).json()["paths"]
        assert {"/v1/channels", "/v1/messages/search", "/v1/notes", "/v1/events", "/v1/events/stream"} <= set(paths)


def test_http_channels_without_keys_name_the_agent() -> None:
    with TestClient(create_app(ServerConfig(store=":memory:", embedder="hashing"))) as client:
        client.post("/v1/projects", json={"id": "acme"})
        client.post("/v1/agents", json={"id": "alice", "project": "acme"})
        error_of(client.get("/v1/channels"), 403, "agent_required")
        me = {"X-Engram-Agent": "alice"}
        assert client.post("/v1/channels", json={"name": "c"}, headers=me).status_code == 201
        assert [c["id"] for c in client.get("/v1/channels", headers=me).json()] == ["acme:c"]
        error_of(client.get("/v1/channels", headers={"X-Engram-Agent": "ghost"}), 404, "agent_not_found")
