"""Versioned objects: commits, and the records stored as tree values.

Both are chunks of canonical JSON behind a one-byte kind (``C`` commit, ``R`` record), so equal
content always hashes to the same id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engram import codec
from engram.errors import IntegrityError, InvalidValueError
from engram.hashing import ChunkId, chunk_id

_COMMIT = b"C"
_RECORD = b"R"


@dataclass(frozen=True, slots=True, repr=False)
class Commit:
    """One version: a tree root, its parents, and who made it, when and why.

    Attributes:
        id: the commit's chunk id.
        tree: root id of the tree of items at this version.
        parents: parent commit ids (none for the first commit, two for a merge).
        time: UTC time in milliseconds since the epoch.
        author: agent or user id that made the commit.
        message: what the change was.
        metadata: anything else (writer run id, source message ids, ...).
    """

    id: ChunkId
    tree: ChunkId
    parents: tuple[ChunkId, ...]
    time: int
    author: str
    message: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def short_id(self) -> str:
        """The first 10 hex characters of the id."""
        return self.id.hex()[:10]

    def __repr__(self) -> str:
        """``<Commit 0a9d0ec6da by alice: 'put users/alice/prefs'>`` (the fields hold raw bytes: unreadable)."""
        return f"<Commit {self.short_id} by {self.author}: {self.message!r}>"


def encode_commit(
    tree: ChunkId,
    parents: tuple[ChunkId, ...],
    time: int,
    author: str,
    message: str,
    metadata: dict[str, Any] | None = None,
) -> tuple[ChunkId, bytes]:
    """Serialize a commit; return (id, bytes)."""
    body = {
        "tree": tree.hex(),
        "parents": [p.hex() for p in parents],
        "time": time,
        "author": author,
        "message": message,
        "metadata": metadata or {},
    }
    data = _COMMIT + codec.dumps(body)
    return chunk_id(data), data


def is_commit(data: bytes) -> bool:
    """True when a chunk's bytes are a commit."""
    return data[:1] == _COMMIT


def decode_commit(cid: ChunkId, data: bytes) -> Commit:
    """Parse a commit chunk."""
    if not is_commit(data):
        raise IntegrityError(f"chunk {cid.hex()} is not a commit")
    body = codec.loads(data[1:])
    return Commit(
        id=cid,
        tree=bytes.fromhex(body["tree"]),
        parents=tuple(bytes.fromhex(p) for p in body["parents"]),
        time=body["time"],
        author=body["author"],
        message=body["message"],
        metadata=body["metadata"],
    )


@dataclass(frozen=True, slots=True)
class Record:
    """What the tree stores for one item: its value, timestamps and provenance.

    Attributes:
        value: the item's JSON object.
        created_at: UTC ms when the key was first written.
        updated_at: UTC ms of this version.
        expires_at: UTC ms after which the item is expired, or None.
        author: who wrote this version.
        sources: ids of the messages (or other inputs) this version came from.
        extra: further per-item settings (index fields, TTL, writer run), kept as JSON.
    """

    value: dict[str, Any]
    created_at: int
    updated_at: int
    expires_at: int | None = None
    author: str | None = None
    sources: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def encode_record(record: Record) -> bytes:
    """Serialize a record as a tree value."""
    body: dict[str, Any] = {"v": record.value, "c": record.created_at, "u": record.updated_at}
    if record.expires_at is not None:
        body["e"] = record.expires_at
    if record.author is not None:
        body["a"] = record.author
    if record.sources:
        body["s"] = list(record.sources)
    if record.extra:
        body["x"] = record.extra
    try:
        return _RECORD + codec.dumps(body)
    except (ValueError, TypeError) as exc:
        raise InvalidValueError(f"an item value must be JSON: {exc}") from None


def decode_record(data: bytes) -> Record:
    """Parse a tree value written by :func:`encode_record`."""
    if data[:1] != _RECORD:
        raise IntegrityError("tree value is not an item record")
    return _record(codec.loads(data[1:]))


def decode_records(datas: Sequence[bytes]) -> list[Record]:
    """Parse many tree values written by :func:`encode_record` with one JSON parse (a bulk load: ~3x fewer
    CPU cycles than one parse each); the same records, or the same error, as :func:`decode_record` each."""
    if not all(data[:1] == _RECORD for data in datas):
        return [decode_record(data) for data in datas]  # raises for the first that is not a record
    try:
        bodies = codec.loads(b"[" + b",".join([data[1:] for data in datas]) + b"]")
    except IntegrityError:  # one of them is not JSON: decoded one by one below, to raise its own error
        bodies = None
    if not isinstance(bodies, list) or len(bodies) != len(datas):  # a malformed one: find it (and its error)
        return [decode_record(data) for data in datas]
    return [_record(body) for body in bodies]


def _record(body: dict[str, Any]) -> Record:
    return Record(
        value=body["v"],
        created_at=body["c"],
        updated_at=body["u"],
        expires_at=body.get("e"),
        author=body.get("a"),
        sources=tuple(body.get("s", ())),
        extra=body.get("x", {}),
    )
