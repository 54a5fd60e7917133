"""The membership part of an agent acting on channels: create, resolve, join, leave, invite, capabilities, mute,
archive; who may read what; the agent's own profile.

Who reads what: a ``global`` channel is in every agent's scope, a ``project`` channel in its project's
agents' scope. ``open`` channels are readable by every agent in scope; ``members`` channels by members
(anyone in scope may join); ``private`` channels by members (join by invitation only). A DM channel is
readable by its two agents, a notes channel by its owner (and, audited, by an actor with ``notes:read-all``).
Sending needs membership with the ``send`` capability.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engram.channels import _layout as layout
from engram.channels._steps import ACCESS, DISCOVERABILITY, DM_POLICIES, Writer, check_capabilities, check_live, join
from engram.channels.hub import Hub
from engram.channels.model import CAPABILITIES, MEMBER_CAPABILITIES, Access, Agent, Channel, Member
from engram.errors import ChannelExistsError, ChannelNotFoundError, InvalidInputError, NotAMemberError
from engram.store.reader import Reader


class Membership:
    """Channels, memberships and the agent's profile (the base of :class:`~engram.channels.Actor`)."""

    def __init__(self, hub: Hub, agent: Agent, *, read_all_notes: bool = False) -> None:
        self.hub = hub
        self.agent = agent
        self.id = agent.id
        self.read_all_notes = read_all_notes

    def create_channel(
        self, name: str, *, scope: str = "project", access: Access = "open", description: str = "",
        default: bool = False,
    ) -> Channel:  # fmt: skip
        """Create a channel and join it with every capability; a ``default`` channel is joined by every agent in
        its scope now and at registration (unless they opt out)."""
        layout.check_name(name)
        if scope not in ("global", "project"):
            raise InvalidInputError(f"scope must be 'global' or 'project', got {scope!r}")
        if access not in ACCESS:
            raise InvalidInputError(f"access must be one of {', '.join(ACCESS)}, got {access!r}")
        if scope == "project" and self.agent.project is None:
            raise InvalidInputError("a global agent has no project: create a 'global' channel")
        project = self.agent.project if scope == "project" else None
        cid = layout.channel_id(name, project)
        value = {"name": name, "kind": "channel", "scope": scope, "project": project, "access": access,
                 "description": description, "default": default, "archived": False, "count": 0,
                 "owner": self.id}  # fmt: skip

        def op(w: Writer) -> Channel:
            if w.get(layout.CHANNELS, cid) is not None:
                raise ChannelExistsError(f"channel {cid!r} exists")
            w.put(layout.CHANNELS, cid, value)
            w.emit("channel.created", cid, name=name, scope=scope, access=access)
            channel = Channel.from_value(cid, value)
            join(w, channel, self.id, CAPABILITIES)
            if default:
                for agent in self.hub.agents():
                    if agent.id != self.id and cid not in agent.opted_out and (project in (None, agent.project)):
                        join(w, channel, agent.id, MEMBER_CAPABILITIES)
            return channel

        return self.hub.write(self.id, f"create channel {cid}", op)

    def resolve(self, channel: str, reader: Reader | None = None) -> Channel:
        """A channel by id (``acme:debugging``) or by name (``debugging``: this agent's project's, else the
        global one); :class:`ChannelNotFoundError` when none exists or it is private and not this agent's."""
        if not isinstance(channel, str) or not channel:
            raise InvalidInputError(f"a channel is named by a non-empty string, got {channel!r}")
        candidates = [channel] if ":" in channel else [
            layout.channel_id(channel, p) for p in (self.agent.project, None) if p or p is None
        ]  # fmt: skip
        for cid in candidates:
            try:
                found = self.hub.channel(cid, reader)
            except ChannelNotFoundError:
                continue
            hidden = found.access == "private" or found.kind != "channel" or not self.in_scope(found)
            if hidden and not self.can_read(found):
                break  # private, DM, notes or other projects' channels: invisible to non-members
            return found
        raise ChannelNotFoundError(f"no channel {channel!r} that {self.id} may see")

    def member(self, channel: Channel, agent: str | None = None) -> Member | None:
        """``agent``'s (default: this agent's) membership of a channel, or None."""
        item = self.hub.memory.get(layout.members_ns(channel.id), agent or self.id)
        if item is None:
            return None
        v = item.value
        return Member(item.key, channel.id, tuple(v["capabilities"]), bool(v["muted"]), int(v["read"]))

    def in_scope(self, channel: Channel) -> bool:
        """True when the channel is in this agent's scope (global, or of its project)."""
        return channel.kind == "channel" and (channel.scope == "global" or channel.project == self.agent.project)

    def can_read(self, channel: Channel) -> bool:
        """True when this agent may read the channel (see the module docstring)."""
        if channel.kind == "notes":
            return channel.owner == self.id
        if channel.kind == "channel" and channel.access == "open" and self.in_scope(channel):
            return True
        return self.member(channel) is not None

    def readable(self) -> list[Channel]:
        """Every channel (not notes) this agent may read."""
        directory = self.hub.directory()
        mine = directory.memberships(self.id)
        return [c for c in directory.channels if c.kind != "notes"
                and (c.id in mine or (c.kind == "channel" and c.access == "open" and self.in_scope(c)))]  # fmt: skip

    def list_channels(self, *, include_archived: bool = False) -> list[Channel]:
        """Channels this agent may read or join (DMs included, notes channels not)."""
        mine = {c.id for c in self.readable()}
        return [c for c in self.hub.directory().channels if (include_archived or not c.archived)
                and c.kind != "notes" and (c.id in mine or (self.in_scope(c) and c.access == "members"))]  # fmt: skip

    def readable_channel(self, channel: str, reader: Reader | None = None) -> Channel:
        """Resolve a channel this agent may read; :class:`NotAMemberError` when it may not."""
        found = self.resolve(channel, reader)
        if not self.can_read(found):
            raise NotAMemberError(f"{self.id} is not a member of {found.id}")
        return found

    def join(self, channel: str) -> Member:
        """Join a channel in scope whose access is ``open`` or ``members``."""
        found = self.resolve(channel)
        if found.kind != "channel" or not self.in_scope(found) or found.access == "private":
            raise NotAMemberError(f"{found.id} can only be joined by invitation")
        check_live(found)

        def op(w: Writer) -> None:
            join(w, found, self.id, MEMBER_CAPABILITIES)
            if found.id in self.agent.opted_out:
                self._update_agent(w, opted_out=[c for c in self.agent.opted_out if c != found.id])

        self.hub.write(self.id, f"join {found.id}", op)
        return self._member_of(found)

    def leave(self, channel: str) -> None:
        """Leave a channel (a default channel is not joined again automatically)."""
        found = self.resolve(channel)
        self._needs(found, "leave")

        def op(w: Writer) -> None:
            w.delete(layout.members_ns(found.id), self.id)
            w.delete(layout.memberships_ns(self.id), found.id)
            if found.default:
                self._update_agent(w, opted_out=sorted({*self.agent.opted_out, found.id}))
            w.emit("member.left", found.id, agent=self.id)

        self.hub.write(self.id, f"leave {found.id}", op)

    def invite(self, channel: str, agent: str, capabilities: Sequence[str] = MEMBER_CAPABILITIES) -> Member:
        """Add another agent to a channel (needs the ``invite`` capability)."""
        found = self.resolve(channel)
        self._needs(found, "invite")
        check_live(found)
        self.hub.agent(agent)
        caps = check_capabilities(capabilities)

        def op(w: Writer) -> None:
            join(w, found, agent, caps)
            w.emit("member.invited", found.id, agent=agent, by=self.id)

        self.hub.write(self.id, f"invite {agent} to {found.id}", op)
        return self._member_of(found, agent)

    def set_capabilities(self, channel: str, agent: str, capabilities: Sequence[str]) -> Member:
        """Change a member's capabilities (needs ``manage``)."""
        found = self.resolve(channel)
        self._needs(found, "manage")
        caps = check_capabilities(capabilities)
        self._set_member(found, agent, "member.updated", capabilities=list(caps))
        return self._member_of(found, agent)

    def mute(self, channel: str, muted: bool = True) -> Member:
        """Mute (or unmute) a channel: its events are left out of this agent's subscription."""
        found = self.resolve(channel)
        self._set_member(found, self.id, "member.muted", muted=bool(muted))
        return self._member_of(found)

    def archive(self, channel: str) -> Channel:
        """Archive a channel (needs ``manage``): it stays readable and searchable, and takes no more writes."""
        found = self.resolve(channel)
        self._needs(found, "manage")

        def op(w: Writer) -> None:
            value = w.get(layout.CHANNELS, found.id) or {}
            w.put(layout.CHANNELS, found.id, {**value, "archived": True})
            w.emit("channel.archived", found.id)

        self.hub.write(self.id, f"archive {found.id}", op)
        return self.hub.channel(found.id)

    def members(self, channel: str) -> list[Member]:
        """The members of a channel this agent may read."""
        found = self.readable_channel(channel)
        return [Member(i.key, found.id, tuple(i.value["capabilities"]), bool(i.value["muted"]), int(i.value["read"]))
                for i in self.hub.memory.iter_items(layout.members_ns(found.id))]  # fmt: skip

    def list_agents(self) -> list[Agent]:
        """Agents this agent may discover (public ones, its project's, and itself)."""
        mine = self.agent.project
        return [a for a in self.hub.agents() if a.id == self.id or a.discoverability == "public"
                or (a.discoverability == "project" and a.project is not None and a.project == mine)]  # fmt: skip

    def update_profile(self, **fields: Any) -> Agent:
        """Change this agent's description, status, dm_policy, allow, block or discoverability."""
        allowed = {"description", "status", "dm_policy", "allow", "block", "discoverability"}
        unknown = set(fields) - allowed
        if unknown:
            raise InvalidInputError(f"unknown profile fields: {', '.join(sorted(unknown))}")
        if fields.get("dm_policy", "open") not in DM_POLICIES:
            raise InvalidInputError(f"dm_policy must be one of {', '.join(DM_POLICIES)}, got {fields['dm_policy']!r}")
        if fields.get("discoverability", "public") not in DISCOVERABILITY:
            raise InvalidInputError(f"discoverability must be one of {', '.join(DISCOVERABILITY)}")
        for name in ("allow", "block"):
            if name in fields:
                fields[name] = sorted({self.hub.agent(a).id for a in layout.check_tags(fields[name])})
        for name in ("description", "status"):
            if name in fields and not isinstance(fields[name], str):
                raise InvalidInputError(f"{name} must be a string, got {fields[name]!r}")
        self.hub.write(self.id, f"update agent {self.id}", lambda w: self._update_agent(w, **fields))
        self.agent = self.hub.agent(self.id)
        return self.agent

    def _needs(self, channel: Channel, capability: str) -> None:
        member = self.member(channel)
        if member is None or capability not in member.capabilities:
            raise NotAMemberError(f"{self.id} lacks the {capability!r} capability in {channel.id}")

    def _member_of(self, channel: Channel, agent: str | None = None) -> Member:
        found = self.member(channel, agent)
        if found is None:
            raise NotAMemberError(f"{agent or self.id} is not a member of {channel.id}")
        return found

    def _set_member(self, channel: Channel, agent: str, topic: str, **fields: Any) -> None:
        def op(w: Writer) -> None:
            value = w.get(layout.members_ns(channel.id), agent)
            if value is None:
                raise NotAMemberError(f"{agent} is not a member of {channel.id}")
            w.put(layout.members_ns(channel.id), agent, {**value, **fields})
            w.emit(topic, channel.id, agent=agent, **fields)

        self.hub.write(self.id, f"{topic} {agent} in {channel.id}", op)

    def _update_agent(self, w: Writer, **fields: Any) -> None:
        value = w.get(layout.AGENTS, self.id) or {}
        w.put(layout.AGENTS, self.id, {**value, **fields})
        w.emit("agent.updated", agent=self.id, fields=sorted(fields))
