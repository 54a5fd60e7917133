"""System namespaces: the state services keep in the store, which generic doors neither show nor change.

A namespace whose first label starts with ``_`` (``_channels``, ``_conversations``, ...) belongs to the service
that owns it: channels keep their messages, members, key bindings and event log there, the memory writer its
conversations. A handle made with ``system=False`` (what an API key without the ``system`` scope gets) treats
them as absent from every read (get, search, list, diff, log, show) and refuses every write, history, revert,
merge or reset that would reach them; the owning service reads and writes them through its own rules.

In the tree's key order every system entry lies in one range (:data:`RANGE`), so a check costs one bounded
tree diff, whatever the store's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from engram import _refs, codec
from engram.errors import PermissionDeniedError
from engram.hashing import ChunkId
from engram.objects import Commit
from engram.repo import HEADS, TAGS, Repository
from engram.tree import diff_trees, empty_tree

#: The first character of a system namespace's first label.
MARK = codec.SYSTEM_MARK
#: The half-open range of tree entry keys holding every system namespace.
RANGE = codec.SYSTEM_RANGE
#: Where a service's commit records which service made it (its commits' metadata: ``{"service": name}``).
SERVICE = "service"


is_system = codec.is_system


def is_system_key(raw: bytes) -> bool:
    """True when a tree entry key lies in a system namespace."""
    return RANGE[0] <= raw < RANGE[1]


def visible_ranges(prefix: Sequence[str], system: bool) -> list[tuple[bytes, bytes]]:
    """The entry key ranges under namespace ``prefix`` a caller reads: the prefix's range, or at the root for a
    caller without the ``system`` scope, that range without the system namespaces' (one range, so two are left)."""
    start, end = codec.prefix_range(prefix)
    if prefix or system:
        return [(start, end)]
    return [(start, RANGE[0]), (RANGE[1], end)]


def refused(namespace: Sequence[str], action: str = "read or change") -> PermissionDeniedError:
    """The error for a caller without the ``system`` scope reaching a system namespace."""
    shown = ".".join(namespace)
    return PermissionDeniedError(
        f"namespace {shown!r} is a system namespace (first label starts with '_'): its service owns it, and a "
        f"caller without the 'system' scope may not {action} it; use the service's own routes (channels, writer)",
        "system_namespace",
    )


def check(namespace: Sequence[str], action: str = "read or change") -> None:
    """Raise :class:`PermissionDeniedError` when ``namespace`` is a system namespace."""
    if is_system(namespace):
        raise refused(namespace, action)


def visible(namespaces: Iterable[tuple[str, ...]]) -> Iterator[tuple[str, ...]]:
    """The namespaces that are not system namespaces."""
    return (ns for ns in namespaces if not is_system(ns))


def refused_commit(commit: Commit) -> PermissionDeniedError:
    """The error for showing a service's own commit to a caller without the ``system`` scope."""
    return PermissionDeniedError(
        f"commit {commit.short_id} changed only system namespaces (a service's state); a caller without the "
        "'system' scope may not read it",
        "system_namespace",
    )


def check_ref(repo: Repository, ref: str) -> None:
    """Refuse a ref expression whose base is a service's own ref (one outside branches and tags, such as the
    memory writer's ``writer/state/<target>``) to a caller without the ``system`` scope."""
    base = _refs.parse(ref).base
    if base == "HEAD" or "/" not in base:
        return
    if repo.refs.get(HEADS + base) is None and repo.refs.get(TAGS + base) is None and repo.refs.get(base) is not None:
        raise PermissionDeniedError(
            f"{base!r} is a service's own ref, not a branch or a tag; a caller without the 'system' scope may not "
            "read it (the writer's routes show its state)",
            "system_namespace",
        )


def _system_changes(repo: Repository, old: ChunkId | None, new: ChunkId) -> bool:
    before = empty_tree(repo.nodes) if old is None else repo.commit(old).tree
    return next(diff_trees(repo.nodes, before, repo.commit(new).tree, *RANGE), None) is not None


def check_revert(repo: Repository, commit: Commit) -> None:
    """Refuse to revert a commit that changed a system namespace: undoing a service's write outside its rules
    would break its state (a channel's event log rewound, a message id issued twice)."""
    if changes_system(repo, commit):
        raise PermissionDeniedError(
            f"commit {commit.short_id} changed system namespaces (a service's state: channels, the memory writer); "
            "it cannot be reverted: change that state through the service (edit or delete the message, ...)",
            "system_namespace",
        )


def check_merge(repo: Repository, head: ChunkId, source: ChunkId) -> None:
    """Refuse a merge whose source changed a system namespace since the merge base (for a caller without the
    ``system`` scope)."""
    if _system_changes(repo, repo.merge_base(head, source), source):
        raise PermissionDeniedError(
            "the source changed system namespaces (a service's state) since it branched; merging it needs the "
            "'system' scope",
            "system_namespace",
        )


def check_reset(repo: Repository, head: ChunkId, target: ChunkId) -> None:
    """Refuse a reset that would change a system namespace (for a caller without the ``system`` scope)."""
    if _system_changes(repo, head, target):
        raise PermissionDeniedError(
            "resetting there would rewind system namespaces (a service's state: channels, the memory writer); "
            "that needs the 'system' scope",
            "system_namespace",
        )


def changes_system(repo: Repository, commit: Commit) -> bool:
    """True when ``commit`` changed any item of a system namespace (against its first parent)."""
    return next(repo.changes(commit, *RANGE), None) is not None


def changes_visible(repo: Repository, commit: Commit) -> bool:
    """True when ``commit`` changed any item outside the system namespaces (against its first parent); a
    commit changing nothing (an empty or metadata-only commit) is visible."""
    if next(repo.changes(commit, None, RANGE[0]), None) is not None:
        return True
    if next(repo.changes(commit, RANGE[1], None), None) is not None:
        return True
    return not changes_system(repo, commit)


__all__ = [
    "MARK",
    "RANGE",
    "SERVICE",
    "changes_system",
    "changes_visible",
    "check",
    "check_merge",
    "check_ref",
    "check_reset",
    "check_revert",
    "is_system",
    "is_system_key",
    "refused",
    "refused_commit",
    "visible",
    "visible_ranges",
]
