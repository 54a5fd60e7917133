"""``engram writer``: the CLI door of the memory writer (issue #14, deliverable 8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import engram
from engram.cli import cli
from engram.writer.state import Lease, StateStore, WriterState


@pytest.fixture
def run(tmp_path: Path):  # type: ignore[no-untyped-def]
    runner = CliRunner()
    base = ["--store", str(tmp_path / "store"), "--embedder", "hashing", "--vector-cache", "none"]

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, [*base, *args], obj={})
        assert not result.exception or isinstance(result.exception, SystemExit), result.exception
        return result.exit_code, result.output

    return invoke


def _chat(run, *writer_options: str) -> None:  # type: ignore[no-untyped-def]
    w = ["writer", *writer_options]
    assert run(*w, "append", "chat-1", "user", "I moved to Lyon last month and I work as a nurse.",
               "--target", "users/alice", "--message-id", "m1")[0] == 0  # fmt: skip
    assert "1 of 2" in run(*w, "append", "chat-1", "assistant", "Noted, Lyon it is.", "--message-id", "m2")[1]
    run(*w, "append", "chat-1", "user", "My favourite editor is Vim and I use it every day.", "--message-id", "m3")


def test_append_runs_the_writer_every_interval_and_memories_cite_their_messages(run) -> None:  # type: ignore[no-untyped-def]
    _chat(run)
    code, out = run("writer", "append", "chat-1", "assistant", "Great.", "--message-id", "m4")
    assert code == 0 and "merged: 2 actions" in out
    items = json.loads(run("search", "users/alice", "--json")[1])["items"]
    assert sorted(tuple(i["sources"]) for i in items) == [("m1",), ("m3",)]
    status = json.loads(run("writer", "status", "users/alice", "--json")[1])
    assert status["pending_turns"] == 0 and status["watermarks"]["chat-1"]["message_id"] == "m4"
    assert "nothing to do: no new turns" in run("writer", "run-now", "users/alice")[1]


def test_review_policy_leaves_a_branch_to_approve_or_reject(run) -> None:  # type: ignore[no-untyped-def]
    _chat(run, "--policy", "review")
    code, out = run("writer", "--policy", "review", "run-now", "users/alice")
    assert code == 0 and "review" in out and "approve/reject" in out
    [record] = json.loads(run("writer", "runs", "users/alice", "--json")[1])
    assert record["review"] == "pending" and run("get", "users/alice", "m1")[0] == 1
    assert json.loads(run("search", "users/alice", "--json")[1])["items"] == []  # nothing merged yet
    code, out = run("writer", "approve", "users/alice", record["id"])
    assert code == 0 and "approved" in out
    assert len(json.loads(run("search", "users/alice", "--json")[1])["items"]) == 2
    shown = json.loads(run("writer", "show", "users/alice", record["id"])[1])
    assert shown["review"] == "approved"
    code, out = run("writer", "reject", "users/alice", record["id"])
    assert code == 1 and "no review pending" in out


def test_writer_mistakes_are_one_line(run) -> None:  # type: ignore[no-untyped-def]
    run("init")
    for args in (["writer", "--extractor", "gpt", "run-now", "users/alice"],
                 ["writer", "show", "users/alice", "nope"],
                 ["writer", "append", "nobody", "user", "hi"]):  # fmt: skip
        code, out = run(*args)
        assert code != 0 and "Traceback" not in out and out.strip(), args


def test_runs_say_what_was_decided_after_a_review(run) -> None:  # type: ignore[no-untyped-def]
    _chat(run, "--policy", "review")
    run("writer", "--policy", "review", "run-now", "users/alice")
    [record] = json.loads(run("writer", "runs", "users/alice", "--json")[1])
    run("writer", "approve", "users/alice", record["id"])
    out = run("writer", "runs", "users/alice")[1]
    assert "approved" in out and "approve/reject" not in out


@pytest.mark.parametrize("value", ["0", "51"])
def test_an_interval_out_of_range_is_refused_with_the_range(run, value) -> None:  # type: ignore[no-untyped-def]
    code, out = run("writer", "--interval", value, "status", "users/alice")
    assert code == 2 and "1<=x<=50" in out


def test_status_names_the_run_in_flight_and_a_dead_letter(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]

    _chat(run)
    mem = engram.open(str(tmp_path / "store"), embedder="hashing")

    def hold(state: WriterState) -> bool:
        state.lease = Lease("r-123", "elsewhere:1:x", 0, 2**62)
        state.failures, state.dead_letter = 3, {"run": "r-122", "outcome": "no_tool_call", "failures": 3}
        return True

    StateStore(mem.repo, "users.alice").update(hold, "test")
    mem.close()
    out = run("writer", "status", "users/alice")[1]
    assert "run r-123 in flight" in out and "None" not in out
    assert "dead-lettered after 3 failed runs" in out and "engram writer retry users/alice" in out


def test_help_names_the_message_id_format_and_the_settings(run) -> None:  # type: ignore[no-untyped-def]
    assert "<conversation>:<n>" in run("writer", "append", "--help")[1]
    helped = run("writer", "--help")[1]
    for option in ("--timeout", "--retries", "--instructions", "--max-failures", "--max-model-calls"):
        assert option in helped
    served = CliRunner().invoke(cli, ["serve", "--help"]).output
    assert "--writer-timeout" in served and "--writer-max-input-chars" in served
    assert "--writer-interval" in CliRunner().invoke(cli, ["mcp", "--help"]).output
