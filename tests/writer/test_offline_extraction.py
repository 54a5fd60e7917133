"""What the offline extractor keeps from hand-written conversations: absolute dates, no filler, short facts kept,
sentence boundaries, pasted logs and code skipped, turns cut by the budget never cut mid-word, paraphrases merged,
reversals superseding the older memory."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import engram
from engram import clock
from engram.store import Memory
from engram.writer import MemoryWriter, OfflineExtractor, WriterMetrics
from engram.writer.dates import resolve
from engram.writer.offline import subject_of
from engram.writer.sentences import first_person, is_filler, is_prose_line, prose_lines, split_sentences

ME = ("users", "me")


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    store = engram.open(f"sqlite:///{tmp_path / 'extract.db'}", embedder="hashing", search="local")
    yield store
    store.close()


def writer_on(mem: Memory, tmp_path: Path, **kw: Any) -> MemoryWriter:
    kw.setdefault("interval", 1)
    writer = MemoryWriter(mem, extractor=OfflineExtractor(), background=False, trace_dir=tmp_path / "traces",
                          metrics=WriterMetrics(CollectorRegistry()), **kw)  # fmt: skip
    writer.start_conversation("c", ME)
    return writer


def say(writer: MemoryWriter, *user_turns: str, reply: str = "Noted.") -> dict[str, Any]:
    """The user's turns, then one assistant reply; returns the run it made due."""
    for text in user_turns:
        writer.append("c", "user", text)
    run = writer.append("c", "assistant", reply).run
    assert run is not None and run["outcome"] in ("merged", "no_new_memories"), run
    return run


def texts(mem: Memory) -> list[str]:
    return sorted(item.value["text"] for item in mem.search(ME, limit=1000))


def test_offline_resolves_relative_dates_against_the_turn_time(mem: Memory, tmp_path: Path):
    writer = writer_on(mem, tmp_path)
    with clock.simulated(datetime(2023, 5, 8, 13, 56, tzinfo=UTC)):  # a Monday
        say(writer, "I went hiking yesterday.", "Last Friday I painted a lake.", "Two weeks ago we adopted a dog.",
            "We're going camping next month.")  # fmt: skip
    assert texts(mem) == [
        "I went hiking yesterday (7 May 2023).",
        "Last Friday (5 May 2023) I painted a lake.",
        "Two weeks ago (the week of 24 April 2023) we adopted a dog.",
        "We're going camping next month (June 2023).",
    ]


def test_dates_are_resolved_at_the_precision_said_and_never_without_a_time():
    said = int(datetime(2023, 7, 15, 9, 0, tzinfo=UTC).timestamp() * 1000)  # a Saturday
    assert (
        resolve("I joined a club last weekend.", said) == "I joined a club last weekend (the weekend of 8 July 2023)."
    )
    assert resolve("I ran a race last year and may run again.", said) == (
        "I ran a race last year (2022) and may run again."  # "may" is not May
    )
    assert resolve("We met a few days ago.", said) == "We met a few days ago (before 15 July 2023)."
    assert resolve("Last summer was hot.", said) == "Last summer (summer 2022) was hot."
    assert resolve("I went hiking yesterday.", 0) == "I went hiking yesterday."


def test_offline_drops_filler_and_keeps_short_facts(mem: Memory, tmp_path: Path):
    writer = writer_on(mem, tmp_path)
    say(writer, "I totally agree, Melanie.", "That's so cool!", "Thanks for sharing", "I love sushi.", "I'm vegan.",
        "Wow, great to hear that!", "Keep it up, you're doing great!", "Thanks, Caroline.",
        "Been reading the book you recommended.", "Sunflowers mean warmth, right?")  # fmt: skip
    assert texts(mem) == [
        "Been reading the book you recommended.",
        "I love sushi.",
        "I'm vegan.",
        "Sunflowers mean warmth.",
    ]


def test_filler_is_told_from_content():
    for filler in ("Thanks, Caroline!", "Sounds great!", "Hey Mel! Good to see you!", "Talk to you soon!", "Yes."):
        assert is_filler(filler, {"Caroline"}), filler
    for fact in ("I love sushi.", "I'm vegan.", "I ran 5k.", "My sister is a nurse."):
        assert not is_filler(fact), fact


def test_lowercase_i_is_the_pronoun_only_where_it_is_one(mem: Memory, tmp_path: Path):
    assert first_person("i went hiking with my dog") and first_person("so did i.") and first_person("i'm tired")
    for numeral in ("The fix, i.e. a restart, worked.", "(i) the first point", "You should read part i first.",
                    "He fought in World War I.", "i. first item"):  # fmt: skip
        assert not first_person(numeral), numeral
    writer = writer_on(mem, tmp_path)
    say(writer, "You should read part i of the series.", "i moved to Lyon in 2020.")
    assert texts(mem) == ["I moved to Lyon in 2020."]  # the pronoun capitalised; advice to the listener dropped
    assert mem.search(ME, limit=10)[0].value["subject"] == "home"


def test_sentences_end_at_real_boundaries():
    text = (
        "I met Dr. Smith at the clinic, e.g. for my knee. I ran 3.5 km today! "
        "My notes are at https://example.com/a.b?c=1 now. J. R. R. Tolkien is my favourite author... and Le Guin"
    )
    assert split_sentences(text) == [
        "I met Dr. Smith at the clinic, e.g. for my knee.",
        "I ran 3.5 km today!",
        "My notes are at https://example.com/a.b?c=1 now.",
        "J. R. R. Tolkien is my favourite author... and Le Guin",
    ]
    assert split_sentences("- I love tea\n- I hate coffee\nThis line is wrapped at a fixed width because the\n"
                           "writer's editor does that.") == [
        "I love tea", "I hate coffee", "This line is wrapped at a fixed width because the writer's editor does that."
    ]  # fmt: skip


