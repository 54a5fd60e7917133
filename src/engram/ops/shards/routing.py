"""Routing rules within a tenant: one tenant's memories split over several repositories, each on its shard.

A :class:`RoutingRule` maps an item to a routing key: its memory type (a namespace label, :func:`by_type`), the
month it was created in (:func:`by_month`), or a hash of its identity (namespace and key, :func:`by_hash`). Each
key is a repository of its own, named ``<tenant>__<key>``, placed by the shard map like any tenant (so the keys
of one tenant spread over the shards). :class:`RoutedMemory` writes each item to its key's repository and runs
reads over all of them in parallel:

- **search** asks every repository (or, with :func:`by_type` and a namespace prefix that names the type, just
  one) for its first ``offset + limit`` results and merges them in the one ranking's order: score descending,
  then newest first, then by namespace and key, the order one repository gives its own results. Scores are
  absolute (``engram.index.ranking``), so semantic scores, confidence and recency are the same wherever an item
  lives. Keyword scores need the corpus's BM25 statistics (items, average length, how many items hold each query
  term), so a keyword or hybrid search runs in two phases (Elasticsearch's ``dfs_query_then_fetch``): every
  repository reports its statistics for the query's terms (:meth:`RoutedMemory.corpus_stats`, in parallel), and
  every repository searched scores with their sum. The merged page is then one repository's page: the same
  items, scores and order as one repository holding every item (tested in process and on PostgreSQL, at the
  head and at a tag). The first phase costs a round trip to every repository (even when :func:`by_type` searches
  one); ``global_stats=False`` skips it, each repository then scoring with its own statistics (12 monthly
  repositories: 84 % of the top 10 in common with one repository, in another order; benchmarks/RESULTS.md).
  Semantic searches and listings need no statistics. Writes landing between the phases may leave the statistics
  a write behind the searched items.
- a **tag across shards** (:meth:`RoutedMemory.tag`) tags every repository of the tenant; :meth:`RoutedMemory.at`
  reads them all at that tag (a repository created after the tag held nothing then, and is skipped).

The cost: a commit no longer spans the tenant (a write, a revert or a merge is per repository), and ``get`` under
:func:`by_month` asks every repository (the month an item was created in is not in its address).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engram import codec
from engram.backends.base import now_ms
from engram.errors import InvalidInputError, RefNotFoundError
from engram.index.corpus import CorpusStats
from engram.objects import Commit
from engram.ops.shards.router import ShardRouter
from engram.store import Memory
from engram.store.item import Item, SearchItem, SearchResults
from engram.store.operations import Mode, When
from engram.store.ranking import Profile
from engram.store.view import View

_SAFE = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
#: Repositories searched at once.
WORKERS = 8


#: Periods a time rule partitions by, and the routing key each gives (UTC): ``2026-11-28``, ``2026-W48``, ``2026-11``.
PERIODS = ("day", "week", "month")


@dataclass(frozen=True, slots=True)
class RoutingRule:
    """How items map to routing keys: ``kind`` is ``type`` (namespace label ``level``), ``time`` (the ``period``
    of a time, UTC: the item's ``field`` when given, else when it was created), ``month`` (``time`` by month of
    creation, the older spelling) or ``hash`` (of namespace and key, into ``buckets`` keys)."""

    kind: str
    level: int = 0
    buckets: int = 16
    period: str = "month"
    field: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("type", "time", "month", "hash"):
            raise InvalidInputError(f"unknown routing rule {self.kind!r}: use type, time, month or hash")
        if self.level < 0 or self.buckets < 1:
            raise InvalidInputError("a routing rule's level is >= 0 and its buckets >= 1")
        if self.period not in PERIODS:
            raise InvalidInputError(f"unknown period {self.period!r}: use day, week or month")
        if self.field is not None and (not isinstance(self.field, str) or not self.field.strip(".")):
            raise InvalidInputError(f"a routing field is a dotted path into the item's value, not {self.field!r}")

    def key(self, namespace: Sequence[str], key: str, created_ms: int, value: Mapping[str, Any] | None = None) -> str:
        """The routing key of an item (``created_ms``: when it was, or will be, created; ``value``: the item's
        value, which a rule with a ``field`` reads its time from).

        Raises:
            InvalidInputError: the rule routes by a field the value lacks, or holds no time in.
        """
        if self.kind == "type":
            if len(namespace) <= self.level:
                raise InvalidInputError(
                    f"routing by memory type needs namespaces of at least {self.level + 1} label(s), got {namespace!r}"
                )
            label = namespace[self.level]
            return label if _SAFE.match(label) else "t" + hashlib.blake2b(label.encode(), digest_size=6).hexdigest()
        if self.kind in ("time", "month"):
            when = (
                datetime.fromtimestamp(created_ms / 1000, UTC) if self.field is None else _field_time(self.field, value)
            )
            return _period_key(when, self.period if self.kind == "time" else "month")
        digest = hashlib.blake2b(codec.encode_key(tuple(namespace), key), digest_size=8).digest()
        return f"h{int.from_bytes(digest, 'big') % self.buckets:03d}"

    def keys_for(self, prefix: Sequence[str]) -> str | None:
        """The one routing key every item under ``prefix`` has, when the rule tells (else None: all of them)."""
        if self.kind == "type" and len(prefix) > self.level:
            return self.key(prefix, "", 0)
        return None

    @property
    def addressed(self) -> bool:
        """True when an item's address (namespace, key) alone gives its routing key."""
        return self.kind in ("type", "hash")


