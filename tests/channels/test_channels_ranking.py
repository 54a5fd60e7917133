"""Ranking messages: recency is the send time, ``min_score`` on every search, and whether more results exist."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import CHANNEL_BACKENDS, open_memory, populate

from engram import clock
from engram.channels import Actor, Channels
from engram.errors import InvalidInputError


@pytest.fixture(params=CHANNEL_BACKENDS)
def aged(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Channels, clock.SimulatedClock]]:
    """A hub whose clock starts 60 days ago and moves only when the test says so."""
    with clock.simulated(datetime.now(UTC) - timedelta(days=60)) as sim:
        memory = open_memory(request.param, tmp_path, request)
        try:
            yield populate(Channels(memory)), sim
        finally:
            memory.close()


def test_recency_is_the_send_time_not_the_last_vote(aged: tuple[Channels, clock.SimulatedClock]) -> None:
    hub, sim = aged
    alice, bob = hub.as_agent("alice"), hub.as_agent("bob")
    alice.create_channel("debugging")
    bob.join("debugging")
    old = alice.send("debugging", "postgres connection refused: restart the pool")
    sim.advance(days=59)
    fresh = [alice.send("debugging", f"postgres connection refused again, attempt {n}") for n in range(3)]
    sim.advance(hours=2)
    bob.feedback(old.id, False)  # a vote rewrites the item: it must not make the message new
    alice.edit(old.id, content="postgres connection refused: restart the pool (edited)")
    for profile in ("recent", "balanced", "quality"):
        found = alice.search_messages("postgres connection refused", profile=profile, explain=True, limit=4)
        assert found[-1].id == old.id, (profile, [m.id for m in found])
        why, half_life = found[-1].explain, {"recent": 24, "balanced": 168, "quality": 720}[profile]
        age_hours = (sim.now() - old.created_at).total_seconds() / 3600
        assert why is not None and why["recency"] == pytest.approx(0.5 ** (age_hours / half_life), rel=1e-3)
        assert why["components"]["recency"] == pytest.approx(why["weights"]["recency"] * why["recency"])
        assert found[0].score is not None and found[-1].score is not None and found[0].score > found[-1].score
    top = alice.search_messages("postgres connection refused", profile="recent", limit=1)
    assert top[0].id in {m.id for m in fresh} and top.has_more and top.next_offset == 1
    listed = alice.search_messages(limit=4)  # without a query: newest sent first
    assert [m.id for m in listed] == [m.id for m in reversed(fresh)] + [old.id]


def test_min_score_on_message_and_note_search(alice: Actor, bob: Actor) -> None:
    alice.create_channel("debugging")
    bob.join("debugging")
    for n in range(12):
        alice.send("debugging", f"ConnectionRefusedError on port {5432 + n} while the pool restarts")
        alice.write_note(f"restart the pool after failover number {n}")
    nonsense = "zebra quantum marmalade"
    assert len(bob.search_messages(nonsense)) > 0  # without min_score even nonsense finds weak matches
    assert list(bob.search_messages(nonsense, min_score=0.3)) == []
    assert list(alice.search_my_notes(nonsense, min_score=0.3)) == []
    assert list(alice.search_notes(nonsense, min_score=0.3)) == []
    good = bob.search_messages("ConnectionRefusedError pool", min_score=0.3, limit=20)
    assert len(good) == 12 and all(m.score is not None and m.score >= 0.3 for m in good)
    assert len(alice.search_my_notes("restart pool failover", min_score=0.3, limit=20)) == 12
    with pytest.raises(InvalidInputError):
        bob.search_messages("pool", min_score=float("nan"))


def test_search_says_whether_more_results_exist(alice: Actor, bob: Actor) -> None:
    alice.create_channel("debugging")
    bob.join("debugging")
    for n in range(12):
        alice.send("debugging", f"ConnectionRefusedError on port {5432 + n}")
        alice.write_note(f"pool note {n}")
    first = bob.search_messages("ConnectionRefusedError")
    assert len(first) == 10 and first.has_more and first.next_offset == 10  # the default limit stays 10
    rest = bob.search_messages("ConnectionRefusedError", offset=first.next_offset or 0)
    assert len(rest) == 2 and not rest.has_more and rest.next_offset is None
    assert {m.id for m in first} | {m.id for m in rest} == {f"acme:debugging#{n}" for n in range(1, 13)}
    notes = alice.search_my_notes("pool note", limit=5)
    assert len(notes) == 5 and notes.has_more and notes.next_offset == 5
    assert not alice.search_my_notes("pool note", limit=12).has_more
    listed = bob.search_messages(limit=11)
    assert len(listed) == 11 and listed.has_more


def test_a_search_of_untouched_messages_reads_one_page_of_the_store(alice: Actor) -> None:
    alice.create_channel("imports")
    alice.send_many("imports", [{"content": f"postgres connection refused on replica {n}"} for n in range(80)])
    memory = alice.hub.memory
    calls: list[int] = []
    search = memory.search

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(int(kwargs.get("limit", 0)))  # type: ignore[call-overload]
        return search(*args, **kwargs)  # type: ignore[arg-type]

    memory.search = counting  # type: ignore[method-assign]
    try:
        found = alice.search_messages("postgres connection refused", profile="quality", limit=5)
    finally:
        del memory.search
    assert len(found) == 5 and found.has_more
    assert calls == [6]  # one read of limit + 1: sending then writing a message does not count as touching it
