"""Three-way merge of trees. Conflicts are data: they come back in :class:`MergeResult`, never lost."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from engram.hashing import ChunkId
from engram.tree.diff import Change, diff_trees
from engram.tree.mutate import mutate
from engram.tree.node import NodeStore


@dataclass(frozen=True, slots=True)
class Conflict:
    """A key both sides changed differently. ``None`` means absent (deleted or never added) on that side."""

    key: bytes
    base: bytes | None
    ours: bytes | None
    theirs: bytes | None


@dataclass(frozen=True, slots=True)
class MergeResult:
    """The merged root and the conflicts left unresolved (their keys keep ``ours``' value)."""

    root: ChunkId
    conflicts: list[Conflict] = field(default_factory=list)


Resolver = Callable[[Conflict], bytes | None]
"""Decides a conflict: returns the merged value (``None`` deletes the key)."""


def merge_trees(
    store: NodeStore, base: ChunkId, ours: ChunkId, theirs: ChunkId, resolve: Resolver | None = None
) -> MergeResult:
    """Merge the changes ``base -> theirs`` into ``ours``.

    A key changed on one side takes that side's value. A key both sides changed to the same value is
    not a conflict. Otherwise (both modified differently, modify vs. delete, add vs. add) it is a
    :class:`Conflict`, given to ``resolve`` when there is one, else returned unresolved.
    """
    if ours == theirs or base == theirs:
        return MergeResult(ours)
    if base == ours:
        return MergeResult(theirs)
    edits: dict[bytes, bytes | None] = {}
    conflicts: list[Conflict] = []
    for mine, other in _pair(diff_trees(store, base, ours), diff_trees(store, base, theirs)):
        if mine is None:
            assert other is not None
            edits[other.key] = other.new
        elif other is not None and mine.new != other.new:
            conflict = Conflict(mine.key, mine.old, mine.new, other.new)
            if resolve is None:
                conflicts.append(conflict)
                continue
            value = resolve(conflict)
            if value != mine.new:
                edits[mine.key] = value
    return MergeResult(mutate(store, ours, edits), conflicts)


def _pair(left: Iterator[Change], right: Iterator[Change]) -> Iterator[tuple[Change | None, Change | None]]:
    """Walk two key-ordered change streams together, pairing changes of the same key."""
    a = next(left, None)
    b = next(right, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a.key < b.key):
            yield a, None
            a = next(left, None)
        elif a is None or b.key < a.key:
            yield None, b
            b = next(right, None)
        else:
            yield a, b
            a = next(left, None)
            b = next(right, None)
