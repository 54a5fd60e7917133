"""Pattern detection: the index's stored vectors, clustering on a metadata field or the first line, the default
threshold calibrated on realistic error reports, and a pattern note's confidence following its cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import CHANNEL_BACKENDS, open_memory, populate
from error_reports import CLUSTERS, REPORTS
from fastapi.testclient import TestClient

import engram
from engram.channels import Actor, Channels
from engram.channels.patterns import DEFAULT_THRESHOLDS
from engram.cli import cli
from engram.embed import HashingEmbedder
from engram.errors import InvalidInputError
from engram.mcp.server import call_tool
from engram.ops.access import Principal
from engram.server import ServerConfig, create_app


def _refused(actor: Actor, port: int) -> None:
    actor.send("debugging", f"ConnectionRefusedError: connect to 127.0.0.1 port {port} refused")


def test_pattern_note_confidence_follows_its_cluster(alice: Actor) -> None:
    alice.create_channel("debugging")
    for port in (5432, 5433, 5434):
        _refused(alice, port)
    first = alice.detect_patterns("debugging", threshold=0.6, write=True)[0]
    note = alice.message(first.note or "")
    assert note.confidence == pytest.approx(0.6)  # 3 members
    _refused(alice, 5435)
    grown = alice.detect_patterns("debugging", threshold=0.6, write=True)[0]
    assert grown.note == first.note and alice.message(grown.note or "").confidence == pytest.approx(0.65)
    _refused(alice, 5436)
    alice.detect_patterns("debugging", threshold=0.6, write=True)
    history = [m.confidence for m in alice.message_history(first.note or "") if m]
    assert history == pytest.approx([0.7, 0.65, 0.6])  # newest first: 5, 4 and 3 members


class _Counting(HashingEmbedder):
    """The hashing embedder, recording every text it is asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.embedded: list[str] = []

    def embed(self, texts: Sequence[str]) -> Any:
        self.embedded += list(texts)
        return super().embed(texts)


@pytest.fixture(params=CHANNEL_BACKENDS)
def counted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Channels, _Counting]]:
    """A populated channels service whose store embeds with a counting embedder, on each backend."""
    embedder = _Counting()
    memory = open_memory(request.param, tmp_path, request, embedder=embedder)
    yield populate(Channels(memory)), embedder
    memory.close()


@pytest.mark.parametrize("on", ["message", "first_line"])
def test_patterns_reuse_stored_vectors_instead_of_embedding_again(counted: tuple[Channels, _Counting], on: str) -> None:
    hub, embedder = counted
    alice = hub.as_agent("alice")
    alice.create_channel("debugging")
    for port in range(5432, 5438):
        _refused(alice, port)
    alice.send("debugging", "KeyError: 'user_id'\nin the session middleware")
    hub.memory.update_index()  # the index is up to date: every message has its vector
    sent = alice.messages("debugging", limit=100)
    compared = {m.content for m in sent} | {
        m.content.splitlines()[0] for m in sent
    }  # what "message"/"first_line" embed
    embedder.embedded.clear()
    first = alice.detect_patterns("debugging", on=on, write=True)
    if on == "message":  # the index's own vectors: not even the first run embeds a message
        assert compared.intersection(embedder.embedded) == set()
    embedder.embedded.clear()
    second = alice.detect_patterns("debugging", on=on, write=True)
    assert [p.members for p in second] == [p.members for p in first] and first[0].count == 6
    assert compared.intersection(embedder.embedded) == set()  # the second run: none at all


@pytest.mark.parametrize("embedder", ["hashing", "minilm"])
@pytest.mark.parametrize("on", ["message", "first_line", "metadata.error.message"])
def test_default_threshold_finds_recurring_errors_not_pairs_or_singles(embedder: str, on: str) -> None:
    memory = engram.open(":memory:", author="tester", embedder=embedder)
    try:
        hub = populate(Channels(memory))
        alice = hub.as_agent("alice")
        alice.create_channel("debugging")
        kind_of = {alice.send("debugging", content, metadata=meta).id: kind for kind, content, meta in REPORTS}
        found = alice.detect_patterns("debugging", on=on)
        assert sorted(tuple(kind_of[m] for m in p.members) for p in found) == sorted((k,) * 3 for k in CLUSTERS)
        lexical = "hashing" if embedder == "hashing" else "model"
        assert found.threshold == DEFAULT_THRESHOLDS[lexical, "message" if on == "message" else "line"]
        if on != "message":  # the representative is what the members share
            assert {p.representative for p in found} >= {"sqlite3.OperationalError: database is locked"}
    finally:
        memory.close()


