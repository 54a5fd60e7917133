"""Building and editing trees: bulk build from a sorted stream, and batched puts and deletes.

An edit batch is applied one level at a time. At each level only the nodes that hold an edit are
re-chunked, continuing into following nodes until the new boundaries meet an old one; the
replaced nodes become edits of the level above. A batch of ``k`` edits on ``n`` entries writes
``O(k log n)`` nodes, and the result is the same tree a bulk build of the final contents gives.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

from engram.hashing import ChunkId
from engram.tree.chunker import LevelChunker, build_levels
from engram.tree.node import Node, NodeStore, NodeWriter

Edit = tuple[bytes, bytes | None]
"""A put (key, value) or a delete (key, None)."""


def empty_tree(store: NodeStore) -> ChunkId:
    """Write (if needed) and return the id of the empty tree."""
    writer = store.writer()
    cid = writer.write(0, [], []).id
    writer.flush()
    return cid


def build_tree(store: NodeStore, entries: Iterable[tuple[bytes, bytes]]) -> ChunkId:
    """Build a tree from entries sorted by strictly increasing key; return its root id."""
    writer = store.writer()
    chunker = LevelChunker(writer, 0)
    last: bytes | None = None
    for key, value in entries:
        if last is not None and key <= last:
            raise ValueError(f"entries must be sorted by strictly increasing key: {key!r} after {last!r}")
        chunker.add(key, value)
        last = key
    chunker.cut()
    root = build_levels(writer, 0, chunker.emitted)
    writer.flush()
    return root


def mutate(
    store: NodeStore,
    root: ChunkId,
    edits: Mapping[bytes, bytes | None] | Iterable[Edit],
    writer: NodeWriter | None = None,
) -> ChunkId:
    """Apply puts (key -> value) and deletes (key -> None) to the tree at ``root``; return the new root.

    New nodes are written through ``writer`` when given (the caller flushes it), else flushed here.
    """
    items = edits.items() if isinstance(edits, Mapping) else edits
    batch = sorted(dict(items).items())
    if not batch:
        return root
    out = store.writer() if writer is None else writer
    new_root = _mutate(store, out, root, batch)
    if writer is None:
        out.flush()
    return new_root


def _mutate(store: NodeStore, writer: NodeWriter, root: ChunkId, edits: list[Edit]) -> ChunkId:
    top = store.load(root)
    level_edits = edits
    for level in range(top.level + 1):
        emitted, level_edits = _apply_level(store, writer, top, level, level_edits)
        if level == top.level:
            node = writer.load(build_levels(writer, level, emitted))
            while node.level > 0 and len(node.keys) == 1:  # a level of one node is the root
                node = writer.load(node.child(0))
            return node.id
        if not level_edits:
            return root
    raise AssertionError("unreachable")


class _LevelCursor:
    """Walks the nodes of one level of a tree, left to right, with seeks by key."""

    def __init__(self, store: NodeStore, top: Node, level: int) -> None:
        self.store = store
        self.top = top
        self.level = level
        self.parents: list[Node] = []  # from the root down to the level's parent
        self.index: list[int] = []  # child index taken in each parent
        self.node = top

    def seek(self, key: bytes) -> None:
        """Move to the first node whose last key is >= ``key`` (the last node if none is)."""
        node = self.top
        self.parents, self.index = [], []
        while node.level > self.level:
            i = min(bisect.bisect_left(node.keys, key), len(node.keys) - 1)
            self.parents.append(node)
            self.index.append(i)
            node = self.store.load(node.child(i))
        self.node = node

    def is_last(self) -> bool:
        """True when the current node is the last of its level."""
        return all(i == len(p.keys) - 1 for p, i in zip(self.parents, self.index, strict=True))

    def advance(self) -> None:
        """Move to the next node of the level (the caller checks :meth:`is_last` first)."""
        depth = len(self.parents) - 1
        while self.index[depth] == len(self.parents[depth].keys) - 1:
            depth -= 1
        self.index[depth] += 1
        del self.parents[depth + 1 :], self.index[depth + 1 :]
        node = self.store.load(self.parents[depth].child(self.index[depth]))
        while node.level > self.level:
            self.parents.append(node)
            self.index.append(0)
            node = self.store.load(node.child(0))
        self.node = node


def _apply_level(
    store: NodeStore, writer: NodeWriter, top: Node, level: int, edits: list[Edit]
) -> tuple[list[tuple[bytes, bytes]], list[Edit]]:
    """Apply sorted edits to one level; return the nodes written and the edits for the level above."""
    cursor = _LevelCursor(store, top, level)
    chunker = LevelChunker(writer, level)
    removed: dict[bytes, bytes] = {}
    n_edits = len(edits)
    i = 0
    while i < n_edits:
        cursor.seek(edits[i][0])
        while True:
            node = cursor.node
            last = cursor.is_last()
            if node.keys:
                removed[node.keys[-1]] = node.id
            keys, values = node.keys, node.values
            n, j = len(keys), 0
            inner = n - 1  # entries before the last one are known non-boundaries
            limit = None if last else keys[-1]
            while i < n_edits and (limit is None or edits[i][0] <= limit):
                ekey, evalue = edits[i]
                while j < n and keys[j] < ekey:
                    chunker.add(keys[j], values[j], j < inner)
                    j += 1
                if j < n and keys[j] == ekey:
                    j += 1
                if evalue is not None:
                    chunker.add(ekey, evalue)
                i += 1
            while j < n:
                chunker.add(keys[j], values[j], j < inner)
                j += 1
            if last:
                chunker.cut()
                break
            if chunker.at_boundary:
                break
            cursor.advance()
    parent_edits: dict[bytes, bytes | None] = dict.fromkeys(removed)
    for key, ref in chunker.emitted:
        if removed.get(key) == ref[:20]:
            del parent_edits[key]  # the same node as before: nothing changes above
        else:
            parent_edits[key] = ref
    return chunker.emitted, sorted(parent_edits.items())
