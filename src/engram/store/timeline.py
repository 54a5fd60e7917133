"""A page of a branch's timeline: commits newest first, filtered, with the number of items each changed.

:func:`timeline` walks the commit graph like :meth:`~engram.store.Memory.log` (newest first, by time then id)
but stops after one page and returns a cursor that resumes the walk where it stopped: the cursor holds the
walk's frontier (the commits waiting to be visited) and the visited commits a later commit may still name as
a parent (those as new as the frontier: a merge made in the same millisecond as its parents), so page *n*
costs what page 1 costs, never a walk from the head, and the pages add up to the log exactly. The walk may start
from every branch's head at once (``all_branches``): the branches' commits together. A page also
stops after ``max_scan`` commits looked at, so a filter that rarely matches answers quickly with a cursor to
keep looking, never scanning the whole history in one request.

Each entry also says how many items the memory held after the commit and how that differs from its first parent
(both counted from the tree's per-subtree counts, O(log n) each: never by listing items), and which namespaces
and keys it touched (the first few, from the changes it already counts).
"""

from __future__ import annotations

import base64
import binascii
import heapq
import itertools
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engram import _refs, codec
from engram.errors import InvalidInputError
from engram.hashing import ID_SIZE, ChunkId
from engram.objects import Commit
from engram.store import _validate
from engram.store import system as sysns
from engram.tree import count

if TYPE_CHECKING:
    from engram.store.versioning import Versioned

#: Changed items counted per commit; a commit that changed more says "at least" this many.
COUNT_CAP = 1000
#: Namespaces an entry names (the first it touched, in key order), and keys named per namespace.
TOUCHED_NAMESPACES = 5
TOUCHED_KEYS = 3
#: Commits one page looks at, at most, before it returns what it found and a cursor.
MAX_SCAN = 5000
_VERSION = b"t2"
_HEAD = struct.Struct(">2sH")  # version, number of frontier ids (the visited ids follow them)
#: Visited commits a cursor carries, at most (more only when thousands of commits share one millisecond).
_CARRIED = 256


