"""The importers round-trip real sources: LangGraph's SqliteStore and PostgresStore, mem0's history and vector
store, and a claude-slack database built by its documented schema (counts, values, timestamps, history, idempotent
re-runs, dry runs)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from langgraph.store.postgres import PostgresStore
from langgraph.store.sqlite import SqliteStore

os.environ.setdefault("MEM0_TELEMETRY", "False")  # before mem0 is imported: it reads this at import
os.environ.setdefault("MEM0_DIR", str(Path(tempfile.gettempdir()) / "engram-tests-mem0"))
from mem0 import Memory as Mem0Memory

import engram
from engram.channels import Channels
from engram.cli import cli
from engram.compat.importers import ImportSourceError, count_source, import_from


def _dt(value: Any) -> datetime:
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _close(a: datetime, b: datetime, ms: int = 1) -> bool:
    return abs(a - b) <= timedelta(milliseconds=ms)


# ---------------------------------------------------------------- LangGraph SqliteStore


@pytest.fixture
def langgraph_sqlite(tmp_path: Path) -> Path:
    path = tmp_path / "langgraph.sqlite"
    with SqliteStore.from_conn_string(str(path), ttl={"default_ttl": None, "refresh_on_read": True}) as store:
        store.setup()
        store.put(("users", "alice"), "prefs", {"theme": "dark", "lang": "en"})
        store.put(("users", "alice"), "profile", {"name": "Alice", "tags": ["a", "b"]})
        store.put(("users", "bob"), "prefs", {"theme": "light"}, ttl=60)
        store.put(("docs",), "readme", {"text": "hello"}, index=False)
    return path


def _raw_rows(path: Path) -> dict[tuple[str, str], tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT prefix, key, created_at, updated_at, expires_at, ttl_minutes FROM store")
        return {(r[0], r[1]): r[2:] for r in rows}


def test_langgraph_sqlite_round_trips_items_timestamps_and_ttl(langgraph_sqlite: Path) -> None:
    mem = engram.open(":memory:", embedder="hashing")
    report = import_from("langgraph-sqlite", langgraph_sqlite, mem)
    assert (report.seen, report.items, report.versions, report.commits, report.skipped) == (4, 4, 4, 1, 0)
    assert mem.count() == 4
    with SqliteStore.from_conn_string(str(langgraph_sqlite)) as store:
        for ns, key in [(("users", "alice"), "prefs"), (("users", "alice"), "profile"), (("users", "bob"), "prefs"),
                        (("docs",), "readme")]:  # fmt: skip
            theirs = store.get(ns, key, refresh_ttl=False)
            ours = mem.get(ns, key, refresh_ttl=False)
            assert theirs is not None and ours is not None
            assert ours.value == theirs.value
            assert _close(ours.created_at, _dt(theirs.created_at))
            assert _close(ours.updated_at, _dt(theirs.updated_at))
    raw = _raw_rows(langgraph_sqlite)
    bob = mem.get(("users", "bob"), "prefs", refresh_ttl=False)
    assert bob is not None and bob.expires_at is not None
    assert _close(bob.expires_at, _dt(raw[("users.bob", "prefs")][2]))
    assert raw[("users.bob", "prefs")][3] == 60
    alice = mem.get(("users", "alice"), "prefs", refresh_ttl=False)
    assert alice is not None and alice.expires_at is None
    assert alice.sources and alice.sources[0].startswith("users.alice/prefs@")
    assert mem.search(("users",), query="dark")[0].key == "prefs"
    head = mem.head
    assert head.metadata["import"]["from"] == "langgraph-sqlite"
    assert len(head.metadata["import"]["ids"]) == 4


def test_langgraph_sqlite_second_import_adds_nothing_and_new_versions_come_in(langgraph_sqlite: Path) -> None:
    mem = engram.open(":memory:", embedder="hashing")
    import_from("langgraph-sqlite", langgraph_sqlite, mem)
    head = mem.head.id
    again = import_from("langgraph-sqlite", langgraph_sqlite, mem)
    assert (again.versions, again.commits, again.items, again.skipped) == (0, 0, 0, 4)
    assert mem.head.id == head
    with sqlite3.connect(langgraph_sqlite) as db:  # an update in LangGraph since: a later updated_at
        db.execute("UPDATE store SET value = ?, updated_at = '2099-01-01 00:00:00' WHERE prefix = 'docs'",
                   ('{"text": "changed"}',))  # fmt: skip
    third = import_from("langgraph-sqlite", langgraph_sqlite, mem)
    assert (third.versions, third.commits, third.skipped) == (1, 1, 3)
    readme = mem.get(("docs",), "readme")
    assert readme is not None and readme.value == {"text": "changed"}
    assert len(mem.history(("docs",), "readme")) == 2


def test_langgraph_sqlite_dry_run_writes_nothing(langgraph_sqlite: Path) -> None:
    mem = engram.open(":memory:", embedder="hashing")
    head = mem.head.id
    seen: list[int] = []
    report = import_from("langgraph-sqlite", langgraph_sqlite, mem, dry_run=True, progress=seen.append)
    assert (report.items, report.versions, report.commits) == (4, 4, 1)
    assert report.dry_run and "would add 4 item(s)" in report.summary()
    assert sum(seen) == 4 == count_source("langgraph-sqlite", langgraph_sqlite)
    assert mem.head.id == head and mem.count() == 0


def test_langgraph_sqlite_refuses_other_files(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a database")
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE things (id INTEGER)")
    mem = engram.open(":memory:", embedder="hashing")
    with pytest.raises(ImportSourceError, match="not a SQLite database"):
        import_from("langgraph-sqlite", text, mem)
    with pytest.raises(ImportSourceError, match="no 'store' table"):
        import_from("langgraph-sqlite", other, mem)
    with pytest.raises(ImportSourceError, match="no such file"):
        import_from("langgraph-sqlite", tmp_path / "missing.sqlite", mem)
    assert mem.count() == 0


# ---------------------------------------------------------------- LangGraph PostgresStore


@pytest.fixture
def langgraph_postgres(postgres_url: str) -> Iterator[str]:
    """A PostgresStore in a schema of its own (parallel runs share the database, never a schema)."""
    schema = "lg_" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in postgres_url else "?"
    url = f"{postgres_url}{sep}options=-csearch_path%3D{schema}"
    try:
        with PostgresStore.from_conn_string(url) as store:
            store.setup()
            store.put(("users", "alice"), "prefs", {"theme": "dark"})
            time.sleep(0.01)  # the update comes a moment later (engram keeps milliseconds; PostgreSQL microseconds)
            store.put(("users", "alice"), "prefs", {"theme": "darker"})  # an update: created_at stays
            store.put(("users", "bob"), "prefs", {"theme": "light"}, ttl=30)
            store.put(("team", "infra", "runbooks"), "db", {"steps": ["restart", "check"]})
        yield url
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def test_langgraph_postgres_round_trips_items_timestamps_and_ttl(langgraph_postgres: str) -> None:
    mem = engram.open(":memory:", embedder="hashing")
    report = import_from("langgraph-postgres", langgraph_postgres, mem)
    assert (report.seen, report.items, report.versions, report.commits, report.skipped) == (3, 3, 3, 1, 0)
    assert mem.count() == 3
    with psycopg.connect(langgraph_postgres) as db:
        rows = db.execute("SELECT prefix, key, value, created_at, updated_at, expires_at, ttl_minutes FROM store")
        raw = {(r[0], r[1]): r[2:] for r in rows}
    assert len(raw) == 3
    for (prefix, key), (value, created, updated, expires, ttl) in raw.items():
        item = mem.get(tuple(prefix.split(".")), key, refresh_ttl=False)
        assert item is not None and item.value == value
        assert _close(item.created_at, created) and _close(item.updated_at, updated)
        assert (item.expires_at is None) == (expires is None)
        if expires is not None:
            assert _close(item.expires_at, expires) and ttl == 30
    alice = mem.get(("users", "alice"), "prefs")
    assert alice is not None and alice.created_at < alice.updated_at  # LangGraph kept created_at on update
    again = import_from("langgraph-postgres", langgraph_postgres, mem)
    assert (again.versions, again.commits, again.skipped) == (0, 0, 3)


def test_langgraph_postgres_dry_run_and_bad_urls(langgraph_postgres: str, postgres_url: str) -> None:
    mem = engram.open(":memory:", embedder="hashing")
    report = import_from("langgraph-postgres", langgraph_postgres, mem, dry_run=True)
    assert (report.items, report.versions) == (3, 3) and mem.count() == 0
    empty = "lg_" + uuid.uuid4().hex[:12]  # a schema without LangGraph's tables
    with pytest.raises(ImportSourceError, match="no 'store' table"):
        import_from("langgraph-postgres", f"{postgres_url}?options=-csearch_path%3D{empty}", mem)
    with pytest.raises(ImportSourceError, match="cannot connect"):
        import_from("langgraph-postgres", "postgresql://nobody:secret@127.0.0.1:1/none", mem)


# ---------------------------------------------------------------- mem0 (history database + local Qdrant store)


class _Embedder:
    """A deterministic stand-in for mem0's embedder (mem0 runs offline with infer=False)."""

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return [b / 255 for b in hashlib.sha256(text.encode()).digest()[:16]]


