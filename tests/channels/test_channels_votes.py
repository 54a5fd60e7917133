"""Votes on messages: steps per kind of vote set per hub, one vote per agent, and who may not vote."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

import engram
from engram.channels import FEEDBACK_STEPS, Actor, Channels
from engram.errors import InvalidInputError, MessageNotFoundError, NotAMemberError, PermissionDeniedError
from engram.mcp.server import call_tool
from engram.server import ServerConfig, create_app


def test_feedback_steps_are_set_per_hub(hub: Channels, alice: Actor, bob: Actor) -> None:
    assert dict(FEEDBACK_STEPS) == {"up": 0.1, "down": -0.1}
    alice.create_channel("c")
    bob.join("c")
    carol = hub.as_agent(hub.register_agent("carol", project="acme").id)
    fix = alice.send("c", "restart the connection pool", confidence=0.6)
    flow = Channels(hub.memory, feedback_steps={"up": 0.1, "down": -0.2})  # the same store, the flow's steps
    bob_, carol_ = flow.as_agent("bob"), flow.as_agent("carol")
    assert bob_.feedback(fix.id, False).confidence == pytest.approx(0.4)
    assert bob_.feedback(fix.id, False).confidence == pytest.approx(0.4)  # one vote per agent
    assert carol_.feedback(fix.id, True).confidence == pytest.approx(0.5)
    assert bob_.feedback(fix.id, True).confidence == pytest.approx(0.8)  # bob changed his mind
    assert carol.feedback(fix.id, False).confidence == pytest.approx(0.6)  # the default hub: +0.1 and -0.1
    downs = Channels(hub.memory, feedback_steps={"down": -0.3})  # a kind left out keeps its default
    assert downs.feedback_steps == {"up": 0.1, "down": -0.3}
    assert downs.as_agent("carol").feedback(fix.id, False).confidence == pytest.approx(0.4)
    for bad in ({"up": -0.1}, {"down": 0.2}, {"sideways": 0.1}, {"up": "big"}, {"down": -1.5}, {"up": True}):
        with pytest.raises(InvalidInputError, match="feedback_steps"):
            Channels(hub.memory, feedback_steps=bad)  # type: ignore[dict-item]


def test_no_vote_on_ones_own_message_nor_on_one_you_cannot_read(hub: Channels, alice: Actor, bob: Actor) -> None:
    alice.create_channel("c")
    bob.join("c")
    mine = alice.send("c", "my own fix", confidence=0.6)
    with pytest.raises(PermissionDeniedError, match="own message"):
        alice.feedback(mine.id, True)
    assert alice.message(mine.id).confidence == 0.6 and alice.message(mine.id).feedback == {}
    note = alice.write_note("my own idea", confidence=0.5)
    assert alice.feedback(note.id, True).confidence == pytest.approx(0.6)  # one's own notes: yes
    alice.create_channel("club", access="members")
    secret = alice.send("club", "members only")
    with pytest.raises(NotAMemberError):
        bob.feedback(secret.id, False)
    olga = hub.as_agent("olga")  # another project's agent: acme's open channel is out of its scope
    with pytest.raises(NotAMemberError):
        olga.feedback(mine.id, False)
    with pytest.raises(MessageNotFoundError):
        bob.feedback(note.id, True)
    assert alice.message(secret.id).feedback == {} and alice.message(mine.id).feedback == {}


def test_http_and_mcp_refuse_own_and_unreadable_votes() -> None:
    with TestClient(create_app(ServerConfig(store=":memory:", embedder="hashing"))) as client:
        client.post("/v1/projects", json={"id": "acme"})
        client.post("/v1/projects", json={"id": "other"})
        for agent, project in (("alice", "acme"), ("bob", "acme"), ("olga", "other")):
            client.post("/v1/agents", json={"id": agent, "project": project})
        alice, bob, olga = ({"X-Engram-Agent": a} for a in ("alice", "bob", "olga"))
        client.post("/v1/channels", json={"name": "c"}, headers=alice)
        client.post("/v1/channels", json={"name": "club", "access": "members"}, headers=alice)
        client.post("/v1/channels/c/messages", json={"content": "a fix", "confidence": 0.6}, headers=alice)
        client.post("/v1/channels/club/messages", json={"content": "members only"}, headers=alice)
        for who, mid, code in ((alice, "acme:c%231", "forbidden"), (bob, "acme:club%231", "not_a_member"),
                               (olga, "acme:c%231", "not_a_member")):  # fmt: skip
            refused = client.post(f"/v1/messages/{mid}/feedback", json={"worked": False}, headers=who)
            assert refused.status_code == 403 and refused.json()["error"]["code"] == code, refused.text
        own = client.post("/v1/messages/acme:c%231/feedback", json={"worked": True}, headers=alice)
        assert "own message" in own.json()["error"]["message"]
        voted = client.post("/v1/messages/acme:c%231/feedback", json={"worked": True}, headers=bob)
        assert voted.status_code == 200 and voted.json()["confidence"] == pytest.approx(0.7)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_refuses_a_vote_on_ones_own_message(anyio_backend: str) -> None:
    mem = engram.open(":memory:", embedder="hashing", author="alice")
    hub = Channels(mem)
    hub.create_project("acme")
    alice = hub.as_agent(hub.register_agent("alice", project="acme").id)
    hub.register_agent("bob", project="acme")
    alice.create_channel("club", access="members")
    mine = alice.send("club", "a fix", confidence=0.6)
    own = await call_tool(mem, "message_feedback", {"target": mine.id, "worked": True})
    assert own.is_error and "own message" in str(own.content)
    unread = await call_tool(mem, "message_feedback", {"target": mine.id, "worked": True, "agent": "bob"})
    assert unread.is_error and "not a member" in str(unread.content)
    assert alice.message(mine.id).confidence == 0.6
    mem.close()


def test_metadata_confidence_is_the_message_confidence(hub: Channels, alice: Actor, bob: Actor) -> None:
    alice.create_channel("c")
    bob.join("c")
    sure = alice.send("c", "restart the pool", metadata={"confidence": 0.99, "type": "fix"})
    assert sure.confidence == 0.99 and sure.metadata == {"confidence": 0.99, "type": "fix"}
    assert [m.id for m in bob.search_messages("restart pool", min_confidence=0.95)] == [sure.id]
    assert alice.send("c", "both", confidence=0.7, metadata={"confidence": 0.7}).confidence == 0.7
    assert alice.send("c", "plain").confidence == 0.5
    assert bob.dm("alice", "psst", metadata={"confidence": 0.2}).confidence == 0.2
    assert alice.write_note("idea", metadata={"confidence": 0.8}).confidence == 0.8
    assert alice.send_many("c", [{"content": "bulk", "metadata": {"confidence": 0.3}}])[0].confidence == 0.3
    for bad in ({"confidence": 1.7}, {"confidence": "high"}):
        with pytest.raises(InvalidInputError, match=r"metadata\.confidence"):
            alice.send("c", "wrong", metadata=bad)
    with pytest.raises(InvalidInputError, match="disagree"):
        alice.send("c", "two answers", confidence=0.4, metadata={"confidence": 0.9})
    edited = alice.edit(sure.id, metadata={"confidence": 0.6})
    assert edited.confidence == 0.6 and bob.feedback(sure.id, True).confidence == pytest.approx(0.7)


def test_http_send_honours_metadata_confidence() -> None:
    with TestClient(create_app(ServerConfig(store=":memory:", embedder="hashing"))) as client:
        client.post("/v1/projects", json={"id": "acme"})
        client.post("/v1/agents", json={"id": "alice", "project": "acme"})
        me = {"X-Engram-Agent": "alice"}
        client.post("/v1/channels", json={"name": "c"}, headers=me)
        sent = client.post("/v1/channels/c/messages", json={"content": "x", "metadata": {"confidence": 0.99}},
                           headers=me)  # fmt: skip
        assert sent.status_code == 201 and sent.json()["confidence"] == 0.99
        bad = client.post("/v1/channels/c/messages", json={"content": "x", "metadata": {"confidence": 1.7}},
                          headers=me)  # fmt: skip
        assert bad.status_code == 422 and "metadata.confidence" in bad.json()["error"]["message"]
