"""Value objects the memory API returns: items, item-level changes, versions and conflicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engram.objects import Commit, Record


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


@dataclass(frozen=True, slots=True)
class Item:
    """A stored memory, shaped like LangGraph's ``Item``, plus provenance.

    Attributes:
        namespace: hierarchical path of the item, e.g. ``("users", "alice")``.
        key: unique id within the namespace.
        value: the memory, a JSON object.
        created_at: when the key was first written (UTC).
        updated_at: when this version was written (UTC).
        expires_at: when the item expires (UTC), or None.
        author: who wrote this version.
        sources: ids of the messages or inputs this version came from.
    """

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None
    author: str | None = None
    sources: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_record(cls, namespace: tuple[str, ...], key: str, record: Record) -> Item:
        """Build an item from a stored record."""
        return cls(
            namespace=namespace,
            key=key,
            value=record.value,
            created_at=_dt(record.created_at),
            updated_at=_dt(record.updated_at),
            expires_at=None if record.expires_at is None else _dt(record.expires_at),
            author=record.author,
            sources=record.sources,
        )

    def dict(self) -> dict[str, Any]:
        """LangGraph's ``Item.dict()`` shape (ISO timestamps, namespace as a list)."""
        return {
            "namespace": list(self.namespace),
            "key": self.key,
            "value": self.value,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class SearchItem(Item):
    """An item found by a search, with its score (None for a listing without a query).

    ``explain`` holds each signal's score when the search asked for ``explain=True``.
    """

    score: float | None = None
    explain: dict[str, Any] | None = None

    @classmethod
    def found(
        cls, namespace: tuple[str, ...], key: str, record: Record, score: float | None, explain: dict[str, Any] | None
    ) -> SearchItem:  # fmt: skip
        """A search result from a stored record, built once (a search builds one per candidate it reads)."""
        expires = None if record.expires_at is None else _dt(record.expires_at)
        created, updated = _dt(record.created_at), _dt(record.updated_at)
        author, sources = record.author, record.sources
        return cls(namespace, key, record.value, created, updated, expires, author, sources, score, explain)

    def dict(self) -> dict[str, Any]:
        """LangGraph's ``SearchItem.dict()`` shape: the item's fields plus ``score``."""
        out = Item.dict(self)
        out["score"] = self.score
        if self.explain is not None:
            out["explain"] = self.explain
        return out


class SearchResults(list[SearchItem]):
    """The items a search found, best first, and how the search ran.

    Attributes:
        mode: the mode that ran (``keyword``, ``semantic``, ``hybrid``, or ``list`` without a query).
        requested_mode: the mode asked for.
        degraded: why the search ran in a weaker mode than asked (e.g. the embedder failed), else None.
        lag: items of the searched index not fully indexed when the search ran (their vectors are still to
            be made: keywords find them, meaning does not yet); 0 when the index was complete.
        has_more: whether more results follow this page.
        next_offset: the ``offset`` that asks for them (None when none do).
    """

    mode: str
    requested_mode: str
    degraded: str | None
    lag: int
    has_more: bool
    next_offset: int | None

    def __init__(
        self, items: list[SearchItem], mode: str, requested_mode: str, degraded: str | None = None, lag: int = 0,
        *, has_more: bool = False, next_offset: int | None = None,
    ):  # fmt: skip
        super().__init__(items)
        self.mode = mode
        self.requested_mode = requested_mode
        self.degraded = degraded
        self.lag = lag
        self.has_more = has_more
        self.next_offset = next_offset if has_more else None

    def page(self, offset: int, limit: int) -> SearchResults:
        """The first ``limit`` of these results (a search asked for one more), saying whether more exist: the
        page that starts at ``offset``."""
        more = len(self) > limit or self.has_more
        items = list(self[:limit])
        return SearchResults(items, self.mode, self.requested_mode, self.degraded, self.lag, has_more=more,
                             next_offset=offset + len(items))  # fmt: skip


@dataclass(frozen=True, slots=True)
class ItemChange:
    """One item that differs between two versions (``old``/``new`` is None when absent)."""

    namespace: tuple[str, ...]
    key: str
    old: Item | None
    new: Item | None

    @property
    def kind(self) -> str:
        """``added``, ``removed`` or ``modified``."""
        if self.old is None:
            return "added"
        return "removed" if self.new is None else "modified"


@dataclass(frozen=True, slots=True)
class Version:
    """One version of an item in its history: the commit that made it and the item (None = deleted)."""

    commit: Commit
    item: Item | None


@dataclass(frozen=True, slots=True)
class ItemConflict:
    """An item both sides of a merge changed differently; None means absent on that side."""

    namespace: tuple[str, ...]
    key: str
    base: Item | None
    ours: Item | None
    theirs: Item | None


@dataclass(frozen=True, slots=True)
class CommitDetails:
    """A commit with the item changes it made relative to its first parent."""

    commit: Commit
    changes: list[ItemChange]


@dataclass(frozen=True, slots=True)
class MergeOutcome:
    """What a merge did.

    Attributes:
        commit: the merge commit, or the branch's unchanged head when there was nothing to merge.
        up_to_date: True when the branch already had everything in the source (no commit was written).
        resolved: the conflicts the strategy decided (empty with ``fail``, which raises instead).
    """

    commit: Commit
    up_to_date: bool
    resolved: tuple[ItemConflict, ...] = ()
