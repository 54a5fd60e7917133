"""Diff of two trees. Equal subtrees are skipped by hash, so the cost grows with the change, not the map."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from engram.hashing import ChunkId
from engram.tree.node import Node, NodeStore


@dataclass(frozen=True, slots=True)
class Change:
    """One key that differs: ``old`` is ``None`` for an addition, ``new`` is ``None`` for a deletion."""

    key: bytes
    old: bytes | None
    new: bytes | None


class _Cursor:
    """A position on one leaf entry, with the path of nodes above it."""

    def __init__(self, store: NodeStore, root: ChunkId, start: bytes | None = None) -> None:
        self.store = store
        self.nodes: list[Node] = [store.load(root)]
        self.index: list[int] = [0]
        self.done = False
        self._descend()
        if start is not None:
            while not self.done and self.key < start:
                self.next()

    def _descend(self) -> None:
        node = self.nodes[-1]
        while node.level > 0:
            node = self.store.load(node.child(self.index[-1]))
            self.nodes.append(node)
            self.index.append(0)
        if not node.keys:
            self.done = True

    @property
    def key(self) -> bytes:
        return self.nodes[-1].keys[self.index[-1]]

    @property
    def value(self) -> bytes:
        return self.nodes[-1].values[self.index[-1]]

    def _advance(self, depth: int) -> None:
        """Step to the next entry of ``nodes[depth]`` (carrying upward), then down to a leaf."""
        while depth >= 0 and self.index[depth] + 1 >= len(self.nodes[depth].keys):
            depth -= 1
        if depth < 0:
            self.done = True
            return
        self.index[depth] += 1
        del self.nodes[depth + 1 :], self.index[depth + 1 :]
        self._descend()

    def next(self) -> None:
        """Move to the next leaf entry."""
        self._advance(len(self.nodes) - 1)

    def skip(self, depth: int) -> None:
        """Move past the whole subtree ``nodes[depth]`` (the cursor is at its first entry)."""
        self._advance(depth - 1)

    def subtree_starts(self) -> dict[ChunkId, int]:
        """Ids of the nodes whose first entry is the current position -> their stack depth."""
        starts: dict[ChunkId, int] = {}
        depth = len(self.nodes) - 1
        while depth >= 0 and self.index[depth] == 0:
            starts[self.nodes[depth].id] = depth
            depth -= 1
        return starts


def diff_trees(
    store: NodeStore, old: ChunkId, new: ChunkId, start: bytes | None = None, end: bytes | None = None
) -> Iterator[Change]:
    """Yield the changes that turn tree ``old`` into tree ``new``, in key order, for keys in ``[start, end)``."""
    if old == new:
        return
    for change in _diff(store, old, new, start):
        if end is not None and change.key >= end:
            return
        yield change


def _diff(store: NodeStore, old: ChunkId, new: ChunkId, start: bytes | None) -> Iterator[Change]:
    a = _Cursor(store, old, start)
    b = _Cursor(store, new, start)
    while not a.done and not b.done:
        if a.index[-1] == 0 and b.index[-1] == 0:
            ours = a.subtree_starts()
            theirs = b.subtree_starts()
            shared = [cid for cid in ours if cid in theirs]
            if shared:
                top = min(shared, key=lambda cid: ours[cid])  # the largest shared subtree
                a.skip(ours[top])
                b.skip(theirs[top])
                continue
        ka, kb = a.key, b.key
        if ka == kb:
            if a.value != b.value:
                yield Change(ka, a.value, b.value)
            a.next()
            b.next()
        elif ka < kb:
            yield Change(ka, a.value, None)
            a.next()
        else:
            yield Change(kb, None, b.value)
            b.next()
    while not a.done:
        yield Change(a.key, a.value, None)
        a.next()
    while not b.done:
        yield Change(b.key, None, b.value)
        b.next()
