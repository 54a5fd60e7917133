"""A cache of search results that is never stale.

A search's results depend only on what it searched (the tree root), what it asked (prefix, query,
filter, limit, offset, mode, profile, explain, min_score, and the keyword statistics a fan-out passes), how
the store searches (embedder model, indexed fields, engine) and the time. Roots are immutable, so a result keyed
by all of that never needs a TTL or an invalidation: a write makes a new root, and the next search misses. Time
enters twice, and both are handled exactly:

- **expiry**: an item with a TTL drops out of every search once it expires. A cached result records the
  earliest expiry among the items ranked up to the end of its page (``valid_until``) and is not served
  from then on. (Items ranked lower cannot change the page: scores are absolute, see ADR 0002.)
- **recency**: a ranking profile with a recency weight decays continuously; its searches (and every search with
  ``explain``, which shows the recency signal whatever its weight) are keyed on a time bucket of
  ``recency_resolution`` half-lives (0.001 by default: 86 s for ``recent``, 10 min for ``balanced``), during
  which a recency score moves by less than 0.07 %.

Results a search *degraded* to (the embedder failed, so hybrid ran as keyword) are never cached, nor results of
an index still waiting for vectors (``lag``): the same root would rank differently once they arrive.

Two levels: an in-process LRU bounded in entries and bytes, and (when the store has a Redis cache) Redis,
shared by every process of a deployment, with no TTL except an item's own expiry (``PXAT``); Redis's
``maxmemory`` policy bounds it. Entries are stored as bytes and decoded on every hit, so a caller that
mutates its results can never change what the next caller gets.

Every lookup is recorded in the process's metrics (:mod:`engram.observe`: ``engram_cache_lookups`` and
``engram_cache_misses`` with ``cache="query"``, and ``cache="query_redis"`` for the Redis level), so the hit
ratio is ``1 - misses / lookups``. The counters (``hits``, ``misses``, ...) are also read by :func:`stats` (every
cache of the process) and :meth:`QueryCache.stats` (one cache).
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from engram import observe, runtime
from engram.errors import ConfigError
from engram.hashing import ChunkId
from engram.index.engine import NEVER as _NEVER
from engram.index.ranking import get_profile
from engram.store.item import SearchItem, SearchResults
from engram.store.operations import SearchOp
from engram.store.search import check

if TYPE_CHECKING:
    from engram.backends.redis import RedisHealth
    from engram.embed import Embedder

__all__ = [
    "SHARED",
    "QueryCache",
    "QueryCacheStats",
    "ResultLru",
    "cache_context",
    "decode",
    "encode",
    "for_pool",
    "stats",
]

#: Format of a stored entry; part of every key, so a new format never reads an old entry.
_FORMAT = 1
_HEADER = struct.Struct(">q")  # valid_until (ms since the epoch; NEVER when no item in the page expires)

Run = Callable[[SearchOp, int], SearchResults]
#: ``valid_until`` of a page in which no item expires.
NEVER = int(_NEVER)


@dataclass(frozen=True, slots=True)
class QueryCacheStats:
    """Counters of one query cache (or of every cache of the process, from :func:`stats`).

    Attributes:
        hits: searches answered from the cache (``redis_hits`` of them from Redis).
        misses: searches the engine ran (``expired`` of them found an entry past its ``valid_until``).
        uncacheable: searches never cached (degraded, too large, or a filter that is not plain JSON).
        entries, bytes: what the in-process LRU holds now.
        evictions: entries the LRU dropped to stay within its bounds.
    """

    hits: int
    redis_hits: int
    misses: int
    expired: int
    uncacheable: int
    entries: int
    bytes: int
    evictions: int

    @property
    def hit_ratio(self) -> float:
        """``hits / (hits + misses)``, 0.0 before the first search."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class ResultLru:
    """Encoded results by key, bounded in entries and bytes, least recently used out first (thread-safe)."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ConfigError("query cache bounds (max_entries, max_bytes) must be positive")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.evictions = 0
        self._entries: OrderedDict[bytes, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: bytes) -> bytes | None:
        """The entry under ``key`` (now the most recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: bytes, entry: bytes) -> None:
        """Keep ``entry`` under ``key``, dropping the least recently used entries past the bounds."""
        with self._lock:
            old = self._entries.pop(key, None)
            self._bytes += len(entry) - (0 if old is None else len(old))
            self._entries[key] = entry
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= len(dropped)
                self.evictions += 1

    def drop(self, key: bytes) -> None:
        """Forget ``key``."""
        with self._lock:
            old = self._entries.pop(key, None)
            self._bytes -= 0 if old is None else len(old)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def size(self) -> tuple[int, int]:
        """(entries, bytes) held now."""
        with self._lock:
            return len(self._entries), self._bytes


#: The in-process LRU every store's query cache shares unless given bounds of its own: one budget for the
#: process, however many stores (tenants) it opens. Sharing is safe: a key names a tree root, so two stores
#: only share an entry when they hold the same items (and search them the same way).
SHARED = ResultLru(4096, 64 << 20)


