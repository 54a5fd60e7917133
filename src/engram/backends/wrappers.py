"""Store wrappers: chunk and ref stores that forward to another (the base of layers such as the Redis cache), a
validating chunk store that re-hashes every chunk, an in-process LRU cache, and metered stores that record every
operation in :mod:`engram.observe`."""

from __future__ import annotations

import builtins
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager

from engram import observe
from engram.backends.base import ChunkStore, RefLogEntry, RefStore
from engram.hashing import ChunkId, verify


class ForwardingChunkStore(ChunkStore):
    """A chunk store that forwards every operation to ``inner``: the base of chunk-store layers that change a few."""

    def __init__(self, inner: ChunkStore) -> None:
        self.inner = inner

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        return self.inner.get_many(ids)

    def has_many(self, ids: Iterable[ChunkId]) -> set[ChunkId]:
        return self.inner.has_many(ids)

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        self.inner.put_many(chunks)

    def iter_ids(
        self, start: ChunkId | None = None, end: ChunkId | None = None, *, written_before: int | None = None
    ) -> Iterator[ChunkId]:
        return self.inner.iter_ids(start, end, written_before=written_before)

    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        self.inner.delete_many(ids)

    def close(self) -> None:
        self.inner.close()


class ValidatingChunkStore(ForwardingChunkStore):
    """Re-hash every chunk read or written; raise :class:`IntegrityError` on a mismatch. For tests and fsck."""

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        found = self.inner.get_many(ids)
        for cid, data in found.items():
            verify(cid, data)
        return found

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        for cid, data in chunks.items():
            verify(cid, data)
        self.inner.put_many(chunks)


