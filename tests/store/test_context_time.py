"""``Memory.context`` / ``acontext`` with ``when`` and ``reference_time``: the block's lines are chosen by the
memories' dates as a search's hits are; the JSON doors' range form is read into the library's."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

import engram
from engram.errors import InvalidInputError
from engram.store.timerank import when_of_json

NS = ("trips",)
REFERENCE = "2023-10-20"
#: One trip a month, May to August 2023, each to another place (distinct texts: the block keeps them all).
TRIPS = {
    "a": ("Hiking trip with Sam to the lake", "2023-05-08"),
    "b": ("Hiking trip with Sam to the coast", "2023-06-12"),
    "c": ("Hiking trip with Sam to the ridge", "2023-07-12"),
    "d": ("Hiking trip with Sam to the falls", "2023-08-20"),
}


def _filled() -> engram.Memory:
    memory = engram.open(":memory:", embedder="hashing:64")
    for key, (text, date) in TRIPS.items():
        memory.put(NS, key, {"text": text, "date": date}, index=["text"])
    return memory


def test_context_puts_the_memory_of_the_named_month_first_and_filters_a_range() -> None:
    with _filled() as memory:
        query = "hiking trip with Sam in July 2023"
        assert memory.context(NS, query, when="off").items[0].key != "c"
        timed = memory.context(NS, query, when="auto", reference_time=REFERENCE)
        assert [i.key for i in memory.context(NS, query, reference_time=REFERENCE).items] == [
            i.key for i in timed.items
        ]  # "auto" is the default
        assert timed.items[0].key == "c" and timed.text.startswith("[2023-07-12] Hiking trip with Sam to the ridge")
        assert len(timed.items) == 4  # a boost, not a filter
        ranged = memory.context(NS, "hiking trip", when=(datetime(2023, 6, 1, tzinfo=UTC), None))
        assert sorted(i.key for i in ranged.items) == ["b", "c", "d"]
        stated = memory.context(NS, "hiking trip before June 2023", when="auto", reference_time=REFERENCE)
        assert [i.key for i in stated.items] == ["a"]
        past = memory.context(NS, query, at="HEAD~3", when="auto", reference_time=REFERENCE)
        assert [i.key for i in past.items] == ["a"]  # only the first trip was written then; no window holds it
        with pytest.raises(InvalidInputError, match="reference_time"):
            memory.context(NS, query, when="auto", reference_time="not a date at all")


def test_acontext_takes_the_same_arguments() -> None:
    with _filled() as memory:
        block = asyncio.run(engram.AsyncMemory(memory).acontext(NS, "hiking trip in July 2023", when="auto",
                                                                reference_time=REFERENCE))  # fmt: skip
        assert block.items[0].key == "c"


def test_when_of_json_reads_the_doors_range() -> None:
    assert when_of_json(None) is None and when_of_json("auto") == "auto"
    assert when_of_json({"start": "2023-05-01", "end": None}) == (datetime(2023, 5, 1), None)
    assert when_of_json({"end": "2023-06-01T00:00:00Z"}) == (None, datetime(2023, 6, 1, tzinfo=UTC))
    for bad in ({}, {"start": None}, {"start": "May"}, {"start": 1}, {"from": "2023-05-01"}):
        with pytest.raises(InvalidInputError, match="when"):
            when_of_json(bad)