class QueryCache:
    """Search results keyed by (root, request, search context), in process and optionally in Redis.

    Args:
        max_entries, max_bytes: bounds of an in-process LRU of this cache's own (one given: 2,048 entries or
            32 MB for the other); without either, the cache uses :data:`SHARED` (4,096 entries and 64 MB for the
            whole process).
        max_entry_bytes: results larger than this once encoded are not cached (they would crowd out many).
        redis: a shared :class:`~engram.backends.redis.RedisHealth` (the store's Redis cache), or None.
        repo: the repository (tenant) id, part of every Redis key.
        prefix: the start of every Redis key.
        recency_resolution: the time bucket of recency-ranked searches, in half-lives of the profile.
    """

    def __init__(
        self,
        *,
        max_entries: int | None = None,
        max_bytes: int | None = None,
        max_entry_bytes: int = 1 << 20,
        redis: RedisHealth | None = None,
        repo: str = "default",
        prefix: str = "engram:",
        recency_resolution: float = 0.001,
    ) -> None:
        if max_entry_bytes < 1:
            raise ConfigError(f"max_entry_bytes must be positive, not {max_entry_bytes}")
        if not 0 < recency_resolution <= 1:
            raise ConfigError(f"recency_resolution must be in (0, 1], not {recency_resolution}")
        if not repo or ":" in repo:
            raise ConfigError(f"invalid repository id {repo!r} for the query cache: non-empty, without ':'")
        own = max_entries is not None or max_bytes is not None
        self.lru = (
            ResultLru(2048 if max_entries is None else max_entries, 32 << 20 if max_bytes is None else max_bytes)
            if own
            else SHARED
        )
        self.max_entry_bytes = max_entry_bytes
        self.redis = redis
        self.recency_resolution = recency_resolution
        self._redis_base = f"{prefix}{repo}:q:"
        self._lock = threading.Lock()
        self.hits = self.redis_hits = self.misses = self.expired = self.uncacheable = 0
        _CACHES.add(self)

    def search(
        self, root: ChunkId, request: SearchOp, now: int, run: Run, context: str, variant: str = ""
    ) -> SearchResults:
        """The results of ``request`` at ``root`` and time ``now``: from the cache, else ``run(request, now)``.

        ``context`` names how the store searches (see :func:`cache_context`); ``variant``, what else the results
        depend on (a time stage's resolved windows: :func:`engram.store.timerank.signature`).
        """
        check(request)  # bad input is reported as the engine would, before it can shape a key
        key = self.key(root, request, now, context, variant)
        if key is None:
            self._count("uncacheable")
            return run(request, now)
        found = self._get(key, now)
        if found is not None:
            return decode(found)
        widened = request.offset > 0
        ask = _widen(request) if widened else request
        full = run(ask, now)
        page = _page(full, request.offset) if widened else full
        if full.degraded is not None or full.lag:
            self._count("uncacheable")
            return page
        valid_until = min((_ms(item.expires_at) for item in full if item.expires_at is not None), default=NEVER)
        blob = encode(page)
        if len(blob) > self.max_entry_bytes:
            self._count("uncacheable")
            return page
        self._put(key, valid_until, blob)
        return page

    def key(self, root: ChunkId, request: SearchOp, now: int, context: str, variant: str = "") -> bytes | None:
        """The cache key of a search (None when the request cannot be keyed: a filter that is not plain JSON,
        or an invalid profile, which the engine then reports). ``variant``: see :meth:`search`."""
        try:
            profile = get_profile(request.profile)
            filter_text = json.dumps(request.filter, sort_keys=True, separators=(",", ":"), allow_nan=False)
            bucket = None
            if request.query is not None and (profile.recency or request.explain):  # explain shows the recency
                width = max(1, int(profile.half_life_hours * 3_600_000 * self.recency_resolution))
                bucket = now // width
            text = json.dumps(
                [
                    _FORMAT, root.hex(), context, list(request.namespace_prefix), request.query, filter_text,
                    request.limit, request.offset, request.mode,
                    [profile.similarity, profile.confidence, profile.recency, profile.half_life_hours],
                    bool(request.explain), request.min_score, bucket, bool(request.hide_system),
                    *([] if request.stats is None else [request.stats.key()]),  # a fan-out's statistics
                    *([variant] if variant else []),
                ],
                separators=(",", ":"),
                allow_nan=False,
            )  # fmt: skip
        except (TypeError, ValueError):
            return None
        return hashlib.blake2b(text.encode(), digest_size=20).digest()

    def stats(self) -> QueryCacheStats:
        """This cache's counters now (``entries``, ``bytes`` and ``evictions`` are its LRU's, maybe shared)."""
        entries, size = self.lru.size()
        with self._lock:
            return QueryCacheStats(
                self.hits, self.redis_hits, self.misses, self.expired, self.uncacheable, entries, size,
                self.lru.evictions,
            )  # fmt: skip

    def clear(self) -> None:
        """Forget every in-process entry of its LRU (Redis entries stay: they are never stale either)."""
        self.lru.clear()

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def _get(self, key: bytes, now: int) -> bytes | None:
        entry = self.lru.get(key)
        if entry is not None:
            fresh = _HEADER.unpack_from(entry)[0] > now
            with self._lock:
                self.hits += fresh
                self.misses += not fresh
                self.expired += not fresh
            observe.cache_lookups("query", 1, 0 if fresh else 1)
            if fresh:
                return entry[_HEADER.size :]
            self.lru.drop(key)
            return None
        entry = self._redis_get(key)
        fresh = entry is not None and len(entry) > _HEADER.size and _HEADER.unpack_from(entry)[0] > now
        observe.cache_lookups("query", 1, 0 if fresh else 1)
        if self.redis is not None:
            observe.cache_lookups("query_redis", 1, 0 if fresh else 1)
        with self._lock:
            self.hits += fresh
            self.redis_hits += fresh
            self.misses += not fresh
        if entry is None or not fresh:
            return None
        self.lru.put(key, entry)
        return entry[_HEADER.size :]

    def _put(self, key: bytes, valid_until: int, blob: bytes) -> None:
        entry = _HEADER.pack(valid_until) + blob
        self.lru.put(key, entry)
        if self.redis is not None:
            name = self._redis_base + key.hex()
            pxat = None if valid_until >= NEVER else valid_until
            self.redis.run(lambda r: r.set(name, entry, pxat=pxat))

    def _redis_get(self, key: bytes) -> bytes | None:
        if self.redis is None:
            return None
        name = self._redis_base + key.hex()
        found = self.redis.run(lambda r: r.get(name))
        return found if isinstance(found, bytes) else None


