"""Where nodes end: boundaries chosen by a hash of the key, so the tree's shape depends only on its keys.

An entry ends its node when the 32-bit hash of its key (salted by tree level) falls below
``2**32 / target``, or when the node reaches ``4 * target`` entries. The decision depends only on
the keys since the last boundary, so two sequences that share a boundary chunk identically from
there on: that is what makes the tree history independent and edits local. Values never move a
boundary. See docs/adr/0001-prolly-tree-chunking.md for the targets.
"""

from __future__ import annotations

from engram.hashing import ChunkId, key_hash
from engram.tree.node import NodeWriter, child_ref, ref_count

#: Average entries per leaf.
LEAF_TARGET = 16
#: Average entries per internal node.
BRANCH_TARGET = 32
#: A node is cut when it reaches this many times its target size, whatever the hashes say.
MAX_FACTOR = 4


def target(level: int) -> int:
    """Average number of entries per node at ``level``."""
    return LEAF_TARGET if level == 0 else BRANCH_TARGET


class LevelChunker:
    """Accumulates the entries of one tree level and writes a node at every boundary."""

    __slots__ = ("_limit", "_threshold", "emitted", "keys", "level", "values", "writer")

    def __init__(self, writer: NodeWriter, level: int) -> None:
        self.writer = writer
        self.level = level
        self._threshold = (1 << 32) // target(level)
        self._limit = MAX_FACTOR * target(level)
        self.keys: list[bytes] = []
        self.values: list[bytes] = []
        #: parent entries (last key, child ref) of the nodes written so far
        self.emitted: list[tuple[bytes, bytes]] = []

    def add(self, key: bytes, value: bytes, interior: bool = False) -> None:
        """Append an entry; cut a node if it is a boundary.

        ``interior=True`` says the key sat inside (not last in) a node of this level before, so its
        hash is known not to be a boundary: only the size cap is checked, and no hash is computed.
        """
        self.keys.append(key)
        self.values.append(value)
        if len(self.keys) >= self._limit or (not interior and key_hash(key, self.level) < self._threshold):
            self.cut()

    def cut(self) -> None:
        """Write the buffered entries as one node (no-op when empty)."""
        if self.keys:
            node = self.writer.write(self.level, self.keys, self.values)
            count = len(self.keys) if self.level == 0 else sum(ref_count(v) for v in self.values)
            self.emitted.append((self.keys[-1], child_ref(node.id, count)))
            self.keys = []
            self.values = []

    @property
    def at_boundary(self) -> bool:
        """True when nothing is buffered: the last entry added ended a node."""
        return not self.keys


def build_levels(writer: NodeWriter, level: int, entries: list[tuple[bytes, bytes]]) -> ChunkId:
    """Stack parent levels over the nodes of ``level`` (given as parent entries) until one root remains."""
    if not entries:
        return writer.write(0, [], []).id
    while len(entries) > 1:
        level += 1
        chunker = LevelChunker(writer, level)
        for key, value in entries:
            chunker.add(key, value)
        chunker.cut()
        entries = chunker.emitted
    return entries[0][1][:20]
