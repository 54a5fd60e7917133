"""The memory writer over MCP (issue #14, deliverable 8): append turns, status, runs, approve and reject."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client

import engram
from engram.mcp import build_server

pytestmark = pytest.mark.anyio
ALICE = ["users", "alice"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def call(client: Client, name: str, /, **arguments: Any) -> Any:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


async def test_turns_become_memories_through_mcp() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    async with Client(build_server(mem), mode="auto") as client:
        turns = [("user", "I moved to Lyon last month and I work as a nurse.", "m1"), ("assistant", "Noted.", "m2")]
        for role, text, message_id in turns:
            done = await call(client, "memory_append_turn", conversation_id="chat-1", target=ALICE, role=role,
                              text=text, message_id=message_id)  # fmt: skip
        assert done["decision"]["action"] == "waiting" and done["decision"]["pending"] == 1
        done = await call(client, "memory_append_turn", conversation_id="chat-1", target=ALICE, role="assistant",
                          text="Anything else?", message_id="m3")  # fmt: skip
        assert done["decision"]["action"] == "queued"  # the run happens in the background, never inside the call
        status = await call(client, "memory_writer_status", target=ALICE, wait=30)
        run = status["last_run"]
        assert run["outcome"] == "merged" and run["actions"] == 1
        assert status["pending_turns"] == 0 and status["settings"]["interval"] == 2
        runs = (await call(client, "memory_writer_runs", target=ALICE))["runs"]
        assert [r["id"] for r in runs] == [run["id"]]
        [item] = mem.search(("users", "alice"))
        assert item.sources == ("m1",)
        refused = await client.call_tool("memory_writer_reject", {"target": ALICE, "run_id": run["id"]})
        assert refused.is_error and "no review pending" in refused.content[0].text
