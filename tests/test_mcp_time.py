"""Questions about time over MCP: ``when`` and ``reference_time`` on memory_search and memory_context rank by the
memories' dates and filter by a range; a bad value is a tool error, never a crash."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

import engram
from engram.mcp import build_server
from engram.store import Memory

pytestmark = pytest.mark.anyio

NS = ["trips"]
REFERENCE = "2023-10-20"
TEXT = "Went hiking in the hills with Sam"
DATES = {"a": "1:56 pm on 8 May, 2023", "b": "2023-06-12", "c": "12 July, 2023", "d": "2023-08-20T09:00:00Z"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def trips() -> Iterator[Memory]:
    with engram.open(":memory:", embedder="hashing:64") as memory:
        for key, date in DATES.items():
            memory.put(tuple(NS), key, {"text": TEXT, "date": date}, index=["text"])
        yield memory


async def _call(client: Client, tool: str, **arguments: Any) -> Any:
    return await client.call_tool(tool, {"namespace": NS, "query": "hiking in the hills in July 2023", **arguments})


def _keys(result: Any) -> list[str]:
    assert not result.is_error, result.content
    return [item["key"] for item in result.structured_content["items"]]


async def test_memory_search_ranks_and_filters_by_time(trips: Memory) -> None:
    async with Client(build_server(trips)) as client:
        assert _keys(await _call(client, "memory_search", when="off")) == ["a", "b", "c", "d"]
        assert _keys(await _call(client, "memory_search", reference_time=REFERENCE))[0] == "c"  # "auto": the default
        assert _keys(await _call(client, "memory_search", when="auto", reference_time=REFERENCE)) == [
            "c",
            "b",
            "d",
            "a",
        ]
        yesterday = await _call(client, "memory_search", query="hiking yesterday", when="auto",
                                reference_time="2023-06-13T10:00:00Z")  # fmt: skip
        assert _keys(yesterday)[0] == "b"
        stated = await _call(client, "memory_search", query="hiking since August 2023", when="auto",
                             reference_time=REFERENCE)  # fmt: skip
        assert _keys(stated) == ["d"]
        ranged = await _call(client, "memory_search", query="hiking", when={"start": "2023-05-01", "end": "2023-06-30"})
        assert _keys(ranged) == ["a", "b"]
        explained = await _call(client, "memory_search", when="auto", reference_time=REFERENCE, explain=True)
        assert explained.structured_content["items"][0]["explain"]["time"]["match"] == 1.0


async def test_memory_context_chooses_its_lines_by_time(trips: Memory) -> None:
    async with Client(build_server(trips)) as client:
        plain = await _call(client, "memory_context", when="off")
        assert plain.structured_content["text"] == f"[1:56 pm on 8 May, 2023] {TEXT} (source: a)"
        timed = await _call(client, "memory_context", when="auto", reference_time=REFERENCE)
        assert not timed.is_error, timed.content
        assert timed.structured_content["text"] == f"[12 July, 2023] {TEXT} (source: c)"
        ranged = await _call(client, "memory_context", when={"start": "2023-08-01", "end": None})
        assert [i["key"] for i in ranged.structured_content["items"]] == ["d"]


@pytest.mark.parametrize("tool", ["memory_search", "memory_context"])
async def test_bad_time_values_are_tool_errors(trips: Memory, tool: str) -> None:
    async with Client(build_server(trips)) as client:
        for arguments, kind in (
            ({"when": "next blue moon"}, "InvalidInputError"),
            ({"when": {"start": "soon"}}, "InvalidInputError"),
            ({"when": {}}, "InvalidInputError"),
            ({"when": "auto", "reference_time": "not a date at all"}, "InvalidInputError"),
            ({"when": 5}, "InvalidArguments"),
            ({"when": {"start": "2023-05-01", "until": "2023-06-01"}}, "InvalidArguments"),
            ({"reference_time": 20231020}, "InvalidArguments"),
        ):
            result = await _call(client, tool, query="hiking", **arguments)
            assert result.is_error, (arguments, result.content)
            assert result.structured_content["error"]["type"] == kind, (arguments, result.structured_content)
