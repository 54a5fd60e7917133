"""The chunk store and ref store of a remote, written once over a :class:`~engram.ops.remotes.buckets.Bucket`.

Layout (the same in a folder and in S3)::

    chunks/<first 2 hex>/<40 hex>       one object per chunk, its bytes as stored locally
    refs/<ref name, %-quoted>           a ref: the hex id it points at
    reflog/<20-digit ns>-<random>       one JSON object per ref change

A remote passes the storage contract suites (:mod:`engram.testing`) like every local backend, so
``fsck``, the reachability walk and the sweep of :mod:`engram.maintenance` run on a remote as they do locally.
"""

from __future__ import annotations

import builtins
import json
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from engram.backends.base import ChunkStore, RefLogEntry, RefStore, now_ms
from engram.errors import StorageError
from engram.hashing import ID_SIZE, ChunkId
from engram.ops.remotes.buckets import Bucket, open_bucket

CHUNKS = "chunks/"
REFS = "refs/"
REFLOG = "reflog/"
#: From this many ids on, ``has_many`` lists the remote's chunks once instead of asking about each id.
LIST_THRESHOLD = 256
#: Seconds a listing of the remote's chunks answers ``has_many`` for.
LISTING_TTL = 60.0


def chunk_key(cid: ChunkId) -> str:
    """The object key of a chunk."""
    text = cid.hex()
    return f"{CHUNKS}{text[:2]}/{text}"


def _chunk_of(key: str) -> ChunkId | None:
    name = key.rpartition("/")[2]
    try:
        cid = bytes.fromhex(name)
    except ValueError:
        return None
    return cid if len(cid) == ID_SIZE else None


class BucketChunkStore(ChunkStore):
    """Chunks as objects of a bucket (``put_many`` is idempotent; a re-put renews the write time)."""

    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket
        self._listed: set[ChunkId] | None = None  # the last full listing, reused for LISTING_TTL seconds
        self._listed_at = 0.0
        self._listing = threading.Lock()

    def _present(self) -> set[ChunkId]:
        """Every chunk id on the remote, from a listing at most LISTING_TTL seconds old (a listing is one request
        per 1,000 chunks, parsed in Python: a copy's successive questions share one). Chunks only disappear in a
        sweep, which must not run during a copy."""
        with self._listing:
            if self._listed is None or time.monotonic() - self._listed_at > LISTING_TTL:
                self._listed = set(self.iter_ids())
                self._listed_at = time.monotonic()
            return self._listed

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        wanted = {chunk_key(cid): cid for cid in ids}
        return {wanted[key]: data for key, data in self.bucket.get_many(wanted).items()}

    def has_many(self, ids: Iterable[ChunkId]) -> set[ChunkId]:
        wanted = set(ids)
        if len(wanted) >= LIST_THRESHOLD:
            return wanted - self._present()
        present = self.bucket.exists_many(chunk_key(cid) for cid in wanted)
        return {cid for cid in wanted if chunk_key(cid) not in present}

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        self.bucket.put_many({chunk_key(cid): data for cid, data in chunks.items()})
        with self._listing:
            if self._listed is not None:
                self._listed.update(chunks)

    def iter_ids(
        self, start: ChunkId | None = None, end: ChunkId | None = None, *, written_before: int | None = None
    ) -> Iterator[ChunkId]:
        for key, written in self.bucket.iter_keys(CHUNKS):
            cid = _chunk_of(key)
            if cid is None or (start is not None and cid < start) or (end is not None and cid >= end):
                continue
            if written_before is not None and written > written_before - self.bucket.precision_ms:
                exact = written if written >= written_before else self.bucket.written_at(key)
                if exact is None or exact >= written_before:
                    continue
            yield cid

    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        with self._listing:
            self._listed = None
        self.bucket.delete_many(chunk_key(cid) for cid in ids)

    def close(self) -> None:
        self.bucket.close()


def _ref_key(name: str) -> str:
    if not name or "\0" in name:
        raise StorageError(f"invalid ref name {name!r}")
    return REFS + quote(name, safe="")


