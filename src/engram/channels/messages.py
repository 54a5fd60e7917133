"""The messages part of an agent acting on channels: send, DM, post, read, history, edit, delete, feedback."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engram.channels import _layout as layout
from engram.channels._steps import Writer, change_message, confidence_from, confidence_of, join, post_message
from engram.channels.membership import Membership
from engram.channels.model import Channel, Message
from engram.errors import (
    DirectMessageBlockedError,
    InvalidInputError,
    MessageNotFoundError,
    NotAMemberError,
    PermissionDeniedError,
)
from engram.store.operations import GetOp


class Messages(Membership):
    """Messages and DMs, their history, edits and feedback (a part of :class:`~engram.channels.Actor`)."""

    def send(
        self, channel: str, content: str, *, metadata: Mapping[str, Any] | None = None,
        confidence: float | None = None, reply_to: str | None = None,
    ) -> Message:  # fmt: skip
        """Post a message (one commit: the message, its channel's counter and a ``message.created`` event).

        ``@agent`` mentions must name registered agents; ``reply_to`` a message of the same channel. Without
        ``confidence``, ``metadata["confidence"]`` is the message's confidence (as plain memory search reads it);
        given both, they must agree."""
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
        op = post_message(self.id, channel, kind, content, max_content=self.hub.max_content,
                          max_metadata=self.hub.max_metadata, metadata=metadata, confidence=confidence,
                          reply_to=reply_to, tags=tags, breadcrumbs=breadcrumbs, session=session, make=make,
                          then=then)  # fmt: skip
        return self.hub.write(self.id, f"{kind} to {channel.id}", op)

    def send_many(self, channel: str, messages: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Post many messages to one channel as one commit (an import): each a dict of :meth:`send`'s keyword
        arguments plus ``content``. All or nothing."""
        found = self.resolve(channel)
        hub = self.hub
        ops = [post_message(self.id, found, "message", max_content=hub.max_content, max_metadata=hub.max_metadata,
                            **dict(m)) for m in messages]  # fmt: skip
        return self.hub.write(self.id, f"{len(ops)} messages to {found.id}", lambda w: [op(w) for op in ops])

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
        same commit. ``metadata["confidence"]`` sets the confidence as in :meth:`send`."""
        text = None if content is None else layout.check_content(content, self.hub.max_content)
        meta = None if metadata is None else layout.check_json(metadata, "metadata", self.hub.max_metadata)
        conf = confidence_from(confidence, meta or {})

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
                v["confidence"] = confidence_of(conf, v.get("feedback", {}), self.hub.feedback_steps)
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

        ``confidence = clamp(base + up * (agents it worked for) + down * (agents it failed), 0, 1)``, where
        ``base`` is the confidence it was written with, ``up`` and ``down`` are the hub's ``feedback_steps``
        (default +0.1 and -0.1) and each agent's latest feedback counts once. An agent may not vote on its own
        message (:class:`PermissionDeniedError`; its own notes it may) nor on one it cannot read. The feedback
        itself is a versioned item; the confidence's history is the message's history."""
        if not isinstance(worked, bool):
            raise InvalidInputError(f"worked must be true or false, got {worked!r}")
        if note is not None:
            layout.check_content(note, self.hub.max_content, what="note", empty=True)
        channel, number = layout.parse_message_id(target)
        steps = self.hub.feedback_steps

        def change(v: dict[str, Any]) -> dict[str, Any]:
            if v["sender"] == self.id and v["kind"] != "note":
                raise PermissionDeniedError(f"{self.id} may not vote on its own message {target}")
            votes = {**v.get("feedback", {}), self.id: worked}
            return {**v, "feedback": votes, "confidence": confidence_of(v["base_confidence"], votes, steps)}

        def record(w: Writer) -> None:
            w.put(layout.feedback_ns(channel, number), self.id, {"worked": worked, "note": note, "time": w.now})

        return self._change(target, "feedback", change, record)

    def _readable_id(self, channel: str) -> Channel:
        found = self.hub.channel(channel)
        if not self.can_read(found):
            if found.kind == "notes" or found.access == "private":
                raise MessageNotFoundError(f"no message in {channel!r} that {self.id} may read")
            raise NotAMemberError(f"{self.id} is not a member of {found.id}")
        return found

    def _change(self, message_id: str, what: str, change: Any, extra: Any = None) -> Message:
        channel, _ = layout.parse_message_id(message_id)
        found = self._readable_id(channel)
        return self.hub.write(self.id, f"{what} {message_id}", change_message(found, message_id, what, change, extra))