@pytest.fixture
def mem0_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A real mem0 Memory's history.db and Qdrant folder: alice's memory updated twice, a memory of agent bot
    deleted, bob's memory; returns the directory, the ids and mem0's own history of each memory."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-offline")  # mem0 builds its OpenAI clients; nothing calls them
    where = tmp_path / "mem0"
    config = {
        "embedder": {"provider": "openai", "config": {"embedding_dims": 16}},
        "vector_store": {"provider": "qdrant", "config": {"path": str(where / "qdrant"), "collection_name": "mem0",
                                                          "embedding_model_dims": 16, "on_disk": True}},
        "history_db_path": str(where / "history.db"),
    }  # fmt: skip
    m = Mem0Memory.from_config(config)
    m.embedding_model = _Embedder()
    try:
        a = m.add("Likes dark mode", user_id="alice", metadata={"kind": "pref"}, infer=False)["results"][0]["id"]
        m.update(a, "Likes light mode")
        m.update(a, "Likes light mode in the morning")
        b = m.add("Deploys on Fridays", agent_id="bot", run_id="r1", infer=False)["results"][0]["id"]
        m.delete(b)
        c = m.add("Speaks French", user_id="bob", infer=False)["results"][0]["id"]
        histories = {i: m.history(i) for i in (a, b, c)}
    finally:
        m.vector_store.client.close()
        m.close()
    return {"dir": where, "a": a, "b": b, "c": c, "history": histories}


