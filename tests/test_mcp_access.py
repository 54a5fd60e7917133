"""The MCP server applies the HTTP API's access policy (issue #9, item 9): over streamable HTTP with API keys
every request needs one; a key reaches only its tenant, its scopes and its namespace prefix; the caller is
the key, never a tool argument."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import engram
from engram.mcp import TOOLS, KeyedAccess, build_server, call_tool
from engram.mcp.server import tools_for
from engram.ops.access import KeyRing, Principal
from engram.ops.tenants import TenantPool

ENGRAM = Path(sys.executable).with_name("engram")
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _data(result: Any) -> dict[str, Any]:
    return result.structured_content  # type: ignore[no-any-return]


def _principal(*scopes: str, prefix: tuple[str, ...] = ()) -> Principal:
    return Principal("acme", frozenset(scopes), prefix, key_id="k1")


async def test_call_tool_checks_scopes_for_every_tool() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    mem.put(("users", "alice"), "prefs", {"text": "dark mode"})
    reader = _principal("read")
    writes = {
        "memory_write": {"namespace": ["users"], "key": "k", "value": {}},
        "memory_delete": {"namespace": ["users"], "key": "k"},
        "memory_create_branch": {"name": "b"},
        "memory_merge": {"source": "main"},
        "memory_revert": {"ref": "HEAD"},
        # the channel tools (issue #13)
        "channel_create": {"name": "c"},
        "channel_join": {"channel": "c"},
        "channel_leave": {"channel": "c"},
        "channel_invite": {"channel": "c", "invitee": "bob"},
        "message_send": {"channel": "c", "content": "x"},
        "message_direct": {"to": "bob", "content": "x"},
        "message_feedback": {"target": "acme:c#1", "worked": True},
        "note_write": {"content": "x"},
        "note_peek": {"owner": "bob"},
        "pattern_detect": {},
        "message_edit": {"message_id": "acme:c#1", "content": "y"},
        "message_delete": {"message_id": "acme:c#1"},
        "message_send_many": {"channel": "c", "messages": [{"content": "x"}]},
        "channel_mark_read": {"channel": "c"},
        "channel_mute": {"channel": "c"},
        "channel_archive": {"channel": "c"},
        "channel_set_capabilities": {"channel": "c", "member": "bob", "capabilities": ["send"]},
        "agent_update_profile": {"status": "busy"},
        # the memory writer's tools (issue #14)
        "memory_append_turn": {"conversation_id": "c", "target": ["users", "alice"], "role": "user", "text": "x"},
        "memory_writer_approve": {"target": ["users", "alice"], "run_id": "r"},
        "memory_writer_reject": {"target": ["users", "alice"], "run_id": "r"},
        "memory_writer_retry": {"target": ["users", "alice"]},
    }
    assert set(writes) == {name for name, tool in TOOLS.items() if tool.scope == "write"}
    for name, args in writes.items():
        result = await call_tool(mem, name, args, reader)
        assert result.is_error and "lacks the 'write' scope" in result.content[0].text, name
    assert set(mem.branches()) == {"main"}
    found = await call_tool(mem, "memory_get", {"namespace": ["users", "alice"], "key": "prefs"}, reader)
    assert _data(found)["item"]["value"] == {"text": "dark mode"}
    listed = await call_tool(mem, "memory_list_branches", {}, reader)
    assert not listed.is_error and "main" in _data(listed)["branches"]
    writer = _principal("read", "write")
    created = await call_tool(mem, "memory_create_branch", {"name": "b"}, writer)
    assert not created.is_error and set(mem.branches()) == {"main", "b"}
    deleted = await call_tool(mem, "memory_delete_branch", {"name": "b"}, writer)
    assert deleted.is_error and "'admin' scope" in deleted.content[0].text and "b" in mem.branches()
    restricted = _principal("admin", prefix=("users", "alice"))
    deleted = await call_tool(mem, "memory_delete_branch", {"name": "b"}, restricted)
    assert deleted.is_error and "reaches every namespace" in deleted.content[0].text and "b" in mem.branches()
    deleted = await call_tool(mem, "memory_delete_branch", {"name": "b"}, _principal("admin"))
    assert not deleted.is_error and set(mem.branches()) == {"main"}


def test_a_key_sees_only_the_tools_its_scopes_allow() -> None:
    reads = [name for name, tool in TOOLS.items() if tool.read_only]
    assert reads == [tool.name for tool in tools_for(_principal("read"))]
    assert "memory_list_branches" in reads and "memory_create_branch" not in reads
    writer = [tool.name for tool in tools_for(_principal("read", "write"))]
    assert writer == [name for name in TOOLS if name != "memory_delete_branch"]
    assert [tool.name for tool in tools_for(_principal("admin"))] == list(TOOLS)


async def test_a_keyed_server_lists_no_tool_to_a_caller_without_a_key(tmp_path: Path) -> None:
    tenants = TenantPool(lambda _: engram.open(":memory:", embedder="hashing"), sweep_minutes=None)
    server = build_server(access=KeyedAccess(KeyRing(tmp_path / "keys.json"), tenants))
    try:
        async with Client(server) as client:  # in process: no HTTP request, so no key
            with pytest.raises(MCPError, match="send an API key"):
                await client.list_tools()
    finally:
        tenants.close()


async def test_call_tool_refreshes_nothing_for_a_read_only_key() -> None:
    mem = engram.open(":memory:", embedder="hashing", ttl={"default_ttl": 1.0, "refresh_on_read": True})
    mem.put(("n",), "k", {"v": 1})
    commits = len(mem.log())
    result = await call_tool(mem, "memory_get", {"namespace": ["n"], "key": "k"}, _principal("read"))
    assert not result.is_error and len(mem.log()) == commits


async def test_call_tool_keeps_a_restricted_key_inside_its_prefix() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    mem.put(("users", "alice"), "prefs", {"text": "alice likes dark mode"})
    mem.put(("users", "bob"), "prefs", {"text": "bob likes dark mode"})
    alice = _principal("read", "write", prefix=("users", "alice"))
    outside = await call_tool(mem, "memory_get", {"namespace": ["users", "bob"], "key": "prefs"}, alice)
    assert outside.is_error and "outside this API key's prefix" in outside.content[0].text
    found = await call_tool(mem, "memory_search", {"query": "dark mode"}, alice)  # [] narrowed to the prefix
    assert [item["namespace"] for item in _data(found)["items"]] == [["users", "alice"]]
    spaces = await call_tool(mem, "memory_list_namespaces", {}, alice)
    assert _data(spaces)["namespaces"] == [["users", "alice"]]
    block = _data(await call_tool(mem, "memory_context", {"query": "dark mode"}, alice))  # [] narrowed too
    assert [item["namespace"] for item in block["items"]] == [["users", "alice"]] and "bob" not in block["text"]
    refused = await call_tool(mem, "memory_context", {"namespace": ["users", "bob"], "query": "dark mode"}, alice)
    assert refused.is_error and "outside this API key's prefix" in refused.content[0].text
    diff = await call_tool(mem, "memory_diff", {"old": "HEAD~2"}, alice)
    assert {tuple(c["namespace"]) for c in _data(diff)["changes"]} == {("users", "alice")}
    for name, args in [("memory_merge", {"source": "main"}), ("memory_revert", {"ref": "HEAD"})]:
        refused = await call_tool(mem, name, args, alice)
        assert refused.is_error and "reaches every namespace" in refused.content[0].text
    written = await call_tool(mem, "memory_write", {"namespace": ["users", "alice"], "key": "n", "value": {}}, alice)
    assert _data(written)["commit"]["author"] == "key:k1"  # the key is the author, not a tool argument default


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(process: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, "the MCP server did not start"
            time.sleep(0.05)


@asynccontextmanager
async def _client(url: str, key: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


@pytest.mark.slow
async def test_mcp_over_http_with_keys_enforces_tenants_scopes_and_prefixes(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ring = KeyRing(store / "keys.json")
    _, acme = ring.create("acme", ["read", "write"])
    _, acme_reader = ring.create("acme", ["read"])
    _, beta = ring.create("beta", ["read", "write"])
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    cmd = [str(ENGRAM), "--store", str(store), "--embedder", "hashing", "--vector-cache", "none", "mcp",
           "--transport", "http", "--port", str(port)]  # fmt: skip
    process = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        await anyio.to_thread.run_sync(_wait_for_port, process, port)
        for headers in ({}, {"Authorization": "Bearer ek_not-a-key"}):
            refused = httpx.post(url, headers={**headers, "Accept": "application/json, text/event-stream"},
                                 json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=10)  # fmt: skip
            assert refused.status_code == 401 and refused.json()["error"]["code"] in ("unauthorized", "invalid_key")
        with anyio.fail_after(60):
            async with _client(url, acme) as client:
                listed = [tool.name for tool in (await client.list_tools()).tools]
                assert "memory_write" in listed and "memory_delete_branch" not in listed  # no admin scope
                done = await client.call_tool("memory_write", {"namespace": ["notes"], "key": "k",
                                                               "value": {"text": "acme secret"}})  # fmt: skip
                assert not done.is_error and _data(done)["commit"]["author"].startswith("key:")
            async with _client(url, beta) as client:
                got = await client.call_tool("memory_get", {"namespace": ["notes"], "key": "k"})
                assert _data(got)["item"] is None  # another tenant's repository
                found = await client.call_tool("memory_search", {"query": "secret"})
                assert _data(found)["items"] == []
            async with _client(url, acme_reader) as client:
                listed = [tool.name for tool in (await client.list_tools()).tools]
                assert listed == [tool.name for tool in tools_for(_principal("read"))]
                assert "memory_list_branches" in listed and "memory_write" not in listed
                got = await client.call_tool("memory_get", {"namespace": ["notes"], "key": "k"})
                assert _data(got)["item"]["value"] == {"text": "acme secret"}
                refused_write = await client.call_tool("memory_write", {"namespace": ["n"], "key": "k", "value": {}})
                assert refused_write.is_error and "'write' scope" in refused_write.content[0].text
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=15)
    assert "API keys from" in stderr and json.dumps("x")


@pytest.mark.slow
def test_mcp_over_http_without_keys_binds_loopback_only(tmp_path: Path) -> None:
    port = _free_port()
    cmd = [str(ENGRAM), "--store", str(tmp_path / "store"), "--embedder", "hashing", "--vector-cache", "none", "mcp",
           "--transport", "http", "--host", "0.0.0.0", "--port", str(port)]  # fmt: skip
    process = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_port(process, port)
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=15)
    assert "binds to 127.0.0.1 only" in stderr and f"http://127.0.0.1:{port}/mcp" in stderr
