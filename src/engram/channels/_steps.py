"""What every channels operation is made of: the limits and value rules, the per-operation :class:`Writer`, and the
write steps the hub and its satellites share (join, post a message, change a message).

This module sits below the hub (:mod:`engram.channels.hub`) and every satellite, so none of them imports another
for this vocabulary. Write steps are functions returning an operation (``Callable[[Writer], T]``) for
:meth:`Hub.write <engram.channels.hub.Hub.write>` to run in one commit; they check nothing about who may act
(their callers do).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from engram.backends.base import now_ms
from engram.channels import _layout as layout
from engram.channels.model import CAPABILITIES, Channel, Event, Message
from engram.errors import (
    AgentNotFoundError,
    ChannelArchivedError,
    ChannelNotFoundError,
    InvalidConfidenceError,
    InvalidInputError,
    MessageNotFoundError,
    NotAMemberError,
)
from engram.store.item import Item
from engram.store.memory import Transaction

#: The longest message or note, in characters, unless the service is configured otherwise.
MAX_CONTENT = 32_000
#: The largest metadata (or session context) object, in characters of JSON.
MAX_METADATA = 32_000
DM_POLICIES = ("open", "restricted", "closed")
DISCOVERABILITY = ("public", "project", "private")
ACCESS = ("open", "members", "private")
#: How far one agent's feedback that the advice worked moves a confidence up (the default ``up`` step).
FEEDBACK_STEP = 0.1
#: How far one agent's vote moves a confidence, per kind of vote: ``up`` (it worked) and ``down`` (it did not),
#: unless the hub is configured otherwise (see :meth:`Actor.feedback <engram.channels.Actor.feedback>`).
FEEDBACK_STEPS: Mapping[str, float] = MappingProxyType({"up": FEEDBACK_STEP, "down": -FEEDBACK_STEP})


class Writer:
    """The items and events of one operation, buffered in one transaction."""

    def __init__(self, tx: Transaction, actor: str) -> None:
        self.tx = tx
        self.actor = actor
        self.now = now_ms()
        self._counters: dict[str, Any] | None = None
        self._buckets: dict[str, dict[str, Any]] = {}
        self.events: list[Event] = []

    def get(self, namespace: tuple[str, ...], key: str) -> dict[str, Any] | None:
        """The value at (namespace, key) as this operation sees it (its own writes included)."""
        item = self.tx.get(namespace, key)
        return None if item is None else dict(item.value)

    def put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any], text: bool = False) -> None:
        """Write an item; only messages and notes (``text=True``) are searchable, by their ``text`` field."""
        self.tx.put(namespace, key, value, ["text"] if text else False, ttl=None)

    def delete(self, namespace: tuple[str, ...], key: str) -> None:
        """Delete an item."""
        self.tx.delete(namespace, key)

    def emit(self, topic: str, channel: str | None = None, message: str | None = None, **data: Any) -> Event:
        """Append an event to the log, in this operation's commit (into the bucket of its sequence number)."""
        if self._counters is None:
            self._counters = self.get(layout.STATE, layout.COUNTERS) or {"events": 0}
        self._counters["events"] += 1
        seq = self._counters["events"]
        value = {"seq": seq, "topic": topic, "actor": self.actor, "time": self.now, "channel": channel,
                 "message": message, "data": data}  # fmt: skip
        key = layout.seq_key(layout.bucket_of(seq))
        bucket = self._buckets.get(key) or self.get(layout.EVENTS, key) or {"events": []}
        bucket["events"].append(value)
        self._buckets[key] = bucket
        self.put(layout.EVENTS, key, bucket)
        self.put(layout.STATE, layout.COUNTERS, self._counters)
        event = Event.from_value(value)
        self.events.append(event)
        return event


def join(w: Writer, channel: Channel, agent: str, capabilities: Sequence[str]) -> None:
    """Make ``agent`` a member of ``channel`` (no check: callers check permissions)."""
    if w.get(layout.members_ns(channel.id), agent) is not None:
        return
    w.put(layout.members_ns(channel.id), agent, {"capabilities": list(capabilities), "muted": False, "read": 0})
    w.put(layout.memberships_ns(agent), channel.id, {"time": w.now})
    w.emit("member.joined", channel.id, agent=agent)


def check_live(channel: Channel) -> None:
    """Raise :class:`ChannelArchivedError` when ``channel`` is archived (it can be read, not written)."""
    if channel.archived:
        raise ChannelArchivedError(f"{channel.id} is archived: it can be read, not written")


def check_capabilities(capabilities: Sequence[str]) -> tuple[str, ...]:
    """Member capabilities, de-duplicated in order; :class:`InvalidInputError` for an unknown one."""
    caps = tuple(dict.fromkeys(capabilities))
    bad = [c for c in caps if c not in CAPABILITIES]
    if bad or isinstance(capabilities, str):
        raise InvalidInputError(f"capabilities must be among {', '.join(CAPABILITIES)}, got {capabilities!r}")
    return caps