def test_mem0_history_becomes_commits_in_time_order(mem0_dir: dict[str, Any]) -> None:
    mem = engram.open(":memory:", embedder="hashing")
    report = import_from("mem0", mem0_dir["dir"], mem)
    assert (report.seen, report.versions, report.commits, report.items, report.skipped) == (6, 6, 6, 3, 0)
    alice = ("mem0", "users", "alice")
    item = mem.get(alice, mem0_dir["a"])
    assert item is not None
    assert item.value["text"] == "Likes light mode in the morning"
    assert item.value["metadata"] == {"kind": "pref"} and item.value["user_id"] == "alice"
    assert item.value["hash"] == hashlib.md5(b"Likes light mode in the morning").hexdigest()
    theirs = mem0_dir["history"][mem0_dir["a"]]
    ours = list(reversed(mem.history(alice, mem0_dir["a"])))  # oldest first, as mem0 lists them
    assert [v.item.value["text"] for v in ours if v.item] == [h["new_memory"] for h in theirs]
    assert [v.commit.metadata["mem0"]["history_id"] for v in ours] == [h["id"] for h in theirs]
    for version, row in zip(ours[1:], theirs[1:], strict=True):  # each update at the time mem0 wrote it
        assert _close(_dt(row["updated_at"]), datetime.fromtimestamp(version.commit.time / 1000, tz=UTC))
    assert _close(_dt(theirs[0]["created_at"]), datetime.fromtimestamp(ours[0].commit.time / 1000, tz=UTC))
    assert _close(item.created_at, _dt(theirs[0]["created_at"]))
    assert _close(item.updated_at, _dt(theirs[-1]["updated_at"]))
    assert all(v.commit.author == "mem0:user" for v in ours)
    times = [c.time for c in reversed(mem.log()) if "import" in c.metadata]
    assert len(times) == 6 and times == sorted(times)
    deleted = mem.history(("mem0",), mem0_dir["b"])  # its payload went with it: no scope to file it under
    assert [v.item is None for v in deleted] == [True, False]  # newest first: the delete, then the add
    assert mem.get(("mem0",), mem0_dir["b"]) is None
    bob = mem.get(("mem0", "users", "bob"), mem0_dir["c"])
    assert bob is not None and bob.value["text"] == "Speaks French" and bob.sources
    index = mem.get(("mem0-ids",), mem0_dir["a"])  # the mem0 adapter's id index, in the same commits
    assert index is not None and index.value == {"namespace": list(alice)}
    assert mem.get(("mem0-ids",), mem0_dir["b"]) is None and mem.get(("mem0-ids",), mem0_dir["c"]) is not None
    assert [r.key for r in mem.search(("mem0",), query="French")][:1] == [mem0_dir["c"]]
    again = import_from("mem0", mem0_dir["dir"], mem)
    assert (again.versions, again.commits, again.skipped) == (0, 0, 6)


