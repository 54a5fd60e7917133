"""The channels service over one memory handle: registration, the write path, reads and events.

Every operation is one commit (a strict transaction): its items and the events it emits are written
together or not at all. Every write also advances the event counter, so two writers racing on the same
branch conflict and the loser retries on the new head: the event log has one order and no gaps.
"""

from __future__ import annotations

import copy
import fnmatch
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Self, TypeVar

from engram.channels import _layout as layout
from engram.channels._steps import (
    DISCOVERABILITY,
    DM_POLICIES,
    MAX_CONTENT,
    MAX_METADATA,
    Writer,
    check_feedback_steps,
    join,
)
from engram.channels.model import Agent, Channel, Discoverability, DmPolicy, Event
from engram.errors import (
    AgentNotFoundError,
    ChannelExistsError,
    ChannelNotFoundError,
    InvalidInputError,
    MergeConflictError,
)
from engram.store import Memory
from engram.store.operations import GetOp
from engram.store.reader import Reader
from engram.store.system import SERVICE

T = TypeVar("T")
#: How often a write that lost a race with another writer is retried on the new head.
MAX_ATTEMPTS = 50


class Directory:
    """Every channel and every agent's memberships as of one version of the store (a tree root): what each
    search needs to know which channels an agent may read. Read once per version; memberships per agent on
    first use."""

    def __init__(self, root: bytes, reader: Reader, channels: list[Channel]) -> None:
        self.root = root
        self.channels = channels
        self._reader = reader
        self._memberships: dict[str, frozenset[str]] = {}

    def memberships(self, agent: str) -> frozenset[str]:
        """The ids of the channels ``agent`` is a member of."""
        found = self._memberships.get(agent)
        if found is None:
            found = frozenset(i.key for i in self._reader.iter_items(layout.memberships_ns(agent)))
            self._memberships[agent] = found
        return found


class _Shared:
    """What every view of one hub shares (see :meth:`Hub.for_caller`): the write lock and the directory cache."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.directory: Directory | None = None


def _commit_message(events: list[Event]) -> str:
    """``channels: message.sent (event 37)``: the topics and sequence numbers of an operation's events."""
    if not events:
        return "channels: update"
    topics = ", ".join(dict.fromkeys(e.topic for e in events))
    first, last = events[0].seq, events[-1].seq
    return f"channels: {topics} (event {first})" if first == last else f"channels: {topics} (events {first}-{last})"


