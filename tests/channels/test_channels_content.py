"""Message and note content must have text: the library refuses empty or whitespace-only content, and so do MCP
and the CLI (HTTP: tests/channels/test_channels_http_errors.py)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

import engram
from engram.channels import Actor, Channels
from engram.cli import cli
from engram.errors import InvalidInputError
from engram.mcp.server import call_tool
from engram.ops.access import Principal

BLANK = ["", " ", "\n\t  \r\n", "\u3000"]


@pytest.mark.parametrize("content", BLANK)
def test_content_empty_is_refused_by_every_writing_call(alice: Actor, bob: Actor, content: str) -> None:
    alice.create_channel("debugging")
    fine = alice.send("debugging", "a real message")
    attempts = [
        lambda: alice.send("debugging", content),
        lambda: alice.send_many("debugging", [{"content": "ok"}, {"content": content}]),
        lambda: alice.dm("bob", content),
        lambda: alice.write_note(content),
        lambda: alice.edit(fine.id, content=content),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidInputError, match="content is empty"):
            attempt()
    assert [m.content for m in alice.messages("debugging")] == ["a real message"]
    assert alice.recent_notes() == []
    assert bob.feedback(fine.id, True, note=content).confidence > fine.confidence  # a feedback note may be empty


def test_content_empty_is_refused_over_mcp() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    hub = Channels(mem)
    hub.create_project("acme")
    hub.register_agent("alice", project="acme")
    hub.bind_key("ka", ["alice"])
    alice = Principal("acme", frozenset({"read", "write"}), (), key_id="ka")

    async def calls() -> list[tuple[bool, str]]:
        assert not (await call_tool(mem, "channel_create", {"name": "c"}, alice)).is_error
        sent = await call_tool(mem, "message_send", {"channel": "c", "content": "  "}, alice)
        note = await call_tool(mem, "note_write", {"content": ""}, alice)
        return [(r.is_error, r.content[0].text) for r in (sent, note)]  # type: ignore[union-attr]

    for is_error, text in anyio.run(calls):
        assert is_error and "content is empty" in text
    mem.close()


def test_content_empty_is_refused_by_the_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["--store", f"sqlite:///{tmp_path / 's.db'}", "--embedder", "hashing", "--vector-cache", "none"]
    for args in (["channel", "project", "acme"], ["channel", "agent", "alice", "--project", "acme"],
                 ["channel", "create", "c", "--as", "alice"]):  # fmt: skip
        assert runner.invoke(cli, [*base, *args]).exit_code == 0
    refused = runner.invoke(cli, [*base, "msg", "send", "c", " ", "--as", "alice"])
    assert refused.exit_code == 1 and "content is empty" in refused.output and "Traceback" not in refused.output
    listed = runner.invoke(cli, [*base, "msg", "ls", "c", "--as", "alice"])
    assert json.loads(listed.output) == []