def test_mem0_import_is_what_the_mem0_adapter_reads(mem0_dir: dict[str, Any]) -> None:
    """Imported memories are engram.compat.mem0's: get, get_all and history answer as mem0 itself did."""
    adapter = pytest.importorskip("engram.compat.mem0")  # the adapter lands beside the importers
    mem = engram.open(":memory:", embedder="hashing")
    import_from("mem0", mem0_dir["dir"], mem)
    ours = adapter.Memory(store=mem)
    a = mem0_dir["a"]
    theirs = mem0_dir["history"][a]
    assert [(h["event"], h["new_memory"]) for h in ours.history(a)] == [(h["event"], h["new_memory"]) for h in theirs]
    got = ours.get(a)
    assert (got["memory"], got["metadata"], got["user_id"]) == ("Likes light mode in the morning", {"kind": "pref"},
                                                                 "alice")  # fmt: skip
    assert [r["id"] for r in ours.get_all(filters={"user_id": "bob"})["results"]] == [mem0_dir["c"]]
    assert ours.get(mem0_dir["b"]) is None


def test_mem0_dry_run_and_wrong_files(mem0_dir: dict[str, Any], langgraph_sqlite: Path) -> None:
    mem = engram.open(":memory:", embedder="hashing")
    report = import_from("mem0", mem0_dir["dir"] / "history.db", mem, dry_run=True)  # the file alone: no payloads
    assert (report.versions, report.commits, report.items) == (6, 6, 3)
    assert mem.count() == 0 and len(mem.log()) == 1
    with pytest.raises(ImportSourceError, match="no 'history' table"):
        import_from("mem0", langgraph_sqlite, mem)
    with pytest.raises(ImportSourceError, match="lacks column"):
        with sqlite3.connect(mem0_dir["dir"] / "odd.db") as db:
            db.execute("CREATE TABLE history (id TEXT)")
        import_from("mem0", mem0_dir["dir"] / "odd.db", mem)


# ---------------------------------------------------------------- claude-slack (its documented SQLite schema)

