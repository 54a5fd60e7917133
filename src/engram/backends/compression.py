"""How chunks are stored compressed outside the process (remote objects, Redis values): zstd frames
(docs/adr/0005-compression.md).

A stored copy of a chunk is either one zstd frame (it starts with the frame magic ``28 B5 2F FD``) or the chunk's
own bytes, as written before compression existed (engram's chunks start with a type tag, ``N`` or ``C``, never with
the magic). Whatever is stored, ids are the hash of the uncompressed bytes, and the hash has the last word: a copy is
good only when what it decodes to hashes to its id. A frame that cannot be decoded is corruption, reported as
:class:`~engram.errors.IntegrityError`, never as a zstd exception.
"""

from __future__ import annotations

import threading

import zstandard

from engram.errors import IntegrityError
from engram.hashing import ChunkId, chunk_id

__all__ = ["LEVEL", "MAGIC", "MAX_CHUNK_BYTES", "compress", "decode", "decompress"]

#: The first four bytes of every zstd frame.
MAGIC = b"\x28\xb5\x2f\xfd"
#: zstd level of writes: level 1 to 3 compress engram's JSON chunks alike, and decompression speed is the same.
LEVEL = 3
#: A frame that claims to decode to more than this is corrupt (no chunk is that large): never allocate it.
MAX_CHUNK_BYTES = 1 << 30

_local = threading.local()  # zstd (de)compressor objects are not thread-safe: one of each per thread


def _compressor() -> zstandard.ZstdCompressor:
    found: zstandard.ZstdCompressor | None = getattr(_local, "compressor", None)
    if found is None:
        found = _local.compressor = zstandard.ZstdCompressor(level=LEVEL, write_checksum=True)
    return found


def _decompressor() -> zstandard.ZstdDecompressor:
    found: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if found is None:
        found = _local.decompressor = zstandard.ZstdDecompressor()
    return found


def compress(data: bytes) -> bytes:
    """The bytes to store for ``data``: one zstd frame (with its content checksum), or ``data`` itself when the
    frame would not be smaller and ``data`` cannot be mistaken for a frame."""
    frame = _compressor().compress(data)
    return frame if len(frame) < len(data) or data.startswith(MAGIC) else data


def decompress(stored: bytes) -> bytes:
    """The bytes a stored copy holds: a frame decoded, anything else as it is. A frame that cannot be decoded
    (truncated, flipped bytes, a checksum that does not match) is an :class:`IntegrityError`."""
    if not stored.startswith(MAGIC):
        return stored
    try:
        size = zstandard.frame_content_size(stored)
        if size > MAX_CHUNK_BYTES:
            raise zstandard.ZstdError(f"the frame claims {size} bytes")
        return _decompressor().decompress(stored, max_output_size=MAX_CHUNK_BYTES)
    except zstandard.ZstdError as exc:
        raise IntegrityError(f"a compressed chunk is damaged ({exc})") from None


def decode(cid: ChunkId, stored: bytes) -> bytes | None:
    """The chunk ``cid`` from a stored copy of it (a frame or its own bytes), or None when the copy is not good:
    a frame that cannot be decoded, or bytes that do not hash to ``cid``."""
    try:
        data = decompress(stored)
    except IntegrityError:
        data = stored  # the hash decides: only an old copy of a chunk that starts with the magic can pass
    return data if chunk_id(data) == cid else None
