"""The commit graph ``engram log --graph`` draws beside each commit, like ``git log --graph`` (pure, no I/O).

Each lane is a column waiting for a commit. A commit takes its lane (a new one on the right when nothing
waits for it: a branch tip); its first parent then waits in that lane, and each further parent of a merge
opens a lane to its right (``|\\``). When several lanes wait for the same commit (where a branch forked),
they join before it is drawn (``|/``).
"""

from __future__ import annotations

from collections.abc import Sequence

from engram.hashing import ChunkId
from engram.objects import Commit


def draw(commits: Sequence[Commit]) -> list[tuple[str, Commit | None]]:
    """Rows of the graph, newest first: ``(lanes, commit)`` for a commit, ``(lanes, None)`` for a row that only
    joins or forks lanes. ``commits`` are in ``log`` order (every commit before its parents)."""
    lanes: list[ChunkId] = []
    rows: list[tuple[str, Commit | None]] = []
    for commit in commits:
        waiting = [i for i, lane in enumerate(lanes) if lane == commit.id]
        if not waiting:
            lanes.append(commit.id)
            col = len(lanes) - 1
        else:
            col = waiting[0]
            for j in reversed(waiting[1:]):
                rows.append((_join(len(lanes), j), None))
                del lanes[j]
        rows.append((_cells({i: "|" for i in range(len(lanes))} | {col: "*"}), commit))
        if not commit.parents:
            del lanes[col]
            continue
        lanes[col] = commit.parents[0]
        for extra, parent in enumerate(commit.parents[1:], start=1):
            rows.append((_fork(len(lanes), col + extra - 1), None))
            lanes.insert(col + extra, parent)
    return rows


def _cells(marks: dict[int, str]) -> str:
    """Lane marks at even positions (``*``, ``|``)."""
    line = [" "] * (2 * max(marks, default=-1) + 1)
    for i, mark in marks.items():
        line[2 * i] = mark
    return "".join(line)


def _join(n: int, j: int) -> str:
    """Lane ``j`` of ``n`` ends by joining the lane on its left; the lanes right of it move left."""
    line = [" "] * (2 * n)
    for i in range(n):
        if i < j:
            line[2 * i] = "|"
        else:
            line[2 * i - 1] = "/"
    return "".join(line).rstrip()


def _fork(n: int, col: int) -> str:
    """A new lane opens right of lane ``col`` (of ``n``); the lanes right of it move right."""
    line = [" "] * (2 * n + 2)
    for i in range(n):
        if i <= col:
            line[2 * i] = "|"
        else:
            line[2 * i + 1] = "\\"
    line[2 * col + 1] = "\\"
    return "".join(line).rstrip()
