"""Content addressing: every chunk is named by the BLAKE2b-160 hash of its bytes."""

from __future__ import annotations

import hashlib

from engram.errors import IntegrityError

#: Length in bytes of a chunk id.
ID_SIZE = 20

ChunkId = bytes
"""A chunk id: the 20-byte BLAKE2b digest of the chunk's bytes."""


def chunk_id(data: bytes) -> ChunkId:
    """Return the id of a chunk with these bytes."""
    return hashlib.blake2b(data, digest_size=ID_SIZE).digest()


def verify(cid: ChunkId, data: bytes) -> None:
    """Raise :class:`IntegrityError` unless ``data`` hashes to ``cid``."""
    if chunk_id(data) != cid:
        raise IntegrityError(f"chunk {cid.hex()} is corrupt: its bytes hash to {chunk_id(data).hex()}")


def key_hash(key: bytes, level: int) -> int:
    """A 32-bit hash of a tree key, independent per tree level; used to place chunk boundaries."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=4, salt=_SALTS[level % 16]).digest(), "little")


_SALTS = [bytes([level]) * 16 for level in range(16)]
