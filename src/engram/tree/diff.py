"""Diff of two trees. Equal subtrees are skipped by hash, so the cost grows with the change, not the map."""

from __future__ import annotations

import bisect
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
    """A position in a tree: a path of nodes, each with an index.

    When the last node of the path is a leaf, the position is that leaf's entry at the index. When it
    is an internal node the cursor is *pending*: positioned at the start of the child at the index,
    which is not loaded yet, so a diff can skip an equal subtree without reading it.
    """

    def __init__(self, store: NodeStore, root: ChunkId, start: bytes | None = None) -> None:
        self.store = store
        self.nodes: list[Node] = [store.load(root)]
        self.index: list[int] = [0]
        self.done = not self.nodes[0].keys
        if start is not None and not self.done:
            while self.nodes[-1].level > 0:
                node = self.nodes[-1]
                self.index[-1] = min(bisect.bisect_left(node.keys, start), len(node.keys) - 1)
                self.descend()
            leaf = self.nodes[-1]
            self.index[-1] = bisect.bisect_left(leaf.keys, start)
            if self.index[-1] == len(leaf.keys):
                self.index[-1] -= 1
                self.next()

    @property
    def pending(self) -> bool:
        return self.nodes[-1].level > 0

    @property
    def at_start(self) -> bool:
        """True when the position is the first entry of some node (always, when pending)."""
        return self.pending or self.index[-1] == 0

    def descend(self) -> None:
        """Load the pending child and stand at its first entry (or child)."""
        node = self.nodes[-1]
        self.nodes.append(self.store.load(node.child(self.index[-1])))
        self.index.append(0)

    @property
    def key(self) -> bytes:
        return self.nodes[-1].keys[self.index[-1]]

    @property
    def value(self) -> bytes:
        return self.nodes[-1].values[self.index[-1]]

    def _advance(self, depth: int) -> None:
        """Step to the next entry of ``nodes[depth]``, carrying upward; stays pending above the leaves."""
        while depth >= 0 and self.index[depth] + 1 >= len(self.nodes[depth].keys):
            depth -= 1
        if depth < 0:
            self.done = True
            return
        self.index[depth] += 1
        del self.nodes[depth + 1 :], self.index[depth + 1 :]

    def next(self) -> None:
        """Move to the next leaf entry (the cursor is not pending)."""
        self._advance(len(self.nodes) - 1)

    def subtree_starts(self) -> dict[ChunkId, tuple[int, int]]:
        """Subtrees that begin at this position: id -> (level, depth of the index to advance to skip it)."""
        starts: dict[ChunkId, tuple[int, int]] = {}
        last = len(self.nodes) - 1
        if self.pending:
            node = self.nodes[last]
            starts[node.child(self.index[last])] = (node.level - 1, last)
        depth = last
        while depth >= 0 and self.index[depth] == 0:
            starts[self.nodes[depth].id] = (self.nodes[depth].level, depth - 1)
            depth -= 1
        return starts

    def skip(self, depth: int) -> None:
        """Move past a subtree found by :meth:`subtree_starts`."""
        if depth < 0:
            self.done = True
        else:
            self._advance(depth)


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
        if a.at_start and b.at_start:
            ours, theirs = a.subtree_starts(), b.subtree_starts()
            shared = [cid for cid in ours if cid in theirs]
            if shared:
                top = max(shared, key=lambda cid: ours[cid][0])  # the largest shared subtree
                a.skip(ours[top][1])
                b.skip(theirs[top][1])
                continue
            if a.pending or b.pending:  # descend the higher side one level, then look again
                level_a = a.nodes[-1].level if a.pending else 0
                level_b = b.nodes[-1].level if b.pending else 0
                (a if level_a >= level_b else b).descend()
                continue
        while a.pending:
            a.descend()
        while b.pending:
            b.descend()
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
    for rest, old_side in ((a, True), (b, False)):
        while not rest.done:
            while rest.pending:
                rest.descend()
            yield Change(rest.key, rest.value, None) if old_side else Change(rest.key, None, rest.value)
            rest.next()