#: The tables and columns claude-slack's documented schema defines that the importer reads (claude-slack is not
#: installable from a registry, so the database is built by its schema; timestamps are epoch seconds, REAL).
CLAUDE_SLACK_SCHEMA = """
CREATE TABLE projects (id TEXT PRIMARY KEY, path TEXT UNIQUE NOT NULL, name TEXT,
    created_at REAL DEFAULT (strftime('%s', 'now')), last_active REAL, metadata JSON);
CREATE TABLE agents (name TEXT NOT NULL, project_id TEXT, description TEXT, status TEXT DEFAULT 'offline',
    current_project_id TEXT, dm_policy TEXT DEFAULT 'open', discoverable TEXT DEFAULT 'public', last_active REAL,
    created_at REAL DEFAULT (strftime('%s', 'now')), metadata JSON, PRIMARY KEY (name, project_id));
CREATE TABLE channels (id TEXT PRIMARY KEY, channel_type TEXT NOT NULL, access_type TEXT NOT NULL, project_id TEXT,
    scope TEXT NOT NULL, name TEXT NOT NULL, description TEXT, topic_required BOOLEAN DEFAULT FALSE,
    default_topic TEXT DEFAULT 'general', channel_metadata JSON, created_by TEXT, created_by_project_id TEXT,
    created_at REAL DEFAULT (strftime('%s', 'now')), is_default BOOLEAN DEFAULT FALSE,
    is_archived BOOLEAN DEFAULT FALSE, owner_agent_name TEXT, owner_agent_project_id TEXT);
CREATE TABLE channel_members (channel_id TEXT NOT NULL, agent_name TEXT NOT NULL, agent_project_id TEXT,
    invited_by TEXT DEFAULT 'self', joined_at REAL DEFAULT (strftime('%s', 'now')), source TEXT DEFAULT 'manual',
    can_leave BOOLEAN DEFAULT TRUE, can_send BOOLEAN DEFAULT TRUE, can_invite BOOLEAN DEFAULT FALSE,
    can_manage BOOLEAN DEFAULT FALSE, is_muted BOOLEAN DEFAULT FALSE, opted_out BOOLEAN DEFAULT FALSE,
    PRIMARY KEY (channel_id, agent_name, agent_project_id));
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, channel_id TEXT NOT NULL, sender_id TEXT NOT NULL,
    sender_project_id TEXT, content TEXT NOT NULL, topic_name TEXT, ai_metadata JSON, confidence REAL,
    model_version TEXT, intent_type TEXT, thread_id TEXT, timestamp REAL DEFAULT (strftime('%s', 'now')),
    is_edited BOOLEAN DEFAULT FALSE, edited_at REAL, metadata JSON);
"""
PID = "3f2a9c0d4b5e6f708192a3b4c5d6e7f8"
T0 = 1_760_000_000.0  # seconds


@pytest.fixture
def claude_slack_db(tmp_path: Path) -> Path:
    path = tmp_path / "claude-slack.db"
    with sqlite3.connect(path) as db:
        db.executescript(CLAUDE_SLACK_SCHEMA)
        db.execute("INSERT INTO projects (id, path, name, created_at) VALUES (?, '/src/acme', 'acme', ?)", (PID, T0))
        db.executemany("INSERT INTO agents (name, project_id, description, dm_policy, created_at) VALUES (?,?,?,?,?)",
                       [("Backend_Dev", PID, "APIs", "open", T0 + 1), ("frontend", PID, "UI", "open", T0 + 2),
                        ("meta", None, "learns", "open", T0 + 3)])  # fmt: skip
        db.executemany(
            "INSERT INTO channels (id, channel_type, access_type, project_id, scope, name, description, created_by, "
            "created_by_project_id, created_at, is_default, owner_agent_name) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            [("global:general", "channel", "open", None, "global", "general", "all hands", "meta", None, T0 + 4,
              1, None),
             (f"proj_{PID[:8]}:dev", "channel", "members", PID, "project", "dev", "", "Backend_Dev", PID, T0 + 5,
              0, None),
             ("dm:Backend_Dev:frontend", "direct", "private", None, "global", "dm", "", None, None, T0 + 6, 0, None),
             ("notes:meta:global", "channel", "private", None, "global", "notes-meta", "", "meta", None, T0 + 7, 0,
              "meta")],
        )  # fmt: skip
        db.executemany(
            "INSERT INTO channel_members (channel_id, agent_name, agent_project_id, joined_at) VALUES (?,?,?,?)",
            [("global:general", "meta", None, T0 + 4), ("global:general", "Backend_Dev", PID, T0 + 8),
             ("global:general", "frontend", PID, T0 + 8), (f"proj_{PID[:8]}:dev", "Backend_Dev", PID, T0 + 5),
             (f"proj_{PID[:8]}:dev", "frontend", PID, T0 + 9), ("dm:Backend_Dev:frontend", "Backend_Dev", PID, T0 + 6),
             ("dm:Backend_Dev:frontend", "frontend", PID, T0 + 6)],
        )  # fmt: skip
        db.executemany(
            "INSERT INTO messages (channel_id, sender_id, sender_project_id, content, confidence, timestamp, metadata) "
            "VALUES (?,?,?,?,?,?,?)",
            [("global:general", "meta", None, "Welcome, team", None, T0 + 10, None),
             (f"proj_{PID[:8]}:dev", "Backend_Dev", PID, "ConnectionRefusedError on port 5432", 0.4, T0 + 20,
              json.dumps({"type": "debug_start", "service": "db"})),
             (f"proj_{PID[:8]}:dev", "frontend", PID, "Pool size was 5; raised to 20", None, T0 + 30,
              json.dumps({"type": "solution", "confidence": 0.9})),
             ("dm:Backend_Dev:frontend", "Backend_Dev", PID, "thanks for the fix", None, T0 + 40, None),
             ("notes:meta:global", "meta", None, "pool exhaustion shows as refused connections", 0.8, T0 + 50,
              json.dumps({"tags": ["postgres", "pool"]})),
             ("global:general", "frontend", PID, "deployed", None, T0 + 60, json.dumps({"release": "1.2"}))],
        )  # fmt: skip
    return path


