"""claude-slack's SQLite database (``~/.claude/claude-slack/data/claude-slack.db``), into :mod:`engram.channels`.

Read by its documented schema: ``projects``, ``agents`` (per project, with DM policy and discoverability),
``channels`` (``channel_type`` channel or direct; notes channels have an ``owner_agent_name``), ``channel_members``
(capabilities, opt-outs) and ``messages`` (content, ``metadata`` JSON, ``confidence``, ``timestamp``). Everything
is written through the public channels API, as the agents who did it, at the times it happened (through
:func:`engram.clock.simulated`): projects, then agents, channels and memberships, then every message, DM and note
in time order. Names become engram's (lowercase letters, digits and hyphens: ``Backend_Dev`` is ``backend-dev``);
an agent name registered in two projects is one engram agent (of the first project). A sender that was not a
member of its channel any more is invited back to post its message.

Idempotence, exactly once under a crash at any point: projects, agents, channels and memberships that exist are
skipped; each message is one commit of the channels API, and the ids of imported messages are recorded in the
metadata of a ledger commit after every :data:`LEDGER_EVERY` messages and at the end (the item
``("imports", "claude-slack") / ledger``), and a re-run skips them. Messages written after the last ledger commit
by a run that stopped (killed, or an error) are found again before anything is written: messages go in time order,
one after the other, so what such a run wrote is the first part of what the ledger lacks, and each channel's
messages since the last ledger commit are matched against it in order (same sender, content, metadata and tags,
at or after the source's timestamp; the first source message not found ends the search). Those count as skipped
and go into the next ledger commit. Only the channels' messages since the last ledger commit are read, so a run
that was not interrupted reads next to nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

from engram import clock
from engram.channels import Actor, Channels, Message
from engram.compat.importers.common import (
    ImportReport,
    ImportSourceError,
    Progress,
    import_metadata,
    imported_ids,
    open_sqlite,
    to_ms,
)
from engram.errors import AgentNotFoundError, ChannelNotFoundError
from engram.store import Memory
from engram.store.reader import Reader

KIND = "claude-slack"
WHAT = "a claude-slack database"
TABLES = {
    "agents": {"name", "project_id"},
    "channels": {"id", "channel_type", "access_type", "project_id", "scope", "name"},
    "messages": {"id", "channel_id", "sender_id", "content", "timestamp", "metadata", "confidence"},
}
LEDGER = (("imports", KIND), "ledger")
#: Imported message ids are recorded (a ledger commit) after this many messages, and at the end.
LEDGER_EVERY = 100
DM_POLICIES: tuple[Literal["open", "restricted", "closed"], ...] = ("open", "restricted", "closed")
DISCOVERABILITY: tuple[Literal["public", "project", "private"], ...] = ("public", "project", "private")
ACCESS: tuple[Literal["open", "members", "private"], ...] = ("open", "members", "private")
T = TypeVar("T", bound=str)
_INVALID = re.compile(r"[^a-z0-9-]+")


@dataclass(slots=True)
class _Post:
    """One source message as the channels API writes it: ``author`` posts to ``to`` (its notes, a DM's other
    agent, a channel id)."""

    kind: str
    author: str
    to: str
    content: str
    metadata: dict[str, Any]
    confidence: Any
    tags: list[str]
    reader: str  # the agent that reads the channel back (a channel's creator, else the author)

    def same(self, found: Message, ms: int | None) -> bool:
        """Whether ``found`` is this post as a run wrote it (at or after the source's time ``ms``)."""
        return (found.sender == self.author and found.content == self.content and found.metadata == self.metadata
                and list(found.tags) == self.tags
                and (ms is None or found.created_at.timestamp() * 1000 >= ms - 1))  # fmt: skip


def source_id(row: dict[str, Any]) -> str:
    """A message's id in the import ledger: claude-slack's integer id and a digest of where, by whom, when and
    what, so that two claude-slack databases imported into one branch never take each other's messages for
    imported ones (their integer ids overlap), and a database moved or copied elsewhere is still recognised."""
    what = json.dumps([row.get("channel_id"), row.get("sender_id"), row.get("timestamp"), row.get("content")],
                      default=str)  # fmt: skip
    return f"{row['id']}:{hashlib.blake2b(what.encode(), digest_size=6).hexdigest()}"


def engram_name(name: Any) -> str:
    """A claude-slack name as an engram name: lowercase, other characters as hyphens, at most 80 characters."""
    text = _INVALID.sub("-", str(name).lower()).strip("-")[:80].strip("-")
    return text or "unnamed"


def _json(text: Any) -> dict[str, Any]:
    if text in (None, ""):
        return {}
    data = json.loads(text) if isinstance(text, str | bytes) else text
    return dict(data) if isinstance(data, dict) else {"value": data}


class ClaudeSlackDatabase:
    """The rows of a claude-slack database (read-only), as dicts."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.connection = open_sqlite(location, WHAT, TABLES)
        self.connection.row_factory = sqlite3.Row
        names = {row[0] for row in self.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        self.tables = names

    def rows(self, table: str, order: str = "rowid") -> list[dict[str, Any]]:
        if table not in self.tables:
            return []
        return [dict(row) for row in self.connection.execute(f"SELECT * FROM {table} ORDER BY {order}")]

    def close(self) -> None:
        self.connection.close()


class _Import:
    """One run: what exists, what is new, and the writes (counted only, with ``dry_run``)."""

    def __init__(self, db: ClaudeSlackDatabase, memory: Memory, report: ImportReport, progress: Progress | None):
        self.db, self.memory, self.report, self.progress = db, memory, report, progress
        self.hub = Channels(memory)
        self.dry = report.dry_run
        self.projects = set(self.hub.projects())
        self.agents: dict[tuple[str, str | None], str] = {}  # (claude-slack name, project) -> engram agent id
        self.channels: dict[str, dict[str, Any]] = {}  # claude-slack channel id -> row (+ "engram" id)
        self.homes: dict[str, str | None] = {}  # engram agent id -> its project
        self.created: set[str] = set()  # what this run made (a dry run pretends)
        self.done = imported_ids(memory, KIND)
        self.pending: list[str] = []
        self.recorded = len(self.done)  # message ids the ledger holds, with the pending ones once written
        self.dms: dict[tuple[str, str], str | None] = {}  # (agent, other agent) -> their DM channel

    def _made(self, what: str) -> None:
        self.report.items += 1
        self.report.commits += 1
        self.created.add(what)

    def _exists_agent(self, aid: str) -> bool:
        if aid in self.created:
            return True
        try:
            self.hub.agent(aid)
        except AgentNotFoundError:
            return False
        return True

    def _exists_channel(self, cid: str) -> bool:
        if cid in self.created:
            return True
        try:
            self.hub.channel(cid)
        except ChannelNotFoundError:
            return False
        return True

    def actor(self, aid: str) -> Actor:
        return self.hub.as_agent(aid)

    def project(self, pid: Any, name: str = "", description: str = "") -> str | None:
        if pid in (None, ""):
            return None
        engram_pid = engram_name(pid)
        if engram_pid not in self.projects and f"project:{engram_pid}" not in self.created:
            if not self.dry:
                self.hub.create_project(engram_pid, name=name, description=description)
            self._made(f"project:{engram_pid}")
        self.projects.add(engram_pid)
        return engram_pid

    def agent(self, name: Any, project: Any = None, row: dict[str, Any] | None = None) -> str:
        key = (str(name), None if project in (None, "") else str(project))
        if key in self.agents:
            return self.agents[key]
        named = [aid for (n, _), aid in self.agents.items() if n == key[0]]
        if named:  # the same name in another project: one engram agent
            self.agents[key] = named[0]
            return named[0]
        aid = engram_name(name)
        self.agents[key] = aid
        self.homes[aid] = None if key[1] is None else engram_name(key[1])
        if self._exists_agent(aid):
            return aid
        row = row or {}
        policy = _choice(row.get("dm_policy"), DM_POLICIES)
        seen = _choice(row.get("discoverable"), DISCOVERABILITY)
        pid = self.project(key[1])
        if not self.dry:
            self.hub.register_agent(aid, project=pid, description=str(row.get("description") or ""),
                                    dm_policy=policy, discoverability=seen)  # fmt: skip
        self._made(aid)
        return aid

    def tick(self, moment: Any, sim: clock.SimulatedClock | None) -> None:
        ms = to_ms(moment)
        if sim is None or ms is None:
            return
        when = datetime.fromtimestamp(ms / 1000, tz=UTC)
        if when > sim.now():
            sim.set(when)

    def structure(self, sim: clock.SimulatedClock | None) -> None:
        for row in self.db.rows("projects", "created_at, rowid"):
            self.tick(row.get("created_at"), sim)
            self.project(row["id"], str(row.get("name") or ""), str(row.get("path") or ""))
        for row in self.db.rows("agents", "created_at, rowid"):
            self.tick(row.get("created_at"), sim)
            self.agent(row["name"], row.get("project_id"), row)
        members: dict[str, list[dict[str, Any]]] = {}
        for row in self.db.rows("channel_members", "joined_at, rowid"):
            members.setdefault(str(row["channel_id"]), []).append(row)
        for row in self.db.rows("channels", "created_at, rowid"):
            self.tick(row.get("created_at"), sim)
            self.channel(row, members.get(str(row["id"]), []))

    def channel(self, row: dict[str, Any], members: list[dict[str, Any]]) -> None:
        sid = str(row["id"])
        self.channels[sid] = row
        if row.get("owner_agent_name") or sid.startswith("notes:"):
            row["kind"] = "notes"  # made by the first note written
            return
        if row["channel_type"] == "direct":
            row["kind"] = "dm"  # made by the first message sent
            row["members"] = [self.agent(m["agent_name"], m.get("agent_project_id")) for m in members]
            return
        row["kind"] = "channel"
        pid = self.project(row.get("project_id")) if row.get("scope") == "project" else None
        name = engram_name(row["name"])
        cid = f"{pid or 'global'}:{name}"
        row["engram"] = cid
        creator = self._creator(row, members, pid)
        row["creator"] = creator
        if not self._exists_channel(cid):
            if not self.dry:
                access = _choice(row["access_type"], ACCESS)
                self.actor(creator).create_channel(name, scope="project" if pid else "global", access=access,
                                                   description=str(row.get("description") or ""),
                                                   default=bool(row.get("is_default")))  # fmt: skip
            self._made(cid)
        for member in members:
            if member.get("opted_out"):
                continue
            aid = self.agent(member["agent_name"], member.get("agent_project_id"))
            self.member(cid, creator, aid, member, bool(row.get("is_default")) and pid in (None, self.homes.get(aid)))

    def _creator(self, row: dict[str, Any], members: list[dict[str, Any]], pid: str | None) -> str:
        candidates = [(row.get("created_by"), row.get("created_by_project_id"))]
        candidates += [(m["agent_name"], m.get("agent_project_id")) for m in members]
        for name, project in candidates:
            if name and (pid is None or (project and engram_name(project) == pid)):
                return self.agent(name, project)
        return self.agent(f"importer-{pid or 'global'}", pid)

    def member(self, cid: str, creator: str, aid: str, row: dict[str, Any], joins_default: bool) -> None:
        if aid == creator or f"member:{cid}:{aid}" in self.created:
            return
        planned = self.dry and cid in self.created  # a dry run's channel does not exist to be asked
        if planned and joins_default:  # creating a default channel joins the agents in its scope
            return
        if not planned and self.actor(creator).member(self.hub.channel(cid), aid) is not None:
            return
        caps = [c for c in ("send", "invite", "manage", "leave") if row.get(f"can_{c}", c != "manage")]
        if not self.dry:
            self.actor(creator).invite(cid, aid, caps)
        self._made(f"member:{cid}:{aid}")

    def messages(self, sim: clock.SimulatedClock | None) -> None:
        rows = self.db.rows("messages", "timestamp, id")
        written = self.written([row for row in rows if source_id(row) not in self.done])
        for row in rows:
            mid = source_id(row)
            self.report.seen += 1
            if mid in self.done:
                self.report.skipped += 1
            else:
                if mid in written:  # written by a run that stopped before its ledger commit
                    self.report.skipped += 1
                    self.tick(written[mid], sim)
                else:
                    self.tick(row.get("timestamp"), sim)
                    self.message(row)
                    self.report.versions += 1
                    self.report.commits += 1
                self.pending.append(mid)
                if len(self.pending) >= LEDGER_EVERY:
                    self.ledger()
            if self.progress is not None:
                self.progress(1)
        self.ledger()
        for row in self.channels.values():
            if row.get("is_archived") and row["kind"] == "channel" and not self.dry:
                channel = self.hub.channel(row["engram"])
                if not channel.archived:
                    self.actor(row["creator"]).archive(row["engram"])

    def post(self, row: dict[str, Any]) -> _Post:
        """How a source message is written: by whom, where, with what (registering its sender if new)."""
        channel = self.channels.get(str(row["channel_id"]))
        if channel is None:
            raise ImportSourceError(
                f"{self.db.location}: message {row['id']} is in unknown channel {row['channel_id']}"
            )
        sender = self.agent(row["sender_id"], row.get("sender_project_id"))
        metadata = _json(row.get("metadata"))
        confidence = row.get("confidence")
        if confidence is not None and "confidence" in metadata and metadata["confidence"] != confidence:
            metadata.pop("confidence")  # the column is claude-slack's confidence; engram keeps one
        content = str(row["content"])
        if channel["kind"] == "notes":
            owner = self.agent(channel.get("owner_agent_name") or row["sender_id"],
                               channel.get("owner_agent_project_id"))  # fmt: skip
            tags = metadata.pop("tags", None)
            listed = [str(t) for t in tags] if isinstance(tags, list) else []
            return _Post("notes", owner, owner, content, metadata, confidence, listed, owner)
        if channel["kind"] == "dm":
            others = [m for m in channel["members"] if m != sender] or _dm_others(str(row["channel_id"]), sender)
            return _Post("dm", sender, others[0], content, metadata, confidence, [], sender)
        return _Post("channel", sender, channel["engram"], content, metadata, confidence, [], channel["creator"])

    def message(self, row: dict[str, Any]) -> None:
        post = self.post(row)
        if self.dry:
            return
        if post.kind == "notes":
            self.actor(post.author).write_note(post.content, confidence=post.confidence, metadata=post.metadata,
                                               tags=post.tags)  # fmt: skip
        elif post.kind == "dm":
            self.actor(post.author).dm(post.to, post.content, metadata=post.metadata, confidence=post.confidence)
        else:
            me = self.actor(post.author)
            if me.member(self.hub.channel(post.to)) is None:
                self.actor(post.reader).invite(post.to, post.author)
            me.send(post.to, post.content, metadata=post.metadata, confidence=post.confidence)

    def written(self, rows: list[dict[str, Any]]) -> dict[str, datetime]:
        """Of ``rows`` (the messages the ledger lacks, in order), those an earlier run wrote after its last ledger
        commit: source id -> just after the time it was written at. They are the first part of ``rows``: each channel's
        messages since that commit are matched in order, and the first message not found ends the search."""
        last = self.memory.log(namespace=LEDGER[0], key=LEDGER[1], limit=1)
        before = self.hub.reader(last[0].id.hex()) if last else None
        tails: dict[str, list[Message]] = {}
        found: dict[str, datetime] = {}
        for row in rows:
            post = self.post(row)
            cid = self._channel_of(post)
            if cid is None:
                return found
            if cid not in tails:
                tails[cid] = self._since(cid, post.reader, before)
            tail, ms = tails[cid], to_ms(row.get("timestamp"))
            at = next((i for i, message in enumerate(tail) if post.same(message, ms)), None)
            if at is None:
                return found
            found[source_id(row)] = tail[at].created_at + timedelta(milliseconds=1)
            del tail[: at + 1]
        return found

    def _channel_of(self, post: _Post) -> str | None:
        """The engram channel a post goes to (None: a DM or notes channel that does not exist yet)."""
        if post.kind == "channel":
            return post.to
        if post.author in self.created:  # new in this run (a dry run's): it wrote nothing yet
            return None
        me = self.actor(post.author)
        if post.kind == "notes":
            return me.notes_channel().id
        key = (post.author, post.to)
        if key not in self.dms:
            dms = [c for c in me.readable() if c.kind == "dm" and me.member(c, post.to) is not None]
            self.dms[key] = dms[0].id if dms else None
        return self.dms[key]

    def _since(self, cid: str, reader: str, before: Reader | None) -> list[Message]:
        """The channel's messages after the ones it had at the last ledger commit (``before``), oldest first."""
        if cid in self.created:
            return []
        try:
            now = self.hub.channel(cid).count
        except ChannelNotFoundError:  # no channel: nothing was written to it
            return []
        try:
            then = 0 if before is None else self.hub.channel(cid, before).count
        except ChannelNotFoundError:
            then = 0
        if now <= then:
            return []
        return self.actor(reader).messages(cid, after=then, limit=now - then)

    def ledger(self) -> None:
        if not self.pending:
            return
        self.recorded += len(self.pending)
        if not self.dry:
            metadata = import_metadata(KIND, self.db.location, self.pending)
            with self.memory.transaction(f"import: {len(self.pending)} message(s) from {KIND}",
                                         metadata=metadata) as tx:  # fmt: skip
                tx.put(*LEDGER, {"source": self.db.location, "messages": self.recorded, "last": self.pending[-1]})
            if tx.commit is not None:
                self.report.commit_ids.append(tx.commit.id.hex())
        self.report.commits += 1
        self.pending = []


def _choice(value: Any, choices: tuple[T, ...]) -> T:
    """``value`` if it is one of ``choices``, else the first (the default) choice."""
    return next((c for c in choices if c == value), choices[0])


def _dm_others(channel_id: str, sender: str) -> list[str]:
    """The other agent of a DM from its claude-slack id (``dm:<a>:<b>``, names possibly with project ids)."""
    parts = [engram_name(p) for p in channel_id.split(":")[1:] if p]
    others = [p for p in parts if p != sender]
    if not others:
        raise ImportSourceError(f"direct-message channel {channel_id!r}: cannot tell the other agent")
    return others


def _times(db: ClaudeSlackDatabase) -> Iterator[int]:
    for table, column in (("projects", "created_at"), ("agents", "created_at"), ("channels", "created_at"),
                          ("messages", "timestamp")):  # fmt: skip
        for row in db.rows(table):
            ms = to_ms(row.get(column))
            if ms is not None:
                yield ms


def import_claude_slack(
    location: str, memory: Memory | None, *, dry_run: bool = False, progress: Progress | None = None
) -> ImportReport:
    """Import a claude-slack database into ``memory``'s channels (``memory`` None: only count its messages)."""
    db = ClaudeSlackDatabase(location)
    report = ImportReport(KIND, location, dry_run=dry_run)
    try:
        if memory is None:
            report.seen = len(db.rows("messages"))
            return report
        run = _Import(db, memory, report, progress)
        start = min(_times(db), default=None)
        if dry_run or start is None:
            run.structure(None)
            run.messages(None)
            return report
        with clock.simulated(datetime.fromtimestamp(start / 1000, tz=UTC)) as sim:
            run.structure(sim)
            run.messages(sim)
        return report
    finally:
        db.close()
