"""The synchronous half of :class:`engram.compat.claude_slack.ClaudeSlackAPI`: each claude-slack call as calls on
engram's public channels API (:class:`engram.channels.Channels` and the :class:`~engram.channels.Actor` of the
agent it names). The async API runs each method on a worker thread.

claude-slack names the acting agent in every call; engram acts as an agent (``hub.as_agent``). An agent a call names
that is not registered yet is registered first (in the call's project, else the default project), as claude-slack
registers senders on first use. Calls claude-slack makes without an agent (``search_messages``, ``get_messages``,
``list_channels`` without ``agent_name``) are its administrative reads: they read every channel.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from engram.channels import Actor, Channel, Channels, Message, search
from engram.compat import _slack_shapes as shapes
from engram.errors import (
    AgentNotFoundError,
    ChannelExistsError,
    InvalidInputError,
    MessageNotFoundError,
    NotAMemberError,
)

#: The agent that creates the channels a call creates without naming its creator (``<name>-<project>`` for a
#: project's channels: a project channel's creator is an agent of that project).
SYSTEM_AGENT = "claude-slack"
#: claude-slack's ranking profiles (engram has the same four); a custom ``engram.store.ranking.Profile`` also works.
PROFILES = ("balanced", "quality", "recent", "similarity")
#: claude-slack's agent discoverability and DM policies (engram's have the same values).
DISCOVERABLE = ("public", "project", "private")


class SlackCore:
    """claude-slack's operations over one :class:`~engram.channels.Channels` hub (see the module docstring)."""

    def __init__(self, hub: Channels, *, project: str = shapes.DEFAULT_PROJECT, semantic: bool = True) -> None:
        self.hub = hub
        self.project = project
        self.semantic = semantic
        self._lock = threading.Lock()
        self._ready = False

    def setup(self) -> None:
        """Make what a claude-slack installation starts with: the default project and the default ``global:general``
        channel every agent joins. Idempotent; runs before the first call."""
        with self._lock:
            if self._ready:
                return
            self.ensure_project(self.project)
            system = self._agent(SYSTEM_AGENT, None, register=True)
            if not any(c.id == "global:general" for c in self.hub.list_channels_raw()):
                system.create_channel("general", scope="global", description="Global general channel",
                                      default=True)  # fmt: skip
            self._ready = True

    def ensure_project(self, project: str | None) -> None:
        """Register ``project`` unless it exists (a global call has none)."""
        if project is not None and project not in self.hub.projects():
            try:
                self.hub.create_project(project)
            except ChannelExistsError:
                if project not in self.hub.projects():  # it was not a concurrent registration after all
                    raise

    def _agent(self, name: Any, project: str | None, *, register: bool) -> Actor:
        """The actor of agent ``name``; registered first (in ``project``) when ``register`` and it is unknown."""
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"an agent is named by a non-empty string, got {name!r}")
        try:
            return self.hub.as_agent(name)
        except AgentNotFoundError:
            if not register:
                raise
        self.ensure_project(project)
        try:
            self.hub.register_agent(name, project=project)
        except ChannelExistsError:
            if name not in {a.id for a in self.hub.agents()}:  # it was not a concurrent registration after all
                raise
        return self.hub.as_agent(name)

    def actor(self, name: Any, project: str | None = None) -> Actor:
        """The acting agent of a call, registered on first use in ``project`` (default: the adapter's project)."""
        self.setup()
        return self._agent(name, project or self.project, register=True)

    def register_agent(
        self, name: str, project_id: str | None, description: str | None, dm_policy: str, discoverable: str,
        status: str,
    ) -> None:  # fmt: skip
        """Register an agent, or update the profile of one that exists (claude-slack's register is an upsert)."""
        self.setup()
        if discoverable not in DISCOVERABLE:
            raise InvalidInputError(f"Invalid discoverability: {discoverable!r}")
        fields: dict[str, Any] = {"dm_policy": dm_policy, "discoverability": discoverable}
        try:
            me = self.hub.as_agent(name)
        except AgentNotFoundError:
            self.ensure_project(project_id)
            self.hub.register_agent(name, project=project_id, description=description or "", **fields)
            me = self.hub.as_agent(name)
        me.update_profile(description=description or me.agent.description, status=status, **fields)

    def channel_of(self, me: Actor, channel_id: str) -> Channel:
        """The channel a claude-slack channel id names, as ``me`` sees it."""
        return me.resolve(shapes.channel_ref(channel_id, me.agent.project or self.project))

    def admin_channel(self, channel_id: str) -> Channel:
        """The channel a claude-slack channel id names, with no agent (a bare name: the default project's channel,
        else the global one)."""
        self.setup()
        ref = shapes.channel_ref(channel_id, self.project)
        candidates = [ref] if ":" in ref else [f"{self.project}:{ref}", f"global:{ref}"]
        for cid in candidates[:-1]:
            if any(c.id == cid for c in self.hub.list_channels_raw()):
                return self.hub.channel(cid)
        return self.hub.channel(candidates[-1])

    def create_channel(
        self, name: str, scope: str, access_type: str, project_id: str | None, description: str | None,
        created_by: str | None, created_by_project_id: str | None, is_default: bool,
    ) -> str:  # fmt: skip
        """Create a channel; its creator is ``created_by`` when that agent is of the channel's project, else the
        adapter's system agent of that scope."""
        self.setup()
        if scope not in ("global", "project"):
            raise InvalidInputError(f"scope must be 'global' or 'project', got {scope!r}")
        project = (project_id or self.project) if scope == "project" else None
        if project is not None and project.startswith(shapes.PROJECT_PREFIX):
            project = project.removeprefix(shapes.PROJECT_PREFIX)
        creator = None
        if created_by is not None:
            creator = self._agent(created_by, created_by_project_id or project, register=True)
            if scope == "project" and creator.agent.project != project:
                creator = None
        if creator is None:
            system = SYSTEM_AGENT if project is None else f"{SYSTEM_AGENT}-{project}"
            creator = self._agent(system, project, register=True)
        text = description or f"{scope.title()} {name} channel"
        made = creator.create_channel(name, scope=scope, access=access_type, description=text,  # type: ignore[arg-type]
                                      default=is_default)  # fmt: skip
        if creator.id != created_by and created_by is not None:
            self._agent(created_by, created_by_project_id, register=True).join(made.id)
        return made.id

    def join_channel(self, agent_name: str, project: str | None, channel_id: str) -> bool:
        """Join a channel; False when the agent may not (a private channel, or out of its scope)."""
        me = self.actor(agent_name, project)
        ref = shapes.channel_ref(channel_id, me.agent.project or self.project)
        found = self.hub.channel(ref) if ":" in ref else me.resolve(ref)  # a private channel exists, unjoinable
        if me.member(found) is not None:
            return True
        if found.kind != "channel" or found.access == "private" or not me.in_scope(found):
            return False
        me.join(found.id)
        return True

    def leave_channel(self, agent_name: str, project: str | None, channel_id: str) -> bool:
        """Leave a channel; False when the agent is not a member or may not leave it."""
        me = self.actor(agent_name, project)
        found = self.channel_of(me, channel_id)
        member = me.member(found)
        if member is None or "leave" not in member.capabilities:
            return False
        me.leave(found.id)
        return True

    def invite(self, channel_id: str, invitee: str, invitee_project: str | None, inviter: str,
               inviter_project: str | None) -> bool:  # fmt: skip
        """Add ``invitee`` to a channel (the inviter needs the invite capability: :class:`NotAMemberError`)."""
        me = self.actor(inviter, inviter_project)
        found = self.channel_of(me, channel_id)
        self.actor(invitee, invitee_project)
        me.invite(found.id, invitee)
        return True

    def list_channels(self, agent_name: str | None, project_id: str | None, scope_filter: str,
                      include_archived: bool) -> list[dict[str, Any]]:  # fmt: skip
        """Channels (not notes) by scope; with an agent, what it may do in each (``is_member``, ``can_join``, ...)."""
        self.setup()
        if scope_filter not in ("all", "global", "project"):
            raise InvalidInputError(f"scope_filter must be 'all', 'global' or 'project', got {scope_filter!r}")
        me = None if agent_name is None else self.actor(agent_name, project_id)
        out = []
        for channel in self.hub.list_channels_raw():
            if channel.kind == "notes" or (channel.archived and not include_archived):
                continue
            if scope_filter != "all" and channel.scope != scope_filter:
                continue
            if project_id is not None and channel.project not in (None, project_id):
                continue
            if me is not None and channel.kind == "dm" and not me.can_read(channel):
                continue
            entry = shapes.channel_dict(channel)
            if me is not None:
                member = me.member(channel)
                joinable = channel.kind == "channel" and channel.access != "private" and me.in_scope(channel)
                entry.update(is_member=member is not None, can_join=member is None and joinable,
                             can_send=member is not None and "send" in member.capabilities,
                             can_leave=member is not None and "leave" in member.capabilities)  # fmt: skip
            out.append(entry)
        return out

    def send(
        self, channel_id: str, sender: str, content: str, project: str | None, metadata: Mapping[str, Any] | None,
        thread_id: str | None,
    ) -> str:  # fmt: skip
        """Send a message; a sender not yet a member of an open channel in its scope joins it first."""
        me = self.actor(sender, project)
        found = self.channel_of(me, channel_id)
        if me.member(found) is None and found.kind == "channel" and found.access == "open" and me.in_scope(found):
            me.join(found.id)
        return me.send(found.id, content, metadata=metadata, reply_to=thread_id).id

    def direct(self, sender: str, recipient: str, content: str, sender_project: str | None,
               metadata: Mapping[str, Any] | None) -> str:  # fmt: skip
        """Send a direct message (``dm:<a>+<b>``); the recipient must be registered."""
        me = self.actor(sender, sender_project)
        return me.dm(recipient, content, metadata=metadata).id

    def all_channels(self, channel_ids: Sequence[str] | None, project_ids: Sequence[str] | None) -> list[str]:
        """Every message channel's id (claude-slack's administrative reads), or those named; ``project_ids`` keeps
        a project's channels (``"global"``: the global ones)."""
        self.setup()
        names = shapes.strings(channel_ids, "channel_ids")
        if names is not None:
            return [self.admin_channel(c).id for c in names]
        projects = shapes.strings(project_ids, "project_ids")
        return [c.id for c in self.hub.list_channels_raw() if c.kind != "notes" and (
            projects is None or ("global" in projects and c.scope == "global") or c.project in projects)]  # fmt: skip

    def search(
        self, me: Actor | None, channels: list[str] | None, *, kind: str = "message", query: str | None,
        filters: Mapping[str, Any] | None, senders: Sequence[str] | None, min_confidence: float | None,
        since: datetime | str | None, until: datetime | str | None, limit: int, profile: Any,
        semantic: bool | None, tags: Sequence[str] | None = None,
    ) -> list[Message]:  # fmt: skip
        """One engram search: as ``me`` (the channels it may read, or ``channels`` among them), else over
        ``channels`` with no permission check (claude-slack's administrative search)."""
        options: dict[str, Any] = {
            "senders": shapes.strings(senders, "sender_ids"), "filter": shapes.metadata_filter(filters),
            "min_confidence": min_confidence, "since": since, "until": until, "limit": limit, "profile": profile,
            "mode": None if (semantic if semantic is not None else self.semantic) else "keyword",
        }  # fmt: skip
        if tags:
            options.update(tags=shapes.strings(tags, "tags"), tags_mode="any")  # claude-slack ORs the tags
        if me is None:
            return list(search.run(self.hub, kind, channels or [], query=query, **options))
        if kind == "note":
            return list(me.search_my_notes(query, **options))
        ids = None if channels is None else [self.channel_of(me, c).id for c in channels]
        return list(me.search_messages(query, channels=ids, **options))

    def find(self, message_id: Any) -> Message:
        """A message or note by id, read with no agent (claude-slack's ``get_message``)."""
        if not isinstance(message_id, str) or "#" not in message_id:
            raise MessageNotFoundError(f"no message {message_id!r}")
        self.setup()
        cid, _, number = message_id.rpartition("#")
        channel = self.hub.channel(cid)
        if not number.isdigit():
            raise MessageNotFoundError(f"no message {message_id!r}")
        # newest first: message n is among the channel's newest count - n + 1 (a few more for equal send times)
        newer = max(channel.count - int(number), 0) + 8
        kind = "note" if channel.kind == "notes" else "message"
        for found in search.run(self.hub, kind, [channel.id], limit=newer):
            if found.id == message_id:
                return found
        raise MessageNotFoundError(f"no message {message_id!r}")

    def get_messages(
        self, channel_ids: Sequence[str] | None, sender_ids: Sequence[str] | None, message_ids: Sequence[str] | None,
        limit: int, since: datetime | str | None,
    ) -> list[Message]:  # fmt: skip
        """Messages, newest first, with no permission check (claude-slack's administrative read)."""
        if message_ids is not None:
            wanted = shapes.strings(message_ids, "message_ids") or []
            return [self.find(m) for m in wanted][:limit]
        channels = self.all_channels(channel_ids, None)
        return list(search.run(self.hub, "message", channels, senders=shapes.strings(sender_ids, "sender_ids"),
                               since=since, limit=limit))  # fmt: skip

    def update(self, message_id: str, content: str | None, metadata: Mapping[str, Any] | None,
               agent_name: str | None) -> bool:  # fmt: skip
        """Edit a message as its sender (or as ``agent_name``, who must be it): every version stays in history."""
        found = self.find(message_id)
        me = self.hub.as_agent(agent_name or found.sender)
        if me.id != found.sender:
            raise NotAMemberError(f"only {found.sender} may edit {message_id}")
        me.edit(message_id, content=content, metadata=metadata)
        return True

    def delete(self, message_id: str, agent_name: str | None) -> bool:
        """Soft-delete a message as its sender (or as ``agent_name``: its sender or a manager of its channel)."""
        found = self.find(message_id)
        self.hub.as_agent(agent_name or found.sender).delete(message_id)
        return True

    def write_note(
        self, agent_name: str, content: str, project: str | None, session_context: Any, tags: Sequence[str] | None,
        metadata: Mapping[str, Any] | None, confidence: float | None, breadcrumbs: Any,
    ) -> str:  # fmt: skip
        """Write a note: claude-slack's note metadata (``type: note``, ``tags``, ``session_context``) plus the
        caller's; ``confidence`` (or ``metadata["confidence"]``) is the note's confidence; breadcrumbs (a dict, or
        ``metadata["breadcrumbs"]``) are searchable."""
        me = self.actor(agent_name, project)
        extra = dict(metadata or {})
        crumbs = breadcrumbs if breadcrumbs is not None else extra.get("breadcrumbs")
        tag_list = shapes.strings(tags, "tags") or []
        meta = {"type": "note", "tags": tag_list, "session_context": session_context, **extra}
        if crumbs is not None and isinstance(crumbs, Mapping):
            meta["breadcrumbs"] = dict(crumbs)
        note = me.write_note(content, confidence=confidence, tags=tag_list, breadcrumbs=shapes.breadcrumbs_in(crumbs),
                             metadata=meta)  # fmt: skip
        return note.id

    def peek(self, target: str, requester: str | None, requester_project: str | None, query: str | None,
             limit: int) -> list[Message]:  # fmt: skip
        """Another agent's notes, read as ``requester`` (default: the system agent) with the audited
        ``notes:read-all`` scope."""
        self.setup()
        name = requester or SYSTEM_AGENT
        self.actor(name, requester_project)
        return list(self.hub.as_agent(name, read_all_notes=True).peek_notes(target, query=query, limit=limit))
