"""The MCP doors act through their tenant's one channels hub and one memory writer (issue #27): every tool call of a
tenant reuses them, and the caller's key still decides the author and what it may write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engram.mcp.server import call_tool
from engram.ops.access import Principal
from engram.ops.tenants import TenantPool, store_opener
from engram.store import Memory
from engram.writer import MemoryWriter, OfflineExtractor

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _key(key_id: str, *scopes: str) -> Principal:
    return Principal("acme", frozenset(scopes), (), key_id=key_id)


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return result.structured_content  # type: ignore[no-any-return]


async def test_mcp_tool_calls_of_a_tenant_share_its_services(tmp_path: Path) -> None:
    built: list[Memory] = []

    def writer(memory: Memory, tenant: str) -> MemoryWriter:
        built.append(memory)
        return MemoryWriter(memory, extractor=OfflineExtractor(), background=False)

    pool = TenantPool(store_opener(str(tmp_path), local=False, embedder="hashing"), index_delay=None, writer=writer)
    try:
        with pool.lease("acme") as mem:
            services = pool.services("acme", mem)
            hub = services.channels
            hub.create_project("acme")
            hub.register_agent("alice", project="acme")
            hub.bind_key("kw", ["alice"])
            hub.bind_key("kr", ["alice"])
            agent, reader = _key("kw", "read", "write"), _key("kr", "read")
            made = await call_tool(mem, "channel_create", {"name": "debugging"}, agent, services)
            assert _data(made)["result"]["id"] == "acme:debugging" and mem.head.author == "alice"
            await call_tool(mem, "message_send", {"channel": "debugging", "content": "pool restart"}, agent, services)
            found = await call_tool(mem, "message_search", {"query": "pool"}, reader, services)
            assert [m["id"] for m in _data(found)["result"]["results"]] == ["acme:debugging#1"]
            cached = hub._shared.directory  # filled by the tool's search through the tenant's hub
            assert cached is not None and cached.root == mem.head.tree
            refused = await call_tool(mem, "message_send", {"channel": "debugging", "content": "x"}, reader, services)
            assert refused.is_error and "write" in refused.content[0].text  # type: ignore[union-attr]

            turns = [("user", "I live in Lyon."), ("assistant", "Noted."), ("user", "I am a nurse."),
                     ("assistant", "Noted too.")]  # fmt: skip
            for role, text in turns:
                args = {"conversation_id": "c1", "target": ["users", "alice"], "role": role, "text": text}
                done = _data(await call_tool(mem, "memory_append_turn", args, agent, services))
            assert done["decision"]["run"]["outcome"] == "merged" and mem.head.author == "writer"
            status = await call_tool(mem, "memory_writer_status", {"target": ["users", "alice"]}, reader, services)
            assert _data(status)["pending_turns"] == 0
            assert len(built) == 1 and pool.services("acme", mem) is services and services.channels is hub
        pool.close()
        assert services.closed
    finally:
        pool.close()
