"""Conversations live in the writer's system namespace ``_conversations``; a store written before keeps its
conversations under ``conversations`` and the writer goes on reading and appending to them there."""

from __future__ import annotations

import pytest

import engram
from engram.errors import ConflictError, PermissionDeniedError
from engram.writer import MemoryWriter, OfflineExtractor
from engram.writer.conversations import LEGACY_NAMESPACE, META, NAMESPACE


def test_new_conversations_are_a_system_namespace_hidden_from_guarded_handles() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    writer = MemoryWriter(mem.handle(system=False), extractor=OfflineExtractor(), background=False)
    writer.start_conversation("c1", ("users", "alice"))
    writer.append("c1", "user", "I live in Lyon.")
    talk = mem.handle("conversations")
    assert talk.get((NAMESPACE, "c1"), META) is not None
    guarded = talk.handle(system=False)
    assert guarded.list_namespaces() == []
    with pytest.raises(PermissionDeniedError):
        guarded.get((NAMESPACE, "c1"), "t000000001")


def test_a_conversation_written_before_stays_where_it_is() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    writer = MemoryWriter(mem, extractor=OfflineExtractor(), background=False)
    writer.start_conversation("seed", ("users", "bob"))  # makes the conversations branch
    talk = mem.handle("conversations")
    header = {"id": "old", "target": "users.alice", "parent": None, "excluded": False, "turns": 1,
              "assistant_turns": 0, "created_at": 1, "metadata": {}}  # fmt: skip
    turn = {"conversation_id": "old", "seq": 1, "role": "user", "text": "I live in Lyon.", "message_id": "old:1",
            "status": "completed", "tool_calls": [], "name": None, "created_at": 1}  # fmt: skip
    talk.put((LEGACY_NAMESPACE, "old"), META, header, index=False)
    talk.put((LEGACY_NAMESPACE, "old"), "t000000001", turn, index=False)
    writer.append("old", "assistant", "Noted.")
    assert writer.conversations.require("old").turns == 2
    assert [t.text for t in writer.conversations.turns("old", 1, 2)] == ["I live in Lyon.", "Noted."]
    assert talk.get((NAMESPACE, "old"), META) is None


def test_an_append_sent_again_with_its_message_id_is_stored_once() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    writer = MemoryWriter(mem, extractor=OfflineExtractor(), background=False)
    writer.start_conversation("c1", ("users", "alice"))
    first = writer.append("c1", "user", "I live in Lyon.", message_id="m-1")
    again = writer.append("c1", "user", "I live in Lyon.", message_id="m-1")  # the client's retry
    assert again.turn == first.turn
    assert writer.conversations.require("c1").turns == 1
    with pytest.raises(ConflictError, match="m-1"):
        writer.append("c1", "user", "I live in Paris.", message_id="m-1")
    assert writer.conversations.require("c1").turns == 1
    writer.append("c1", "user", "I live in Lyon.", message_id="m-2")  # another id: another turn
    assert writer.conversations.require("c1").turns == 2