_CACHES: weakref.WeakSet[QueryCache] = weakref.WeakSet()


def _forget() -> None:
    SHARED.clear()
    _CACHES.clear()


runtime.register("engram.store.querycache", reset=_forget)


def stats() -> QueryCacheStats:
    """The counters of every query cache of this process, summed, with the size of every LRU they use."""
    caches = list(_CACHES)
    found = [cache.stats() for cache in caches]
    lrus = list({id(cache.lru): cache.lru for cache in caches}.values())
    sizes = [lru.size() for lru in lrus]
    return QueryCacheStats(
        hits=sum(s.hits for s in found),
        redis_hits=sum(s.redis_hits for s in found),
        misses=sum(s.misses for s in found),
        expired=sum(s.expired for s in found),
        uncacheable=sum(s.uncacheable for s in found),
        entries=sum(n for n, _ in sizes),
        bytes=sum(b for _, b in sizes),
        evictions=sum(lru.evictions for lru in lrus),
    )


class _Pool(Protocol):
    query_cache: QueryCache | None
    embedder: Embedder | None
    fields: tuple[str, ...]
    sql: Any


def for_pool(pool: _Pool) -> tuple[QueryCache, str] | None:
    """A store's query cache and its search context (None when the store caches no queries)."""
    cache = pool.query_cache
    return None if cache is None else (cache, cache_context(pool))


def cache_context(pool: _Pool) -> str:
    """How a store searches, as part of a cache key: the engine, the embedder's model and the indexed fields."""
    model = pool.embedder.model_id if pool.embedder is not None else ""
    return json.dumps(["pg" if pool.sql is not None else "local", model, list(pool.fields)], separators=(",", ":"))


def encode(results: SearchResults) -> bytes:
    """Search results as JSON bytes (exact: timestamps in ms, scores as JSON floats)."""
    items = [
        [
            list(i.namespace), i.key, i.value, _ms(i.created_at), _ms(i.updated_at),
            None if i.expires_at is None else _ms(i.expires_at), i.author, list(i.sources), i.score, i.explain,
        ]
        for i in results
    ]  # fmt: skip
    doc = [results.mode, results.requested_mode, items]
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def decode(blob: bytes) -> SearchResults:
    """Search results from :func:`encode`'s bytes: fresh objects every time."""
    mode, requested, items = json.loads(blob)
    found = [
        SearchItem(
            tuple(ns), key, value, _dt(created), _dt(updated), None if expires is None else _dt(expires), author,
            tuple(sources), score, explain,
        )
        for ns, key, value, created, updated, expires, author, sources, score, explain in items
    ]  # fmt: skip
    return SearchResults(found, mode, requested)


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _widen(request: SearchOp) -> SearchOp:
    """The same search from the first result: a page's freshness depends on the expiry of every item ranked
    above it too (one expiring moves the page)."""
    fields = {name: getattr(request, name) for name in SearchOp.__dataclass_fields__}
    fields.update(limit=request.offset + request.limit, offset=0)
    return SearchOp(**fields)


def _page(full: SearchResults, offset: int) -> SearchResults:
    return SearchResults(list(full)[offset:], full.mode, full.requested_mode, full.degraded, full.lag)
