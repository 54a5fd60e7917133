"""Value objects the channels service returns: agents, channels, members, messages, events, patterns."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from engram.channels import _layout as layout
from engram.store.item import Item

Scope = Literal["global", "project"]
Access = Literal["open", "members", "private"]
DmPolicy = Literal["open", "restricted", "closed"]
Discoverability = Literal["public", "project", "private"]
#: What a member may do in a channel.
CAPABILITIES = ("send", "invite", "manage", "leave")
MEMBER_CAPABILITIES = ("send", "invite", "leave")


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


@dataclass(frozen=True, slots=True)
class Agent:
    """A registered agent: an id, its project (None: a global agent) and how others may reach it."""

    id: str
    project: str | None
    description: str = ""
    status: str = "active"
    dm_policy: DmPolicy = "open"
    allow: tuple[str, ...] = ()
    block: tuple[str, ...] = ()
    discoverability: Discoverability = "public"
    opted_out: tuple[str, ...] = ()

    @classmethod
    def from_value(cls, agent_id: str, v: dict[str, Any]) -> Agent:
        """An agent from its stored value."""
        return cls(agent_id, v.get("project"), v.get("description", ""), v.get("status", "active"),
                   v.get("dm_policy", "open"), tuple(v.get("allow", ())), tuple(v.get("block", ())),
                   v.get("discoverability", "public"), tuple(v.get("opted_out", ())))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Channel:
    """A channel: ``kind`` is ``channel``, ``dm`` (two members) or ``notes`` (one agent's private notes)."""

    id: str
    name: str
    kind: str
    scope: Scope
    project: str | None
    access: Access
    description: str = ""
    default: bool = False
    archived: bool = False
    count: int = 0
    owner: str | None = None

    @classmethod
    def from_value(cls, channel_id: str, v: dict[str, Any]) -> Channel:
        """A channel from its stored value."""
        return cls(channel_id, v["name"], v["kind"], v["scope"], v.get("project"), v["access"],
                   v.get("description", ""), bool(v.get("default")), bool(v.get("archived")), int(v.get("count", 0)),
                   v.get("owner"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Member:
    """An agent's membership of a channel: capabilities, mute, and its read cursor (last message read)."""

    agent: str
    channel: str
    capabilities: tuple[str, ...]
    muted: bool = False
    read: int = 0


@dataclass(frozen=True, slots=True)
class Message:
    """A message or a note (``kind``), as stored at one version; ``score``/``explain`` come from a search."""

    id: str
    channel: str
    kind: str
    sender: str
    content: str
    metadata: dict[str, Any]
    confidence: float
    created_at: datetime
    updated_at: datetime
    reply_to: str | None = None
    thread: str | None = None
    mentions: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    breadcrumbs: tuple[dict[str, Any], ...] = ()
    session: dict[str, Any] = field(default_factory=dict)
    edited: bool = False
    deleted: bool = False
    feedback: dict[str, bool] = field(default_factory=dict)
    score: float | None = None
    explain: dict[str, Any] | None = None

    @property
    def number(self) -> int:
        """The message's position in its channel (1, 2, ...)."""
        return layout.parse_message_id(self.id)[1]

    @classmethod
    def from_item(cls, item: Item, score: float | None = None, explain: dict[str, Any] | None = None) -> Message:
        """A message from its stored item."""
        v = item.value
        return cls(
            id=layout.message_id(v["channel"], int(v["number"])),
            channel=v["channel"],
            kind=v["kind"],
            sender=v["sender"],
            content=v["content"],
            metadata=v.get("metadata", {}),
            confidence=float(v.get("confidence", layout.DEFAULT_CONFIDENCE)),
            created_at=_dt(int(v["time"])),
            updated_at=item.updated_at,
            reply_to=v.get("reply_to"),
            thread=v.get("thread"),
            mentions=tuple(v.get("mentions", ())),
            tags=tuple(v.get("tags", ())),
            breadcrumbs=tuple(v.get("breadcrumbs", ())),
            session=v.get("session") or {},
            edited=bool(v.get("edited")),
            deleted=bool(v.get("deleted")),
            feedback=dict(v.get("feedback", {})),
            score=score,
            explain=explain,
        )


class MessageResults(list[Message]):
    """Messages a search found, best first, and how the search ran (``degraded`` says why it ran in a
    weaker mode than asked, e.g. keyword because the embedder is unavailable; None when it did not).

    ``has_more`` says whether more results follow this page; ``next_offset`` is the ``offset`` that asks for
    them (None when there are none). ``hint`` says why an empty result may not be what was meant (several tags
    match with *all* of them by default: ``tags_mode="any"`` matches any); None otherwise."""

    mode: str
    degraded: str | None
    has_more: bool
    next_offset: int | None
    hint: str | None

    def __init__(
        self, items: list[Message], mode: str, degraded: str | None = None, *, has_more: bool = False,
        next_offset: int | None = None, hint: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(items)
        self.mode = mode
        self.degraded = degraded
        self.has_more = has_more
        self.next_offset = next_offset if has_more else None
        self.hint = hint


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of the persistent event log; ``seq`` is its cursor (strictly increasing, no gaps)."""

    seq: int
    topic: str
    actor: str
    time: datetime
    channel: str | None = None
    message: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_value(cls, v: dict[str, Any]) -> Event:
        """An event from its stored value."""
        return cls(int(v["seq"]), v["topic"], v["actor"], _dt(int(v["time"])), v.get("channel"), v.get("message"),
                   v.get("data", {}))  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        """The event as JSON (for SSE and MCP)."""
        return {"seq": self.seq, "topic": self.topic, "actor": self.actor, "time": self.time.isoformat(),
                "channel": self.channel, "message": self.message, "data": self.data}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Pattern:
    """A cluster of similar messages: its members (oldest first), a representative text and the note that
    records it (None unless written)."""

    id: str
    members: tuple[str, ...]
    representative: str
    count: int
    channels: tuple[str, ...]
    note: str | None = None
    new: bool = False


class Patterns(list[Pattern]):
    """Clusters pattern detection found, largest first, and how it embedded them (``degraded`` says why it fell back
    to the lexical hashing embedder, e.g. the store has no embedder or it is unavailable; None when it did not) and
    the ``threshold`` it clustered with (the calibrated default when the caller named none)."""

    degraded: str | None
    threshold: float | None

    def __init__(self, items: list[Pattern], degraded: str | None = None, *, threshold: float | None = None) -> None:
        super().__init__(items)
        self.degraded = degraded
        self.threshold = threshold


def to_json(value: Any) -> Any:
    """Any channels value object (or a list of them) as JSON: the one shape every door returns."""
    if isinstance(value, MessageResults):
        return {"results": [to_json(m) for m in value], "mode": value.mode, "degraded": value.degraded,
                "has_more": value.has_more, "next_offset": value.next_offset, "hint": value.hint}  # fmt: skip
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Event):
        return value.as_dict()
    if hasattr(value, "__dataclass_fields__"):
        return {name: to_json(getattr(value, name)) for name in value.__dataclass_fields__}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value
