"""Searching messages and notes: one memory search, scoped to the channels the caller may read.

The scope, sender, tag, confidence and time conditions and the caller's metadata filter are one filter
for engram's filter compiler, so the same semantics hold on every backend (``$ne``, ``$nin`` and ``$not``
match messages that lack the field; ``$regex`` is a real regular expression).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from engram.channels import _layout as layout
from engram.channels.hub import Hub
from engram.channels.model import Message, MessageResults
from engram.errors import InvalidInputError
from engram.store.item import SearchResults
from engram.store.ranking import Profile


class OnHub(Protocol):
    """Anything acting on a hub (an :class:`~engram.channels.Actor`): what it searches is scoped on that hub."""

    @property
    def hub(self) -> Hub:
        """The hub it acts on."""
        ...


def run(
    hub: Hub,
    kind: str,
    channels: Sequence[str],
    *,
    query: str | None = None,
    senders: Sequence[str] | None = None,
    projects: Sequence[str] | None = None,
    filter: Mapping[str, Any] | None = None,
    tags: Sequence[str] | None = None,
    tags_mode: str = "all",
    min_confidence: float | None = None,
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    profile: str | Profile = "similarity",
    mode: Any = None,
    limit: int = 10,
    offset: int = 0,
    explain: bool = False,
    at: Any = None,
) -> MessageResults:
    """Search ``kind`` (``message`` or ``note``) of ``hub`` in the given channels (already permission-checked)."""
    if query is not None and not isinstance(query, str):
        raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
    parts: list[dict[str, Any]] = []  # the caller's conditions first: they are the selective ones
    user = layout.metadata_filter(filter)
    if user:
        parts.append(user)
    if senders is not None:
        parts.append({"sender": {"$in": _strings(senders, "senders")}})
    if projects is not None:
        parts.append({"project": {"$in": _strings(projects, "projects")}})
    if tags:
        if tags_mode not in ("all", "any"):
            raise InvalidInputError(f"tags_mode must be 'all' or 'any', got {tags_mode!r}")
        parts.append({"tags": {"$all" if tags_mode == "all" else "$in": layout.check_tags(tags)}})
    if min_confidence is not None:
        parts.append({"confidence": {"$gte": layout.check_confidence(min_confidence, "min_confidence")}})
    if since is not None:
        parts.append({"time": {"$gte": _ms(since, "since")}})
    if until is not None:
        parts.append({"time": {"$lt": _ms(until, "until")}})
    if not channels:
        return MessageResults([], "list" if query is None else "keyword")
    ids = sorted(set(channels))
    parts += [{"kind": kind}, {"deleted": {"$ne": True}}]
    prefix = layout.messages_ns(ids[0]) if len(ids) == 1 else layout.MESSAGES
    scope = _scope(hub, ids)

    def search(condition: dict[str, Any] | None) -> SearchResults:
        return hub.memory.search(
            prefix, query, filter={"$and": parts + ([condition] if condition else [])}, limit=limit, offset=offset,
            mode=mode, profile=profile, explain=explain, at=at,
        )  # fmt: skip

    found, allowed = search(scope), set(ids)
    if scope != {"channel": {"$in": ids}} and any(i.value.get("channel") not in allowed for i in found):
        found = search({"channel": {"$in": ids}})  # a channel appeared since the scope was read: be exact
    return MessageResults([Message.from_item(i, i.score, i.explain) for i in found], found.mode, found.degraded)


def _scope(on: Hub | OnHub, ids: list[str]) -> dict[str, Any] | None:
    """The filter condition keeping a search to the channels ``ids``: ``$in`` them, or, when the caller may read
    most channels, ``$nin`` the others (None when it may read them all), which costs far less per candidate.
    The short forms are checked against the results, since a channel may be created after this was read."""
    if len(ids) == 1:
        return None  # the namespace prefix is the channel's own
    hub = on if isinstance(on, Hub) else on.hub
    others = sorted({c.id for c in hub.directory().channels} - set(ids))
    if len(others) >= len(ids):
        return {"channel": {"$in": ids}}
    return {"channel": {"$nin": others}} if others else None


def _strings(values: Sequence[str], what: str) -> list[str]:
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise InvalidInputError(f"{what} must be a list of strings, got {values!r}")
    return list(values)


def _ms(when: datetime | str, what: str) -> int:
    """A time as milliseconds since the epoch (naive datetimes are UTC)."""
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(f"{what} must be an ISO 8601 time, got {when!r}") from None
    if not isinstance(when, datetime):
        raise InvalidInputError(f"{what} must be a datetime or an ISO 8601 string, got {when!r}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)
