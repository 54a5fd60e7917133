"""The one JSON shape of engram's values, used by every door (HTTP, MCP, CLI ``--json``).

Times are ISO 8601 with their offset (UTC, ``2026-11-20T11:15:00.123000+00:00``); namespaces are lists
of labels; an absent item is ``null``. LangGraph's own routes keep LangGraph's ``Item.dict()`` shape;
everything engram adds (provenance, versions, conflicts) is written here once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from engram.objects import Commit
from engram.store.item import CommitDetails, Item, ItemChange, ItemConflict, SearchResults, Version


def iso(moment: int | datetime) -> str:
    """An instant (milliseconds since the epoch, or a datetime) as ISO 8601 with its UTC offset."""
    if isinstance(moment, datetime):
        return moment.astimezone(UTC).isoformat()
    return datetime.fromtimestamp(moment / 1000, tz=UTC).isoformat()


def commit_json(commit: Commit) -> dict[str, Any]:
    """``{id, short_id, parents, time, author, message, metadata}``."""
    return {
        "id": commit.id.hex(),
        "short_id": commit.short_id,
        "parents": [parent.hex() for parent in commit.parents],
        "time": iso(commit.time),
        "author": commit.author,
        "message": commit.message,
        "metadata": commit.metadata,
    }


def item_json(item: Item | None) -> dict[str, Any] | None:
    """An item with its expiry and provenance: LangGraph's ``Item.dict()`` plus ``expires_at``, ``author``
    and ``sources`` (and ``score``/``explain`` for a search result); None stays None."""
    if item is None:
        return None
    return {
        **item.dict(),
        "expires_at": None if item.expires_at is None else iso(item.expires_at),
        "author": item.author,
        "sources": list(item.sources),
    }


def change_json(change: ItemChange) -> dict[str, Any]:
    """``{namespace, key, kind, old, new}``: ``kind`` is added, removed or modified; old/new are items."""
    return {
        "namespace": list(change.namespace),
        "key": change.key,
        "kind": change.kind,
        "old": item_json(change.old),
        "new": item_json(change.new),
    }


def details_json(details: CommitDetails, prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    """A commit and the changes it made (only those under namespace ``prefix``)."""
    changes = [change_json(c) for c in details.changes if c.namespace[: len(prefix)] == prefix]
    return {**commit_json(details.commit), "changes": changes}


def version_json(version: Version) -> dict[str, Any]:
    """One version of an item: ``{commit, item}`` (item null: deleted by that commit)."""
    return {"commit": commit_json(version.commit), "item": item_json(version.item)}


def conflict_json(conflict: ItemConflict) -> dict[str, Any]:
    """An item a merge could not decide: ``{namespace, key, base, ours, theirs}`` (null: absent on that side)."""
    return {
        "namespace": list(conflict.namespace),
        "key": conflict.key,
        "base": item_json(conflict.base),
        "ours": item_json(conflict.ours),
        "theirs": item_json(conflict.theirs),
    }


def search_json(results: SearchResults) -> dict[str, Any]:
    """Search results and how the search ran: ``{items, mode, requested_mode, degraded, has_more, next_offset}``,
    each item as :func:`item_json` with its ``score`` (and ``explain`` when asked)."""
    return {"items": [item_json(r) for r in results], "mode": results.mode, "requested_mode": results.requested_mode,
            "degraded": results.degraded, "has_more": results.has_more,
            "next_offset": results.next_offset}  # fmt: skip


__all__ = [
    "change_json",
    "commit_json",
    "conflict_json",
    "details_json",
    "iso",
    "item_json",
    "search_json",
    "version_json",
]
