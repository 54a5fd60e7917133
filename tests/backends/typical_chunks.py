"""Chunks of a store of typical JSON memories (sentences of common words, tags, a timestamp) for the Redis cache's
compression tests, and a chunk store that records what it was asked for."""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

import engram
from engram.backends import MemoryChunkStore
from engram.hashing import ChunkId

WORDS = [
    "".join(random.Random(i).choices("abcdefghijklmnopqrstuvwxyz", k=random.Random(-i).randint(2, 9)))
    for i in range(3000)
]


class CountingStore(MemoryChunkStore):
    """A memory chunk store that records the ids each ``get_many`` asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[ChunkId] = []

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        wanted = list(ids)
        self.reads.extend(wanted)
        return super().get_many(wanted)


def typical_chunks(path: Path, *, items: int, per_commit: int, seed: int) -> dict[ChunkId, bytes]:
    """Every chunk of a new store at ``path`` holding ``items`` memories written ``per_commit`` a commit."""
    mem = engram.open(str(path), embedder=None, author="tester")
    rng = random.Random(seed)
    weights = [1 / (r + 1) for r in range(len(WORDS))]
    for start in range(0, items, per_commit):
        with mem.transaction("bulk") as tx:
            for i in range(start, min(start + per_commit, items)):
                text = " ".join(rng.choices(WORDS, weights=weights, k=rng.randint(15, 45)))
                value = {"text": text, "user": f"user-{i % 50}", "tags": rng.sample(WORDS[:40], 3),
                         "created": f"2026-01-{1 + i % 28:02d}T00:{i % 60:02d}:00Z"}  # fmt: skip
                tx.put(("agents", f"a{i % 7}"), f"m{i:05d}", value)
    found = mem.repo.chunks.get_many(list(mem.repo.chunks.iter_ids()))
    mem.close()
    return found
