"""The claude-slack import is exactly once under a crash at any point: an exception or a real SIGKILL after any
number of messages, or inside a ledger commit, then re-runs; every source message is in engram once, in order,
and a further re-run adds nothing."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import engram
from compat import slack_source
from compat.slack_source import Crash
from engram.channels import Channels
from engram.compat.importers import claude_slack, import_from
from engram.store import Memory

COUNT = 230  # ledger commits after 100 and 200 messages, and at the end


def _raise() -> None:
    raise Crash("injected")


def expected(source: Path) -> dict[str, list[tuple[str, str, dict[str, Any]]]]:
    """Per source channel: (engram sender, content, metadata as engram keeps it), in source order."""
    found: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    with sqlite3.connect(source) as db:
        rows = db.execute("SELECT channel_id, sender_id, content, metadata FROM messages ORDER BY timestamp, id")
        for channel, sender, content, metadata in rows.fetchall():
            meta = json.loads(metadata)
            meta.pop("tags", None)
            found.setdefault(channel, []).append((claude_slack.engram_name(sender), content, meta))
    return found


def in_engram(mem: Memory) -> dict[str, list[tuple[str, str, dict[str, Any]]]]:
    """Per source channel, the messages engram holds (every one, oldest first)."""
    hub = Channels(mem)
    backend, meta = hub.as_agent("backend-dev"), hub.as_agent("meta")
    dm = next((c.id for c in backend.readable() if c.kind == "dm"), None)  # made by the first DM sent
    notes = meta.notes_channel().id
    where = {"global:general": (meta, "global:general"), "proj_acme:dev": (backend, "acme:dev"),
             "dm:Backend_Dev:frontend": (backend, dm), "notes:meta:global": (meta, notes)}  # fmt: skip
    found: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    existing = {c.id for c in hub.list_channels_raw()}
    for source, (actor, cid) in where.items():
        if cid not in existing:  # a DM or notes channel is made by its first message
            found[source] = []
            continue
        messages = actor.messages(cid, limit=hub.channel(cid).count)
        found[source] = [(m.sender, m.content, m.metadata) for m in messages]
    return found


def check_exactly_once(mem: Memory, source: Path) -> None:
    want, got = expected(source), in_engram(mem)
    assert {k: len(v) for k, v in got.items()} == {k: len(v) for k, v in want.items()}
    assert got == want
    assert sum(len(v) for v in got.values()) == COUNT


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return slack_source.build(tmp_path / "claude-slack.db", COUNT)


CRASHES = [("message", 1), ("message", 50), ("message", 99), ("message", 100), ("message", 101),
           ("message", 199), ("message", 229), ("ledger", 1), ("ledger", 3)]  # fmt: skip


@pytest.mark.parametrize(("step", "n"), CRASHES, ids=[f"{s}-{n}" for s, n in CRASHES])
def test_an_import_stopped_at_any_step_is_completed_exactly_once(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, n: int
) -> None:
    mem = engram.open(str(tmp_path / "store"), embedder="hashing")
    with monkeypatch.context() as patched:
        slack_source.crash_after(step, n, _raise, patched.setattr)
        with pytest.raises(Crash):
            import_from("claude-slack", source, mem)
    written = n if step == "message" else min(100 * n, COUNT)
    assert sum(len(v) for v in in_engram(mem).values()) == written  # the crash came where it was meant to
    recorded = 100 * (n - 1) if step == "ledger" else 100 * (n // 100)
    assert len(claude_slack.imported_ids(mem, "claude-slack")) == recorded  # the rest no ledger commit names
    again = import_from("claude-slack", source, mem)
    check_exactly_once(mem, source)
    assert (again.seen, again.versions, again.skipped) == (COUNT, COUNT - written, written)
    head = mem.log(limit=1)[0]
    assert head.metadata["import"]["from"] == "claude-slack"
    assert len(claude_slack.imported_ids(mem, "claude-slack")) == COUNT
    commits = len(mem.log())
    third = import_from("claude-slack", source, mem)
    assert (third.versions, third.skipped, third.commits, len(mem.log())) == (0, COUNT, 0, commits)
    mem.close()


def test_a_crash_while_recovering_from_a_crash(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = engram.open(str(tmp_path / "store"), embedder="hashing")
    for step, n in (("message", 60), ("message", 30), ("message", 80)):  # 60, then 90, then 170 written
        with monkeypatch.context() as patched:
            slack_source.crash_after(step, n, _raise, patched.setattr)
            with pytest.raises(Crash):
                import_from("claude-slack", source, mem)
    assert sum(len(v) for v in in_engram(mem).values()) == 170
    report = import_from("claude-slack", source, mem)
    assert (report.versions, report.skipped) == (COUNT - 170, 170)
    check_exactly_once(mem, source)
    assert import_from("claude-slack", source, mem).versions == 0
    mem.close()


def test_a_dry_run_after_a_crash_counts_only_what_is_missing(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = engram.open(str(tmp_path / "store"), embedder="hashing")
    with monkeypatch.context() as patched:
        slack_source.crash_after("message", 130, _raise, patched.setattr)
        with pytest.raises(Crash):
            import_from("claude-slack", source, mem)
    commits = len(mem.log())
    dry = import_from("claude-slack", source, mem, dry_run=True)
    assert (dry.versions, dry.skipped, len(mem.log())) == (COUNT - 130, 130, commits)
    mem.close()


def _killed_import(store: Path, source: Path, step: str, n: int) -> None:
    helper = Path(slack_source.__file__)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(helper.parent.parent), *sys.path])}
    proc = subprocess.run([sys.executable, str(helper), str(store), str(source), step, str(n)], env=env,
                          capture_output=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]


@pytest.mark.parametrize(("step", "n"), [("message", 150), ("ledger", 1)], ids=["message-150", "ledger-1"])
def test_engram_import_killed_by_sigkill_resumes_exactly_once(source: Path, tmp_path: Path, step: str, n: int):
    store = tmp_path / "store"
    _killed_import(store, source, step, n)
    written = 150 if step == "message" else 100
    mem = engram.open(str(store), embedder="hashing")
    try:
        assert sum(len(v) for v in in_engram(mem).values()) == written
        counts = Counter(c.metadata.get("import", {}).get("from") for c in mem.log())
        assert counts["claude-slack"] == (1 if step == "message" else 0)  # the kill came before a ledger commit
    finally:
        mem.close()
    engram_cli = Path(sys.executable).with_name("engram")  # the console script of this environment
    result = subprocess.run([str(engram_cli), "--store", str(store), "--embedder", "hashing", "import", "--from",
                             "claude-slack", str(source)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"skipped {written} already imported" in result.stdout + result.stderr
    mem = engram.open(str(store), embedder="hashing")
    try:
        check_exactly_once(mem, source)
        commits = len(mem.log())
        assert import_from("claude-slack", source, mem).versions == 0 and len(mem.log()) == commits
    finally:
        mem.close()


def test_messages_posted_in_engram_after_a_crash_are_neither_taken_nor_lost(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = engram.open(str(tmp_path / "store"), embedder="hashing")
    with monkeypatch.context() as patched:
        slack_source.crash_after("message", 120, _raise, patched.setattr)
        with pytest.raises(Crash):
            import_from("claude-slack", source, mem)
    meta = Channels(mem).as_agent("meta")
    meta.send("global:general", "posted live, between the crash and the re-run", metadata={"n": 1})
    meta.send("global:general", "ack", metadata={"live": True})  # the source's text, not its metadata
    report = import_from("claude-slack", source, mem)
    assert (report.versions, report.skipped) == (COUNT - 120, 120)
    got, want = in_engram(mem), expected(source)
    live = [m for m in got["global:general"] if m[1].startswith("posted live") or m[2] == {"live": True}]
    assert [m[1] for m in live] == ["posted live, between the crash and the re-run", "ack"]
    got["global:general"] = [m for m in got["global:general"] if m not in live]
    assert got == want
    mem.close()
