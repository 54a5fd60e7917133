"""An agent acting on channels: membership, messages and read state (:mod:`~engram.channels.membership`,
:mod:`~engram.channels.messages`, :mod:`~engram.channels.readstate`), notes, search and patterns; and the ways a
hub makes one (:func:`as_agent`, :func:`actor_for_key`, :func:`actor_for_author`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from engram.channels import _layout as layout
from engram.channels import notes, patterns, search
from engram.channels.hub import Hub
from engram.channels.messages import Messages
from engram.channels.model import Channel, Message, MessageResults, Patterns
from engram.channels.readstate import ReadState
from engram.errors import NotAMemberError, PermissionDeniedError
from engram.store.ranking import Profile

Mode = Literal["hybrid", "semantic", "keyword"]


class Actor(Messages, ReadState):
    """One agent acting on the channels service (get one with ``Channels.as_agent``)."""

    def notes_channel(self) -> Channel:
        """This agent's notes channel (a description of it when no note was written yet)."""
        return notes.notes_channel(self.hub, self.agent)

    def write_note(
        self, content: str, *, confidence: float | None = None, tags: Sequence[str] = (),
        breadcrumbs: Sequence[Mapping[str, Any]] = (), session: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Message:  # fmt: skip
        """Write a private note: confidence, tags, typed breadcrumbs (``{"type": "file"|"commit"|"decision"|
        "pattern"|"json", "value": ...}``) and session context. Its searchable text includes tags and
        breadcrumbs. Emits ``note.created``."""
        return notes.write_note(self.hub, self.agent, content, confidence=confidence, tags=tags,
                                breadcrumbs=breadcrumbs, session=session, metadata=metadata)  # fmt: skip

    def recent_notes(self, limit: int = 20, *, at: Any = None) -> list[Message]:
        """This agent's newest notes, newest first."""
        return list(search.run(self.hub, "note", [self.notes_channel().id], limit=limit, at=at))

    def peek_notes(
        self, agent: str, *, query: str | None = None, limit: int = 20, offset: int = 0, min_score: float | None = None
    ) -> MessageResults:  # fmt: skip
        """Another agent's notes; only with the ``notes:read-all`` scope, and every peek is recorded in the
        event log (``note.peeked``). ``offset`` and ``min_score`` as in :meth:`search_messages`."""
        if not self.read_all_notes:
            raise PermissionDeniedError(f"{self.id} may not read {agent}'s notes: that needs notes:read-all",
                                        code="missing_scope")  # fmt: skip
        self.hub.agent(agent)
        self._audit([layout.notes_id(agent)])
        return search.run(self.hub, "note", [layout.notes_id(agent)], query=query, limit=limit, offset=offset,
                          min_score=min_score)  # fmt: skip

    def search_messages(
        self, query: str | None = None, *, channels: Sequence[str] | None = None,
        senders: Sequence[str] | None = None, projects: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None, tags: Sequence[str] | None = None, tags_mode: str = "all",
        min_confidence: float | None = None, since: datetime | str | None = None,
        until: datetime | str | None = None, profile: str | Profile = "similarity", mode: Mode | None = None,
        limit: int = 10, offset: int = 0, explain: bool = False, at: Any = None, min_score: float | None = None,
    ) -> MessageResults:  # fmt: skip
        """Search the messages of the channels this agent may read (all of them, or ``channels``).

        ``filter`` is a MongoDB filter on the messages' metadata (dotted paths into nested objects); ``profile``
        ranks by similarity, confidence and recency; ``at`` searches the channels as they were. Without a query
        it lists the newest matches. The query is never dropped: if embeddings are unavailable the search runs
        on keywords and ``results.degraded`` says why. ``min_score`` leaves out results scoring below it; recency
        is the send time (edits and feedback do not make a message new). ``results.has_more`` says whether
        more follow and ``results.next_offset`` is the ``offset`` that asks for them."""
        ids = [c.id for c in self.readable()] if channels is None else [
            self.readable_channel(c).id for c in channels]  # fmt: skip
        return search.run(self.hub, "message", ids, query=query, senders=senders, projects=projects, filter=filter,
                          tags=tags, tags_mode=tags_mode, min_confidence=min_confidence, since=since, until=until,
                          profile=profile, mode=mode, limit=limit, offset=offset, explain=explain, at=at,
                          min_score=min_score)  # fmt: skip

    def search_my_notes(self, query: str | None = None, **options: Any) -> MessageResults:
        """Search this agent's own notes (same options as :meth:`search_messages`, without ``channels``)."""
        return search.run(self.hub, "note", [self.notes_channel().id], query=query, **options)

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
        return search.run(self.hub, "note", ids, query=query, **options)

    def detect_patterns(
        self, channels: Sequence[str] | str | None = None, *, since: datetime | str | None = None,
        min_cluster: int = 3, threshold: float | None = None, filter: Mapping[str, Any] | None = None,
        on: str = patterns.ON_MESSAGE, write: bool = False, limit: int = 5_000,
    ) -> Patterns:  # fmt: skip
        """Cluster similar messages of ``channels`` (default: every readable channel) by embedding; return the
        clusters of at least ``min_cluster`` messages, largest first. ``threshold`` is the cosine a message needs
        with a cluster's first message to join it (None: the default calibrated for the embedder and ``on``, see
        :data:`~engram.channels.patterns.DEFAULT_THRESHOLDS`). ``on`` is what messages are compared on:
        ``"message"`` (the text as indexed, with the vectors the store keeps), ``"first_line"`` of the content, or
        a metadata field such as ``"metadata.error.message"`` (messages without it are left out). ``write=True``
        records each cluster as a pattern note of this agent (re-running updates it, never duplicates it).
        Deterministic for a given store state. Without a usable embedder the clusters are lexical and
        ``result.degraded`` says why."""
        patterns.check_on(on)
        names = [channels] if isinstance(channels, str) else channels
        ids = [c.id for c in self.readable()] if names is None else [self.readable_channel(c).id for c in names]
        found = search.run(self.hub, "message", ids, filter=filter, since=since, limit=limit)
        clusters = patterns.cluster(self.hub.memory, list(found), min_cluster=min_cluster, threshold=threshold, on=on)
        if not write:
            return clusters
        written = [patterns.record(self.hub, self.agent, c) for c in clusters]
        return Patterns(written, clusters.degraded, threshold=clusters.threshold)

    def _audit(self, channels: list[str]) -> None:
        self.hub.write(self.id, f"peek {len(channels)} notes channel(s)",
                       lambda w: w.emit("note.peeked", agent=self.id, channels=channels))  # fmt: skip


def as_agent(hub: Hub, agent: str, *, read_all_notes: bool = False) -> Actor:
    """Act as a registered agent of ``hub``. ``read_all_notes`` (the ``notes:read-all`` scope) lets it peek at other
    agents' notes; every peek is recorded in the event log."""
    return Actor(hub, hub.agent(agent), read_all_notes=read_all_notes)


def actor_for_key(hub: Hub, key_id: str | None, agent: str | None = None) -> Actor:
    """The actor an API key makes: the agent it is bound to, or the one it names among those it may act for.

    ``key_id=None`` is a server without keys (local development: nobody is authenticated, so the caller
    names the agent). A key bound to no agent may not act on channels at all."""
    if key_id is None:
        if agent is None:
            raise PermissionDeniedError("name the agent you act as (X-Engram-Agent)", code="agent_required")
        return as_agent(hub, agent)
    item = hub.memory.get(layout.KEYS, key_id)
    if item is None:
        raise PermissionDeniedError(f"API key {key_id} is bound to no agent: bind it first",
                                    code="agent_forbidden")  # fmt: skip
    allowed, read_all = list(item.value["agents"]), bool(item.value["read_all_notes"])
    if agent is None and len(allowed) == 1:
        agent = allowed[0]
    if agent is None or agent not in allowed:
        raise PermissionDeniedError(f"API key {key_id} may act as {', '.join(allowed)} only, not {agent!r}",
                                    code="agent_forbidden")  # fmt: skip
    return as_agent(hub, agent, read_all_notes=read_all)


def actor_for_author(hub: Hub, author: str, agent: str | None = None) -> Actor:
    """The actor a handle's author makes: ``key:<id>`` (the author of an API key's handle, see
    :attr:`engram.ops.access.Principal.author`) acts through the key's binding; any other author is a local,
    unauthenticated caller acting as ``agent``, or as the agent the author names."""
    if author.startswith("key:"):
        return actor_for_key(hub, author.removeprefix("key:"), agent)
    return as_agent(hub, agent or author)