class BucketRefStore(RefStore):
    """Refs as small objects changed by the bucket's compare-and-swap, each change logged as its own object."""

    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket

    def get(self, name: str) -> ChunkId | None:
        found = self.bucket.read(_ref_key(name))
        return None if found is None else _decode_ref(name, found[0])

    def set(
        self, name: str, new: ChunkId | None, expected: ChunkId | None, *, actor: str = "", reason: str = ""
    ) -> bool:
        key = _ref_key(name)
        found = self.bucket.read(key)
        current = None if found is None else _decode_ref(name, found[0])
        if current != expected:
            return False
        data = None if new is None else (new.hex() + "\n").encode()
        if not self.bucket.write_if(key, data, None if found is None else found[1]):
            return False
        entry = {"name": name, "old": _hex(expected), "new": _hex(new), "time": now_ms(), "actor": actor,
                 "reason": reason}  # fmt: skip
        self.bucket.put_many({f"{REFLOG}{_sequence()}-{os.urandom(6).hex()}": json.dumps(entry).encode()})
        return True

    def list(self, prefix: str = "") -> dict[str, ChunkId]:
        keys = [key for key, _ in self.bucket.iter_keys(REFS + quote(prefix, safe=""))]
        found = self.bucket.get_many(keys)
        refs = {unquote(key[len(REFS) :]): data for key, data in found.items()}
        return {name: _decode_ref(name, data) for name, data in sorted(refs.items()) if name.startswith(prefix)}

    def _entries(self) -> builtins.list[tuple[str, RefLogEntry]]:
        keys = [key for key, _ in self.bucket.iter_keys(REFLOG)]
        found = self.bucket.get_many(keys)
        entries = []
        for key in keys:
            if key not in found:
                continue  # pruned meanwhile
            body = json.loads(found[key])
            entry = RefLogEntry(body["name"], _id(body["old"]), _id(body["new"]), body["time"], body["actor"],
                                body["reason"])  # fmt: skip
            entries.append((key, entry))
        return entries  # oldest first: keys start with the time

    def reflog(self, name: str | None = None, limit: int | None = None) -> builtins.list[RefLogEntry]:
        entries = [entry for _, entry in reversed(self._entries()) if name is None or entry.name == name]
        return entries if limit is None else entries[:limit]

    def value_at(self, name: str, time_ms: int) -> ChunkId | None:
        for entry in self.reflog(name):
            if entry.time <= time_ms:
                return entry.new
        return None

    def prune_reflog(self, before_ms: int) -> int:
        newest: dict[str, str] = {}
        entries = self._entries()
        for key, entry in entries:
            newest[entry.name] = key
        doomed = [key for key, entry in entries if entry.time < before_ms and newest[entry.name] != key]
        self.bucket.delete_many(doomed)
        return len(doomed)


_last_ns = 0
_sequence_lock = threading.Lock()


def _sequence() -> str:
    """A reflog key's sortable part: wall-clock nanoseconds, strictly increasing within this process."""
    global _last_ns
    with _sequence_lock:
        _last_ns = max(_last_ns + 1, time.time_ns())
        return f"{_last_ns:020d}"


def _hex(cid: ChunkId | None) -> str | None:
    return None if cid is None else cid.hex()


def _id(text: str | None) -> ChunkId | None:
    return None if text is None else bytes.fromhex(text)


def _decode_ref(name: str, data: bytes) -> ChunkId:
    try:
        cid = bytes.fromhex(data.decode().strip())
    except (UnicodeDecodeError, ValueError):
        raise StorageError(f"ref {name!r} on the remote is not a chunk id: {data[:60]!r}") from None
    if len(cid) != ID_SIZE:
        raise StorageError(f"ref {name!r} on the remote is not a chunk id: {data[:60]!r}")
    return cid


@dataclass
class Remote:
    """A remote repository: chunks and refs in a bucket, named by its URL."""

    url: str
    chunks: BucketChunkStore
    refs: BucketRefStore

    def close(self) -> None:
        """Release the bucket's connections."""
        self.chunks.close()


def open_remote(url: str) -> Remote:
    """Open the remote at ``url`` (``dir:///path`` or ``s3://bucket/prefix?endpoint=...``); nothing is written."""
    bucket = open_bucket(url)
    return Remote(url, BucketChunkStore(bucket), BucketRefStore(bucket))
