"""Over HTTP the writer runs in the tenant's background worker: an append returns at once however slow the model,
status and the events stream report the run, the settings are the server's and refused when out of range."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engram.errors import InvalidInputError
from engram.server import ServerConfig, create_app
from engram.writer.scripted import Reply, ScriptedModelServer

from .conftest import error_of

SLOW = 6.0


def _start(client: TestClient) -> None:
    made = client.post("/v1/conversations", json={"conversation_id": "c1", "target": ["users", "alice"]})
    assert made.status_code == 200, made.text


def test_an_append_returns_at_once_while_a_slow_model_runs_in_the_background(tmp_path: Path) -> None:
    reply = Reply.tools(("write_memory", {"text": "Alice lives in Lyon", "source_message_ids": ["m1"]}),
                        ("no_new_memories", {"reason": "done"}), delay=SLOW)  # fmt: skip
    with ScriptedModelServer([reply]) as model:
        config = ServerConfig(store=str(tmp_path / "s"), embedder="hashing", writer_interval=1,
                              writer_extractor=f"openai:scripted@{model.url}", writer_timeout=SLOW * 4,
                              writer_instructions="Only durable facts.")  # fmt: skip
        with TestClient(create_app(config)) as client:
            _start(client)
            client.post(
                "/v1/conversations/c1/turns", json={"role": "user", "text": "I live in Lyon.", "message_id": "m1"}
            )
            started = time.monotonic()
            sent = client.post("/v1/conversations/c1/turns", json={"role": "assistant", "text": "ok"})
            took = time.monotonic() - started
            assert sent.status_code == 200 and sent.json()["decision"]["action"] == "queued"
            assert took < SLOW / 2, f"the append waited {took:.1f}s for the model"
            busy = client.get("/v1/writer/users.alice/status").json()
            assert busy["queued"] is True and busy["pending_turns"] == 1
            assert busy["settings"]["instructions"] == "Only durable facts." and busy["settings"]["timeout"] == SLOW * 4
            with client.stream("GET", "/v1/writer/users.alice/events", params={"timeout": SLOW * 3}) as stream:
                events = []
                for line in stream.iter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
                    if events and events[-1].get("outcome") == "merged":
                        break
            assert events[0]["queued"] is True  # the first status event
            assert events[-1]["outcome"] == "merged" and events[-1]["added"] == 1
            done = client.get("/v1/writer/users.alice/status", params={"wait": 30}).json()
            assert done["pending_turns"] == 0 and done["last_run_settings"]["model"] == "scripted"


def test_a_dead_lettered_target_is_retried_over_http(tmp_path: Path) -> None:
    prose = Reply(content="I think the user lives in Lyon.")
    fixed = Reply.tools(("no_new_memories", {"reason": "nothing durable"}))
    with ScriptedModelServer([prose, fixed]) as model:
        config = ServerConfig(store=str(tmp_path / "s"), embedder="hashing", writer_interval=1, writer_retries=0,
                              writer_extractor=f"openai:scripted@{model.url}", writer_max_failures=1)  # fmt: skip
        with TestClient(create_app(config)) as client:
            _start(client)
            client.post("/v1/conversations/c1/turns", json={"role": "user", "text": "I live in Lyon."})
            client.post("/v1/conversations/c1/turns", json={"role": "assistant", "text": "ok"})
            status = client.get("/v1/writer/users.alice/status", params={"wait": 30}).json()
            assert status["last_run"]["outcome"] == "no_tool_call" and status["dead_letter"]["failures"] == 1
            assert status["pending_turns"] == 1  # reported, not skipped
            assert "engram_writer_dead_lettered" in client.get("/metrics").text
            retried = client.post("/v1/writer/users.alice/retry").json()
            assert retried["action"] == "ran" and retried["run"]["outcome"] == "no_new_memories"
            assert client.get("/v1/writer/users.alice/status").json()["dead_letter"] is None


@pytest.mark.parametrize(("field", "value"), [("writer_interval", 0), ("writer_interval", 51),
                                              ("writer_max_model_calls", 0), ("writer_timeout", 0)])  # fmt: skip
def test_writer_settings_out_of_range_are_refused_when_the_server_is_configured(tmp_path: Path, field, value) -> None:
    with pytest.raises(InvalidInputError):
        ServerConfig(store=str(tmp_path / "s"), embedder="hashing", **{field: value})


def test_a_prefix_key_cannot_follow_another_targets_events(keyed) -> None:  # type: ignore[no-untyped-def]
    client, make_key = keyed()
    narrow = make_key("acme", "read", prefix=("users", "bob"))
    error_of(client.get("/v1/writer/users.alice/events", params={"timeout": 1}, headers=narrow), 403)
