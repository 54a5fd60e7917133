"""Memory search says whether more results exist, on every door: library, HTTP, MCP and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

import engram
from engram.cli import cli
from engram.mcp.server import call_tool
from engram.server import ServerConfig, create_app
from engram.store import SearchOp


def _fill(mem: engram.Memory, n: int = 12) -> None:
    for i in range(n):
        mem.put(("facts",), f"f{i:02d}", {"text": f"the database listens on port {5432 + i}"})


def test_library_search_pages_say_whether_more_exist() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    _fill(mem)
    first = mem.search(("facts",), "database port")
    assert len(first) == 10 and first.has_more and first.next_offset == 10  # the default limit stays 10
    rest = mem.search(("facts",), "database port", offset=first.next_offset or 0)
    assert len(rest) == 2 and not rest.has_more and rest.next_offset is None
    assert {r.key for r in first} | {r.key for r in rest} == {f"f{i:02d}" for i in range(12)}
    listed = mem.search(("facts",), limit=12)
    assert len(listed) == 12 and not listed.has_more
    past = mem.search(("facts",), "database port", limit=5, at=mem.head.id.hex())
    assert len(past) == 5 and past.has_more and past.next_offset == 5
    batched = mem.batch([SearchOp(("facts",), "database", limit=11)])[0]
    assert len(batched) == 11 and batched.has_more
    assert not mem.search(("facts",), "database", limit=0, offset=12).has_more
    with pytest.raises(engram.errors.InvalidInputError):
        mem.search(("facts",), "database", limit=-1)
    mem.close()


def test_http_mcp_and_cli_memory_search_say_whether_more_exist(tmp_path: Path) -> None:
    with TestClient(create_app(ServerConfig(store=":memory:", embedder="hashing"))) as client:
        for i in range(12):
            client.put("/v1/items", json={"namespace": ["facts"], "key": f"f{i}", "value": {"text": f"port {i}"}})
        page = client.post("/v1/search", json={"namespace_prefix": ["facts"], "query": "port", "limit": 5}).json()
        assert len(page["items"]) == 5 and page["has_more"] is True and page["next_offset"] == 5
    mem = engram.open(":memory:", embedder="hashing")
    _fill(mem)

    async def mcp() -> dict[str, object]:
        found = await call_tool(mem, "memory_search", {"namespace": ["facts"], "query": "database", "limit": 11})
        return found.structured_content  # type: ignore[return-value]

    out = anyio.run(mcp)
    assert len(out["items"]) == 11 and out["has_more"] is True and out["next_offset"] == 11  # type: ignore[arg-type]
    mem.close()
    base = ["--store", f"sqlite:///{tmp_path / 's.db'}", "--embedder", "hashing", "--vector-cache", "none"]
    runner = CliRunner()
    for i in range(12):
        fact = json.dumps({"text": f"the database listens on port {5432 + i}"})
        assert runner.invoke(cli, [*base, "put", "facts", f"f{i}", fact], catch_exceptions=False).exit_code == 0
    shown = runner.invoke(cli, [*base, "search", "facts", "database", "--json"], catch_exceptions=False)
    body = json.loads(shown.output)
    assert len(body["items"]) == 10 and body["has_more"] is True and body["next_offset"] == 10
