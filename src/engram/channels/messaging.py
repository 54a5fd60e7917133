"""The messaging half of an agent acting on channels: create, join, send, DM, edit, delete, read, mark read, feedback.

Who reads what: a ``global`` channel is in every agent's scope, a ``project`` channel in its project's
agents' scope. ``open`` channels are readable by every agent in scope; ``members`` channels by members
(anyone in scope may join); ``private`` channels by members (join by invitation only). A DM channel is
readable by its two agents, a notes channel by its owner (and, audited, by an actor with ``notes:read-all``).
Sending needs membership with the ``send`` capability.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engram.channels import _layout as layout
from engram.channels.hub import DISCOVERABILITY, DM_POLICIES, Writer, join
from engram.channels.model import CAPABILITIES, MEMBER_CAPABILITIES, Access, Agent, Channel, Event, Member, Message
from engram.errors import (
    AgentNotFoundError,
    ChannelArchivedError,
    ChannelExistsError,
    ChannelNotFoundError,
    DirectMessageBlockedError,
    InvalidInputError,
    MessageNotFoundError,
    NotAMemberError,
)
from engram.store.ops import GetOp
from engram.store.reader import Reader

if TYPE_CHECKING:
    from engram.channels.hub import Channels

ACCESS = ("open", "members", "private")
#: How far one agent's feedback moves a confidence (see :meth:`Actor.feedback`).
FEEDBACK_STEP = 0.1


class Messaging:
    """Channels, membership, messages, DMs and feedback (the base of :class:`~engram.channels.Actor`)."""

    def __init__(self, hub: Channels, agent: Agent, *, read_all_notes: bool = False) -> None:
        self.hub = hub
        self.agent = agent
        self.id = agent.id
        self.read_all_notes = read_all_notes

    # ------------------------------------------------------------------ channels

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
        self._live(found)

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
        self._live(found)
        self.hub.agent(agent)
        caps = _capabilities(capabilities)

        def op(w: Writer) -> None:
            join(w, found, agent, caps)
            w.emit("member.invited", found.id, agent=agent, by=self.id)

        self.hub.write(self.id, f"invite {agent} to {found.id}", op)
        return self._member_of(found, agent)

    def set_capabilities(self, channel: str, agent: str, capabilities: Sequence[str]) -> Member:
        """Change a member's capabilities (needs ``manage``)."""
        found = self.resolve(channel)
        self._needs(found, "manage")
        caps = _capabilities(capabilities)
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

    # ------------------------------------------------------------------ messages

    def send(
        self, channel: str, content: str, *, metadata: Mapping[str, Any] | None = None,
        confidence: float | None = None, reply_to: str | None = None,
    ) -> Message:  # fmt: skip
        """Post a message (one commit: the message, its channel's counter and a ``message.created`` event).

        ``@agent`` mentions must name registered agents; ``reply_to`` a message of the same channel."""
        found = self.resolve(channel)
        return self.post(found, "message", content, metadata=metadata, confidence=confidence, reply_to=reply_to)

    def dm(self, agent: str, content: str, **fields: Any) -> Message:
        """Send a direct message (the DM channel is made on first use), if the recipient's policy allows it."""
        other = self.hub.agent(agent)
        if other.id == self.id:
            raise InvalidInputError("an agent cannot send a direct message to itself: write a note")
        if self.id in other.block or other.dm_policy == "closed":
            raise DirectMessageBlockedError(f"{other.id} does not accept direct messages from {self.id}")
        if other.dm_policy == "restricted" and self.id not in other.allow:
            raise DirectMessageBlockedError(f"{other.id} accepts direct messages only from its allow list")
        cid = layout.dm_id(self.id, other.id)
        value = {"name": cid, "kind": "dm", "scope": "global", "project": None, "access": "private",
                 "description": "", "default": False, "archived": False, "count": 0, "owner": None}  # fmt: skip

        def make(w: Writer) -> Channel:
            if w.get(layout.CHANNELS, cid) is None:
                w.put(layout.CHANNELS, cid, value)
                w.emit("channel.created", cid, kind="dm")
                for who in (self.id, other.id):
                    join(w, Channel.from_value(cid, value), who, ("send",))
            return Channel.from_value(cid, value)

        return self.post(Channel.from_value(cid, value), "message", content, make=make, **fields)

    def post(
        self, channel: Channel, kind: str, content: str, *, metadata: Mapping[str, Any] | None = None,
        confidence: float | None = None, reply_to: str | None = None, tags: Any = None, breadcrumbs: Any = None,
        session: Mapping[str, Any] | None = None, make: Any = None, then: Any = None,
    ) -> Message:  # fmt: skip
        """Write one message or note to a channel (the path ``send``, ``dm`` and ``write_note`` share)."""
        op = self._post_op(channel, kind, content, metadata=metadata, confidence=confidence, reply_to=reply_to,
                           tags=tags, breadcrumbs=breadcrumbs, session=session, make=make, then=then)  # fmt: skip
        return self.hub.write(self.id, f"{kind} to {channel.id}", op)

    def send_many(self, channel: str, messages: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Post many messages to one channel as one commit (an import): each a dict of :meth:`send`'s keyword
        arguments plus ``content``. All or nothing."""
        found = self.resolve(channel)
        ops = [self._post_op(found, "message", **dict(m)) for m in messages]
        return self.hub.write(self.id, f"{len(ops)} messages to {found.id}", lambda w: [op(w) for op in ops])

    def _post_op(
        self, channel: Channel, kind: str, content: str, *, metadata: Mapping[str, Any] | None = None,
        confidence: float | None = None, reply_to: str | None = None, tags: Any = None, breadcrumbs: Any = None,
        session: Mapping[str, Any] | None = None, make: Any = None, then: Any = None,
    ) -> Callable[[Writer], Message]:  # fmt: skip
        hub = self.hub
        text = layout.check_content(content, hub.max_content)
        meta = layout.check_json(metadata, "metadata", hub.max_metadata)
        ctx = layout.check_json(session, "session", hub.max_metadata)
        conf = layout.DEFAULT_CONFIDENCE if confidence is None else layout.check_confidence(confidence)
        tag_list, crumbs = layout.check_tags(tags), layout.check_breadcrumbs(breadcrumbs)
        named = layout.mentions(text)
        parent = None if reply_to is None else layout.parse_message_id(reply_to)
        if parent is not None and parent[0] != channel.id:
            raise InvalidInputError(f"reply_to {reply_to!r} is not a message of {channel.id}")

        def op(w: Writer) -> Message:
            found = make(w) if make is not None else channel
            stored = w.get(layout.CHANNELS, found.id)
            if stored is None:
                raise ChannelNotFoundError(f"no channel {found.id!r}")
            self._live(Channel.from_value(found.id, stored))
            member = w.get(layout.members_ns(found.id), self.id)
            if member is None or "send" not in member["capabilities"]:
                raise NotAMemberError(f"{self.id} may not send to {found.id}: join it first")
            for name in named:
                if w.get(layout.AGENTS, name) is None:
                    raise AgentNotFoundError(f"@{name} names no registered agent")
            thread = None
            if parent is not None:
                replied = w.get(layout.messages_ns(found.id), layout.seq_key(parent[1]))
                if replied is None:
                    raise MessageNotFoundError(f"no message {reply_to!r} to reply to")
                thread = replied.get("thread") or reply_to
            number = int(stored.get("count", 0)) + 1
            w.put(layout.CHANNELS, found.id, {**stored, "count": number})
            value = {"kind": kind, "channel": found.id, "number": number, "project": stored.get("project"),
                     "sender": self.id, "content": text, "text": layout.embedded_text(text, tag_list, crumbs),
                     "metadata": meta, "confidence": conf, "base_confidence": conf, "reply_to": reply_to,
                     "thread": thread, "mentions": named, "tags": tag_list, "breadcrumbs": crumbs, "session": ctx,
                     "time": w.now, "edited": False, "deleted": False, "feedback": {}}  # fmt: skip
            w.put(layout.messages_ns(found.id), layout.seq_key(number), value, text=True)
            mid = layout.message_id(found.id, number)
            w.emit(f"{kind if kind == 'note' else 'message'}.created", found.id, mid, sender=self.id, mentions=named)
            if then is not None:
                then(w, mid)
            return _message(value, w.now)

        return op

    def messages(
        self, channel: str, *, limit: int = 50, after: int | None = None, at: Any = None
    ) -> list[Message]:  # fmt: skip
        """A channel's messages, oldest first: the last ``limit``, or the first ``limit`` after message number
        ``after``; ``at`` reads the channel as it was at a ref or time. Deleted messages are left out."""
        reader = self.hub.reader(at)
        found = self.readable_channel(channel)
        count = self.hub.channel(found.id, reader).count if at is not None else found.count
        if not isinstance(limit, int) or limit < 0:
            raise InvalidInputError(f"limit must be a non-negative integer, got {limit!r}")
        start = max(count - limit, 0) + 1 if after is None else after + 1
        numbers = range(start, min(count, start + limit - 1) + 1)
        ops = [GetOp(layout.messages_ns(found.id), layout.seq_key(n), False) for n in numbers]
        items = reader.batch(ops) if hasattr(reader, "batch") else [reader.get(o.namespace, o.key) for o in ops]
        return [Message.from_item(i) for i in items if i is not None and not i.value.get("deleted")]

    def message(self, message_id: str, *, at: Any = None) -> Message:
        """One message or note this agent may read, as it is now or was at ``at``."""
        channel, number = layout.parse_message_id(message_id)
        found = self._readable_id(channel)
        item = self.hub.reader(at).get(layout.messages_ns(found.id), layout.seq_key(number))
        if item is None:
            raise MessageNotFoundError(f"no message {message_id!r}")
        return Message.from_item(item)

    def message_history(self, message_id: str) -> list[Message | None]:
        """Every version of a message, newest first (None where it did not exist): edits, feedback, deletion."""
        channel, number = layout.parse_message_id(message_id)
        found = self._readable_id(channel)
        versions = self.hub.memory.history(layout.messages_ns(found.id), layout.seq_key(number))
        return [None if v.item is None else Message.from_item(v.item) for v in versions]

    def edit(
        self, message_id: str, *, content: str | None = None, metadata: Mapping[str, Any] | None = None,
        confidence: float | None = None,
    ) -> Message:  # fmt: skip
        """Edit one's own message or note; the old version stays in history and every index follows in the
        same commit."""
        text = None if content is None else layout.check_content(content, self.hub.max_content)
        meta = None if metadata is None else layout.check_json(metadata, "metadata", self.hub.max_metadata)
        conf = None if confidence is None else layout.check_confidence(confidence)

        def change(v: dict[str, Any]) -> dict[str, Any]:
            if v["sender"] != self.id:
                raise NotAMemberError(f"only {v['sender']} may edit {message_id}")
            if text is not None:
                v["content"], v["mentions"] = text, layout.mentions(text)
                v["text"] = layout.embedded_text(text, v.get("tags", ()), v.get("breadcrumbs", ()))
            if meta is not None:
                v["metadata"] = meta
            if conf is not None:
                v["base_confidence"] = conf
                v["confidence"] = _confidence(conf, v.get("feedback", {}))
            v["edited"] = True
            return v

        return self._change(message_id, "edited", change)

    def delete(self, message_id: str) -> None:
        """Soft-delete a message (its sender, or a channel manager): it leaves every index in the same commit and
        its earlier versions stay in history."""
        channel, _ = layout.parse_message_id(message_id)
        found = self._readable_id(channel)
        member = self.member(found)
        manager = member is not None and "manage" in member.capabilities

        def change(v: dict[str, Any]) -> dict[str, Any]:
            if v["sender"] != self.id and not manager:
                raise NotAMemberError(f"only {v['sender']} or a manager of {found.id} may delete {message_id}")
            return {**v, "deleted": True, "content": "", "text": "", "metadata": {}}

        self._change(message_id, "deleted", change)

    def feedback(self, target: str, worked: bool, *, note: str | None = None) -> Message:
        """Record whether a message's or note's advice worked; its confidence moves by a bounded rule:

        ``confidence = clamp(base + 0.1 * (agents it worked for - agents it failed), 0, 1)``, where ``base`` is
        the confidence it was written with and each agent's latest feedback counts once. The feedback itself
        is a versioned item; the confidence's history is the message's history."""
        if not isinstance(worked, bool):
            raise InvalidInputError(f"worked must be true or false, got {worked!r}")
        if note is not None:
            layout.check_content(note, self.hub.max_content)
        channel, number = layout.parse_message_id(target)

        def change(v: dict[str, Any]) -> dict[str, Any]:
            votes = {**v.get("feedback", {}), self.id: worked}
            return {**v, "feedback": votes, "confidence": _confidence(v["base_confidence"], votes)}

        def record(w: Writer) -> None:
            w.put(layout.feedback_ns(channel, number), self.id, {"worked": worked, "note": note, "time": w.now})

        return self._change(target, "feedback", change, record)

    def mark_read(self, channel: str, upto: int | None = None) -> Member:
        """Move this agent's read cursor to message number ``upto`` (default: the newest); it is written."""
        found = self.readable_channel(channel)
        number = found.count if upto is None else upto
        if not isinstance(number, int) or not 0 <= number <= found.count:
            raise InvalidInputError(f"upto must be a message number in 0..{found.count}, got {upto!r}")
        self._set_member(found, self.id, "member.read", read=number)
        return self._member_of(found)

    def unread(self, channel: str) -> int:
        """How many messages of a channel came after this agent's read cursor."""
        found = self.readable_channel(channel)
        member = self.member(found)
        return found.count - (member.read if member else 0)

    # ------------------------------------------------------------------ agents and events

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

    def events(self, after: int = 0, *, topics: Sequence[str] | None = None, limit: int = 100) -> list[Event]:
        """Events after a cursor that this agent may see (its readable channels' and its own notes')."""
        return [e for e in self.hub.read_events(after, limit=limit, topics=topics) if self.may_see(e)]

    def subscribe(
        self, topics: Sequence[str] | None = None, after: int | None = None, *, poll: float = 0.02,
        timeout: float | None = None,
    ) -> Iterator[Event]:  # fmt: skip
        """Yield the events this agent may see as they are written (any process), muted channels left out."""
        return self.hub.subscribe(topics, after, poll=poll, timeout=timeout, accept=self.wants)

    # ------------------------------------------------------------------ internals

    def may_see(self, event: Event) -> bool:
        """True when this agent may see an event (one of a channel it may read, or of no channel)."""
        if event.channel is None:
            return True
        try:
            return self.can_read(self.hub.channel(event.channel))
        except ChannelNotFoundError:
            return False

    def wants(self, event: Event) -> bool:
        """True when an event belongs in this agent's subscription: one it may see, not of a channel it muted."""
        if not self.may_see(event) or event.channel is None:
            return self.may_see(event)
        member = self.member(self.hub.channel(event.channel))
        return member is None or not member.muted or event.actor == self.id

    def _readable_id(self, channel: str) -> Channel:
        found = self.hub.channel(channel)
        if not self.can_read(found):
            if found.kind == "notes" or found.access == "private":
                raise MessageNotFoundError(f"no message in {channel!r} that {self.id} may read")
            raise NotAMemberError(f"{self.id} is not a member of {found.id}")
        return found

    def _change(self, message_id: str, what: str, change: Any, extra: Any = None) -> Message:
        channel, number = layout.parse_message_id(message_id)
        found = self._readable_id(channel)
        self._live(found)
        ns, key = layout.messages_ns(found.id), layout.seq_key(number)

        def op(w: Writer) -> Message:
            value = w.get(ns, key)
            if value is None or value.get("deleted"):
                raise MessageNotFoundError(f"no message {message_id!r}")
            updated = change(value)
            w.put(ns, key, updated, text=not updated.get("deleted"))
            if extra is not None:
                extra(w)
            topic = "note" if value["kind"] == "note" else "message"
            w.emit(f"{topic}.{what}", found.id, message_id, confidence=updated["confidence"])
            return _message(updated, w.now)

        return self.hub.write(self.id, f"{what} {message_id}", op)

    def _needs(self, channel: Channel, capability: str) -> None:
        member = self.member(channel)
        if member is None or capability not in member.capabilities:
            raise NotAMemberError(f"{self.id} lacks the {capability!r} capability in {channel.id}")

    def _live(self, channel: Channel) -> None:
        if channel.archived:
            raise ChannelArchivedError(f"{channel.id} is archived: it can be read, not written")

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


def _capabilities(capabilities: Sequence[str]) -> tuple[str, ...]:
    caps = tuple(dict.fromkeys(capabilities))
    bad = [c for c in caps if c not in CAPABILITIES]
    if bad or isinstance(capabilities, str):
        raise InvalidInputError(f"capabilities must be among {', '.join(CAPABILITIES)}, got {capabilities!r}")
    return caps


def _confidence(base: float, votes: Mapping[str, bool]) -> float:
    worked = sum(1 for v in votes.values() if v)
    return round(min(1.0, max(0.0, base + FEEDBACK_STEP * (worked - (len(votes) - worked)))), 6)


def _message(value: dict[str, Any], now: int) -> Message:
    from datetime import UTC, datetime

    from engram.store.item import Item

    stamp = datetime.fromtimestamp(now / 1000, tz=UTC)
    return Message.from_item(Item((), "", value, stamp, stamp))