class Hub:
    """The channels service's state over one memory handle: registration, the write path, reads and events.

    Agents act through :class:`~engram.channels.Actor`, built on a hub by :mod:`engram.channels.actor`; the public
    :class:`~engram.channels.Channels` is this hub plus the ways to get an actor.
    """

    def __init__(
        self, memory: Memory, *, max_content: int = MAX_CONTENT, max_metadata: int = MAX_METADATA,
        feedback_steps: Mapping[str, float] | None = None,
    ) -> None:  # fmt: skip
        """Channels in ``memory``'s branch: messages and notes up to ``max_content`` characters, metadata up to
        ``max_metadata`` characters of JSON, and ``feedback_steps`` (``{"up": 0.1, "down": -0.2}``; default
        :data:`~engram.channels.FEEDBACK_STEPS`, ±0.1) how far one agent's vote moves a confidence."""
        # channels own their system namespaces: a door's handle that hides them (a key without the system
        # scope) reaches them here, under the rules below
        self.memory = memory if memory.system else memory.handle(system=True)
        self.max_content = max_content
        self.max_metadata = max_metadata
        self.feedback_steps = check_feedback_steps(feedback_steps)
        self._shared = _Shared()

    def for_caller(self, memory: Memory) -> Self:
        """This hub acting through a caller's handle ``memory``: its branch and read-only-ness (a key without the
        ``write`` scope writes nothing), reaching the service's own namespaces as :class:`Hub` always does; it shares
        this hub's write lock and directory cache. A door builds one hub per tenant and one of these per request,
        so what the hub caches outlives the request while the caller still decides every access."""
        view = copy.copy(self)
        view.memory = memory if memory.system else memory.handle(system=True)
        return view

    def write(self, actor: str, message: str, operation: Callable[[Writer], T]) -> T:
        """Run ``operation`` in one commit as ``actor``; retry it on the new head when another writer won.

        The commit's message names the operation and its events by number only (``message`` is for logs): a
        channel's id can carry agents' names (``dm:a+b``), and commit messages reach more readers than channels."""
        for attempt in range(MAX_ATTEMPTS):
            try:
                metadata = {SERVICE: "channels"}
                with self._shared.lock, self.memory.transaction("channels", author=actor, metadata=metadata) as tx:
                    writer = Writer(tx, actor)
                    result = operation(writer)
                    tx.message = _commit_message(writer.events)
                return result
            except MergeConflictError:
                if attempt == MAX_ATTEMPTS - 1:
                    raise
                time.sleep(random.uniform(0.0005, 0.002 * (attempt + 1)))
        raise AssertionError("unreachable")  # pragma: no cover

    def create_project(self, project: str, *, name: str = "", description: str = "") -> str:
        """Register a project (its id is stable: a name following the channel name rules); return its id."""
        pid = layout.check_project(project)

        def op(w: Writer) -> str:
            if w.get(layout.PROJECTS, pid) is not None:
                raise ChannelExistsError(f"project {pid!r} exists")
            w.put(layout.PROJECTS, pid, {"name": name or pid, "description": description, "time": w.now})
            w.emit("project.created", project=pid)
            return pid

        return self.write("engram", f"create project {pid}", op)

    def register_agent(
        self,
        agent: str,
        *,
        project: str | None = None,
        description: str = "",
        dm_policy: DmPolicy = "open",
        allow: Sequence[str] = (),
        block: Sequence[str] = (),
        discoverability: Discoverability = "public",
        opt_out: Sequence[str] = (),
    ) -> Agent:
        """Register an agent (of ``project``, or global when None); it joins the default channels in its
        scope except those named in ``opt_out``."""
        aid = layout.check_name(agent, "agent id")
        if dm_policy not in DM_POLICIES:
            raise InvalidInputError(f"dm_policy must be one of {', '.join(DM_POLICIES)}, got {dm_policy!r}")
        if discoverability not in DISCOVERABILITY:
            raise InvalidInputError(f"discoverability must be one of {', '.join(DISCOVERABILITY)}")
        value = {"project": project, "description": description, "status": "active", "dm_policy": dm_policy,
                 "allow": sorted(set(allow)), "block": sorted(set(block)), "discoverability": discoverability,
                 "opted_out": sorted(set(opt_out))}  # fmt: skip

        opted_out = set(opt_out)

        def op(w: Writer) -> Agent:
            if project is not None and w.get(layout.PROJECTS, project) is None:
                raise ChannelNotFoundError(f"unknown project {project!r}: create it first")
            if w.get(layout.AGENTS, aid) is not None:
                raise ChannelExistsError(f"agent {aid!r} is registered")
            w.put(layout.AGENTS, aid, value)
            w.emit("agent.registered", agent=aid, project=project)
            for channel in self.list_channels_raw():
                wanted = channel.default and not channel.archived and channel.id not in opted_out
                if wanted and (channel.scope == "global" or channel.project == project):
                    join(w, channel, aid, ("send", "invite", "leave"))
            return Agent.from_value(aid, value)

        return self.write(aid, f"register agent {aid}", op)

    def bind_key(self, key_id: str, agents: Sequence[str], *, read_all_notes: bool = False) -> None:
        """Let API key ``key_id`` act as ``agents`` (one: always that agent; several: the caller names one of
        them per request). ``read_all_notes`` grants the ``notes:read-all`` scope (every use is audited)."""
        if not isinstance(key_id, str) or not key_id or isinstance(agents, str) or not agents:
            raise InvalidInputError("bind a key id to a non-empty list of agent ids")
        for agent in agents:
            self.agent(agent)
        value = {"agents": sorted(set(agents)), "read_all_notes": bool(read_all_notes)}

        def op(w: Writer) -> None:
            w.put(layout.KEYS, key_id, value)
            w.emit("key.bound", key=key_id, agents=value["agents"], read_all_notes=value["read_all_notes"])

        self.write("engram", f"bind key {key_id}", op)

    def reader(self, at: Any = None) -> Reader:
        """The memory at ``at`` (a ref, time or commit id), or the live head."""
        return self.memory if at is None else self.memory.at(at)

    def agent(self, agent: str, reader: Reader | None = None) -> Agent:
        """A registered agent; :class:`AgentNotFoundError` when there is none."""
        item = (reader or self.memory).get(layout.AGENTS, agent) if isinstance(agent, str) and agent else None
        if item is None:
            raise AgentNotFoundError(f"no agent {agent!r} is registered")
        return Agent.from_value(agent, item.value)

    def agents(self) -> list[Agent]:
        """Every registered agent (unfiltered: an actor's ``list_agents`` applies discoverability)."""
        return [Agent.from_value(i.key, i.value) for i in self.memory.iter_items(layout.AGENTS)]

    def projects(self) -> list[str]:
        """Every project id."""
        return [item.key for item in self.memory.iter_items(layout.PROJECTS)]

    def channel(self, channel_id: str, reader: Reader | None = None) -> Channel:
        """A channel by id; :class:`ChannelNotFoundError` when there is none."""
        item = (reader or self.memory).get(layout.CHANNELS, channel_id) if channel_id else None
        if item is None:
            raise ChannelNotFoundError(f"no channel {channel_id!r}")
        return Channel.from_value(channel_id, item.value)

    def directory(self) -> Directory:
        """The channels and memberships at the head of the branch, cached until the head's tree changes (every
        write changes it: each one appends an event), so repeated searches between writes read them once."""
        head = self.memory.head
        found = self._shared.directory
        if found is None or found.root != head.tree:  # a tree is content-addressed: one root, one directory
            view = self.memory.at(head.id.hex())
            found = self._shared.directory = Directory(head.tree, view, self.list_channels_raw(view))
        return found

    def list_channels_raw(self, reader: Reader | None = None) -> list[Channel]:
        """Every channel, DM and notes channel (no permission applied)."""
        return [Channel.from_value(i.key, i.value) for i in (reader or self.memory).iter_items(layout.CHANNELS)
                if len(i.namespace) == 2]  # fmt: skip

    def last_event(self) -> int:
        """The cursor of the newest event (0 when there is none)."""
        item = self.memory.get(layout.STATE, layout.COUNTERS)
        return 0 if item is None else int(item.value["events"])

    def read_events(self, after: int = 0, *, limit: int = 100, topics: Sequence[str] | None = None) -> list[Event]:
        """Events after cursor ``after``, oldest first (at most ``limit`` of them, before topic filtering).

        Works from any process: the log is items in the store, read by direct lookups of dense keys."""
        if not isinstance(after, int) or after < 0:
            raise InvalidInputError(f"the event cursor must be a non-negative integer, got {after!r}")
        last = min(self.last_event(), after + max(1, limit))
        if last <= after:
            return []
        buckets = range(layout.bucket_of(after + 1), layout.bucket_of(last) + 1)
        found = self.memory.batch([GetOp(layout.EVENTS, layout.seq_key(b), False) for b in buckets])
        values = [v for item in found if item is not None for v in item.value["events"] if after < v["seq"] <= last]
        return [e for e in map(Event.from_value, values) if topic_matches(e.topic, topics)]

    def subscribe(
        self,
        topics: Sequence[str] | None = None,
        after: int | None = None,
        *,
        poll: float = 0.02,
        timeout: float | None = None,
        accept: Callable[[Event], bool] | None = None,
    ) -> Iterator[Event]:
        """Yield events as they are written (by this or any other process), polling by cursor.

        ``after`` is the cursor to resume from (None: only events from now on); ``topics`` are glob patterns
        (``message.*``); the iterator ends after ``timeout`` seconds (None: never)."""
        cursor = self.last_event() if after is None else after
        deadline = None if timeout is None else time.monotonic() + timeout
        while deadline is None or time.monotonic() < deadline:
            batch = self.read_events(cursor, limit=200)
            for event in batch:
                cursor = event.seq
                if topic_matches(event.topic, topics) and (accept is None or accept(event)):
                    yield event
            if not batch:
                time.sleep(poll)


def topic_matches(topic: str, topics: Sequence[str] | None) -> bool:
    """True when ``topic`` matches one of the glob patterns (every topic when None)."""
    return topics is None or any(fnmatch.fnmatchcase(topic, pattern) for pattern in topics)
