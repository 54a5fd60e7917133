"""The channels model: channels, membership, DMs, messages, edits, deletes, permissions and bad input."""

from __future__ import annotations

import pytest

from engram.channels import Actor, Channels
from engram.channels import _layout as layout
from engram.errors import (
    AgentNotFoundError,
    ChannelArchivedError,
    ChannelExistsError,
    ChannelNotFoundError,
    ContentTooLargeError,
    DirectMessageBlockedError,
    InvalidChannelNameError,
    InvalidConfidenceError,
    InvalidFilterError,
    InvalidInputError,
    MessageNotFoundError,
    NotAMemberError,
    PermissionDeniedError,
)


def test_channel_create_send_and_read_back(alice: Actor, bob: Actor) -> None:
    channel = alice.create_channel("debugging", description="errors and fixes")
    assert channel.id == "acme:debugging" and channel.scope == "project" and channel.owner == "alice"
    bob.join("debugging")
    first = alice.send("debugging", "hello @bob", metadata={"type": "greeting", "nested": {"x": 1}}, confidence=0.8)
    second = bob.send("debugging", "hi", reply_to=first.id)
    assert first.id == "acme:debugging#1" and first.mentions == ("bob",) and first.confidence == 0.8
    assert second.thread == first.id and second.reply_to == first.id
    read = alice.messages("debugging")
    assert [m.content for m in read] == ["hello @bob", "hi"]
    assert read[0].metadata == {"type": "greeting", "nested": {"x": 1}}
    assert alice.messages("debugging", after=1)[0].id == second.id
    assert alice.message(first.id).sender == "alice"


def test_channel_missing_confidence_is_the_one_default(alice: Actor) -> None:
    alice.create_channel("c")
    assert alice.send("c", "no confidence").confidence == layout.DEFAULT_CONFIDENCE == 0.5


def test_channel_each_operation_is_one_commit_with_its_event(hub: Channels, alice: Actor) -> None:
    alice.create_channel("c")
    before = hub.memory.head.id
    cursor = hub.last_event()
    sent = alice.send("c", "one commit")
    assert hub.memory.head.parents == (before,)
    events = hub.read_events(cursor)
    assert [e.topic for e in events] == ["message.created"] and events[0].message == sent.id


def test_channel_names_follow_the_rules(alice: Actor) -> None:
    for bad in ("Debugging", "has space", "-lead", "trail-", "x" * 81, "", "a.b", 7):
        with pytest.raises(InvalidChannelNameError):
            alice.create_channel(bad)  # type: ignore[arg-type]
    assert alice.create_channel("x" * 80).name == "x" * 80
    alice.create_channel("dup")
    with pytest.raises(ChannelExistsError):
        alice.create_channel("dup")


def test_channel_scope_and_access_decide_who_reads(hub: Channels, alice: Actor, bob: Actor) -> None:
    olga, gus = hub.as_agent("olga"), hub.as_agent("gus")
    alice.create_channel("open-one")
    alice.create_channel("closed", access="members")
    alice.create_channel("secret", access="private")
    alice.send("open-one", "visible to acme")
    assert [m.content for m in bob.messages("open-one")] == ["visible to acme"]  # open: readable in scope
    with pytest.raises(ChannelNotFoundError):
        olga.messages("acme:open-one")  # another project: out of scope, and not a member
    with pytest.raises(NotAMemberError):
        bob.messages("closed")
    bob.join("closed")
    assert bob.messages("closed") == []
    with pytest.raises(ChannelNotFoundError):
        bob.resolve("secret")  # private channels are invisible to non-members
    with pytest.raises(ChannelNotFoundError):
        bob.join("acme:secret")
    alice.invite("secret", "gus")
    assert gus.messages("acme:secret") == []
    with pytest.raises(NotAMemberError):
        bob.send("open-one", "not joined yet")


