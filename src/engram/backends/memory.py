"""In-memory backend: the reference implementation, and so the spec, of the storage seam."""

from __future__ import annotations

import bisect
import builtins
import threading
from collections.abc import Iterable, Iterator, Mapping

from engram.backends.base import ChunkStore, RefLogEntry, RefStore, now_ms
from engram.hashing import ChunkId


class MemoryChunkStore(ChunkStore):
    """Chunks in a dict. Thread-safe."""

    def __init__(self) -> None:
        self._chunks: dict[ChunkId, bytes] = {}
        self._written: dict[ChunkId, int] = {}
        self._lock = threading.Lock()

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        chunks = self._chunks
        return {cid: chunks[cid] for cid in ids if cid in chunks}

    def has_many(self, ids: Iterable[ChunkId]) -> set[ChunkId]:
        return {cid for cid in ids if cid not in self._chunks}

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        stamp = now_ms()
        with self._lock:
            self._chunks.update(chunks)
            self._written.update(dict.fromkeys(chunks, stamp))

    def iter_ids(
        self, start: ChunkId | None = None, end: ChunkId | None = None, *, written_before: int | None = None
    ) -> Iterator[ChunkId]:
        with self._lock:
            ids = sorted(c for c in self._chunks if written_before is None or self._written[c] < written_before)
        lo = 0 if start is None else bisect.bisect_left(ids, start)
        hi = len(ids) if end is None else bisect.bisect_left(ids, end)
        yield from ids[lo:hi]

    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        with self._lock:
            for cid in ids:
                self._chunks.pop(cid, None)
                self._written.pop(cid, None)


class MemoryRefStore(RefStore):
    """Refs and their reflog in dicts; the reflog is kept per ref, in time order. Thread-safe."""

    def __init__(self) -> None:
        self._refs: dict[str, ChunkId] = {}
        self._logs: dict[str, list[tuple[int, RefLogEntry]]] = {}  # name -> [(seq, entry)]
        self._seq = 0
        self._last_time = 0
        self._lock = threading.Lock()

    def get(self, name: str) -> ChunkId | None:
        return self._refs.get(name)

    def set(
        self,
        name: str,
        new: ChunkId | None,
        expected: ChunkId | None,
        *,
        actor: str = "",
        reason: str = "",
    ) -> bool:
        with self._lock:
            if self._refs.get(name) != expected:
                return False
            if new is None:
                self._refs.pop(name, None)
            else:
                self._refs[name] = new
            self._seq += 1
            self._last_time = max(now_ms(), self._last_time)
            entry = RefLogEntry(name, expected, new, self._last_time, actor, reason)
            self._logs.setdefault(name, []).append((self._seq, entry))
            return True

    def list(self, prefix: str = "") -> dict[str, ChunkId]:
        with self._lock:
            return {n: v for n, v in sorted(self._refs.items()) if n.startswith(prefix)}

    def reflog(self, name: str | None = None, limit: int | None = None) -> builtins.list[RefLogEntry]:
        with self._lock:
            if name is None:
                rows = sorted((row for log in self._logs.values() for row in log), reverse=True)
            else:
                rows = list(reversed(self._logs.get(name, [])))
        entries = [entry for _, entry in rows]
        return entries if limit is None else entries[:limit]

    def value_at(self, name: str, time_ms: int) -> ChunkId | None:
        with self._lock:
            log = self._logs.get(name, [])
            i = bisect.bisect_right(log, time_ms, key=lambda row: row[1].time)
            return log[i - 1][1].new if i else None

    def prune_reflog(self, before_ms: int) -> int:
        dropped = 0
        with self._lock:
            for name, log in self._logs.items():
                kept = [row for row in log[:-1] if row[1].time >= before_ms] + log[-1:]
                dropped += len(log) - len(kept)
                self._logs[name] = kept
        return dropped
