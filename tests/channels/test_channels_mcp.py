"""The MCP door for channels: the agent comes from the API key, schemas reject unknown arguments, errors are text."""

from __future__ import annotations

from typing import Any

import pytest

import engram
from engram.channels import Actor, Channels
from engram.mcp.channel_tools import CHANNEL_TOOLS
from engram.mcp.server import call_tool
from engram.ops.access import Principal
from engram.store import Memory

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _key(key_id: str) -> Principal:
    return Principal("acme", frozenset({"read", "write"}), (), key_id=key_id)


def _acme() -> tuple[Memory, Principal, Principal]:
    """A store whose hub has agents alice and bob (project acme), with the keys ka and kb bound to them."""
    mem = engram.open(":memory:", embedder="hashing")
    hub = Channels(mem)
    hub.create_project("acme")
    for agent in ("alice", "bob"):
        hub.register_agent(agent, project="acme")
    hub.bind_key("ka", ["alice"])
    hub.bind_key("kb", ["bob"])
    return mem, _key("ka"), _key("kb")


async def test_mcp_channel_tools_act_as_the_keys_agent() -> None:
    mem, alice, bob = _acme()

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


async def test_every_channel_operation_of_the_library_is_a_tool() -> None:

    mem, alice, bob = _acme()

    async def ok(name: str, args: dict[str, Any], who: Principal) -> Any:
        result = await call_tool(mem, name, args, who)
        assert not result.is_error, (name, result.content)
        return result.structured_content["result"]  # type: ignore[index]

    await ok("channel_create", {"name": "debugging"}, alice)
    await ok("channel_join", {"channel": "debugging"}, bob)
    batch = [{"content": "ConnectionRefusedError on 5432"}, {"content": "pool exhausted", "confidence": 0.7}]
    sent = await ok("message_send_many", {"channel": "debugging", "messages": batch}, alice)
    first = sent[0]["id"]
    assert (await ok("message_get", {"message_id": first}, bob))["content"] == "ConnectionRefusedError on 5432"
    edited = await ok("message_edit", {"message_id": first, "content": "ConnectionRefusedError on port 5432"}, alice)
    assert edited["content"].endswith("port 5432")
    history = await ok("message_history", {"message_id": first}, bob)
    assert [v["content"] for v in history if v][:2] == ["ConnectionRefusedError on port 5432",
                                                         "ConnectionRefusedError on 5432"]  # fmt: skip
    assert await ok("channel_unread", {"channel": "debugging"}, bob) == 2
    await ok("channel_mark_read", {"channel": "debugging"}, bob)
    assert await ok("channel_unread", {"channel": "debugging"}, bob) == 0
    assert {m["agent"] for m in await ok("channel_members", {"channel": "debugging"}, bob)} == {"alice", "bob"}
    assert (await ok("channel_mute", {"channel": "debugging"}, bob))["muted"] is True
    changed = await ok("channel_set_capabilities", {"channel": "debugging", "member": "bob",
                                                    "capabilities": ["send", "leave"]}, alice)  # fmt: skip
    assert sorted(changed["capabilities"]) == ["leave", "send"]
    assert (await ok("agent_update_profile", {"status": "on call"}, bob))["status"] == "on call"
    found = await ok("message_search", {"query": "pool", "mode": "keyword", "projects": ["acme"]}, bob)
    assert [m["id"] for m in found["results"]] == [sent[1]["id"]] and found["mode"] == "keyword"
    await ok("message_delete", {"message_id": sent[1]["id"]}, alice)
    assert (await ok("message_search", {"query": "pool", "mode": "keyword"}, bob))["results"] == []
    assert (await ok("channel_archive", {"channel": "debugging"}, alice))["archived"] is True
    # every operation of an agent in the library has its tool (hub administration is the admin door's)
    tools = {"archive": "channel_archive", "create_channel": "channel_create", "delete": "message_delete",
             "detect_patterns": "pattern_detect", "dm": "message_direct", "edit": "message_edit",
             "events": "event_list", "feedback": "message_feedback", "invite": "channel_invite",
             "join": "channel_join", "leave": "channel_leave", "list_agents": "agent_list",
             "list_channels": "channel_list", "mark_read": "channel_mark_read", "members": "channel_members",
             "message": "message_get", "message_history": "message_history", "messages": "message_list",
             "mute": "channel_mute", "peek_notes": "note_peek", "recent_notes": "note_recent",
             "search_messages": "message_search", "search_my_notes": "note_search", "search_notes": "note_search",
             "send": "message_send", "send_many": "message_send_many", "set_capabilities": "channel_set_capabilities",
             "unread": "channel_unread", "update_profile": "agent_update_profile",
             "write_note": "note_write"}  # fmt: skip
    helpers = {"can_read", "in_scope", "may_see", "member", "notes_channel", "post", "readable",
               "readable_channel", "resolve", "subscribe", "wants"}  # fmt: skip
    public = {n for n in dir(Actor) if not n.startswith("_") and callable(getattr(Actor, n))}
    assert public == set(tools) | helpers, sorted(public ^ (set(tools) | helpers))
    assert set(tools.values()) <= set(CHANNEL_TOOLS), sorted(set(tools.values()) - set(CHANNEL_TOOLS))