def _period_key(when: datetime, period: str) -> str:
    if period == "day":
        return when.strftime("%Y-%m-%d")
    if period == "week":
        year, week, _ = when.isocalendar()
        return f"{year}-W{week:02d}"
    return when.strftime("%Y-%m")


def _field_time(field: str, value: Mapping[str, Any] | None) -> datetime:
    """The time at dotted path ``field`` of ``value``: an ISO 8601 string (UTC unless it says otherwise) or Unix
    time in seconds (a number; above 1e11 it is read as milliseconds)."""
    found: Any = value
    for part in field.split("."):
        found = found.get(part) if isinstance(found, Mapping) else None
    try:
        if isinstance(found, bool) or found is None:
            raise ValueError("missing")
        if isinstance(found, int | float):
            when = datetime.fromtimestamp(found / 1000 if abs(found) > 1e11 else found, UTC)
        else:
            when = datetime.fromisoformat(str(found).replace("Z", "+00:00"))
            when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        raise InvalidInputError(
            f"routing by time of field {field!r} needs the item to hold a time there (ISO 8601 or Unix seconds), "
            f"got {found!r}"
        ) from None
    return when


def by_type(level: int = 0) -> RoutingRule:
    """Route by memory type: the namespace label at ``level`` (``("facts", "alice")`` -> ``facts``)."""
    return RoutingRule("type", level=level)


def by_time(period: str = "month", field: str | None = None) -> RoutingRule:
    """Route by time, one repository per ``period`` (``day``: ``2026-11-28``, ``week``: ``2026-W48`` (ISO),
    ``month``: ``2026-11``; UTC): the time the item's value holds at ``field`` (a dotted path to an ISO 8601
    string or Unix seconds: the event's own time), or, without a field, when the item was created."""
    return RoutingRule("time", period=period, field=field)


def by_month() -> RoutingRule:
    """Route by the month an item was created in (UTC): ``2026-11`` (``by_time("month")``)."""
    return RoutingRule("month")


def by_hash(buckets: int = 16) -> RoutingRule:
    """Route by a hash of the item's namespace and key into ``buckets`` repositories."""
    return RoutingRule("hash", buckets=buckets)


def merge(results: Sequence[SearchResults], offset: int, limit: int) -> SearchResults:
    """Merge per-repository results (each holding its first ``offset + limit``) into the page one repository
    would return: score descending (listings: newest first), ties by namespace and key, as every engine orders
    them."""

    def order(item: SearchItem) -> tuple[float, bytes]:
        first = -item.score if item.score is not None else -item.updated_at.timestamp()
        return (first, codec.encode_key(item.namespace, item.key))

    items = sorted((item for found in results for item in found), key=order)
    first = next((found for found in results if found), results[0] if results else None)
    mode, requested = (first.mode, first.requested_mode) if first is not None else ("list", "list")
    degraded = next((found.degraded for found in results if found.degraded), None)
    more = len(items) > offset + limit or any(found.has_more for found in results)
    page = items[offset : offset + limit]
    return SearchResults(page, mode, requested, degraded, has_more=more, next_offset=offset + len(page))


