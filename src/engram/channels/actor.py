"""An agent acting on channels: messaging (:mod:`engram.channels.messaging`), notes, search and patterns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from engram.channels import _layout as layout
from engram.channels import patterns, search
from engram.channels.hub import Writer, join
from engram.channels.messaging import Messaging
from engram.channels.model import CAPABILITIES, Channel, Message, MessageResults, Pattern
from engram.errors import NotAMemberError, PermissionDeniedError
from engram.store.ranking import Profile

Mode = Literal["hybrid", "semantic", "keyword"]


class Actor(Messaging):
    """One agent acting on the channels service (get one with ``Channels.as_agent``)."""

    def notes_channel(self) -> Channel:
        """This agent's notes channel (a description of it when no note was written yet)."""
        cid = layout.notes_id(self.id)
        value = {"name": cid, "kind": "notes", "scope": "global", "project": self.agent.project, "access": "private",
                 "description": f"notes of {self.id}", "default": False, "archived": False, "count": 0,
                 "owner": self.id}  # fmt: skip
        item = self.hub.memory.get(layout.CHANNELS, cid)
        return Channel.from_value(cid, value if item is None else item.value)

    def write_note(
        self, content: str, *, confidence: float | None = None, tags: Sequence[str] = (),
        breadcrumbs: Sequence[Mapping[str, Any]] = (), session: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Message:  # fmt: skip
        """Write a private note: confidence, tags, typed breadcrumbs (``{"type": "file"|"commit"|"decision"|
        "pattern"|"json", "value": ...}``) and session context. Its searchable text includes tags and
        breadcrumbs. Emits ``note.created``."""
        return self._write_note(content, confidence=confidence, tags=tags, breadcrumbs=breadcrumbs, session=session,
                                metadata=metadata)  # fmt: skip

    def _write_note(self, content: str, then: Any = None, **fields: Any) -> Message:
        """:meth:`write_note`, running ``then(writer, note id)`` in the same commit."""
        channel = self.notes_channel()

        def make(w: Writer) -> Channel:
            if w.get(layout.CHANNELS, channel.id) is None:
                value = {"name": channel.name, "kind": "notes", "scope": "global", "project": channel.project,
                         "access": "private", "description": channel.description, "default": False,
                         "archived": False, "count": 0, "owner": self.id}  # fmt: skip
                w.put(layout.CHANNELS, channel.id, value)
                w.emit("note.channel.created", channel.id)
                join(w, Channel.from_value(channel.id, value), self.id, CAPABILITIES)
            return channel

        return self.post(channel, "note", content, make=make, then=then, **fields)

    def recent_notes(self, limit: int = 20, *, at: Any = None) -> list[Message]:
        """This agent's newest notes, newest first."""
        return list(search.run(self, "note", [self.notes_channel().id], limit=limit, at=at))

    def peek_notes(self, agent: str, *, query: str | None = None, limit: int = 20) -> MessageResults:
        """Another agent's notes; only with the ``notes:read-all`` scope, and every peek is recorded in the
        event log (``note.peeked``)."""
        if not self.read_all_notes:
            raise PermissionDeniedError(f"{self.id} may not read {agent}'s notes: that needs notes:read-all",
                                        code="missing_scope")  # fmt: skip
        self.hub.agent(agent)
        self._audit([layout.notes_id(agent)])
        return search.run(self, "note", [layout.notes_id(agent)], query=query, limit=limit)

    def search_messages(
        self, query: str | None = None, *, channels: Sequence[str] | None = None,
        senders: Sequence[str] | None = None, projects: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None, tags: Sequence[str] | None = None, tags_mode: str = "all",
        min_confidence: float | None = None, since: datetime | str | None = None,
        until: datetime | str | None = None, profile: str | Profile = "similarity", mode: Mode | None = None,
        limit: int = 10, offset: int = 0, explain: bool = False, at: Any = None,
    ) -> MessageResults:  # fmt: skip
        """Search the messages of the channels this agent may read (all of them, or ``channels``).

        ``filter`` is a MongoDB filter on the messages' metadata (dotted paths into nested objects); ``profile``
        ranks by similarity, confidence and recency; ``at`` searches the channels as they were. Without a query
        it lists the newest matches. The query is never dropped: if embeddings are unavailable the search runs
        on keywords and ``results.degraded`` says why."""
        ids = [c.id for c in self.readable()] if channels is None else [
            self.readable_channel(c).id for c in channels]  # fmt: skip
        return search.run(self, "message", ids, query=query, senders=senders, projects=projects, filter=filter,
                          tags=tags, tags_mode=tags_mode, min_confidence=min_confidence, since=since, until=until,
                          profile=profile, mode=mode, limit=limit, offset=offset, explain=explain, at=at)  # fmt: skip

    def search_my_notes(self, query: str | None = None, **options: Any) -> MessageResults:
        """Search this agent's own notes (same options as :meth:`search_messages`, without ``channels``)."""
        return search.run(self, "note", [self.notes_channel().id], query=query, **options)

    def search_notes(
        self, query: str | None = None, *, agents: Sequence[str] | None = None, **options: Any
    ) -> MessageResults:  # fmt: skip
        """Search notes: this agent's own, plus (with ``notes:read-all``, audited) those of ``agents`` or of
        every agent."""
        ids = [self.notes_channel().id]
        others = [a for a in (agents or []) if a != self.id]
        if others or (agents is None and self.read_all_notes):
            if not self.read_all_notes:
                raise NotAMemberError(f"{self.id} may only search its own notes")
            names = others or [a.id for a in self.hub.agents() if a.id != self.id]
            peeked = [layout.notes_id(a) for a in names]
            self._audit(peeked)
            ids += peeked
        elif agents is not None and self.id not in agents:
            ids = []
        return search.run(self, "note", ids, query=query, **options)

    def detect_patterns(
        self, channels: Sequence[str] | str | None = None, *, since: datetime | str | None = None,
        min_cluster: int = 3, threshold: float = 0.75, filter: Mapping[str, Any] | None = None,
        write: bool = False, limit: int = 5_000,
    ) -> list[Pattern]:  # fmt: skip
        """Cluster similar messages of ``channels`` (default: every readable channel) by embedding; return the
        clusters of at least ``min_cluster`` messages, largest first. ``write=True`` records each cluster as a
        pattern note of this agent (re-running updates it, never duplicates it). Deterministic for a given
        store state."""
        names = [channels] if isinstance(channels, str) else channels
        ids = [c.id for c in self.readable()] if names is None else [self.readable_channel(c).id for c in names]
        found = search.run(self, "message", ids, filter=filter, since=since, limit=limit)
        clusters = patterns.cluster(self.hub.memory, list(found), min_cluster=min_cluster, threshold=threshold)
        return [patterns.record(self, c) for c in clusters] if write else clusters

    def _audit(self, channels: list[str]) -> None:
        self.hub.write(self.id, f"peek {len(channels)} notes channel(s)",
                       lambda w: w.emit("note.peeked", agent=self.id, channels=channels))  # fmt: skip
