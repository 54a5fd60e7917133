"""A claude-slack database (its documented schema) with a few hundred messages, for the crash tests of the
claude-slack importer; run as a script, it runs ``engram import --from claude-slack`` and SIGKILLs itself at a
chosen step (``python slack_source.py STORE SOURCE STEP N``)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

from engram.cli import cli
from engram.compat.importers import claude_slack
from engram.store import Transaction

#: The tables and columns of claude-slack's documented schema that the importer reads.
SCHEMA = """
CREATE TABLE projects (id TEXT PRIMARY KEY, path TEXT UNIQUE NOT NULL, name TEXT, created_at REAL);
CREATE TABLE agents (name TEXT NOT NULL, project_id TEXT, description TEXT, dm_policy TEXT DEFAULT 'open',
    discoverable TEXT DEFAULT 'public', created_at REAL, PRIMARY KEY (name, project_id));
CREATE TABLE channels (id TEXT PRIMARY KEY, channel_type TEXT NOT NULL, access_type TEXT NOT NULL, project_id TEXT,
    scope TEXT NOT NULL, name TEXT NOT NULL, description TEXT, created_by TEXT, created_by_project_id TEXT,
    created_at REAL, is_default BOOLEAN DEFAULT FALSE, is_archived BOOLEAN DEFAULT FALSE, owner_agent_name TEXT,
    owner_agent_project_id TEXT);
CREATE TABLE channel_members (channel_id TEXT NOT NULL, agent_name TEXT NOT NULL, agent_project_id TEXT,
    joined_at REAL, can_leave BOOLEAN DEFAULT TRUE, can_send BOOLEAN DEFAULT TRUE, can_invite BOOLEAN DEFAULT FALSE,
    can_manage BOOLEAN DEFAULT FALSE, opted_out BOOLEAN DEFAULT FALSE, PRIMARY KEY (channel_id, agent_name));
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, channel_id TEXT NOT NULL, sender_id TEXT NOT NULL,
    sender_project_id TEXT, content TEXT NOT NULL, confidence REAL, timestamp REAL, metadata JSON);
"""
PID = "acme"
T0 = 1_760_000_000.0
#: Source channel id -> the engram channel it becomes ("dm" and "notes" are looked up: see ``engram_channel``).
CHANNELS = {"global:general": "global:general", "proj_acme:dev": "acme:dev", "dm:Backend_Dev:frontend": "dm",
            "notes:meta:global": "notes"}  # fmt: skip
SENDERS = {"global:general": ("meta", "Backend_Dev", "frontend"), "proj_acme:dev": ("Backend_Dev", "frontend"),
           "dm:Backend_Dev:frontend": ("Backend_Dev", "frontend"), "notes:meta:global": ("meta",)}  # fmt: skip


def message_rows(count: int) -> list[tuple[Any, ...]]:
    """``count`` messages over four channels: some at the same second, some the same sender repeating itself."""
    rows: list[tuple[Any, ...]] = []
    channels = list(CHANNELS)
    for i in range(count):
        channel = channels[(i * 7 + i // 5) % len(channels)]
        senders = SENDERS[channel]
        sender = senders[i % len(senders)]
        project = None if sender == "meta" else PID
        content = "ack" if i % 9 == 0 else f"message {i} in {channel}"  # repeated text, told apart by order
        metadata = {"step": i % 4, "tags": ["pool", f"t{i % 3}"]} if channel.startswith("notes") else {"n": i % 6}
        confidence = None if i % 3 else round(0.1 + (i % 8) / 10, 2)
        rows.append((channel, sender, project, content, confidence, T0 + 100 + i // 3, json.dumps(metadata)))
    return rows


def build(path: Path, count: int) -> Path:
    """A claude-slack database at ``path`` with ``count`` messages."""
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        db.execute("INSERT INTO projects (id, path, name, created_at) VALUES (?, '/src/acme', 'acme', ?)", (PID, T0))
        db.executemany("INSERT INTO agents (name, project_id, description, created_at) VALUES (?,?,?,?)",
                       [("Backend_Dev", PID, "APIs", T0 + 1), ("frontend", PID, "UI", T0 + 2),
                        ("meta", None, "learns", T0 + 3)])  # fmt: skip
        db.executemany(
            "INSERT INTO channels (id, channel_type, access_type, project_id, scope, name, created_by, "
            "created_by_project_id, created_at, is_default, owner_agent_name) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [("global:general", "channel", "open", None, "global", "general", "meta", None, T0 + 4, 0, None),
             ("proj_acme:dev", "channel", "members", PID, "project", "dev", "Backend_Dev", PID, T0 + 5, 0, None),
             ("dm:Backend_Dev:frontend", "direct", "private", None, "global", "dm", None, None, T0 + 6, 0, None),
             ("notes:meta:global", "channel", "private", None, "global", "notes-meta", "meta", None, T0 + 7, 0,
              "meta")],
        )  # fmt: skip
        db.executemany(
            "INSERT INTO channel_members (channel_id, agent_name, agent_project_id, joined_at) VALUES (?,?,?,?)",
            [("global:general", "meta", None, T0 + 4), ("global:general", "Backend_Dev", PID, T0 + 8),
             ("global:general", "frontend", PID, T0 + 8), ("proj_acme:dev", "Backend_Dev", PID, T0 + 5),
             ("proj_acme:dev", "frontend", PID, T0 + 9), ("dm:Backend_Dev:frontend", "Backend_Dev", PID, T0 + 6),
             ("dm:Backend_Dev:frontend", "frontend", PID, T0 + 6)],
        )  # fmt: skip
        db.executemany(
            "INSERT INTO messages (channel_id, sender_id, sender_project_id, content, confidence, timestamp, "
            "metadata) VALUES (?,?,?,?,?,?,?)",
            message_rows(count),
        )
    return path


class Crash(Exception):
    """Raised by a hook to stop an import at a chosen step."""


def crash_after(step: str, n: int, die: Any, patch: Any = setattr) -> None:
    """Make the importer call ``die()`` at a step: ``message`` before writing message ``n + 1`` (so after ``n``
    messages), ``ledger`` inside its ``n``-th ledger transaction, before it commits (``patch`` is ``setattr`` or a
    test's ``monkeypatch.setattr``)."""
    calls = {"message": 0, "ledger": 0}
    message, put = claude_slack._Import.message, Transaction.put

    def counted(self: claude_slack._Import, row: dict[str, Any]) -> None:
        calls["message"] += 1
        if step == "message" and calls["message"] == n + 1:
            die()
        message(self, row)

    def ledger_put(self: Transaction, namespace: Any, key: str, *args: Any, **kwargs: Any) -> Any:
        result = put(self, namespace, key, *args, **kwargs)
        if tuple(namespace) == claude_slack.LEDGER[0]:
            calls["ledger"] += 1
            if step == "ledger" and calls["ledger"] == n:
                die()
        return result

    patch(claude_slack._Import, "message", counted)
    patch(Transaction, "put", ledger_put)


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    store, source, step, n = sys.argv[1:5]
    crash_after(step, int(n), _kill)
    cli.main(["--store", store, "--embedder", "hashing", "import", "--from", "claude-slack", source],
             standalone_mode=False, obj={})  # fmt: skip
