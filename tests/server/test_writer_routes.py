"""The memory writer over HTTP (issue #14, deliverable 8): conversations, turns, runs, reviews, read-back."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from engram.server import ServerConfig, create_app

from .conftest import Keyed, error_of

TURNS = [
    ("user", "I moved to Lyon last month and I work as a nurse.", "m1"),
    ("assistant", "Noted, Lyon it is.", "m2"),
    ("user", "My favourite editor is Vim and I use it every day.", "m3"),
    ("assistant", "Great.", "m4"),
]


def _converse(client: TestClient, headers: dict[str, str] | None = None) -> list[dict]:  # type: ignore[type-arg]
    made = client.post("/v1/conversations", json={"conversation_id": "chat-1", "target": ["users", "alice"]},
                       headers=headers)  # fmt: skip
    assert made.status_code == 200, made.text
    assert made.json()["target"] == "users.alice"
    answers = []
    for role, text, message_id in TURNS:
        turn = {"role": role, "text": text, "message_id": message_id}
        sent = client.post("/v1/conversations/chat-1/turns", json=turn, headers=headers)
        assert sent.status_code == 200, sent.text
        answers.append(sent.json())
    return answers


def test_turns_run_the_writer_and_memories_read_back(tmp_path: Path) -> None:
    with TestClient(create_app(ServerConfig(store=str(tmp_path / "s"), embedder="hashing"))) as client:
        answers = _converse(client)
        assert [a["decision"]["action"] for a in answers] == ["waiting", "waiting", "waiting", "queued"]
        assert answers[0]["turn"]["message_id"] == "m1"
        status = client.get("/v1/writer/users.alice/status", params={"wait": 30}).json()
        run = status["last_run"]
        assert run["outcome"] == "merged" and run["actions"] == 2
        assert status["pending_turns"] == 0 and status["queued"] is False
        assert status["last_run_settings"]["interval"] == 2 and status["last_run_settings"]["model"] == "offline"
        assert [r["id"] for r in client.get("/v1/writer/users.alice/runs").json()["runs"]] == [run["id"]]
        assert client.get(f"/v1/writer/users.alice/runs/{run['id']}").json()["outcome"] == "merged"
        memories = client.get("/v1/writer/users.alice/memories", params={"query": "where does she live"}).json()
        assert sorted(tuple(m["sources"]) for m in memories["memories"]) == [("m1",), ("m3",)]
        nothing = client.post("/v1/writer/users.alice/run-now").json()
        assert nothing["action"] == "skipped" and nothing["reason"] == "nothing_new"
        error_of(client.get("/v1/writer/users.alice/runs/nope"), 404)
        error_of(client.post("/v1/conversations/ghost/turns", json={"role": "user", "text": "hi"}), 404)
        error_of(client.post("/v1/conversations/chat-1/turns", json={"role": "robot", "text": "hi"}), 422)


def test_review_runs_are_approved_or_rejected_over_http(tmp_path: Path) -> None:
    config = ServerConfig(store=str(tmp_path / "s"), embedder="hashing", writer_policy="review")
    with TestClient(create_app(config)) as client:
        _converse(client)
        run = client.get("/v1/writer/users.alice/status", params={"wait": 30}).json()["last_run"]
        assert run["outcome"] == "review" and run["branch"].startswith("writer/users.alice/")
        assert client.post("/v1/search", json={"namespace_prefix": ["users", "alice"]}).json()["items"] == []
        approved = client.post(f"/v1/writer/users.alice/runs/{run['id']}/approve", json={"strategy": "fail"})
        assert approved.status_code == 200 and approved.json()["review"] == "approved"
        assert len(client.post("/v1/search", json={"namespace_prefix": ["users", "alice"]}).json()["items"]) == 2
        error_of(client.post(f"/v1/writer/users.alice/runs/{run['id']}/reject"), 422)


def test_writer_routes_follow_the_key_scopes(keyed: Keyed) -> None:
    client, make_key = keyed()
    writer, reader = make_key("acme", "read", "write"), make_key("acme", "read")
    _converse(client, writer)
    error_of(client.post("/v1/conversations/chat-1/turns", json={"role": "user", "text": "hi"}, headers=reader), 403)
    status = client.get("/v1/writer/users.alice/status", params={"wait": 30}, headers=reader).json()
    assert status["pending_turns"] == 0
    other = make_key("globex", "read")
    assert client.get("/v1/writer/users.alice/runs", headers=other).json()["runs"] == []  # another tenant's store


def test_a_retried_turn_is_stored_once_and_a_changed_one_is_a_conflict(tmp_path: Path) -> None:
    with TestClient(create_app(ServerConfig(store=str(tmp_path / "s"), embedder="hashing"))) as client:
        _converse(client)
        client.get("/v1/writer/users.alice/status", params={"wait": 30})
        retry = {"role": "assistant", "text": "Great.", "message_id": "m4"}
        again = client.post("/v1/conversations/chat-1/turns", json=retry)
        assert again.status_code == 200 and again.json()["turn"]["seq"] == 4  # the turn stored the first time
        changed = client.post("/v1/conversations/chat-1/turns", json={**retry, "text": "Something else."})
        error_of(changed, 409)
        status = client.get("/v1/writer/users.alice/status").json()
        assert status["pending_turns"] == 0  # the retry made no new turn to extract from