def check_feedback_steps(steps: Mapping[str, float] | None) -> dict[str, float]:
    """Feedback steps: :data:`FEEDBACK_STEPS` with the given kinds replaced; ``up`` in 0..1, ``down`` in -1..0."""
    if steps is None:
        return dict(FEEDBACK_STEPS)
    if not isinstance(steps, Mapping) or not set(steps) <= set(FEEDBACK_STEPS):
        raise InvalidInputError(f"feedback_steps maps 'up' and/or 'down' to a step, got {steps!r}")
    out = {**FEEDBACK_STEPS, **steps}
    for kind, low, high in (("up", 0.0, 1.0), ("down", -1.0, 0.0)):
        step = out[kind]
        if isinstance(step, bool) or not isinstance(step, int | float) or not low <= step <= high:
            raise InvalidInputError(f"feedback_steps[{kind!r}] must be a number in {low:g}..{high:g}, got {step!r}")
        out[kind] = float(step)
    return out


def confidence_of(base: float, votes: Mapping[str, bool], steps: Mapping[str, float] = FEEDBACK_STEPS) -> float:
    """A message's confidence after feedback: ``base`` plus ``steps["up"]`` per agent it worked for and
    ``steps["down"]`` (a negative step) per agent it did not, in 0..1."""
    worked = sum(1 for v in votes.values() if v)
    moved = base + steps["up"] * worked + steps["down"] * (len(votes) - worked)
    return round(min(1.0, max(0.0, moved)), 6)


def confidence_from(confidence: Any, metadata: Mapping[str, Any]) -> float | None:
    """The confidence a message is written with: ``confidence``, else ``metadata["confidence"]`` (as plain memory
    search reads an item's confidence), else None. Either is checked (0..1); both given must agree."""
    if "confidence" not in metadata:
        return None if confidence is None else layout.check_confidence(confidence)
    meta = layout.check_confidence(metadata["confidence"], "metadata.confidence")
    if confidence is not None and layout.check_confidence(confidence) != meta:
        raise InvalidConfidenceError(f"confidence={confidence!r} and metadata.confidence={meta!r} disagree: give one")
    return meta


def message_of(value: dict[str, Any], now: int) -> Message:
    """The :class:`Message` an operation just wrote (stamped with the operation's time)."""
    stamp = datetime.fromtimestamp(now / 1000, tz=UTC)
    return Message.from_item(Item((), "", value, stamp, stamp))


def post_message(
    sender: str, channel: Channel, kind: str, content: str, *, max_content: int = MAX_CONTENT,
    max_metadata: int = MAX_METADATA, metadata: Mapping[str, Any] | None = None, confidence: float | None = None,
    reply_to: str | None = None, tags: Any = None, breadcrumbs: Any = None, session: Mapping[str, Any] | None = None,
    make: Any = None, then: Any = None,
) -> Callable[[Writer], Message]:  # fmt: skip
    """The operation writing one message or note of ``sender`` to ``channel`` (arguments are checked now).

    ``make(writer)`` returns the channel, creating it on first use (a DM, a notes channel); ``then(writer,
    message id)`` runs in the same commit after the message is written."""
    text = layout.check_content(content, max_content)
    meta = layout.check_json(metadata, "metadata", max_metadata)
    ctx = layout.check_json(session, "session", max_metadata)
    given = confidence_from(confidence, meta)
    conf = layout.DEFAULT_CONFIDENCE if given is None else given
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
        check_live(Channel.from_value(found.id, stored))
        member = w.get(layout.members_ns(found.id), sender)
        if member is None or "send" not in member["capabilities"]:
            raise NotAMemberError(f"{sender} may not send to {found.id}: join it first")
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
                 "sender": sender, "content": text, "text": layout.embedded_text(text, tag_list, crumbs),
                 "metadata": meta, "confidence": conf, "base_confidence": conf, "reply_to": reply_to,
                 "thread": thread, "mentions": named, "tags": tag_list, "breadcrumbs": crumbs, "session": ctx,
                 "time": w.now, "edited": False, "deleted": False, "feedback": {}}  # fmt: skip
        w.put(layout.messages_ns(found.id), layout.seq_key(number), value, text=True)
        mid = layout.message_id(found.id, number)
        w.emit(f"{kind if kind == 'note' else 'message'}.created", found.id, mid, sender=sender, mentions=named)
        if then is not None:
            then(w, mid)
        return message_of(value, w.now)

    return op


def change_message(
    channel: Channel, message_id: str, what: str, change: Callable[[dict[str, Any]], dict[str, Any]],
    extra: Callable[[Writer], None] | None = None,
) -> Callable[[Writer], Message]:  # fmt: skip
    """The operation changing one message of ``channel`` (already permission-checked) by ``change(value)``,
    running ``extra(writer)`` in the same commit and emitting ``message.<what>`` (``note.<what>``)."""
    _, number = layout.parse_message_id(message_id)
    check_live(channel)
    ns, key = layout.messages_ns(channel.id), layout.seq_key(number)

    def op(w: Writer) -> Message:
        value = w.get(ns, key)
        if value is None or value.get("deleted"):
            raise MessageNotFoundError(f"no message {message_id!r}")
        updated = change(value)
        w.put(ns, key, updated, text=not updated.get("deleted"))
        if extra is not None:
            extra(w)
        topic = "note" if value["kind"] == "note" else "message"
        w.emit(f"{topic}.{what}", channel.id, message_id, confidence=updated["confidence"])
        return message_of(updated, w.now)

    return op