def test_channel_capabilities_archive_and_leave(alice: Actor, bob: Actor) -> None:
    alice.create_channel("c", access="members")
    bob.join("c")
    with pytest.raises(NotAMemberError):
        bob.archive("c")  # no manage capability
    alice.set_capabilities("c", "bob", ["leave"])
    with pytest.raises(NotAMemberError):
        bob.send("c", "cannot send any more")
    with pytest.raises(InvalidInputError):
        alice.set_capabilities("c", "bob", ["fly"])
    alice.archive("c")
    with pytest.raises(ChannelArchivedError):
        alice.send("c", "archived")
    bob.leave("c")
    assert [m.agent for m in alice.members("c")] == ["alice"]


def test_channel_default_channels_are_joined_with_opt_out(hub: Channels, alice: Actor) -> None:
    alice.create_channel("general", scope="global", default=True)
    assert {m.agent for m in alice.members("general")} == {"alice", "bob", "gus", "olga"}
    hub.register_agent("newbie", project="acme")
    hub.register_agent("loner", project="acme", opt_out=["global:general"])
    members = {m.agent for m in alice.members("general")}
    assert "newbie" in members and "loner" not in members
    bob = hub.as_agent("bob")
    bob.leave("general")
    assert "global:general" in hub.agent("bob").opted_out


def test_channel_dm_policies(hub: Channels, alice: Actor, bob: Actor) -> None:
    sent = alice.dm("olga", "cross-project hello")  # agents of different projects may DM
    assert sent.channel == "dm:alice+olga"
    assert [m.content for m in hub.as_agent("olga").messages("dm:alice+olga")] == ["cross-project hello"]
    with pytest.raises(ChannelNotFoundError):
        bob.messages("dm:alice+olga")
    hub.as_agent("gus").update_profile(dm_policy="restricted", allow=["bob"])
    with pytest.raises(DirectMessageBlockedError):
        alice.dm("gus", "hi")
    assert bob.dm("gus", "allowed").channel == "dm:bob+gus"
    hub.as_agent("olga").update_profile(block=["alice"])
    with pytest.raises(DirectMessageBlockedError):
        alice.dm("olga", "blocked now")
    with pytest.raises(AgentNotFoundError):
        alice.dm("nobody", "hi")


def test_channel_edits_are_history_and_deletes_are_soft(hub: Channels, alice: Actor, bob: Actor) -> None:
    alice.create_channel("c")
    bob.join("c")
    sent = alice.send("c", "old text about kafka")
    with pytest.raises(NotAMemberError):
        bob.edit(sent.id, content="not mine")
    alice.edit(sent.id, content="new text about redis")
    assert alice.message(sent.id).content == "new text about redis" and alice.message(sent.id).edited
    history = alice.message_history(sent.id)
    assert [m.content for m in history if m] == ["new text about redis", "old text about kafka"]
    assert alice.search_messages("kafka", mode="keyword") == []  # the index follows the edit
    assert [m.id for m in alice.search_messages("redis", mode="keyword")] == [sent.id]
    alice.delete(sent.id)
    assert alice.messages("c") == [] and alice.search_messages("redis", mode="keyword") == []
    assert alice.message(sent.id).deleted
    with pytest.raises(MessageNotFoundError):
        alice.edit(sent.id, content="gone")


def test_channel_read_cursor_is_written(hub: Channels, alice: Actor, bob: Actor) -> None:
    alice.create_channel("c")
    bob.join("c")
    for i in range(3):
        alice.send("c", f"m{i}")
    assert bob.unread("c") == 3
    bob.mark_read("c", 2)
    assert bob.unread("c") == 1
    item = hub.memory.get(layout.members_ns("acme:c"), "bob")
    assert item is not None and item.value["read"] == 2
    with pytest.raises(InvalidInputError):
        bob.mark_read("c", 9)


def test_channel_mentions_must_name_agents(alice: Actor) -> None:
    alice.create_channel("c")
    assert alice.send("c", "mail me at x@y.com, @bob and @gus").mentions == ("bob", "gus")
    with pytest.raises(AgentNotFoundError):
        alice.send("c", "@nobody look")