def test_claude_slack_round_trips_channels_members_messages_and_notes(claude_slack_db: Path) -> None:
    mem = engram.open(":memory:", embedder="hashing")
    report = import_from("claude-slack", claude_slack_db, mem)
    assert (report.seen, report.versions, report.skipped) == (6, 6, 0)
    hub = Channels(mem)
    assert hub.projects() == [PID]
    assert sorted(a.id for a in hub.agents()) == ["backend-dev", "frontend", "meta"]
    backend, frontend, meta = (hub.as_agent(a) for a in ("backend-dev", "frontend", "meta"))
    dev = backend.messages(f"{PID}:dev")
    assert [m.content for m in dev] == ["ConnectionRefusedError on port 5432", "Pool size was 5; raised to 20"]
    assert [m.sender for m in dev] == ["backend-dev", "frontend"]
    assert dev[0].metadata == {"type": "debug_start", "service": "db"} and dev[0].confidence == pytest.approx(0.4)
    assert dev[1].confidence == pytest.approx(0.9)  # metadata.confidence honoured, as in claude-slack
    assert _close(dev[0].created_at, datetime.fromtimestamp(T0 + 20, tz=UTC), ms=5)
    assert _close(dev[1].created_at, datetime.fromtimestamp(T0 + 30, tz=UTC), ms=5)
    assert hub.channel(f"{PID}:dev").access == "members"
    assert frontend.member(hub.channel(f"{PID}:dev")) is not None
    general = meta.messages("global:general")
    assert [m.content for m in general] == ["Welcome, team", "deployed"]
    assert general[1].metadata == {"release": "1.2"}
    assert hub.channel("global:general").default
    dm = frontend.messages("dm:backend-dev+frontend")
    assert [(m.sender, m.content) for m in dm] == [("backend-dev", "thanks for the fix")]
    notes = meta.recent_notes()
    assert [n.content for n in notes] == ["pool exhaustion shows as refused connections"]
    assert notes[0].tags == ("postgres", "pool") and notes[0].confidence == pytest.approx(0.8)
    head = mem.head.id
    again = import_from("claude-slack", claude_slack_db, mem)
    assert (again.items, again.versions, again.commits, again.skipped) == (0, 0, 0, 6)
    assert mem.head.id == head