def test_pasted_logs_code_tables_and_blobs_are_not_prose():
    assert not is_prose_line("2023-05-08 13:56:01,123 ERROR [worker-3] connection refused, retrying")
    assert not is_prose_line('  File "app.py", line 12, in <module>')
    assert not is_prose_line("| name | size | owner |")
    assert not is_prose_line(base64.b64encode(bytes(range(90))).decode())
    assert not is_prose_line("    for (int i = 0; i < n; i++) {")
    assert is_prose_line("I use Debian 12 on the server, and it works.")
    text = "My deploy failed.\n```python\ndef f(x):\n    return x\n```\nI prefer tabs."
    assert split_sentences("\n".join(prose_lines(text))) == ["My deploy failed.", "I prefer tabs."]


def test_an_oversized_paste_becomes_no_junk_and_nothing_is_cut_mid_word(mem: Memory, tmp_path: Path):
    # the whole paste, past the default cap (the cost-cap tests cover the cap)
    writer = writer_on(mem, tmp_path, turn_budget_tokens=300, max_input_chars=1_000_000)
    log = "\n".join(
        f"2023-05-08 13:{i // 60 % 60:02d}:{i % 60:02d},{i % 1000:03d} ERROR [worker-{i % 7}] request {i} failed: "
        f"upstream timed out after 30s, retrying with backoff" for i in range(3000)
    )  # fmt: skip
    blob = "\n".join(base64.b64encode(bytes([i % 256] * 57)).decode() for i in range(200))
    prose = " ".join(f"I visited the lovely old town number {i} with my sister." for i in range(60))
    run = say(writer, f"My deploy failed after the upgrade.\n{log}\nI use Debian 12 on the server.", blob, prose)
    assert run["steps"] > 20 and run["outcome"] == "merged"
    found = texts(mem)
    expected = {f"I visited the lovely old town number {i} with my sister." for i in range(60)}
    assert set(found) == expected | {"My deploy failed after the upgrade.", "I use Debian 12 on the server."}


def test_paraphrases_are_one_memory_in_a_run_and_across_runs(mem: Memory, tmp_path: Path):
    writer = writer_on(mem, tmp_path)
    writer.append("c", "user", "I love sushi.", message_id="u1")
    writer.append("c", "user", "I really love sushi!", message_id="u2")
    first = writer.append("c", "assistant", "Noted.", message_id="a1").run
    assert first is not None and first["added"] == 1
    (memory,) = mem.search(ME, limit=10)
    assert memory.value["text"] == "I love sushi." and set(memory.sources) == {"u1", "u2"}
    again = say(writer, "I live in Berlin now.", "Honestly, I love sushi!!")
    assert again["added"] == 1 and texts(mem) == ["I live in Berlin now.", "I love sushi."]


def test_a_reversal_supersedes_the_older_memory(mem: Memory, tmp_path: Path):
    writer = writer_on(mem, tmp_path)
    say(writer, "I live in Berlin.", "I like coffee.")
    before = {item.value["text"]: item for item in mem.search(ME, limit=10)}
    berlin, coffee = before["I live in Berlin."], before["I like coffee."]
    run = say(writer, "I moved to Munich in March.", "I don't like coffee anymore.")
    assert run["added"] == 0 and run["updated"] == 2
    assert mem.get(ME, berlin.key).value["text"] == "I moved to Munich in March."
    assert mem.get(ME, coffee.key).value["text"] == "I don't like coffee anymore."
    assert texts(mem) == ["I don't like coffee anymore.", "I moved to Munich in March."]
    assert [v.item.value["text"] for v in mem.history(ME, berlin.key)] == [
        "I moved to Munich in March.", "I live in Berlin."]  # fmt: skip


def test_subjects_that_a_later_statement_supersedes():
    assert subject_of("I live in Berlin.") == subject_of("I moved to Munich.") == "home"
    assert subject_of("I moved the couch to the attic.") is None
    assert subject_of("I like coffee.") == subject_of("I don't like coffee anymore.") == "likes coffee"
    assert subject_of("I really love the beach in summer.") == "likes beach"
    assert subject_of("My favourite colour is green.") == "my favourite colour"
    assert subject_of("The weather is nice.") is None


def test_a_reversal_finds_the_memory_it_supersedes_among_many(mem: Memory, tmp_path: Path):
    writer = writer_on(mem, tmp_path)
    say(writer, "I live in Berlin.")
    say(writer, *(f"I moved stamp album number {i} to the shelf in March." for i in range(30)))  # not a new home
    run = say(writer, "I moved to Munich in March.")
    assert run["added"] == 0 and run["updated"] == 1
    assert not [text for text in texts(mem) if "Berlin" in text] and "I moved to Munich in March." in texts(mem)
    assert len(texts(mem)) == 31


def test_each_statement_about_the_speaker_is_a_memory_with_what_goes_on_about_it(mem: Memory, tmp_path: Path):
    writer = writer_on(mem, tmp_path)
    say(writer, "I painted that lake in 2022! It's special to me. I also own a red bicycle. The frame is steel.")
    assert texts(mem) == [
        "I also own a red bicycle. The frame is steel.",
        "I painted that lake in 2022! It's special to me.",
    ]