def test_channel_bad_input_writes_nothing(hub: Channels, alice: Actor) -> None:
    alice.create_channel("c")
    head = hub.memory.head.id
    cases = [
        (ChannelNotFoundError, lambda: alice.send("nope", "x")),
        (InvalidConfidenceError, lambda: alice.send("c", "x", confidence=1.5)),
        (InvalidConfidenceError, lambda: alice.send("c", "x", confidence=True)),
        (InvalidConfidenceError, lambda: alice.send("c", "x", confidence=float("nan"))),
        (ContentTooLargeError, lambda: alice.send("c", "x" * 2_001)),
        (ContentTooLargeError, lambda: alice.send("c", "x", metadata={"blob": "y" * 40_000})),
        (InvalidInputError, lambda: alice.send("c", "x", metadata=["not", "an", "object"])),  # type: ignore[arg-type]
        (InvalidFilterError, lambda: alice.search_messages("x", filter={"a": {"$bogus": 1}})),
        (InvalidFilterError, lambda: alice.search_messages("x", filter={"$where": "1"})),
        (MessageNotFoundError, lambda: alice.send("c", "x", reply_to="acme:c#99")),
        (InvalidInputError, lambda: alice.send("c", "x", reply_to="other:c#1")),
        (InvalidInputError, lambda: alice.message("no-hash")),
        (AgentNotFoundError, lambda: hub.as_agent("ghost")),
        (InvalidChannelNameError, lambda: hub.create_project("global")),
        (InvalidInputError, lambda: alice.update_profile(dm_policy="sometimes")),
        (InvalidInputError, lambda: alice.update_profile(nickname="al")),
        (AgentNotFoundError, lambda: alice.update_profile(allow=["ghost"])),
        (InvalidInputError, lambda: alice.detect_patterns("c", threshold=2)),
    ]
    for error, call in cases:
        with pytest.raises(error):
            call()
    assert hub.memory.head.id == head
    assert alice.messages("c") == []


def test_channel_errors_are_in_the_hierarchy() -> None:
    assert issubclass(NotAMemberError, PermissionDeniedError)
    assert issubclass(DirectMessageBlockedError, PermissionDeniedError)
    assert issubclass(ContentTooLargeError, ValueError)
    assert issubclass(ChannelNotFoundError, LookupError)


def test_channel_list_channels_and_agents(hub: Channels, alice: Actor, bob: Actor) -> None:
    alice.create_channel("open-one")
    alice.create_channel("mem", access="members")
    alice.create_channel("priv", access="private")
    hub.register_agent("hidden", project="other", discoverability="private")
    assert {c.id for c in bob.list_channels()} == {"acme:open-one", "acme:mem"}
    assert {c.id for c in alice.list_channels()} == {"acme:open-one", "acme:mem", "acme:priv"}
    assert "hidden" not in {a.id for a in bob.list_agents()}
    assert "hidden" in {a.id for a in hub.as_agent("hidden").list_agents()}


def test_channel_concurrent_writers_lose_nothing(hub: Channels, alice: Actor) -> None:
    import threading

    alice.create_channel("busy")
    cursor = hub.last_event()
    others = [Channels(hub.memory.handle()).as_agent("alice") for _ in range(3)]  # separate locks: real races

    def send(actor: Actor, n: int) -> None:
        for i in range(8):
            actor.send("busy", f"writer {n} message {i}")

    threads = [threading.Thread(target=send, args=(a, n)) for n, a in enumerate(others)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    messages = alice.messages("busy", limit=100)
    assert sorted(m.number for m in messages) == list(range(1, 25))
    assert len({m.content for m in messages}) == 24
    assert [e.seq for e in hub.read_events(cursor, limit=1000)] == list(range(cursor + 1, cursor + 25))


def test_channel_send_many_is_one_commit_all_or_nothing(hub: Channels, alice: Actor) -> None:
    alice.create_channel("bulk")
    before = hub.memory.head.id
    sent = alice.send_many("bulk", [{"content": f"m{i}", "metadata": {"i": i}} for i in range(5)])
    assert [m.number for m in sent] == [1, 2, 3, 4, 5] and hub.memory.head.parents == (before,)
    head = hub.memory.head.id
    with pytest.raises(InvalidConfidenceError):
        alice.send_many("bulk", [{"content": "fine"}, {"content": "bad", "confidence": 7}])
    assert hub.memory.head.id == head and len(alice.messages("bulk")) == 5
