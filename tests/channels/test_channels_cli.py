"""The CLI door for channels: `engram channel`, `engram msg`, `engram note` (one library call each)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from engram.cli import cli


def test_cli_channels_round_trip(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["--store", f"sqlite:///{tmp_path / 's.db'}", "--embedder", "hashing", "--vector-cache", "none"]

    def run(*args: str) -> object:
        result = runner.invoke(cli, [*base, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    run("channel", "project", "acme")
    run("channel", "agent", "alice", "--project", "acme")
    run("channel", "agent", "bob", "--project", "acme")
    assert run("channel", "create", "debugging", "--as", "alice")["id"] == "acme:debugging"  # type: ignore[index]
    run("channel", "join", "debugging", "--as", "bob")
    sent = run(
        "msg",
        "send",
        "debugging",
        "ConnectionRefusedError on 5432",
        "--metadata",
        '{"type": "debug_start", "resolution": {"status": "solved"}}',
        "--confidence",
        "0.7",
        "--as",
        "alice",
    )
    assert sent["id"] == "acme:debugging#1"  # type: ignore[index]
    found = run("msg", "search", "connection", "--filter", '{"resolution.status": "solved"}', "--as", "bob")
    assert [m["id"] for m in found["results"]] == ["acme:debugging#1"]  # type: ignore[index]
    assert run("msg", "feedback", "acme:debugging#1", "--worked", "--as", "bob")["confidence"] == 0.8  # type: ignore[index]
    run("note", "write", "check the container", "--tag", "db", "--breadcrumb", "file=compose.yml", "--as", "alice")
    notes = run("note", "search", "compose", "--as", "alice")
    assert len(notes["results"]) == 1  # type: ignore[index]
    assert run("note", "recent", "--as", "bob") == []
    assert [e["topic"] for e in run("msg", "events", "--topic", "message.*", "--as", "bob")] == [  # type: ignore[union-attr]
        "message.created",
        "message.feedback",
    ]
    bad = runner.invoke(cli, [*base, "msg", "send", "nope", "x", "--as", "alice"])
    assert bad.exit_code == 1 and "Traceback" not in bad.output and "nope" in bad.output
