"""Searching messages and notes: one memory search, scoped to the channels the caller may read.

The scope, sender, tag, confidence and time conditions and the caller's metadata filter are one filter
for engram's filter compiler, so the same semantics hold on every backend (``$ne``, ``$nin`` and ``$not``
match messages that lack the field; ``$regex`` is a real regular expression).

A message's age is its send time, not its item's last update (an edit or a vote rewrites the item). The store
ranks by the update time, which is never earlier than the send time, so the store's score of a message is an
upper bound of its score by send time (recency only falls with age), and a listing's order by update time is an
upper bound of the order by send time. Pages of the store's order are read until the best ``offset + limit``
messages by send time all reach the bound of the next unread one: then no unread message can rank among them,
and the page is exact. A message never touched after it was sent (its item written within :data:`TOUCHED_MS` of
its send time) has the same score either way, so this reads
one page of ``offset + limit + 1`` results (what a search without this step reads) unless recently touched old
messages crowd the top; then it reads pages twice as long until the page is exact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np

from engram.backends.base import now_ms
from engram.channels import _layout as layout
from engram.channels.hub import Hub
from engram.channels.model import Message, MessageResults
from engram.errors import InvalidInputError
from engram.store.item import SearchItem, SearchResults
from engram.store.ranking import Profile, get_profile, recency_score

#: A message whose item changed less than this after it was sent counts as untouched: its commit lands a moment
#: after its send time is taken (longer in a batch import), which no recency half-life can tell apart.
TOUCHED_MS = 60_000


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
    min_score: float | None = None,
) -> MessageResults:
    """Search ``kind`` (``message`` or ``note``) of ``hub`` in the given channels (already permission-checked).

    ``min_score`` leaves out ranked results scoring below it (a listing without a query has no scores)."""
    if query is not None and not isinstance(query, str):
        raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
    for name, number in (("limit", limit), ("offset", offset)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise InvalidInputError(f"{name} must be a non-negative integer, got {number!r}")
    if min_score is not None and (isinstance(min_score, bool) or not isinstance(min_score, int | float)
                                  or not math.isfinite(min_score)):  # fmt: skip
        raise InvalidInputError(f"min_score must be a finite number, got {min_score!r}")
    ranking = get_profile(profile)
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
        return MessageResults([], "list" if query is None else "keyword", has_more=False)
    ids = sorted(set(channels))
    parts += [{"kind": kind}, {"deleted": {"$ne": True}}]
    prefix = layout.messages_ns(ids[0]) if len(ids) == 1 else layout.MESSAGES
    scope = _scope(hub, ids)

    allowed = set(ids)

    def search(size: int, start: int) -> SearchResults:
        def once(condition: dict[str, Any] | None) -> SearchResults:
            return hub.memory.search(
                prefix, query, filter={"$and": parts + ([condition] if condition else [])}, limit=size, offset=start,
                mode=mode, profile=profile, explain=explain, at=at, min_score=min_score,
            )  # fmt: skip

        found = once(scope)
        if scope != {"channel": {"$in": ids}} and any(i.value.get("channel") not in allowed for i in found):
            found = once({"channel": {"$in": ids}})  # a channel appeared since the scope was read: be exact
        return found

    found = _by_send_time(search, query is not None, ranking, limit, offset, min_score)
    if not found and tags and tags_mode == "all" and len(set(tags)) > 1:
        found.hint = (f"no {kind} has all of the tags {sorted(set(tags))}: tags match all of them by default; "
                      "tags_mode='any' matches any of them")  # fmt: skip
    return found


def _by_send_time(
    search: Any, ranked: bool, profile: Profile, limit: int, offset: int, min_score: float | None
) -> MessageResults:
    """The page ``offset:offset + limit`` of messages ordered by send time (see the module docstring): read the
    store's pages (``search(size, start)``) until the page is exact."""
    want = offset + limit + 1  # one more than the page tells whether more exist
    size, start, now = want, 0, now_ms()  # a page as long as asked: untouched messages keep the store's order
    pool: list[tuple[float, SearchItem, float | None, dict[str, Any] | None]] = []
    first: SearchResults | None = None
    while True:
        found = search(size, start)
        first = first if first is not None else found
        bound = None
        for item in found:
            bound, value, score, why = _sort_key(item, ranked, profile, now)
            if not ranked or min_score is None or value >= min_score:
                pool.append((value, item, score, why))
        if len(found) < size or bound is None:
            break  # the store has nothing more
        pool.sort(key=lambda entry: -entry[0])  # stable: ties keep the store's order
        if len(pool) >= want and pool[want - 1][0] >= bound:
            break
        start, size = start + size, size * 2
    pool.sort(key=lambda entry: -entry[0])
    page = [Message.from_item(item, score, why) for _, item, score, why in pool[offset : offset + limit]]
    more = len(pool) > offset + limit
    return MessageResults(page, first.mode, first.degraded, has_more=more, next_offset=offset + len(page))


def _sort_key(
    item: SearchItem, ranked: bool, profile: Profile, now: int
) -> tuple[float, float, float | None, dict[str, Any] | None]:
    """``(store's key, key by send time, score, explanation)`` of one result: for a listing the keys are the
    update and send times; for a ranked search the scores with recency from the update and the send time."""
    updated = int(item.updated_at.timestamp() * 1000)
    sent = int(item.value.get("time", updated))
    if updated - sent < TOUCHED_MS:  # written when it was sent: the store's order is the send-time order
        sent = updated
    if not ranked or item.score is None:
        return float(updated), float(sent), item.score, item.explain
    if not profile.recency or sent >= updated:
        return item.score, item.score, item.score, item.explain
    stored, recency = _recency(updated, now, profile), _recency(sent, now, profile)
    score = item.score - profile.recency * (stored - recency)
    why = item.explain
    if why is not None:
        components = {**why.get("components", {}), "recency": profile.recency * recency}
        why = {**why, "recency": recency, "components": components}
    return item.score, score, score, why


def _recency(when: int, now: int, profile: Profile) -> float:
    """``0.5 ** (age_hours / half_life_hours)`` (the store's recency, of a given time)."""
    return float(recency_score(np.array([when], dtype=np.int64), now, profile.half_life_hours)[0])


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
