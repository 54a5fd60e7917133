"""How a search is kept to the channels an agent may read (issue #13, performance): the scope is read once per
version of the store, and written as the cheapest exact filter, checked against the results."""

from __future__ import annotations

from engram.channels import Actor, Channels
from engram.channels.search import _scope


def channel_ids(results: object) -> set[str]:
    return {m.channel for m in results}  # type: ignore[attr-defined]


def test_scope_is_the_cheapest_exact_condition(hub: Channels, alice: Actor, bob: Actor) -> None:
    alice.create_channel("debugging")
    alice.create_channel("ops")
    readable = sorted(c.id for c in alice.readable())
    assert readable == ["acme:debugging", "acme:ops"]
    assert _scope(alice, readable) is None  # every channel: no condition at all
    assert _scope(alice, ["acme:ops"]) is None  # one channel: its namespace is the scope
    bob.create_channel("bobs", access="private")
    assert _scope(alice, sorted(c.id for c in alice.readable())) == {"channel": {"$nin": ["acme:bobs"]}}
    olga = hub.as_agent("olga")
    olga.create_channel("far")
    olga.create_channel("away")
    olga.create_channel("beyond")
    assert _scope(alice, readable) == {"channel": {"$in": readable}}  # fewer readable than not: list them


def test_scope_search_never_shows_unreadable_channels(hub: Channels, alice: Actor, bob: Actor) -> None:
    alice.create_channel("debugging")
    alice.create_channel("ops")
    bob.create_channel("bobs", access="private")
    for channel, who in (("debugging", alice), ("ops", alice), ("bobs", bob)):
        who.send(channel, f"ConnectionRefusedError connecting to postgres, seen in {channel}")
    found = alice.search_messages("ConnectionRefusedError postgres", limit=10)
    assert channel_ids(found) == {"acme:debugging", "acme:ops"}  # the $nin form keeps bob's private channel out
    assert channel_ids(bob.search_messages("ConnectionRefusedError postgres", limit=10)) == {
        "acme:debugging", "acme:ops", "acme:bobs"}  # fmt: skip


def test_scope_a_channel_missing_from_the_directory_is_still_kept_out(hub: Channels, alice: Actor, bob: Actor) -> None:
    """A version searched with ``at=`` may hold a channel the head does not (here: reset away); the short scope
    forms cannot name it, so the results are checked and the search redone with the exact list."""
    alice.create_channel("debugging")
    alice.create_channel("ops")
    alice.send("debugging", "ConnectionRefusedError connecting to postgres")
    base = hub.memory.head.id.hex()
    bob.create_channel("hidden", access="private")
    bob.send("hidden", "ConnectionRefusedError connecting to postgres, in bob's hidden channel")
    bob.send("hidden", "ConnectionRefusedError postgres postgres postgres")
    then = hub.memory.head.id.hex()
    hub.memory.reset(base)  # the head no longer has the hidden channel
    assert _scope(alice, sorted(c.id for c in alice.readable())) is None
    found = alice.search_messages("ConnectionRefusedError postgres", limit=10, at=then)
    assert channel_ids(found) == {"acme:debugging"}
    seen_by_bob = bob.search_messages("ConnectionRefusedError postgres", limit=10, at=then)
    assert channel_ids(seen_by_bob) == {"acme:debugging"}  # bob is not a member at the head either


def test_scope_directory_is_read_once_per_version(hub: Channels, alice: Actor, bob: Actor) -> None:
    alice.create_channel("debugging")
    first = hub.directory()
    assert hub.directory() is first  # no write: the same reading
    bob.create_channel("club", access="members")
    second = hub.directory()
    assert second is not first and "acme:club" in {c.id for c in second.channels}
    assert "acme:club" not in {c.id for c in alice.readable()}
    alice.join("club")  # a write: the next reading sees the membership
    assert "acme:club" in {c.id for c in alice.readable()}
    assert hub.directory().memberships("alice") >= {"acme:debugging", "acme:club"}
