"""Searching messages and notes: filters on nested metadata, profiles, scope, `at=`, and degraded search."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import CHANNEL_BACKENDS, open_memory, populate

from engram.channels import Actor, Channels
from engram.embed import HashingEmbedder
from engram.errors import EmbedderError, InvalidInputError, NotAMemberError, PermissionDeniedError


def seed(alice: Actor, bob: Actor) -> dict[str, str]:
    alice.create_channel("debugging")
    bob.join("debugging")
    ids = {}
    ids["solved"] = alice.send("debugging", "ConnectionRefusedError connecting to postgres on port 5432",
                               metadata={"type": "debug_start", "resolution": {"status": "solved"}},
                               confidence=0.9).id  # fmt: skip
    ids["open"] = alice.send("debugging", "ConnectionRefusedError talking to redis on port 6379",
                             metadata={"type": "debug_start", "resolution": {"status": "open"}},
                             confidence=0.3).id  # fmt: skip
    ids["pattern"] = bob.send("debugging", "Pattern: connection refused means the service is not listening",
                              metadata={"type": "error_pattern", "resolution": {"status": "solved"}},
                              confidence=0.7).id  # fmt: skip
    ids["chat"] = bob.send("debugging", "lunch anyone? connection to the canteen refused").id  # no metadata
    return ids


def ids_of(results: Sequence[Any]) -> list[str]:
    return [m.id for m in results]


def test_search_nested_metadata_filter_and_quality_profile(alice: Actor, bob: Actor) -> None:
    ids = seed(alice, bob)
    spec = {"type": {"$in": ["debug_start", "error_pattern"]}, "resolution.status": "solved"}
    found = alice.search_messages("connection refused", filter=spec, profile="quality", explain=True)
    assert set(ids_of(found)) == {ids["solved"], ids["pattern"]}
    assert found[0].explain is not None and "confidence" in str(found[0].explain)
    assert found.degraded is None and found.mode == "hybrid"


def test_search_negations_keep_messages_lacking_the_field(alice: Actor, bob: Actor) -> None:
    ids = seed(alice, bob)
    found = ids_of(alice.search_messages(filter={"type": {"$ne": "debug_start"}}, limit=50))
    assert set(found) == {ids["pattern"], ids["chat"]}  # the chat has no "type": $ne keeps it (MongoDB)
    found = ids_of(alice.search_messages(filter={"resolution.status": {"$nin": ["open"]}}, limit=50))
    assert set(found) == {ids["solved"], ids["pattern"], ids["chat"]}
    found = ids_of(alice.search_messages(filter={"type": {"$regex": "^debug_"}}, limit=50))
    assert set(found) == {ids["solved"], ids["open"]}  # a real regex, not a substring match
    assert alice.search_messages(filter={"type": {"$regex": "start$x"}}) == []


def test_search_options_senders_tags_confidence_time(alice: Actor, bob: Actor) -> None:
    ids = seed(alice, bob)
    assert set(ids_of(alice.search_messages("connection", senders=["bob"]))) == {ids["pattern"], ids["chat"]}
    assert ids_of(alice.search_messages("connection", min_confidence=0.8)) == [ids["solved"]]
    assert set(ids_of(alice.search_messages(projects=["acme"], limit=50))) == set(ids.values())
    assert alice.search_messages(projects=["other"]) == []
    future = datetime.now(UTC) + timedelta(hours=1)
    assert alice.search_messages("connection", since=future) == []
    assert len(alice.search_messages("connection", until=future.isoformat(), limit=50)) == 4
    with pytest.raises(InvalidInputError):
        alice.search_messages("x", since="yesterday")
    page = alice.search_messages("connection", limit=2, offset=1)
    assert len(page) == 2 and page[0].id == ids_of(alice.search_messages("connection", limit=4))[1]


def test_search_profiles_change_the_order(alice: Actor, bob: Actor) -> None:
    seed(alice, bob)
    by_quality = alice.search_messages("connection refused port", profile="quality", limit=4)
    confidences = [m.confidence for m in by_quality]
    assert confidences[0] == max(confidences)
    with pytest.raises(InvalidInputError):
        alice.search_messages("x", profile="loudest")


def test_search_is_permission_scoped(hub: Channels, alice: Actor, bob: Actor) -> None:
    seed(alice, bob)
    alice.create_channel("secret", access="private")
    alice.send("secret", "ConnectionRefusedError in the secret channel")
    olga = hub.as_agent("olga")
    assert olga.search_messages("connection") == []  # other project's channels are out of scope
    assert all(m.channel != "acme:secret" for m in bob.search_messages("secret channel connection"))
    assert any(m.channel == "acme:secret" for m in alice.search_messages("secret channel connection"))
    with pytest.raises(Exception):  # noqa: B017  -- private: invisible (not found) to bob
        bob.search_messages("x", channels=["secret"])
    alice.create_channel("club", access="members")
    with pytest.raises(NotAMemberError):
        bob.search_messages("x", channels=["club"])


def test_search_at_a_past_version(hub: Channels, alice: Actor, bob: Actor) -> None:
    ids = seed(alice, bob)
    before = hub.memory.head.id
    alice.edit(ids["solved"], content="totally rewritten text about dns timeouts")
    late = alice.send("debugging", "ConnectionRefusedError again, after the snapshot")
    now = ids_of(alice.search_messages("ConnectionRefusedError postgres", mode="keyword", limit=10))
    then = alice.search_messages("ConnectionRefusedError postgres", mode="keyword", limit=10, at=before)
    assert ids["solved"] in ids_of(then) and late.id not in ids_of(then)
    assert ids["solved"] not in now and late.id in now
    assert alice.messages("debugging", at=before)[0].content.startswith("ConnectionRefusedError")
    assert len(alice.messages("debugging", at=before)) == 4 and len(alice.messages("debugging")) == 5


def test_notes_are_private_search_includes_tags_and_breadcrumbs(hub: Channels, alice: Actor, bob: Actor) -> None:
    note = alice.write_note(
        "restart the pool after failover", confidence=0.85, tags=["postgres", "failover"],
        breadcrumbs=[{"type": "file", "value": "src/db/pool.py"}, {"type": "commit", "value": "abc1234"},
                     {"type": "decision", "value": "retry with backoff"}, {"type": "json", "value": {"k": 1}}],
        session={"task": "incident-42"},
    )  # fmt: skip
    assert note.id == "notes:alice#1" and note.kind == "note" and note.session == {"task": "incident-42"}
    assert ids_of(alice.search_my_notes("pool.py", mode="keyword")) == [note.id]  # breadcrumb text is searched
    assert ids_of(alice.search_my_notes("failover", tags=["postgres"])) == [note.id]
    assert alice.search_my_notes("failover", tags=["postgres", "nope"]) == []
    assert ids_of(alice.search_my_notes("failover", tags=["postgres", "nope"], tags_mode="any")) == [note.id]
    assert ids_of(alice.recent_notes()) == [note.id]
    assert bob.search_notes("failover") == [] and bob.search_messages("failover") == []
    with pytest.raises(NotAMemberError):
        bob.search_notes("failover", agents=["alice"])
    with pytest.raises(PermissionDeniedError):
        bob.peek_notes("alice")
    with pytest.raises(Exception):  # noqa: B017  -- notes are invisible to others
        bob.message(note.id)
    auditor = hub.as_agent("bob", read_all_notes=True)
    cursor = hub.last_event()
    assert ids_of(auditor.peek_notes("alice")) == [note.id]
    assert [e.topic for e in hub.read_events(cursor)] == ["note.peeked"]
    with pytest.raises(InvalidInputError):
        alice.write_note("x", breadcrumbs=[{"type": "rumour", "value": "?"}])


class _Down(HashingEmbedder):
    """Embeds documents, then fails (an embedder that went down)."""

    down = False

    def embed(self, texts: Sequence[str]) -> Any:
        if self.down:
            raise EmbedderError("model server unreachable")
        return super().embed(texts)


@pytest.mark.parametrize("kind", CHANNEL_BACKENDS)
def test_search_never_drops_the_query(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    embedder = _Down()
    memory = open_memory(kind, tmp_path, request, embedder)
    try:
        hub = populate(Channels(memory))
        alice = hub.as_agent("alice")
        alice.create_channel("c")
        alice.send("c", "zebra crossing failure")
        for i in range(5):
            alice.send("c", f"newer unrelated message {i}")
        alice.search_messages("zebra")  # index while the embedder works
        embedder.down = True
        found = alice.search_messages("zebra crossing")  # a query not embedded (nor cached) before
        assert [m.content for m in found] == ["zebra crossing failure"]  # not the newest messages
        assert found.mode == "keyword" and found.degraded is not None and "unreachable" in found.degraded
    finally:
        memory.close()


def test_search_metadata_filters_pass_the_filter_conformance_cases(alice: Actor) -> None:
    from engram.testing import FILTER_CASES, FILTER_DOCS

    alice.create_channel("conformance")
    alice.send_many("conformance", [{"content": f"doc {key}", "metadata": doc} for key, doc in FILTER_DOCS.items()])
    failures = []
    for spec, expected in FILTER_CASES:
        found = alice.search_messages(channels=["conformance"], filter=spec, limit=100)
        got = sorted(m.content.removeprefix("doc ") for m in found)
        if got != expected:
            failures.append((spec, expected, got))
    assert failures == []


def test_search_rejects_every_invalid_filter(alice: Actor) -> None:
    from engram.errors import InvalidFilterError
    from engram.testing import INVALID_FILTERS

    alice.create_channel("c")
    for spec in INVALID_FILTERS:
        with pytest.raises(InvalidFilterError):
            alice.search_messages("x", filter=spec)


def test_several_tags_match_all_of_them_and_an_empty_result_says_how_to_match_any(alice: Actor) -> None:
    alice.write_note("pool exhausted under load", tags=["postgres"])
    alice.write_note("retry storm after deploy", tags=["deploy"])
    both = alice.search_my_notes(tags=["postgres", "deploy"])
    assert list(both) == [] and both.hint is not None and "tags_mode='any'" in both.hint
    anyone = alice.search_my_notes(tags=["postgres", "deploy"], tags_mode="any")
    assert len(anyone) == 2 and anyone.hint is None
    assert alice.search_my_notes(tags=["postgres"]).hint is None  # one tag: nothing to explain
    with pytest.raises(InvalidInputError, match="tags_mode must be 'all' or 'any'"):
        alice.search_my_notes(tags=["postgres"], tags_mode="or")
