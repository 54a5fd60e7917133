"""Memory.context: memories as prompt text within a token budget (current facts, once, most relevant first)."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Sequence

import pytest

import engram
from engram.embed.tokens import EstimateCounter, token_counter
from engram.errors import ConfigError, InvalidInputError
from engram.store import Memory

ALICE = ("users", "alice")


def _open() -> Memory:
    return engram.open(":memory:", embedder="hashing")


def _writer_memory(text: str, subject: str, run: str) -> dict[str, str]:
    """A value shaped as the memory writer stores it (see engram.writer.extract.Workspace.write)."""
    return {"text": text, "kind": "fact", "writer_run": run, "subject": subject}


def test_context_lines_are_most_relevant_first_with_date_and_source() -> None:
    mem = _open()
    mem.put(ALICE, "home", {"text": "Alice lives in Berlin near the river", "date": "8 May, 2023"}, sources=["m1"])
    mem.put(ALICE, "pet", {"text": "Alice has a cat called Miso"}, sources=["m2", "m3"])
    mem.put(ALICE, "misc", {"text": "Alice went to a concert in Berlin"})
    block = mem.context(ALICE, "where does Alice live in Berlin?")
    hits = mem.search(ALICE, "where does Alice live in Berlin?", limit=50)
    assert [i.key for i in block.items] == [h.key for h in hits]  # the search's order
    assert [i.score for i in block.items] == [h.score for h in hits]
    lines = block.text.split("\n")
    assert lines[0] == "[8 May, 2023] Alice lives in Berlin near the river (source: m1)"
    written = mem.get(ALICE, "pet")
    assert written is not None
    day = written.updated_at.date().isoformat()  # no date field: the day it was written
    assert f"[{day}] Alice has a cat called Miso (source: m2, m3)" in lines
    assert f"[{day}] Alice went to a concert in Berlin (source: misc)" in lines  # no sources: its key
    assert [i.line for i in block.items] == lines and all(i.namespace == ALICE for i in block.items)
    assert block.mode == "hybrid" and block.degraded is None and block.tokenizer == "wordpiece:all-MiniLM-L6-v2"
    assert str(block) == block.text


def test_context_stays_within_the_budget_as_the_tokenizer_counts() -> None:
    mem = _open()
    for i in range(40):
        mem.put(ALICE, f"m{i}", {"text": f"Alice talked about hiking trip number {i} in the Alps with friends"})
    counter = token_counter("wordpiece")
    sizes = []
    for budget in (1, 15, 40, 100, 300, 5000):
        block = mem.context(ALICE, "hiking trip in the Alps", budget_tokens=budget)
        counted = counter.count_many([block.text])[0] if block.text else 0
        assert block.tokens == counted <= budget, budget
        assert sum(i.tokens for i in block.items) <= budget
        assert block.left_out == 40 - len(block.items)
        sizes.append(len(block.items))
    assert sizes[0] == 0 and sizes == sorted(sizes) and 0 < sizes[2] < sizes[4] < sizes[5] == 40


def test_context_a_line_that_does_not_fit_leaves_room_for_shorter_ones() -> None:
    mem = _open()
    mem.put(ALICE, "long", {"text": "Alice loves tea " + "and tea ceremonies in Kyoto with old friends " * 6})
    mem.put(ALICE, "short", {"text": "Alice drinks green tea"})
    block = mem.context(ALICE, "Alice loves tea ceremonies", budget_tokens=30)
    assert [i.key for i in block.items] == ["short"] and block.left_out == 1
    assert mem.search(ALICE, "Alice loves tea ceremonies")[0].key == "long"  # it did rank first


def test_context_the_newest_version_of_a_key_wins(smem: Memory) -> None:
    smem.put(ALICE, "home", {"text": "Alice lives in Berlin"})
    smem.put(ALICE, "home", {"text": "Alice lives in Munich"})
    block = smem.context(ALICE, "where does Alice live")
    assert block.text.count("Alice lives in") == 1 and "Munich" in block.text and "Berlin" not in block.text


def test_context_at_a_past_commit_shows_what_was_known_then(smem: Memory) -> None:
    smem.put(ALICE, "home", {"text": "Alice lives in Berlin"})
    then = smem.head.id
    smem.put(ALICE, "home", {"text": "Alice lives in Munich"})
    smem.put(ALICE, "job", {"text": "Alice works as a nurse in Munich"})
    smem.delete(ALICE, "home")
    now = smem.context(ALICE, "Alice lives in Munich")
    assert [i.key for i in now.items] == ["job"]
    past = smem.context(ALICE, "Alice lives in Munich", at=then)
    assert [i.key for i in past.items] == ["home"] and "Berlin" in past.text and "Munich" not in past.text
    assert smem.at(then).context(ALICE, "Alice lives in Munich") == past  # the view has the same read-back


def test_context_drops_writer_memories_replaced_on_their_subject() -> None:
    """The writer supersedes by updating a memory on the same subject; when two of its memories on one subject
    exist side by side (two runs raced), the newer one is the fact and the older one is left out."""
    mem = _open()
    mem.put(ALICE, "w1", _writer_memory("Alice lives in Berlin", "home", "run-1"))
    mem.put(ALICE, "w2", _writer_memory("Alice moved to Munich last spring", "home", "run-2"))
    mem.put(ALICE, "other", {"text": "Alice grew up in Berlin", "subject": "home"})  # not the writer's: kept
    block = mem.context(ALICE, "Alice lives in Berlin")
    keys = [i.key for i in block.items]
    assert "w1" not in keys and "w2" in keys and "other" in keys and block.superseded == 1
    ranked = [h.key for h in mem.search(ALICE, "Alice lives in Berlin")]
    assert ranked[0] == "w1" and keys[0] == "w2"  # in the place of the memory it replaced
    assert "Munich" in block.text
    only_run_1 = mem.context(ALICE, "Alice lives in Berlin", filter={"writer_run": "run-1"})
    assert [i.key for i in only_run_1.items] == ["w1"] and only_run_1.superseded == 0  # the newer one is filtered out


def test_context_shows_the_same_text_once() -> None:
    mem = _open()
    mem.put(ALICE, "a", {"text": "Alice likes  coffee"})
    mem.put(ALICE, "b", {"text": "alice likes coffee"})
    mem.put(("users", "alice", "chat"), "c", {"text": "Alice likes coffee"})
    block = mem.context(("users",), "coffee")
    assert len(block.items) == 1 and block.duplicates == 2 and block.text.lower().count("likes coffee") == 1


def test_context_of_nothing_is_an_empty_block() -> None:
    mem = _open()
    empty = mem.context(ALICE, "anything at all")
    assert empty.text == "" and empty.items == () and empty.tokens == 0 and empty.left_out == 0
    mem.put(("users", "bob"), "k", {"text": "bob likes coffee"})
    assert mem.context(ALICE, "coffee").items == ()  # other namespaces stay out


def test_context_text_of_values_without_a_text_field() -> None:
    mem = _open()
    mem.put(ALICE, "prefs", {"theme": "dark", "language": "Python\nand Rust"})
    block = mem.context(ALICE, "dark theme")
    assert block.items[0].line.endswith('{"language":"Python\\nand Rust","theme":"dark"} (source: prefs)')
    assert "\n" not in block.items[0].line


@pytest.mark.parametrize(
    ("query", "options", "message"),
    [
        ("", {}, "non-empty query"),
        ("   ", {}, "non-empty query"),
        (None, {}, "non-empty query"),
        ("q", {"budget_tokens": 0}, "budget_tokens must be an integer from 1"),
        ("q", {"budget_tokens": True}, "budget_tokens must be an integer"),
        ("q", {"budget_tokens": 10.5}, "budget_tokens must be an integer"),
        ("q", {"budget_tokens": 2_000_000}, "budget_tokens must be an integer"),
        ("q", {"candidates": 0}, "candidates must be an integer from 1 to 1000"),
        ("q", {"filter": {"$bad": 1}}, "operator"),
        ("q", {"mode": "fuzzy"}, "unknown search mode"),
    ],
)
def test_context_refuses_bad_input(query: object, options: dict[str, object], message: str) -> None:
    mem = _open()
    mem.put(ALICE, "k", {"text": "q"})
    with pytest.raises(InvalidInputError, match=message):
        mem.context(ALICE, query, **options)  # type: ignore[arg-type]


def test_context_refuses_an_unknown_tokenizer_and_a_bad_namespace() -> None:
    mem = _open()
    with pytest.raises(ConfigError, match="unknown tokenizer"):
        mem.context(ALICE, "q", tokenizer="gpt-9")
    with pytest.raises(InvalidInputError):
        mem.context(("users", ""), "q")


@pytest.mark.skipif(importlib.util.find_spec("tiktoken") is not None, reason="tiktoken is installed here")
def test_context_says_what_to_install_for_tiktoken() -> None:
    with pytest.raises(ConfigError, match="needs the tiktoken package"):
        _open().context(ALICE, "q", tokenizer="tiktoken:cl100k_base")


class _Words:
    """A counter of words, to show any counter object is used as given."""

    name = "words"

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(text.split()) for text in texts]


def test_context_counts_with_the_tokenizer_asked_for() -> None:
    mem = _open()
    mem.put(ALICE, "k", {"text": "Alice plays the violin every Sunday"})
    words = mem.context(ALICE, "violin", tokenizer=_Words())
    assert words.tokenizer == "words" and words.tokens == len(words.text.split())
    estimate = mem.context(ALICE, "violin", tokenizer="estimate")
    assert estimate.tokenizer == EstimateCounter.name and estimate.tokens == (len(estimate.text) + 3) // 4


def test_context_async_twin_returns_the_same_block() -> None:
    mem = _open()
    mem.put(ALICE, "k", {"text": "Alice plays the violin"})

    async def read() -> object:
        return await engram.AsyncMemory(mem).acontext(ALICE, "violin", budget_tokens=50)

    assert asyncio.run(read()) == mem.context(ALICE, "violin", budget_tokens=50)
