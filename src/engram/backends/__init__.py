"""Storage backends: chunk stores and ref stores (DESIGN.md §3)."""

from engram.backends.base import ChunkStore, RefLogEntry, RefStore
from engram.backends.memory import MemoryChunkStore, MemoryRefStore
from engram.backends.sqlite import SqliteChunkStore, SqliteDatabase, SqliteRefStore, open_sqlite
from engram.backends.wrappers import ForwardingChunkStore, ForwardingRefStore, LruChunkStore, ValidatingChunkStore

__all__ = [
    "ChunkStore",
    "ForwardingChunkStore",
    "ForwardingRefStore",
    "LruChunkStore",
    "MemoryChunkStore",
    "MemoryRefStore",
    "RefLogEntry",
    "RefStore",
    "SqliteChunkStore",
    "SqliteDatabase",
    "SqliteRefStore",
    "ValidatingChunkStore",
    "open_sqlite",
]
