"""Reading a tree: point get, ordered iteration over a key range, and counts."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from engram.hashing import ChunkId
from engram.tree.node import Node, NodeStore, ref_count


def get(store: NodeStore, root: ChunkId, key: bytes) -> bytes | None:
    """The value at ``key``, or ``None``."""
    node = store.load(root)
    while node.level > 0:
        i = bisect.bisect_left(node.keys, key)
        if i == len(node.keys):
            return None
        node = store.load(node.child(i))
    i = bisect.bisect_left(node.keys, key)
    if i < len(node.keys) and node.keys[i] == key:
        return node.values[i]
    return None


def iter_entries(
    store: NodeStore, root: ChunkId, start: bytes | None = None, end: bytes | None = None
) -> Iterator[tuple[bytes, bytes]]:
    """Yield (key, value) in key order for keys in ``[start, end)`` (unbounded where ``None``)."""
    yield from _iter(store, store.load(root), start, end)


def _iter(store: NodeStore, node: Node, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    keys = node.keys
    lo = 0 if start is None else bisect.bisect_left(keys, start)
    if node.level == 0:
        for i in range(lo, len(keys)):
            if end is not None and keys[i] >= end:
                return
            yield keys[i], node.values[i]
        return
    hi = len(keys) if end is None else min(bisect.bisect_left(keys, end) + 1, len(keys))
    children = store.load_many(node.child(i) for i in range(lo, hi))  # one round trip per node
    for i in range(lo, hi):
        yield from _iter(store, children[node.child(i)], start, end)


def rank(store: NodeStore, root: ChunkId, key: bytes) -> int:
    """Number of entries with a key strictly less than ``key``."""
    node = store.load(root)
    below = 0
    while node.level > 0:
        i = bisect.bisect_left(node.keys, key)
        below += sum(ref_count(v) for v in node.values[:i])
        if i == len(node.keys):
            return below
        node = store.load(node.child(i))
    return below + bisect.bisect_left(node.keys, key)


def count(store: NodeStore, root: ChunkId, start: bytes | None = None, end: bytes | None = None) -> int:
    """Number of entries with keys in ``[start, end)``, in O(log n) node reads."""
    total = store.load(root).count() if end is None else rank(store, root, end)
    return total - (0 if start is None else rank(store, root, start))
