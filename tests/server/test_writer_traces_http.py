"""Writer traces over HTTP: each tenant's traces in its own folder (inside its store, or under ``--writer-traces``),
run records that carry a trace id and never a server path, and ``GET .../runs/{run_id}/trace`` under the writer's
access rules (#28)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from engram.server import ServerConfig, create_app
from engram.writer.scripted import Reply, ScriptedModelServer
from engram.writer.traces import TraceFolderError, trace_path

from .conftest import Keyed, error_of

#: Four malformed tool calls in one reply: the run fails as a policy violation (and leaves a trace) at once.
BAD_CALLS = Reply.tools(("nope", {}), ("write_memory", "[1"), ("write_memory", {"txt": 1}), ("read_memory", "x"))


@pytest.fixture
def model() -> Iterator[str]:
    """The extractor spec of a model server whose every answer breaks the tool loop's rules."""
    with ScriptedModelServer(lambda body: BAD_CALLS) as server:
        yield f"openai:scripted@{server.url}"


def _failed_run(client: TestClient, target: list[str], headers: dict[str, str] | None = None) -> dict[str, Any]:
    """Converse on ``target`` until the writer runs; return the run record once it has an outcome."""
    conversation = "chat-" + "-".join(target)
    made = client.post("/v1/conversations", json={"conversation_id": conversation, "target": target}, headers=headers)
    assert made.status_code == 200, made.text
    for role in ("user", "assistant", "user", "assistant"):
        sent = client.post(f"/v1/conversations/{conversation}/turns", headers=headers,
                           json={"role": role, "text": f"I am {target[-1]} and I live in Lyon."})  # fmt: skip
        assert sent.status_code == 200, sent.text
    dotted = ".".join(target)
    deadline = time.monotonic() + 60  # the run may be in the request or in a background worker
    while True:
        runs = client.get(f"/v1/writer/{dotted}/runs", headers=headers).json()["runs"]
        if runs and runs[0]["outcome"] != "running":
            record: dict[str, Any] = runs[0]
            assert record["outcome"] == "policy_violation", record
            return record
        assert time.monotonic() < deadline, runs
        time.sleep(0.1)


def test_each_tenant_keeps_its_traces_in_its_own_store_and_reads_only_its_own(
    keyed: Keyed, tmp_path: Path, model: str
) -> None:
    client, make_key = keyed(writer_extractor=model)
    acme, globex = make_key("acme", "read", "write"), make_key("globex", "read", "write")
    ours = _failed_run(client, ["users", "alice"], acme)
    theirs = _failed_run(client, ["users", "alice"], globex)
    for record in (ours, theirs):
        assert record["trace"] == record["id"]
    folders = {name: tmp_path / "base" / "tenants" / name / "engram-traces" for name in ("acme", "globex")}
    assert trace_path(folders["acme"], ours["id"]).is_file() and trace_path(folders["globex"], theirs["id"]).is_file()
    assert not trace_path(folders["acme"], theirs["id"]).exists()
    assert not trace_path(folders["globex"], ours["id"]).exists()
    for path in (f"/v1/writer/users.alice/runs/{ours['id']}", "/v1/writer/users.alice/status",
                 "/v1/writer/users.alice/runs"):  # fmt: skip
        assert str(tmp_path) not in client.get(path, headers=acme).text  # a trace id, never a server path
    got = client.get(f"/v1/writer/users.alice/runs/{ours['id']}/trace", headers=acme)
    assert got.status_code == 200, got.text
    trace = got.json()
    assert trace["run"] == ours["id"] and trace["target"] == "users.alice" and trace["outcome"] == "policy_violation"
    assert trace["steps"][0]["model_calls"][0]["status"] == 200 and trace["system"]
    error_of(client.get(f"/v1/writer/users.alice/runs/{ours['id']}/trace", headers=globex), 404)  # not its run
    reader = make_key("acme", "read")
    assert client.get(f"/v1/writer/users.alice/runs/{ours['id']}/trace", headers=reader).status_code == 200
    fenced = make_key("acme", "read", prefix=("users", "bob"))
    error_of(client.get(f"/v1/writer/users.alice/runs/{ours['id']}/trace", headers=fenced), 403)
    trace_path(folders["acme"], ours["id"]).unlink()  # pruned
    error_of(client.get(f"/v1/writer/users.alice/runs/{ours['id']}/trace", headers=acme), 404)


def test_writer_traces_root_gives_each_tenant_a_folder_of_its_own(keyed: Keyed, tmp_path: Path, model: str) -> None:
    root = tmp_path / "all-traces"
    client, make_key = keyed(writer_extractor=model, writer_traces=str(root))
    acme, globex = make_key("acme", "read", "write"), make_key("globex", "read", "write")
    ours, theirs = _failed_run(client, ["users", "alice"], acme), _failed_run(client, ["users", "bob"], globex)
    assert [p.name for p in (root / "acme").glob("engram-trace-*.json")] == [trace_path(root, ours["id"]).name]
    assert [p.name for p in (root / "globex").glob("engram-trace-*.json")] == [trace_path(root, theirs["id"]).name]
    assert not (tmp_path / "base" / "tenants" / "acme" / "engram-traces").exists()


def test_a_server_without_keys_keeps_traces_in_its_store(tmp_path: Path, model: str) -> None:
    store = tmp_path / "store"
    with TestClient(create_app(ServerConfig(store=str(store), embedder="hashing", writer_extractor=model))) as client:
        record = _failed_run(client, ["users", "carol"])
        assert trace_path(store / "engram-traces", record["id"]).is_file()
        assert client.get(f"/v1/writer/users.carol/runs/{record['id']}/trace").json()["run"] == record["id"]


def test_a_foreign_writer_traces_folder_is_refused_at_start(tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / "default").mkdir(parents=True)
    (root / "default" / "package.json").write_text("{}")
    with pytest.raises(TraceFolderError, match="holds files engram did not write"):
        create_app(ServerConfig(store=str(tmp_path / "s"), embedder="hashing", writer_traces=str(root)))
    assert (root / "default" / "package.json").read_text() == "{}"
