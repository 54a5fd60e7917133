"""The ref store of a remote: refs as small objects changed by the bucket's compare-and-swap, each change
logged as its own object (``refs/<name, %-quoted>`` and ``reflog/<20-digit ns>-<random>``, beside the chunks of
:mod:`engram.ops.remotes.stores`)."""

from __future__ import annotations

import builtins
import json
import os
import threading
import time
from urllib.parse import quote, unquote

from engram.backends.base import RefLogEntry, RefStore, now_ms
from engram.backends.buckets import Bucket
from engram.errors import StorageError
from engram.hashing import ID_SIZE, ChunkId

REFS = "refs/"
REFLOG = "reflog/"


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