class LruChunkStore(ChunkStore):
    """An in-process cache of chunks bounded in bytes. Chunks are immutable, so it is never stale."""

    def __init__(self, inner: ChunkStore, max_bytes: int = 64 << 20) -> None:
        self.inner = inner
        self.max_bytes = max_bytes
        self._cache: OrderedDict[ChunkId, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def _remember(self, chunks: Mapping[ChunkId, bytes]) -> None:
        with self._lock:
            for cid, data in chunks.items():
                if cid in self._cache:
                    self._cache.move_to_end(cid)
                    continue
                self._cache[cid] = data
                self._size += len(data)
            while self._size > self.max_bytes and self._cache:
                _, old = self._cache.popitem(last=False)
                self._size -= len(old)

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        found: dict[ChunkId, bytes] = {}
        missing: list[ChunkId] = []
        with self._lock:
            for cid in ids:
                data = self._cache.get(cid)
                if data is None:
                    missing.append(cid)
                else:
                    self._cache.move_to_end(cid)
                    found[cid] = data
        observe.cache_lookups("lru", len(found) + len(missing), len(missing))
        if missing:
            loaded = self.inner.get_many(missing)
            self._remember(loaded)
            found.update(loaded)
        return found

    def has_many(self, ids: Iterable[ChunkId]) -> set[ChunkId]:
        with self._lock:
            unknown = [cid for cid in ids if cid not in self._cache]
        return self.inner.has_many(unknown) if unknown else set()

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        self.inner.put_many(chunks)
        self._remember(chunks)

    def iter_ids(
        self, start: ChunkId | None = None, end: ChunkId | None = None, *, written_before: int | None = None
    ) -> Iterator[ChunkId]:
        return self.inner.iter_ids(start, end, written_before=written_before)

    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        doomed = list(ids)
        with self._lock:
            for cid in doomed:
                data = self._cache.pop(cid, None)
                if data is not None:
                    self._size -= len(data)
        self.inner.delete_many(doomed)

    def close(self) -> None:
        self.inner.close()


class ForwardingRefStore(RefStore):
    """A ref store that forwards every call to ``inner``: subclass it and override what a layer changes."""

    def __init__(self, inner: RefStore) -> None:
        self.inner = inner

    def get(self, name: str) -> ChunkId | None:
        return self.inner.get(name)

    def set(
        self, name: str, new: ChunkId | None, expected: ChunkId | None, *, actor: str = "", reason: str = ""
    ) -> bool:
        return self.inner.set(name, new, expected, actor=actor, reason=reason)

    def list(self, prefix: str = "") -> dict[str, ChunkId]:
        return self.inner.list(prefix)

    def reflog(self, name: str | None = None, limit: int | None = None) -> builtins.list[RefLogEntry]:
        return self.inner.reflog(name, limit)

    def value_at(self, name: str, time_ms: int) -> ChunkId | None:
        return self.inner.value_at(name, time_ms)

    def prune_reflog(self, before_ms: int) -> int:
        return self.inner.prune_reflog(before_ms)

    def lock(self, name: str, timeout: float | None = None) -> AbstractContextManager[None]:
        """The inner store's writer queue (a layer must not hide it, or writers race again)."""
        return self.inner.lock(name, timeout)

    def close(self) -> None:
        self.inner.close()


class MeteredChunkStore(ChunkStore):
    """Record every operation of ``inner`` (count, errors, duration; chunks and bytes written) under ``backend``.

    ``iter_ids`` is timed until its iterator is returned (a lazy iterator does its reads later).
    """

    OPERATIONS = ("get_many", "has_many", "put_many", "iter_ids", "delete_many")

    def __init__(self, inner: ChunkStore, backend: str) -> None:
        self.inner = inner
        self.backend = backend
        self._meter = observe.StorageMeter(backend, self.OPERATIONS)

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        return self._meter.run("get_many", lambda: self.inner.get_many(ids))

    def has_many(self, ids: Iterable[ChunkId]) -> set[ChunkId]:
        return self._meter.run("has_many", lambda: self.inner.has_many(ids))

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        self._meter.run("put_many", lambda: self.inner.put_many(chunks))
        self._meter.written(len(chunks), sum(map(len, chunks.values())))

    def iter_ids(
        self, start: ChunkId | None = None, end: ChunkId | None = None, *, written_before: int | None = None
    ) -> Iterator[ChunkId]:
        return self._meter.run("iter_ids", lambda: self.inner.iter_ids(start, end, written_before=written_before))

    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        self._meter.run("delete_many", lambda: self.inner.delete_many(ids))

    def close(self) -> None:
        self.inner.close()


class CacheCountingChunkStore(ForwardingChunkStore):
    """Count the ids read through this layer as lookups (``above=True``) or misses (``above=False``) of ``cache``.

    Put one above a cache layer and one between it and the store it caches: hit ratio = 1 - misses / lookups,
    measured at the seam whatever the cache does inside (the Redis cache when Redis is down: every read a miss).
    """

    def __init__(self, inner: ChunkStore, cache: str, *, above: bool) -> None:
        super().__init__(inner)
        self.cache = cache
        self.above = above

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        wanted = ids if isinstance(ids, list | tuple | set | frozenset) else list(ids)
        if self.above:
            observe.cache_lookups(self.cache, len(wanted), 0)
        else:
            observe.cache_lookups(self.cache, 0, len(wanted))
        return self.inner.get_many(wanted)


class MeteredRefStore(ForwardingRefStore):
    """Record the ref operations of ``inner`` (count, errors, duration) under ``backend``; ``lock`` is forwarded."""

    OPERATIONS = ("ref_get", "ref_set", "ref_list", "reflog", "value_at", "prune_reflog")

    def __init__(self, inner: RefStore, backend: str) -> None:
        super().__init__(inner)
        self.backend = backend
        self._meter = observe.StorageMeter(backend, self.OPERATIONS)

    def get(self, name: str) -> ChunkId | None:
        return self._meter.run("ref_get", lambda: self.inner.get(name))

    def set(
        self, name: str, new: ChunkId | None, expected: ChunkId | None, *, actor: str = "", reason: str = ""
    ) -> bool:
        return self._meter.run("ref_set", lambda: self.inner.set(name, new, expected, actor=actor, reason=reason))

    def list(self, prefix: str = "") -> dict[str, ChunkId]:
        return self._meter.run("ref_list", lambda: self.inner.list(prefix))

    def reflog(self, name: str | None = None, limit: int | None = None) -> builtins.list[RefLogEntry]:
        return self._meter.run("reflog", lambda: self.inner.reflog(name, limit))

    def value_at(self, name: str, time_ms: int) -> ChunkId | None:
        return self._meter.run("value_at", lambda: self.inner.value_at(name, time_ms))

    def prune_reflog(self, before_ms: int) -> int:
        return self._meter.run("prune_reflog", lambda: self.inner.prune_reflog(before_ms))