@dataclass(frozen=True, slots=True)
class Touched:
    """A namespace a commit changed items in: how many of the counted changes, and the first keys (key order)."""

    namespace: tuple[str, ...]
    changed: int
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One commit of a timeline page and how many items it changed (under the page's namespace filter).

    ``items`` is the number of items after the commit and ``delta`` the difference from its first parent (a
    first commit: from nothing), under the same filter. ``touched`` names the first :data:`TOUCHED_NAMESPACES`
    namespaces it changed, ``namespaces`` how many it changed in all (among the counted changes: at least, when
    ``capped``)."""

    commit: Commit
    changed: int
    capped: bool  # True: the commit changed more than ``changed`` items (counting stopped at COUNT_CAP)
    items: int = 0
    delta: int = 0
    touched: tuple[Touched, ...] = ()
    namespaces: int = 0


@dataclass(frozen=True, slots=True)
class TimelinePage:
    """Commits newest first; ``cursor`` resumes after the last one (None: the history ends here)."""

    entries: list[TimelineEntry]
    cursor: str | None
    scanned: int  # commits looked at for this page (matching or not)


def timeline(
    mem: Versioned,
    ref: str | datetime = "HEAD",
    *,
    namespace: Sequence[str] | None = None,
    key: str | None = None,
    author: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 50,
    cursor: str | None = None,
    max_scan: int = MAX_SCAN,
    all_branches: bool = False,
) -> TimelinePage:
    """One page of the commits reachable from ``ref`` (or from any branch), newest first.

    Args:
        mem: the memory handle (``HEAD`` is its branch head).
        ref: where the history starts (ignored when ``cursor`` is given: the cursor knows where it stopped).
        namespace: only commits that changed an item under this namespace prefix (``()``: every commit).
        key: only commits that changed this key (needs ``namespace``).
        author: only commits by this author (exact match).
        since: only commits made at or after this time (the walk stops at the first older one).
        until: only commits made at or before this time.
        limit: commits per page (1..1000).
        cursor: the ``cursor`` of the previous page.
        max_scan: commits looked at before the page returns early with a cursor.
        all_branches: start from every branch's head instead of ``ref``: the branches' commits together, each
            once (the walk costs what one branch's costs; its frontier starts with one commit per branch).

    Raises:
        InvalidInputError: a bad limit, cursor, namespace or key.
    """
    if not 1 <= limit <= 1000:
        raise InvalidInputError(f"limit must be between 1 and 1000, not {limit}")
    if max_scan < 1:
        raise InvalidInputError(f"max_scan must be at least 1, not {max_scan}")
    hidden = not mem.system  # a caller without the system scope: services' commits and changes are not shown
    if hidden and namespace is not None:
        sysns.check(namespace)
    bounds = _bounds(namespace, key)
    since_ms = None if since is None else _refs.datetime_ms(since)
    until_ms = None if until is None else _refs.datetime_ms(until)
    repo = mem.repo
    if cursor is None:
        heads = repo.branches().values() if all_branches else [mem.resolve(ref).id]
        frontier: list[ChunkId] = sorted(set(heads))
        visited: list[Commit] = []
    else:
        frontier, carried = _decode(cursor)
        visited = [repo.commit(cid) for cid in carried]
    heap = [(-c.time, c.id, c) for c in (repo.commit(cid) for cid in frontier)]
    heapq.heapify(heap)
    seen = set(frontier) | {c.id for c in visited}
    entries: list[TimelineEntry] = []
    scanned = 0
    while heap and len(entries) < limit and scanned < max_scan:
        commit = heapq.heappop(heap)[2]
        if since_ms is not None and commit.time < since_ms:
            heap.clear()  # every commit still to come is older
            break
        visited.append(commit)
        for pid in commit.parents:
            if pid not in seen:
                seen.add(pid)
                parent = repo.commit(pid)
                heapq.heappush(heap, (-parent.time, parent.id, parent))
        scanned += 1
        if (until_ms is not None and commit.time > until_ms) or (author is not None and commit.author != author):
            continue
        if hidden and not bounds and not sysns.changes_visible(repo, commit):
            continue
        changes = repo.changes(commit, *bounds) if bounds else repo.changes(commit)
        if hidden and not bounds:
            changes = (c for c in changes if not sysns.is_system_key(c.key))
        keys = [c.key for c in itertools.islice(changes, COUNT_CAP + 1)]
        if bounds and not keys:
            continue
        items = _count(mem, commit.tree, bounds, hidden)
        before = _count(mem, repo.commit(commit.parents[0]).tree, bounds, hidden) if commit.parents else 0
        touched, spread = _touched(keys[:COUNT_CAP])
        entries.append(TimelineEntry(commit, min(len(keys), COUNT_CAP), len(keys) > COUNT_CAP, items,
                                     items - before, touched, spread))  # fmt: skip
    next_cursor = _encode([entry[2] for entry in heap], visited) if heap else None
    return TimelinePage(entries, next_cursor, scanned)


def _count(mem: Versioned, tree: ChunkId, bounds: tuple[bytes, bytes] | None, hidden: bool) -> int:
    """Items in ``tree`` (within ``bounds``; without the system namespaces when ``hidden``): from the counts its
    internal nodes keep (O(log n) node reads; the whole tree's is its root's)."""
    nodes = mem.repo.nodes
    if bounds is not None:
        return count(nodes, tree, *bounds)
    return count(nodes, tree) - (count(nodes, tree, *sysns.RANGE) if hidden else 0)


def _touched(keys: Sequence[bytes]) -> tuple[tuple[Touched, ...], int]:
    """The first namespaces among changed entry keys (in key order), each with its count and first keys; and
    how many namespaces there are. A namespace's items are one key range, so its keys are adjacent; only the
    keys named are decoded."""
    groups: list[list[Any]] = []  # [namespace bytes, count, keys named]
    for raw in keys:
        end = raw.find(b"\x00\x01") + 1  # a label ends in 0x00, the item key starts with 0x01 (0: no labels)
        if not groups or groups[-1][0] != raw[:end]:
            groups.append([raw[:end], 0, []])
        group = groups[-1]
        group[1] += 1
        if len(groups) <= TOUCHED_NAMESPACES and len(group[2]) < TOUCHED_KEYS:
            group[2].append(codec.decode_key(raw))
    shown = tuple(Touched(names[0][0], n, tuple(k for _, k in names)) for _, n, names in groups[:TOUCHED_NAMESPACES])
    return shown, len(groups)


def _bounds(namespace: Sequence[str] | None, key: str | None) -> tuple[bytes, bytes] | None:
    if key is not None:
        raw = codec.encode_key(_validate.namespace(namespace or ()), _validate.key(key))
        return raw, raw + b"\x00"
    if namespace is not None and tuple(namespace):
        return codec.prefix_range(_validate.namespace(namespace, allow_empty=True))
    return None


def _encode(frontier: list[Commit], visited: list[Commit]) -> str:
    """The frontier, and the visited commits as new as its oldest commit (a commit still to come can name a
    visited one as its parent only then: a parent is as old as its child or older, in a sane history)."""
    horizon = min(c.time for c in frontier)
    ids = sorted(c.id for c in frontier)
    carried = [c.id for c in visited if c.time >= horizon][-_CARRIED:]
    raw = _HEAD.pack(_VERSION, len(ids)) + b"".join(ids) + b"".join(carried)
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _decode(cursor: str) -> tuple[list[ChunkId], list[ChunkId]]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    body = raw[_HEAD.size :]
    count = _HEAD.unpack_from(raw)[1] if len(raw) >= _HEAD.size else 0
    if raw[:2] != _VERSION or not count or len(body) % ID_SIZE or len(body) < count * ID_SIZE:
        raise InvalidInputError("not a timeline cursor: pass back the cursor of the previous page unchanged")
    ids = [body[i : i + ID_SIZE] for i in range(0, len(body), ID_SIZE)]
    return ids[:count], ids[count:]


__all__ = [
    "COUNT_CAP",
    "MAX_SCAN",
    "TOUCHED_KEYS",
    "TOUCHED_NAMESPACES",
    "TimelineEntry",
    "TimelinePage",
    "Touched",
    "timeline",
]
