"""The writer looks memories up by content: a date in the conversation never filters out the memory it should
update (a search's default ``when="auto"`` would read "since March 2023" as a range)."""

from __future__ import annotations

import engram
from engram.writer.extract import memory_notes

TARGET = ("users", "u1")


def test_memory_notes_find_a_memory_older_than_a_date_the_conversation_names() -> None:
    with engram.open(":memory:", embedder="hashing:64") as mem:
        mem.put(TARGET, "zcity", {"text": "The user lives in Berlin", "date": "2022-01-05"})
        for i in range(80):  # newer, and more than the newest-50 listing the notes add after the search
            mem.put(TARGET, f"a{i:03d}", {"text": f"note {i} about cooking pasta"})
        mem.flush_index()
        query = "I have lived in Berlin since March 2023"
        assert "zcity" not in [i.key for i in mem.search(TARGET, query, limit=50)]  # as a question: filtered
        notes = memory_notes(mem, TARGET, query, budget_tokens=4000)
        assert "zcity" in [n.key for n in notes]