def test_claude_slack_two_databases_with_the_same_ids_both_come_in(claude_slack_db: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    shutil.copy(claude_slack_db, other)
    with sqlite3.connect(other) as db:  # the same integer ids, other messages
        db.execute("UPDATE messages SET content = 'second team: ' || content, timestamp = timestamp + 1000")
    mem = engram.open(":memory:", embedder="hashing")
    import_from("claude-slack", claude_slack_db, mem)
    second = import_from("claude-slack", other, mem)
    assert (second.versions, second.skipped) == (6, 0)  # none taken for the first database's messages
    general = Channels(mem).as_agent("meta").messages("global:general")
    assert [m.content for m in general] == ["Welcome, team", "deployed", "second team: Welcome, team",
                                            "second team: deployed"]  # fmt: skip
    moved = tmp_path / "moved.db"
    shutil.copy(claude_slack_db, moved)  # the first database, copied elsewhere: still recognised
    assert import_from("claude-slack", moved, mem).skipped == 6


def test_claude_slack_dry_run_counts_and_wrong_files(claude_slack_db: Path, langgraph_sqlite: Path) -> None:
    mem = engram.open(":memory:", embedder="hashing")
    head = mem.head.id
    dry = import_from("claude-slack", claude_slack_db, mem, dry_run=True)
    assert mem.head.id == head
    real = import_from("claude-slack", claude_slack_db, engram.open(":memory:", embedder="hashing"))
    assert (dry.items, dry.versions) == (real.items, real.versions)
    assert real.items == 1 + 3 + 2 + 1  # a project, three agents, two channels, frontend invited to dev
    assert count_source("claude-slack", claude_slack_db) == 6
    with pytest.raises(ImportSourceError, match="no 'agents' table"):
        import_from("claude-slack", langgraph_sqlite, mem)


# ---------------------------------------------------------------- the CLI: engram import --from KIND PATH|URL


def _cli(store: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--store", str(store), "--embedder", "hashing", "import", *args], obj={})
    return result.exit_code, result.output


def test_cli_imports_with_dry_run_and_idempotent_reruns(tmp_path: Path, langgraph_sqlite: Path,
                                                        mem0_dir: dict[str, Any]) -> None:  # fmt: skip
    store = tmp_path / "store"
    code, output = _cli(store, "--from", "langgraph-sqlite", str(langgraph_sqlite), "--dry-run")
    assert code == 0, output
    assert "dry run" in output and "would add 4 item(s), 4 version(s) in 1 commit(s)" in output
    assert not store.exists()  # a dry run writes nothing, not even a new store
    code, output = _cli(store, "--from", "langgraph-sqlite", str(langgraph_sqlite))
    assert code == 0 and "added 4 item(s)" in output, output
    code, output = _cli(store, "--from", "mem0", str(mem0_dir["dir"]))
    assert code == 0 and "added 3 item(s), 6 version(s) in 6 commit(s)" in output, output
    code, output = _cli(store, "--from", "mem0", str(mem0_dir["dir"]))
    assert code == 0 and "added 0 item(s), 0 version(s) in 0 commit(s); skipped 6" in output, output
    code, output = _cli(store, "--from", "mem0", str(mem0_dir["dir"]), "--dry-run")
    assert code == 0 and "would add 0 item(s)" in output, output
    mem = engram.open(str(store), embedder="hashing")
    try:
        assert mem.count(("users",)) == 3 and mem.count(("mem0",)) == 2
        assert len(mem.history(("mem0", "users", "alice"), mem0_dir["a"])) == 3
    finally:
        mem.close()


def test_cli_explains_wrong_sources_without_a_traceback(tmp_path: Path, langgraph_sqlite: Path) -> None:
    store = tmp_path / "store"
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    cases = [
        (("--from", "mem0", str(text)), "is not a SQLite database"),
        (("--from", "claude-slack", str(langgraph_sqlite)), "has no 'agents' table"),
        (("--from", "mem0", str(langgraph_sqlite)), "has no 'history' table"),
        (("--from", "langgraph-sqlite", str(tmp_path / "missing.db")), "no such file"),
        (("--from", "langgraph-postgres", "postgresql://nobody:secret@127.0.0.1:1/none"), "cannot connect"),
        (("--from", "langgraph-postgres", str(langgraph_sqlite)), "takes a postgresql:// URL"),
        (("--from", "langgraph-sqlite", "postgresql://u@h/db"), "not a URL"),
        ((str(langgraph_sqlite), "--dry-run"), "--dry-run goes with --from"),
        (("--from", "mem0", str(text), "-m", "hello"), "not with --from"),
        (("--from", "nothing", str(text)), "Invalid value for '--from'"),
    ]
    for args, expected in cases:
        code, output = _cli(store, *args)
        assert code == 2, (args, output)
        assert expected in output and "Traceback" not in output and "secret" not in output, (args, output)
    assert not store.exists()


def test_cli_import_help_shows_the_sources_and_examples() -> None:
    result = CliRunner().invoke(cli, ["import", "--help"], obj={})
    assert result.exit_code == 0
    for text in ("--from", "mem0|langgraph-sqlite|langgraph-postgres|claude-slack", "--dry-run",
                 "engram import --from mem0 ~/.mem0"):  # fmt: skip
        assert text in result.output
