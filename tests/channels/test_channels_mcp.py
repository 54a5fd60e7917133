"""The MCP door for channels: the agent comes from the API key, schemas reject unknown arguments, errors are text."""

from __future__ import annotations

from typing import Any

import pytest

import engram
from engram.channels import Channels
from engram.mcp.server import call_tool
from engram.ops.access import Principal

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _key(key_id: str) -> Principal:
    return Principal("acme", frozenset({"read", "write"}), (), key_id=key_id)


async def test_mcp_channel_tools_act_as_the_keys_agent() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    hub = Channels(mem)
    hub.create_project("acme")
    for agent in ("alice", "bob"):
        hub.register_agent(agent, project="acme")
    hub.bind_key("ka", ["alice"])
    hub.bind_key("kb", ["bob"])
    alice, bob = _key("ka"), _key("kb")

    made = await call_tool(mem, "channel_create", {"name": "debugging"}, alice)
    assert not made.is_error, made.content
    assert not (await call_tool(mem, "channel_join", {"channel": "debugging"}, bob)).is_error
    sent = await call_tool(
        mem,
        "message_send",
        {
            "channel": "debugging",
            "content": "ConnectionRefusedError",
            "metadata": {"type": "debug_start"},
            "confidence": 0.6,
        },
        alice,
    )
    message: dict[str, Any] = sent.structured_content["result"]  # type: ignore[index]
    assert message["sender"] == "alice" and message["id"] == "acme:debugging#1"
    forged = await call_tool(mem, "message_send", {"channel": "debugging", "content": "x", "agent": "alice"}, bob)
    assert forged.is_error and "may act as bob only" in forged.content[0].text  # type: ignore[union-attr]
    found = await call_tool(
        mem, "message_search", {"query": "connection", "filter": {"type": "debug_start"}, "profile": "quality"}, bob
    )
    results = found.structured_content["result"]["results"]  # type: ignore[index]
    assert [m["id"] for m in results] == ["acme:debugging#1"]
    fb = await call_tool(mem, "message_feedback", {"target": "acme:debugging#1", "worked": True}, bob)
    assert fb.structured_content["result"]["confidence"] == pytest.approx(0.7)  # type: ignore[index]
    note = await call_tool(
        mem,
        "note_write",
        {
            "content": "check the container",
            "tags": ["db"],
            "confidence": 0.9,
            "breadcrumbs": [{"type": "file", "value": "compose.yml"}],
        },
        alice,
    )
    assert not note.is_error
    peek = await call_tool(mem, "note_peek", {"owner": "alice"}, bob)
    assert peek.is_error and "notes:read-all" in peek.content[0].text  # type: ignore[union-attr]
    bad = await call_tool(mem, "message_send", {"channel": "debugging", "content": "x", "confidence": 3}, alice)
    assert bad.is_error and "InvalidArguments" in bad.content[0].text  # type: ignore[union-attr]
    missing = await call_tool(mem, "message_send", {"channel": "nope", "content": "x"}, alice)
    assert missing.is_error and "ChannelNotFoundError" in missing.content[0].text  # type: ignore[union-attr]
    unbound = await call_tool(mem, "channel_list", {}, _key("kz"))
    assert unbound.is_error and "bound to no agent" in unbound.content[0].text  # type: ignore[union-attr]
    events = await call_tool(mem, "event_list", {"topics": ["message.*"]}, bob)
    topics = [e["topic"] for e in events.structured_content["result"]]  # type: ignore[index]
    assert topics == ["message.created", "message.feedback"]
    mem.close()


async def test_mcp_local_server_acts_as_its_author() -> None:
    mem = engram.open(":memory:", embedder="hashing", author="alice")
    hub = Channels(mem)
    hub.create_project("acme")
    hub.register_agent("alice", project="acme")
    made = await call_tool(
        mem,
        "channel_create",
        {"name": "c"},
    )
    assert made.structured_content["result"]["owner"] == "alice"  # type: ignore[index]
    mem.close()
