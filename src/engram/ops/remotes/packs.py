"""The pack format of a remote: many chunks back to back in one object, and an index object beside it.

``packs/<name>.pack`` holds the chunks as stored (each one zstd frame since compression, or its own bytes in packs
written before); ``packs/<name>.idx`` holds a header (magic, write time in UTC ms, entry count) and, per chunk, its
id and the offset and length of its stored bytes. The index is written after the pack, so a pack is visible
only once complete; a pack is named by the hash of its ids, so writing the same chunks again rewrites it.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from engram.errors import StorageError
from engram.hashing import ID_SIZE, ChunkId

PACKS = "packs/"
#: Bytes of chunks in one pack at most; larger writes make several packs, written in parallel.
PACK_BYTES = 8 << 20

_IDX_HEAD = struct.Struct(">4sqI")  # magic, written (UTC ms), entries
_IDX_ENTRY = struct.Struct(f">{ID_SIZE}sQI")  # chunk id, offset, length
_IDX_MAGIC = b"EPK1"


@dataclass(frozen=True)
class Pack:
    """One pack: ``<name>.pack`` (chunks back to back) and ``<name>.idx`` (id, offset, length of each, and the
    write time), written in that order, so a pack is visible only once complete."""

    name: str
    written: int
    entries: dict[ChunkId, tuple[int, int]]

    @property
    def size(self) -> int:
        """Bytes of the pack object."""
        return sum(length for _, length in self.entries.values())

    def encode_index(self) -> bytes:
        """The index object's bytes."""
        head = _IDX_HEAD.pack(_IDX_MAGIC, self.written, len(self.entries))
        return head + b"".join(_IDX_ENTRY.pack(cid, at, n) for cid, (at, n) in self.entries.items())


def decode_index(name: str, data: bytes) -> Pack:
    """A pack from its index object (a damaged index is a :class:`StorageError`)."""
    try:
        magic, written, count = _IDX_HEAD.unpack_from(data)
        if magic != _IDX_MAGIC or len(data) != _IDX_HEAD.size + count * _IDX_ENTRY.size:
            raise ValueError("bad header or size")
        entries = {
            cid: (at, n) for cid, at, n in _IDX_ENTRY.iter_unpack(data[_IDX_HEAD.size :])
        }  # fmt: skip
    except (struct.error, ValueError) as exc:
        raise StorageError(f"the index of pack {name} on the remote is damaged ({exc})") from None
    return Pack(name, written, entries)


def make_packs(items: list[tuple[ChunkId, bytes]], written: int, limit: int = PACK_BYTES) -> list[tuple[Pack, bytes]]:
    """Chunks cut into packs of at most ``limit`` bytes (in the order given: a walk reads them back in that
    order), each named by the hash of its ids, so writing the same chunks again rewrites the same pack."""
    packs: list[tuple[Pack, bytes]] = []
    run: list[tuple[ChunkId, bytes]] = []
    size = 0
    for cid, data in [*items, (b"", b"")]:
        if run and (not cid or size + len(data) > limit):
            name = PACKS + hashlib.blake2b(b"".join(c for c, _ in run), digest_size=20).hexdigest()
            entries: dict[ChunkId, tuple[int, int]] = {}
            at = 0
            for one, body in run:
                entries[one] = (at, len(body))
                at += len(body)
            packs.append((Pack(name, written, entries), b"".join(body for _, body in run)))
            run, size = [], 0
        if cid:
            run.append((cid, data))
            size += len(data)
    return packs


def slice_pack(pack: Pack, data: bytes, start: int, cids: list[ChunkId]) -> dict[ChunkId, bytes]:
    """The chunks ``cids`` out of the bytes of ``pack`` read from offset ``start``."""
    found: dict[ChunkId, bytes] = {}
    for cid in cids:
        at, n = pack.entries[cid]
        piece = data[at - start : at - start + n]
        if len(piece) == n:
            found[cid] = piece
    return found


__all__ = ["PACKS", "PACK_BYTES", "Pack", "decode_index", "make_packs", "slice_pack"]
