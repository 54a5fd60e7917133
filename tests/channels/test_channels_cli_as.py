"""``--as`` of `engram channel`, `engram msg` and `engram note`: before the subcommand, after it, or ENGRAM_AGENT."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from engram.cli import cli


@pytest.fixture
def run(tmp_path: Path) -> Any:
    """Runs `engram` on a store with project acme, agents alice and bob, and channel acme:c (alice's)."""
    runner = CliRunner()
    base = ["--store", f"sqlite:///{tmp_path / 's.db'}", "--embedder", "hashing", "--vector-cache", "none"]

    def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
        return runner.invoke(cli, [*base, *args], env=env or {"ENGRAM_AGENT": ""})

    assert invoke("channel", "project", "acme").exit_code == 0
    for agent in ("alice", "bob"):
        assert invoke("channel", "agent", agent, "--project", "acme").exit_code == 0
    assert invoke("channel", "create", "c", "--as", "alice").exit_code == 0
    return invoke


def test_cli_as_before_the_subcommand(run: Any) -> None:
    joined = run("channel", "--as", "bob", "join", "c")
    assert joined.exit_code == 0, joined.output
    sent = run("msg", "--as", "bob", "send", "c", "hello from bob")
    assert sent.exit_code == 0, sent.output
    assert json.loads(sent.output)["sender"] == "bob"
    noted = run("note", "--as", "alice", "write", "remember the pool")
    assert noted.exit_code == 0 and json.loads(noted.output)["sender"] == "alice"
    listed = json.loads(run("msg", "--as", "alice", "ls", "c").output)
    assert [(m["sender"], m["content"]) for m in listed] == [("bob", "hello from bob")]


def test_cli_as_after_the_subcommand_wins(run: Any) -> None:
    assert run("channel", "join", "c", "--as", "bob").exit_code == 0
    sent = run("msg", "--as", "alice", "send", "c", "hi", "--as", "bob")
    assert sent.exit_code == 0 and json.loads(sent.output)["sender"] == "bob"


def test_cli_as_from_the_environment(run: Any) -> None:
    sent = run("msg", "send", "c", "from the environment", env={"ENGRAM_AGENT": "alice"})
    assert sent.exit_code == 0, sent.output
    assert json.loads(sent.output)["sender"] == "alice"


def test_cli_as_missing_is_a_usage_error(run: Any) -> None:
    missing = run("msg", "send", "c", "nobody")
    assert missing.exit_code == 2 and "--as" in missing.output and "Traceback" not in missing.output
