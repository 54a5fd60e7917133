"""claude-slack's ``ClaudeSlackAPI`` over engram's channels: code written for claude-slack runs on engram unchanged.

The one-line switch: import ``ClaudeSlackAPI`` from ``engram.compat.claude_slack`` instead of ``claude_slack.api``
and build it with ``ClaudeSlackAPI(db_path="team.engram")`` (an engram store: a path or URL; or ``memory=`` /
``channels=``); the same calls, awaited as before (docs/migrate.md).

Every call is a coroutine, as in claude-slack, running engram's public channels API
(:class:`engram.channels.Channels` and :class:`~engram.channels.Actor`) on a worker thread. Channel ids keep
claude-slack's formats (``global:general``, ``proj_<project>:<name>``, and ``proj:<name>`` for the default project's
channels; a bare name is the agent's project's channel, else the global one); results are claude-slack's dicts
(``id``, ``channel_id``, ``sender_id``, ``content``, ``metadata``, ``confidence``, ``timestamp``, ``score``); message
ids are engram's (``proj:debugging#3``), not integers. What differs is in ``docs/migrate.md``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import engram
from engram.channels import Channels
from engram.compat import _slack_shapes as shapes
from engram.compat._slack_core import SlackCore
from engram.store import Memory
from engram.store.ranking import Profile

T = TypeVar("T")
When = datetime | str | None


class ClaudeSlackAPI:
    """claude-slack's unified async API, stored in an engram store.

    ``db_path`` is where the store is (any engram store URL: a SQLite file, ``postgresql://...``; None: in memory);
    or pass an open ``memory`` (``engram.open(...)``) or a ``channels`` hub. ``project_id`` is the project a call
    without one acts in (``"proj"``: ``proj:<name>`` names its channels). The Qdrant options are accepted and unused
    (engram indexes and searches every message itself); ``enable_semantic_search=False`` makes searches keyword-only.
    ``open_options`` go to :func:`engram.open` (e.g. ``embedder="hashing"``)."""

    def __init__(
        self, db_path: str | None = None, qdrant_url: str | None = None, qdrant_api_key: str | None = None,
        qdrant_path: str | None = None, enable_semantic_search: bool = True, *, memory: Memory | None = None,
        channels: Channels | None = None, project_id: str = shapes.DEFAULT_PROJECT, **open_options: Any,
    ) -> None:  # fmt: skip
        if channels is None:
            channels = Channels(memory if memory is not None else engram.open(db_path or ":memory:", **open_options))
        self.db_path = db_path
        self.channels = channels
        self._core = SlackCore(channels, project=project_id, semantic=enable_semantic_search)

    async def _run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(call, *args, **kwargs)

    async def initialize(self) -> None:
        """Make the default project and the default ``global:general`` channel (done by the first call anyway)."""
        await self._run(self._core.setup)

    async def close(self) -> None:
        """Nothing to close: the engram store belongs to its opener (``engram.open`` handles are shared)."""

    async def send_message(
        self, channel_id: str, sender_id: str, content: str, sender_project_id: str | None = None,
        metadata: Mapping[str, Any] | None = None, thread_id: str | None = None,
    ) -> str:  # fmt: skip
        """Send a message; returns its id. ``metadata["confidence"]`` is the message's confidence (0.5 without)."""
        return await self._run(self._core.send, channel_id, sender_id, content, sender_project_id, metadata, thread_id)

    async def send_channel_message(
        self, channel_id: str, sender_id: str, content: str, metadata: Mapping[str, Any] | None = None,
        sender_project_id: str | None = None, thread_id: str | None = None,
    ) -> str:  # fmt: skip
        """Send a message to a channel named by id or by name (``"general"``)."""
        return await self._run(self._core.send, channel_id, sender_id, content, sender_project_id, metadata, thread_id)

    async def send_direct_message(
        self, sender_name: str, recipient_name: str, content: str, sender_project_id: str | None = None,
        recipient_project_id: str | None = None, metadata: Mapping[str, Any] | None = None,
    ) -> str:  # fmt: skip
        """Send a direct message (channel ``dm:<a>+<b>``); the recipient's DM policy applies."""
        return await self._run(self._core.direct, sender_name, recipient_name, content, sender_project_id, metadata)

    async def search_messages(
        self, query: str | None = None, project_ids: Sequence[str] | None = None,
        channel_ids: Sequence[str] | None = None, sender_ids: Sequence[str] | None = None,
        message_type: str | None = None, metadata_filters: Mapping[str, Any] | None = None,
        min_confidence: float | None = None, since: When = None, until: When = None, limit: int = 20,
        ranking_profile: str | Profile = "balanced", semantic_search: bool | None = None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Search every channel's messages (claude-slack's administrative search): ``metadata_filters`` with MongoDB
        operators and dotted paths, ``min_confidence``, ``since``/``until`` (send time), ``ranking_profile``;
        without a query the newest matches are listed. ``semantic_search=False`` searches keywords only."""
        filters = _with_type(metadata_filters, message_type)

        def run() -> list[dict[str, Any]]:
            channels = self._core.all_channels(channel_ids, project_ids)
            found = self._core.search(None, channels, query=query, filters=filters, senders=sender_ids,
                                      min_confidence=min_confidence, since=since, until=until, limit=limit,
                                      profile=ranking_profile, semantic=semantic_search)  # fmt: skip
            return [shapes.message_dict(m) for m in found]

        return await self._run(run)

    async def search_agent_messages(
        self, agent_name: str, agent_project_id: str | None = None, query: str | None = None,
        channel_ids: Sequence[str] | None = None, sender_ids: Sequence[str] | None = None,
        message_type: str | None = None, metadata_filters: Mapping[str, Any] | None = None,
        min_confidence: float | None = None, since: When = None, until: When = None, limit: int = 20,
        ranking_profile: str | Profile = "balanced", semantic_search: bool | None = None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Search the messages of the channels ``agent_name`` may read (``channel_ids`` among them)."""
        filters = _with_type(metadata_filters, message_type)

        def run() -> list[dict[str, Any]]:
            me = self._core.actor(agent_name, agent_project_id)
            found = self._core.search(me, None if channel_ids is None else list(channel_ids), query=query,
                                      filters=filters, senders=sender_ids, min_confidence=min_confidence,
                                      since=since, until=until, limit=limit, profile=ranking_profile,
                                      semantic=semantic_search)  # fmt: skip
            return [shapes.message_dict(m) for m in found]

        return await self._run(run)

    async def get_message(self, message_id: str) -> dict[str, Any]:
        """One message by id (:class:`~engram.errors.MessageNotFoundError` when there is none)."""
        return shapes.message_dict(await self._run(self._core.find, message_id))

    async def get_messages(
        self, channel_ids: Sequence[str] | None = None, sender_ids: Sequence[str] | None = None,
        message_ids: Sequence[str] | None = None, limit: int = 100, since: When = None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Messages, newest first, with no permission check (claude-slack's administrative read)."""
        found = await self._run(self._core.get_messages, channel_ids, sender_ids, message_ids, limit, since)
        return [shapes.message_dict(m) for m in found]

    async def get_agent_messages(
        self, agent_name: str, agent_project_id: str | None = None, channel_id: str | None = None,
        limit: int = 100, since: When = None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Messages ``agent_name`` may read, newest first."""
        return await self.search_agent_messages(agent_name, agent_project_id, channel_ids=None if channel_id is None
                                                else [channel_id], since=since, limit=limit)  # fmt: skip

    async def update_message(
        self, message_id: str, content: str | None = None, metadata: Mapping[str, Any] | None = None,
        agent_name: str | None = None,
    ) -> bool:  # fmt: skip
        """Edit a message (as its sender): the old version stays in engram's history."""
        return await self._run(self._core.update, message_id, content, metadata, agent_name)

    async def delete_message(self, message_id: str, agent_name: str | None = None) -> bool:
        """Delete a message (as its sender, or a manager of its channel): soft, its versions stay in history."""
        return await self._run(self._core.delete, message_id, agent_name)

    async def create_channel(
        self, name: str, scope: str = "global", access_type: str = "open", project_id: str | None = None,
        description: str | None = None, created_by: str | None = None, created_by_project_id: str | None = None,
        is_default: bool = False,
    ) -> str:  # fmt: skip
        """Create a channel; returns its id (``global:<name>`` or ``<project>:<name>``; a project channel without
        ``project_id`` is the default project's)."""
        return await self._run(self._core.create_channel, name, scope, access_type, project_id, description,
                               created_by, created_by_project_id, is_default)  # fmt: skip

    async def join_channel(self, agent_name: str, agent_project_id: str | None, channel_id: str) -> bool:
        """Join a channel; False when the agent may not join it."""
        return await self._run(self._core.join_channel, agent_name, agent_project_id, channel_id)

    async def leave_channel(self, agent_name: str, agent_project_id: str | None, channel_id: str) -> bool:
        """Leave a channel; False when the agent is not a member or may not leave."""
        return await self._run(self._core.leave_channel, agent_name, agent_project_id, channel_id)

    async def invite_to_channel(
        self, channel_id: str, invitee_name: str, invitee_project_id: str | None, inviter_name: str,
        inviter_project_id: str | None,
    ) -> bool:  # fmt: skip
        """Invite an agent (the inviter needs the ``invite`` capability: :class:`~engram.errors.NotAMemberError`)."""
        return await self._run(self._core.invite, channel_id, invitee_name, invitee_project_id, inviter_name,
                               inviter_project_id)  # fmt: skip

    async def list_channels(
        self, agent_name: str | None = None, project_id: str | None = None, scope_filter: str = "all",
        include_archived: bool = False,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Channels (``scope_filter``: ``all``, ``global`` or ``project``); with an agent, its membership of each."""
        return await self._run(self._core.list_channels, agent_name, project_id, scope_filter, include_archived)

    async def register_agent(
        self, name: str, project_id: str | None = None, description: str | None = None, dm_policy: str = "open",
        discoverable: str = "public", status: str = "online", metadata: Mapping[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Register an agent (global when ``project_id`` is None), or update one that exists."""
        await self._run(self._core.register_agent, name, project_id, description, dm_policy, discoverable, status)

    async def write_note(
        self, agent_name: str, content: str, agent_project_id: str | None = None, session_context: Any = None,
        tags: Sequence[str] | None = None, metadata: Mapping[str, Any] | None = None,
        confidence: float | None = None, breadcrumbs: Any = None,
    ) -> str:  # fmt: skip
        """Write a private note; returns its id. ``confidence`` (or ``metadata["confidence"]``) and ``breadcrumbs``
        (a dict, or ``metadata["breadcrumbs"]``) are kept, searchable and returned."""
        return await self._run(self._core.write_note, agent_name, content, agent_project_id, session_context, tags,
                               metadata, confidence, breadcrumbs)  # fmt: skip

    async def search_my_notes(
        self, agent_name: str, query: str | None = None, tags: Sequence[str] | None = None,
        agent_project_id: str | None = None, metadata_filters: Mapping[str, Any] | None = None,
        min_confidence: float | None = None, since: When = None, until: When = None, limit: int = 50,
        ranking_profile: str | Profile = "balanced", semantic_search: bool | None = None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Search an agent's own notes; several ``tags`` match notes carrying any of them (as claude-slack)."""

        def run() -> list[dict[str, Any]]:
            me = self._core.actor(agent_name, agent_project_id)
            found = self._core.search(me, None, kind="note", query=query, filters=metadata_filters, senders=None,
                                      min_confidence=min_confidence, since=since, until=until, limit=limit,
                                      profile=ranking_profile, semantic=semantic_search, tags=tags)  # fmt: skip
            return [shapes.note_dict(m) for m in found]

        return await self._run(run)

    async def search_agent_notes(
        self, agent_name: str, agent_project_id: str | None = None, query: str | None = None,
        tags: Sequence[str] | None = None, since: When = None, until: When = None, limit: int = 50,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """claude-slack's name for :meth:`search_my_notes`."""
        return await self.search_my_notes(agent_name, query, tags, agent_project_id, since=since, until=until,
                                          limit=limit)  # fmt: skip

    async def get_recent_notes(
        self, agent_name: str, agent_project_id: str | None = None, limit: int = 20, session_id: str | None = None
    ) -> list[dict[str, Any]]:  # fmt: skip
        """An agent's newest notes, newest first (``session_id``: those written with that ``session_context``)."""
        filters = None if session_id is None else {"session_context": session_id}
        return await self.search_my_notes(agent_name, agent_project_id=agent_project_id, metadata_filters=filters,
                                          limit=limit)  # fmt: skip

    async def peek_agent_notes(
        self, target_agent_name: str, target_agent_project_id: str | None = None,
        requester_agent_name: str | None = None, requester_project_id: str | None = None, query: str | None = None,
        limit: int = 20,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Another agent's notes; every peek is recorded in engram's event log (``note.peeked``)."""
        found = await self._run(self._core.peek, target_agent_name, requester_agent_name, requester_project_id, query,
                                limit)  # fmt: skip
        return [shapes.note_dict(m) for m in found]


def _with_type(filters: Mapping[str, Any] | None, message_type: str | None) -> Mapping[str, Any] | None:
    """claude-slack's legacy ``message_type``: a ``type`` condition unless the filter has one."""
    if message_type is None:
        return filters
    if filters is None:
        return {"type": message_type}
    return filters if "type" in filters else {**filters, "type": message_type}


__all__ = ["ClaudeSlackAPI"]
