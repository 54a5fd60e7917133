"""``min_score`` and "more results exist" through every door: HTTP, MCP and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

import engram
from engram.channels import Channels
from engram.cli import cli
from engram.mcp.server import call_tool
from engram.server import ServerConfig, create_app

NONSENSE = "zebra quantum marmalade"


def test_http_search_min_score_and_has_more() -> None:
    with TestClient(create_app(ServerConfig(store=":memory:", embedder="hashing"))) as client:
        client.post("/v1/projects", json={"id": "acme"})
        client.post("/v1/agents", json={"id": "alice", "project": "acme"})
        me = {"X-Engram-Agent": "alice"}
        assert client.post("/v1/channels", json={"name": "c"}, headers=me).status_code == 201
        for n in range(12):
            client.post("/v1/channels/c/messages", json={"content": f"ConnectionRefusedError port {n}"}, headers=me)
            client.post("/v1/notes", json={"content": f"restart the pool, try {n}"}, headers=me)
        for path, query in (("/v1/messages/search", "ConnectionRefusedError"), ("/v1/notes/search", "pool")):
            first = client.post(path, json={"query": query}, headers=me).json()
            assert len(first["results"]) == 10 and first["has_more"] is True and first["next_offset"] == 10
            rest = client.post(path, json={"query": query, "offset": 10}, headers=me).json()
            assert len(rest["results"]) == 2 and rest["has_more"] is False and rest["next_offset"] is None
            assert client.post(path, json={"query": NONSENSE}, headers=me).json()["results"]
            quiet = client.post(path, json={"query": NONSENSE, "min_score": 0.3}, headers=me).json()
            assert quiet["results"] == [] and quiet["has_more"] is False
        bad = client.post("/v1/messages/search", json={"query": "x", "min_score": "high"}, headers=me)
        assert bad.status_code == 422


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_search_min_score_offset_and_has_more(anyio_backend: str) -> None:
    mem = engram.open(":memory:", embedder="hashing", author="alice")
    hub = Channels(mem)
    hub.create_project("acme")
    alice = hub.as_agent(hub.register_agent("alice", project="acme").id)
    alice.create_channel("c")
    for n in range(12):
        alice.send("c", f"ConnectionRefusedError port {n}")
        alice.write_note(f"restart the pool, try {n}")
    for tool, query in (("message_search", "ConnectionRefusedError"), ("note_search", "pool")):
        first = (await call_tool(mem, tool, {"query": query})).structured_content["result"]  # type: ignore[index]
        assert len(first["results"]) == 10 and first["has_more"] and first["next_offset"] == 10
        page = await call_tool(mem, tool, {"query": query, "offset": first["next_offset"]})
        rest: dict[str, Any] = page.structured_content["result"]  # type: ignore[index]
        assert len(rest["results"]) == 2 and not rest["has_more"]
        quiet = await call_tool(mem, tool, {"query": NONSENSE, "min_score": 0.3})
        assert quiet.structured_content["result"]["results"] == []  # type: ignore[index]
    mem.close()


def test_cli_search_min_score_and_offset(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["--store", f"sqlite:///{tmp_path / 's.db'}", "--embedder", "hashing", "--vector-cache", "none"]

    def run(*args: str) -> Any:
        result = runner.invoke(cli, [*base, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    run("channel", "project", "acme")
    run("channel", "agent", "alice", "--project", "acme")
    run("channel", "create", "c", "--as", "alice")
    for n in range(12):
        run("msg", "send", "c", f"ConnectionRefusedError port {n}", "--as", "alice")
        run("note", "write", f"restart the pool, try {n}", "--as", "alice")
        fact = json.dumps({"text": f"the database listens on port {5432 + n}"})
        assert runner.invoke(cli, [*base, "put", "facts", f"f{n}", fact], catch_exceptions=False).exit_code == 0
    for group, query in (("msg", "ConnectionRefusedError"), ("note", "pool")):
        first = run(group, "search", query, "--as", "alice")
        assert len(first["results"]) == 10 and first["has_more"] and first["next_offset"] == 10
        rest = run(group, "search", query, "--offset", "10", "--as", "alice")
        assert len(rest["results"]) == 2 and not rest["has_more"]
        assert run(group, "search", NONSENSE, "--min-score", "0.3", "--as", "alice")["results"] == []
    assert run("search", "facts", NONSENSE, "--json")["items"]
    assert run("search", "facts", NONSENSE, "--min-score", "0.3", "--json")["items"] == []


def test_peeking_at_notes_takes_min_score_and_pages() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    hub = Channels(mem)
    hub.create_project("acme")
    for agent in ("alice", "auditor"):
        hub.register_agent(agent, project="acme")
    alice, auditor = hub.as_agent("alice"), hub.as_agent("auditor", read_all_notes=True)
    for n in range(12):
        alice.write_note(f"restart the pool, try {n}")
    first = auditor.peek_notes("alice", query="pool", limit=10)
    assert len(first) == 10 and first.has_more and first.next_offset == 10
    assert len(auditor.peek_notes("alice", query="pool", offset=10)) == 2
    assert list(auditor.peek_notes("alice", query=NONSENSE, min_score=0.3)) == []
    assert len(auditor.peek_notes("alice", query=NONSENSE)) > 0
    mem.close()