class _Reads:
    """Reads fanned out over the repositories of a tenant (live ones, or views at a tag)."""

    rule: RoutingRule
    _executor: ThreadPoolExecutor

    def _readers(self, only: str | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def get(self, namespace: Sequence[str], key: str) -> Item | None:
        """The item at (namespace, key), from the repository its routing key names (under :func:`by_month`,
        from whichever holds it)."""
        readers = self._readers(self.rule.key(namespace, key, 0) if self.rule.addressed else None)
        found = [item for item in self._each(readers, lambda r: r.get(namespace, key)) if item is not None]
        return max(found, key=lambda item: item.updated_at) if found else None

    def search(
        self, namespace_prefix: Sequence[str] = (), /, query: str | None = None, *,
        filter: Mapping[str, Any] | None = None, limit: int = 10, offset: int = 0, mode: Mode | None = None,
        profile: str | Profile = "similarity", explain: bool = False, min_score: float | None = None,
        global_stats: bool = True, when: When = None, reference_time: datetime | str | int | None = None,
    ) -> SearchResults:  # fmt: skip
        """Search every repository of the tenant at once and merge (see the module docstring): ranked as one
        repository holding every item would rank. ``global_stats=False`` skips the first phase (a round trip to
        every repository for the query's keyword statistics): lower latency, keyword scores then each
        repository's own. ``when`` and ``reference_time`` as :meth:`Memory.search <engram.Memory.search>` takes
        them (the time stage rescores each item by its own time, so the merged page is still exact)."""
        if not isinstance(limit, int) or not isinstance(offset, int) or limit < 0 or offset < 0:
            raise InvalidInputError("limit and offset are non-negative integers")
        only = self.rule.keys_for(namespace_prefix)
        stats = None
        if global_stats and isinstance(query, str) and mode != "semantic":
            every = self._readers()
            readers = every if only is None else {k: r for k, r in every.items() if k == only}
            if len(every) > 1 and readers:
                stats = self._total(every, query)
        else:
            readers = self._readers(only)

        def one(reader: Any) -> SearchResults:
            found: SearchResults = reader.search(
                namespace_prefix, query, filter=filter, limit=offset + limit, offset=0, mode=mode, profile=profile,
                explain=explain, min_score=min_score, stats=stats, when=when, reference_time=reference_time,
            )  # fmt: skip
            return found

        return merge(self._each(readers, one), offset, limit)

    def corpus_stats(self, query: str) -> CorpusStats:
        """The tenant's keyword statistics for ``query``: the sum of every repository's (the first phase of
        :meth:`search`; see :meth:`engram.store.reader.Reader.corpus_stats`)."""
        return self._total(self._readers(), query)

    def _total(self, readers: dict[str, Any], query: str) -> CorpusStats:
        return CorpusStats.total(self._each(readers, lambda reader: reader.corpus_stats(query)))

    def _each(self, readers: dict[str, Any], work: Callable[[Any], Any]) -> list[Any]:
        if len(readers) <= 1:
            return [work(reader) for reader in readers.values()]
        return list(self._executor.map(work, readers.values()))


class RoutedMemory(_Reads):
    """One tenant's memories split over repositories by a :class:`RoutingRule` (see the module docstring).

    Args:
        router: the shard router placing each routing key's repository.
        tenant: the tenant (letters, digits, '-' and '_').
        rule: how items map to routing keys.
        workers: repositories read at once.
        options: passed to :func:`engram.open` for every repository (``embedder``, ``author`` ...).

    Examples:
        >>> mem = RoutedMemory(router, "acme", by_month(), embedder="hashing")
        >>> mem.put(("notes",), "n1", {"text": "hello"})
    """

    def __init__(
        self, router: ShardRouter, tenant: str, rule: RoutingRule, *, workers: int = WORKERS, **options: Any
    ) -> None:
        if not tenant or not all(ch.isalnum() or ch in "-_" for ch in tenant):
            raise InvalidInputError(f"invalid tenant name {tenant!r}: use letters, digits, '-' and '_'")
        self.router = router
        self.tenant = tenant
        self.rule = rule
        self.options = options
        self._open: dict[str, Memory] = {}
        self._known: set[str] = set()
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"engram-routed-{tenant}")

    def repository(self, key: str) -> str:
        """The repository (tenant name in the shard map) of routing key ``key``."""
        return f"{self.tenant}__{key}"

    def routing_keys(self) -> list[str]:
        """The routing keys this tenant has repositories for, sorted."""
        return self.router.catalog.routing_keys(self.tenant)

    def memory(self, key: str) -> Memory:
        """The open store of routing key ``key`` (reopened when its repository moved to another shard)."""
        with self._lock:  # one opener at a time: two threads never open (and then close) the same store
            found = self._open.get(key)
            if found is not None and self.router.current(self.repository(key), found):
                return found
            opened = self.router.open(self.repository(key), **self.options)
            self._open[key] = opened
        if found is not None:
            found.close()  # its repository moved to another shard
        return opened

    def _readers(self, only: str | None = None) -> dict[str, Any]:
        keys = [only] if only is not None else self.routing_keys()
        known = set(self.routing_keys()) if only is not None else set(keys)
        return {key: self.memory(key) for key in keys if key in known}

    def _writer(self, namespace: Sequence[str], key: str, value: Mapping[str, Any] | None = None) -> Memory:
        if self.rule.addressed:
            routing = self.rule.key(namespace, key, 0)
        else:  # by time: an existing item stays in the repository of the period it was first routed to
            holders = [k for k, r in self._readers().items() if r.get(namespace, key) is not None]
            routing = holders[0] if holders else self.rule.key(namespace, key, now_ms(), value)
        if routing not in self._known:
            self.router.catalog.add_routing_key(self.tenant, routing)
            self._known.add(routing)
        return self.memory(routing)

    def put(self, namespace: Sequence[str], key: str, value: Mapping[str, Any], **options: Any) -> Commit:
        """Store an item in its routing key's repository (one commit there); ``options`` as :meth:`Memory.put`."""
        return self._writer(namespace, key, value).put(namespace, key, value, **options)

    def delete(self, namespace: Sequence[str], key: str, **options: Any) -> Commit | None:
        """Delete an item from the repository holding it (None: no repository holds it)."""
        if self.rule.addressed:
            return self._writer(namespace, key).delete(namespace, key, **options)
        for memory in self._readers().values():
            if memory.get(namespace, key) is not None:
                deleted: Commit = memory.delete(namespace, key, **options)
                return deleted
        return None

    def tag(self, name: str) -> dict[str, str]:
        """Tag the head of every repository of the tenant ``name`` (a snapshot across shards); returns
        ``{routing key: commit id}``. Each repository is tagged in turn: writes made meanwhile to a repository
        not tagged yet are in the snapshot."""
        tagged: dict[str, str] = {}
        for key, memory in self._readers().items():
            memory.tag(name)
            tagged[key] = memory.head.id.hex()
        return tagged

    def at(self, ref: str) -> RoutedView:
        """Read-only views of every repository at ``ref`` (a tag made by :meth:`tag`); repositories without it
        are skipped (they held nothing then).

        Raises:
            RefNotFoundError: no repository has ``ref``.
        """
        views: dict[str, View] = {}
        for key, memory in self._readers().items():
            try:
                views[key] = memory.at(ref)
            except RefNotFoundError:
                continue
        if not views and self.routing_keys():
            raise RefNotFoundError(f"no repository of tenant {self.tenant!r} has {ref!r}")
        return RoutedView(self.rule, views, self._executor)

    def close(self) -> None:
        """Close every open repository and the reader threads."""
        with self._lock:
            memories, self._open = list(self._open.values()), {}
        for memory in memories:
            memory.close()
        self._executor.shutdown(wait=True)


class RoutedView(_Reads):
    """A tenant's repositories at one tag (see :meth:`RoutedMemory.at`): ``get`` and ``search`` as there."""

    def __init__(self, rule: RoutingRule, views: dict[str, View], executor: ThreadPoolExecutor) -> None:
        self.rule = rule
        self.views = views
        self._executor = executor

    def _readers(self, only: str | None = None) -> dict[str, Any]:
        if only is None:
            return dict(self.views)
        return {only: self.views[only]} if only in self.views else {}


__all__ = [
    "PERIODS",
    "WORKERS",
    "RoutedMemory",
    "RoutedView",
    "RoutingRule",
    "by_hash",
    "by_month",
    "by_time",
    "by_type",
    "merge",
]