def test_patterns_on_a_metadata_field_leave_out_messages_without_it(alice: Actor) -> None:
    alice.create_channel("debugging")
    for service in ("checkout", "search", "admin"):
        alice.send(
            "debugging", f"{service} is down, see the logs", metadata={"error": {"message": "OSError: disk full"}}
        )
    for _ in range(3):
        alice.send("debugging", "OSError: disk full")  # same words, but no metadata field: left out
    alice.send("debugging", "x", metadata={"error": {"message": ""}})
    found = alice.detect_patterns("debugging", on="metadata.error.message")
    assert [p.count for p in found] == [3] and found[0].representative == "OSError: disk full"
    assert found[0].members == ("acme:debugging#1", "acme:debugging#2", "acme:debugging#3")
    assert (
        alice.detect_patterns("debugging", on="metadata.error")[0].representative == '{"message": "OSError: disk full"}'
    )
    for bad in ("content", "metadata.", "error.message", 3):
        with pytest.raises(InvalidInputError, match="metadata field"):
            alice.detect_patterns("debugging", on=bad)  # type: ignore[arg-type]


#: Three sessions of one error that their texts do not show alike, and the field that does.
_SESSIONS = ["checkout crashed at start-up", "the nightly export stopped halfway", "admin dashboard is blank"]
_ERROR = {"error": {"message": "OSError: [Errno 28] No space left on device"}}


def test_http_patterns_take_on_and_the_calibrated_threshold() -> None:
    with TestClient(create_app(ServerConfig(store=":memory:", embedder="hashing"))) as client:
        client.post("/v1/projects", json={"id": "acme"})
        client.post("/v1/agents", json={"id": "alice", "project": "acme"})
        me = {"X-Engram-Agent": "alice"}
        client.post("/v1/channels", json={"name": "debugging"}, headers=me)
        for text in _SESSIONS:
            body = {"content": text, "metadata": _ERROR}
            assert client.post("/v1/channels/debugging/messages", json=body, headers=me).status_code == 201
        found = client.post("/v1/patterns", json={"on": "metadata.error.message", "write": True}, headers=me)
        assert found.status_code == 200, found.text
        [pattern] = found.json()
        assert pattern["count"] == 3 and pattern["representative"] == _ERROR["error"]["message"] and pattern["new"]
        assert client.post("/v1/patterns", json={"threshold": None}, headers=me).json() == []
        bad = client.post("/v1/patterns", json={"on": "content"}, headers=me)
        assert bad.status_code == 422 and "metadata field" in bad.text


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_pattern_detect_takes_on(anyio_backend: str) -> None:
    mem = engram.open(":memory:", embedder="hashing")
    try:
        hub = populate(Channels(mem))
        hub.bind_key("ka", ["alice"])
        alice = hub.as_agent("alice")
        alice.create_channel("debugging")
        for text in _SESSIONS:
            alice.send("debugging", text, metadata=_ERROR)
        who = Principal("acme", frozenset({"read", "write"}), (), key_id="ka")
        found = await call_tool(mem, "pattern_detect", {"on": "metadata.error.message", "threshold": None}, who)
        assert not found.is_error, found.content
        [pattern] = found.structured_content["result"]  # type: ignore[index]
        assert pattern["representative"] == _ERROR["error"]["message"]
        plain = await call_tool(mem, "pattern_detect", {}, who)
        assert plain.structured_content["result"] == []  # type: ignore[index]
    finally:
        mem.close()


def test_cli_patterns_take_on(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["--store", f"sqlite:///{tmp_path / 's.db'}", "--embedder", "hashing", "--vector-cache", "none"]

    def run(*args: str) -> Any:
        result = runner.invoke(cli, [*base, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    run("channel", "project", "acme")
    run("channel", "agent", "alice", "--project", "acme")
    run("channel", "create", "debugging", "--as", "alice")
    for text in _SESSIONS:
        run("msg", "send", "debugging", text, "--metadata", json.dumps(_ERROR), "--as", "alice")
    [pattern] = run("msg", "patterns", "debugging", "--on", "metadata.error.message", "--as", "alice")
    assert pattern["count"] == 3 and pattern["representative"] == _ERROR["error"]["message"]
    assert run("msg", "patterns", "debugging", "--as", "alice") == []
