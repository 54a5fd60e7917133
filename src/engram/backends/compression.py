"""How chunks are stored compressed outside the process (remote objects, Redis values): zstd frames, with a
dictionary trained from the store's own chunks once there are enough of them (docs/adr/0005-compression.md).

A stored copy of a chunk is either one zstd frame (it starts with the frame magic ``28 B5 2F FD``) or the chunk's
own bytes, as written before compression existed (engram's chunks start with a type tag, ``N`` or ``C``, never with
the magic). A frame written with a dictionary names it by the dictionary's id (in the frame header); a dictionary
is addressed by its hash: its id is derived from its content (:func:`dictionary_id`), so a reader that fetched one
checks it before use. Whatever is stored, ids are the hash of the uncompressed bytes, and the hash has the last
word: a copy is good only when what it decodes to hashes to its id. A frame that cannot be decoded (or whose
dictionary is missing or damaged) is corruption, reported as :class:`~engram.errors.IntegrityError`, never as a
zstd exception.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

import zstandard

from engram.errors import IntegrityError
from engram.hashing import ChunkId, chunk_id

__all__ = [
    "DICT_BYTES",
    "KEEP_SHARE",
    "LEVEL",
    "MAGIC",
    "MAX_CHUNK_BYTES",
    "TRAIN_MAX_BYTES",
    "TRAIN_MIN_BYTES",
    "Dictionary",
    "compress",
    "decode",
    "decompress",
    "dictionary_id",
    "frame_dictionary",
    "train",
]

#: The first four bytes of every zstd frame.
MAGIC = b"\x28\xb5\x2f\xfd"
#: The first four bytes of every zstd dictionary (then its id, 4 bytes little-endian).
DICT_MAGIC = b"\x37\xa4\x30\xec"
#: zstd level of writes: level 1 to 3 compress engram's JSON chunks alike, and decompression speed is the same.
LEVEL = 3
#: A frame that claims to decode to more than this is corrupt (no chunk is that large): never allocate it.
MAX_CHUNK_BYTES = 1 << 30
#: Size of a trained dictionary at most (a third of the samples' bytes at most: a larger one overfits them). On
#: typical JSON memories 1 MB of samples and 256 KB store chunks in 23 % of their bytes, 110 KB in 25 %.
DICT_BYTES = 256 << 10
#: Bytes of sample chunks a dictionary is trained from, at least (fewer: no dictionary yet) and at most.
TRAIN_MIN_BYTES = 256 << 10
TRAIN_MAX_BYTES = 4 << 20
#: A trained dictionary is kept only when held-out samples take at most this share of their plain frames with it.
KEEP_SHARE = 0.9
#: Dictionary ids 1 to 32767 are reserved by zstd's format, 2^31 and above too.
_ID_LOW, _ID_HIGH = 32768, 1 << 31

_local = threading.local()  # zstd (de)compressor objects are not thread-safe: one of each per thread and dictionary


def dictionary_id(data: bytes) -> int:
    """The id of a dictionary with content ``data`` (its bytes after the magic and id): derived from its hash,
    so the id in a frame addresses one dictionary, and a fetched dictionary is checked against it."""
    digest = hashlib.blake2b(data[8:], digest_size=8).digest()
    return _ID_LOW + int.from_bytes(digest, "big") % (_ID_HIGH - _ID_LOW)


@dataclass(frozen=True)
class Dictionary:
    """A zstd dictionary: its id (in the header of every frame written with it) and its bytes."""

    id: int
    data: bytes = field(repr=False)

    @property
    def name(self) -> str:
        """The id as 8 hex digits (the dictionary's object or key name)."""
        return f"{self.id:08x}"

    @classmethod
    def load(cls, data: bytes, expected: int | None = None) -> Dictionary:
        """A dictionary from its stored bytes, checked against its hash (and against ``expected``, the id a frame
        asked for): a damaged or foreign dictionary is an :class:`IntegrityError`."""
        stored = int.from_bytes(data[4:8], "little") if len(data) > 8 else -1
        if not data.startswith(DICT_MAGIC) or stored != dictionary_id(data):
            raise IntegrityError("a compression dictionary is damaged (its bytes do not hash to its id)")
        if expected is not None and stored != expected:
            raise IntegrityError(f"dictionary {expected:08x} was asked for, {stored:08x} found")
        return cls(stored, data)


def train(samples: Iterable[bytes], size: int = DICT_BYTES, *, seed: int = 0) -> Dictionary | None:
    """A dictionary of at most ``size`` bytes (and a third of the samples') trained from sample chunks (at most
    TRAIN_MAX_BYTES of them, picked at random), or None
    when they are fewer than TRAIN_MIN_BYTES, zstd cannot train from them, or the dictionary does not pay: every
    eighth sample is held out, and the dictionary must store those in at most KEEP_SHARE of their plain frames'
    bytes (incompressible chunks, or chunks with nothing in common, get no dictionary)."""
    pool = [sample for sample in samples if sample]
    random.Random(seed).shuffle(pool)
    picked: list[bytes] = []
    total = 0
    for sample in pool:
        if total + len(sample) > TRAIN_MAX_BYTES:
            continue
        picked.append(sample)
        total += len(sample)
    if total < TRAIN_MIN_BYTES or len(picked) < 8:
        return None
    held = picked[::8]
    used: list[bytes | bytearray | memoryview] = [sample for i, sample in enumerate(picked) if i % 8]
    try:
        data = zstandard.train_dictionary(min(size, total // 3), used, level=LEVEL).as_bytes()
    except zstandard.ZstdError:
        return None
    if not data.startswith(DICT_MAGIC):
        return None
    found = Dictionary.load(data[:4] + dictionary_id(data).to_bytes(4, "little") + data[8:])
    with_it = sum(len(compress(sample, found)) for sample in held)
    return found if with_it <= KEEP_SHARE * sum(len(compress(sample)) for sample in held) else None


def _tools(dictionary: Dictionary | None) -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    cache: dict[int, tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]] | None = getattr(
        _local, "tools", None
    )
    if cache is None:
        cache = _local.tools = {}
    key = 0 if dictionary is None else dictionary.id
    found = cache.get(key)
    if found is None:
        if len(cache) >= 8:  # a process uses one or two dictionaries per store: bound what an odd one keeps
            cache.clear()
        zdict = None if dictionary is None else zstandard.ZstdCompressionDict(dictionary.data)
        found = cache[key] = (
            zstandard.ZstdCompressor(level=LEVEL, write_checksum=True, dict_data=zdict),
            zstandard.ZstdDecompressor(dict_data=zdict),
        )
    return found


def compress(data: bytes, dictionary: Dictionary | None = None) -> bytes:
    """The bytes to store for ``data``: one zstd frame (with its content checksum, and the id of ``dictionary``
    when one is given), or ``data`` itself when the frame would not be smaller and ``data`` cannot be mistaken
    for a frame."""
    frame = _tools(dictionary)[0].compress(data)
    return frame if len(frame) < len(data) or data.startswith(MAGIC) else data


def frame_dictionary(stored: bytes) -> int:
    """The id of the dictionary a stored copy needs to be decoded: 0 for none (no dictionary, not a frame, or a
    header that cannot be read, which decoding then reports)."""
    if not stored.startswith(MAGIC):
        return 0
    try:
        return int(zstandard.get_frame_parameters(stored).dict_id)
    except zstandard.ZstdError:
        return 0


def decompress(stored: bytes, dictionary: Dictionary | None = None) -> bytes:
    """The bytes a stored copy holds: a frame decoded (with ``dictionary`` when its header names one), anything
    else as it is. A frame that cannot be decoded (truncated, flipped bytes, a checksum that does not match, a
    dictionary that was not given) is an :class:`IntegrityError`."""
    if not stored.startswith(MAGIC):
        return stored
    try:
        params = zstandard.get_frame_parameters(stored)
        if params.dict_id and (dictionary is None or dictionary.id != params.dict_id):
            raise IntegrityError(f"a compressed chunk needs dictionary {params.dict_id:08x}, which is not at hand")
        size = params.content_size
        if size > MAX_CHUNK_BYTES:
            raise zstandard.ZstdError(f"the frame claims {size} bytes")
        chosen = dictionary if params.dict_id else None
        return _tools(chosen)[1].decompress(stored, max_output_size=MAX_CHUNK_BYTES)
    except zstandard.ZstdError as exc:
        raise IntegrityError(f"a compressed chunk is damaged ({exc})") from None


def decode(cid: ChunkId, stored: bytes, dictionary: Dictionary | None = None) -> bytes | None:
    """The chunk ``cid`` from a stored copy of it (a frame or its own bytes), or None when the copy is not good:
    a frame that cannot be decoded, or bytes that do not hash to ``cid``."""
    try:
        data = decompress(stored, dictionary)
    except IntegrityError:
        data = stored  # the hash decides: only an old copy of a chunk that starts with the magic can pass
    return data if chunk_id(data) == cid else None
