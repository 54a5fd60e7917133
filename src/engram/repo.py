"""The repository: commits, branches, tags, ref expressions, history, merge, revert, gc and fsck.

A :class:`Repository` is composed of a chunk store and a ref store. It knows trees of bytes and
commits; what the bytes mean (items, namespaces) lives in :mod:`engram.store`. Branch names are
arguments here: the "current branch" is a property of a handle, never of the repository.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from engram import _refs, maintenance, observe
from engram._names import COMMIT_ID, MIN_ID_PREFIX, new_ref_name, ref_name, refuse_nul
from engram.backends.base import ChunkStore, RefStore, now_ms
from engram.errors import (
    AmbiguousRefError,
    ConflictError,
    MergeConflictError,
    RefExistsError,
    RefNotFoundError,
    UnavailableError,
)
from engram.hashing import ID_SIZE, ChunkId
from engram.maintenance import GC_GRACE_MS, FsckReport, GcReport
from engram.objects import Commit, decode_commit, encode_commit, is_commit
from engram.tree import (
    Change,
    Conflict,
    NodeStore,
    Resolver,
    diff_trees,
    empty_tree,
    get,
    merge_trees,
    mutate,
)

HEADS = "heads/"
TAGS = "tags/"
MAX_RETRIES = 200
#: Default of :attr:`Repository.commit_timeout`: a deadline, not a count of lost races that load can exhaust.
COMMIT_TIMEOUT = 60.0


class Repository:
    """Commits and refs over a chunk store and a ref store."""

    def __init__(self, chunks: ChunkStore, refs: RefStore) -> None:
        self.chunks = chunks
        self.refs = refs
        self.nodes = NodeStore(chunks)
        self._commits: OrderedDict[ChunkId, Commit] = OrderedDict()
        self._lock = threading.Lock()
        self._branch_locks: dict[str, threading.RLock] = {}
        self._watchers: list[weakref.WeakMethod[Callable[[str], None]]] = []

    def watch(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(branch)`` (a bound method, held weakly) after this process moves a branch's head: a
        commit, merge, revert or reset. Search indexes follow heads this way (``engram.store.background``)."""
        with self._lock:
            self._watchers = [w for w in self._watchers if w() is not None]
            self._watchers.append(weakref.WeakMethod(listener))

    def _moved(self, branch: str) -> None:
        for watcher in list(self._watchers):
            listener = watcher()
            if listener is not None:
                listener(branch)

    def init(self, author: str = "engram") -> None:
        """Create branch ``main`` with an empty first commit, unless the repository has branches."""
        if self.refs.list(HEADS):
            return
        root = empty_tree(self.nodes)
        cid, data = encode_commit(root, (), now_ms(), author, "init")
        self.chunks.put_many({cid: data})
        self.refs.set(HEADS + "main", cid, None, actor=author, reason="init")

    def commit(self, cid: ChunkId) -> Commit:
        """Load a commit by full id."""
        with self._lock:
            found = self._commits.get(cid)
        if found is not None:
            return found
        data = self.chunks.get_many([cid]).get(cid)
        if data is None:
            raise RefNotFoundError(f"commit {cid.hex()} does not exist in this store")
        if not is_commit(data):
            raise RefNotFoundError(f"{cid.hex()} is not a commit")
        found = decode_commit(cid, data)
        with self._lock:
            self._commits[cid] = found
            if len(self._commits) > 50_000:
                self._commits.popitem(last=False)
        return found

    def write_commit(
        self,
        tree: ChunkId,
        parents: tuple[ChunkId, ...],
        author: str,
        message: str,
        metadata: dict[str, Any] | None = None,
    ) -> Commit:
        """Store a commit object (no ref moves)."""
        cid, data = encode_commit(tree, parents, now_ms(), author, message, metadata)
        self.chunks.put_many({cid: data})
        observe.commit_written()
        return self.commit(cid)

    def branches(self) -> dict[str, ChunkId]:
        """Branch name -> head commit id."""
        return {name[len(HEADS) :]: cid for name, cid in self.refs.list(HEADS).items()}

    def tags(self) -> dict[str, ChunkId]:
        """Tag name -> commit id."""
        return {name[len(TAGS) :]: cid for name, cid in self.refs.list(TAGS).items()}

    def head(self, branch: str) -> ChunkId:
        """The head commit id of a branch."""
        refuse_nul(branch, "branch name")
        cid = self.refs.get(HEADS + branch)
        if cid is None:
            raise RefNotFoundError(f"branch {branch!r} does not exist; branches: {self._names(HEADS)}")
        return cid

    def _names(self, prefix: str) -> str:
        names = sorted(name[len(prefix) :] for name in self.refs.list(prefix))
        return ", ".join(names) if names else "none"

    def resolve(self, ref: str | datetime | ChunkId, branch: str = "main") -> ChunkId:
        """Resolve a ref expression to a commit id; ``HEAD`` means the head of ``branch``.

        Accepts a branch, a tag, a full or >= 7-character commit id, ``HEAD``, ``X~n``, ``X^n``,
        ``X@{ISO time}`` (the commit ``X`` pointed at then) and a ``datetime`` (``HEAD`` then).
        """
        if isinstance(ref, bytes):
            return self.commit(ref).id
        if isinstance(ref, datetime):
            return self._as_of(branch, _refs.datetime_ms(ref))
        if not isinstance(ref, str):
            raise _refs.InvalidRefError(f"a ref is a string, a datetime or a commit id, not {type(ref).__name__}")
        expr = _refs.parse(ref)
        base = branch if expr.base == "HEAD" else expr.base
        if expr.time_ms is not None:
            cid = self._as_of(base, expr.time_ms)
        else:
            cid = self._resolve_name(base, ref)
        for parent in expr.steps:
            commit = self.commit(cid)
            if parent >= len(commit.parents):
                raise RefNotFoundError(
                    f"{ref!r} goes back past the first commit ({commit.short_id} has {len(commit.parents)} parent(s))"
                )
            cid = commit.parents[parent]
        return cid

    def _resolve_name(self, name: str, expr: str) -> ChunkId:
        for prefix in (HEADS, TAGS, ""):
            cid = self.refs.get(prefix + name) if prefix or "/" in name else None
            if cid is not None:
                return cid
        if len(name) == 2 * ID_SIZE and COMMIT_ID.fullmatch(name):
            return self.commit(bytes.fromhex(name)).id  # a full id: no range scan
        if COMMIT_ID.fullmatch(name):
            return self._by_prefix(name)
        raise RefNotFoundError(
            f"unknown ref {expr!r}: not a branch ({self._names(HEADS)}), a tag ({self._names(TAGS)}) "
            f"or a commit id (use at least {MIN_ID_PREFIX} hex characters)"
        )

    def _by_prefix(self, prefix: str) -> ChunkId:
        bits = 4 * (2 * ID_SIZE - len(prefix))
        value = int(prefix, 16)
        lo = (value << bits).to_bytes(ID_SIZE, "big")
        top = (value + 1) << bits
        hi = top.to_bytes(ID_SIZE, "big") if top < 1 << (8 * ID_SIZE) else None
        candidates = list(self.chunks.iter_ids(lo, hi))
        found = self.chunks.get_many(candidates)
        commits = [cid for cid in candidates if is_commit(found.get(cid, b""))]
        if not commits:
            raise RefNotFoundError(f"no commit id starts with {prefix!r}; see `log` for commit ids")
        if len(commits) > 1:
            listed = ", ".join(c.hex()[:12] for c in commits[:5])
            raise AmbiguousRefError(f"commit id {prefix!r} is ambiguous ({listed}); give more characters")
        return commits[0]

    def _as_of(self, branch: str, time_ms: int) -> ChunkId:
        ref_name(branch, "branch")
        cid = self.refs.value_at(HEADS + branch, time_ms)
        if cid is not None:
            return cid
        # Before the reflog window (or after a clone): the newest first-parent ancestor made by then.
        head = self.head(branch)
        for commit in self.iter_first_parents(head):
            if commit.time <= time_ms:
                return commit.id
        raise RefNotFoundError(f"branch {branch!r} has no commit at or before {_refs.format_ms(time_ms)}")

    def create_branch(self, name: str, at: ChunkId, author: str = "") -> None:
        """Create branch ``name`` pointing at commit ``at``."""
        new_ref_name(name, "branch")
        self.commit(at)
        if not self.refs.set(HEADS + name, at, None, actor=author, reason=f"branch: created at {at.hex()}"):
            raise RefExistsError(f"branch {name!r} already exists")

    def delete_branch(self, name: str, author: str = "") -> None:
        """Delete branch ``name`` (its commits stay reachable through the reflog until gc)."""
        current = self.head(name)
        if len(self.refs.list(HEADS)) == 1:
            raise ConflictError(f"cannot delete {name!r}: it is the only branch")
        if not self.refs.delete(HEADS + name, current, actor=author, reason="branch: deleted"):
            raise ConflictError(f"branch {name!r} moved while deleting it; try again")

    def tag(self, name: str, at: ChunkId, author: str = "") -> None:
        """Create tag ``name`` at commit ``at`` (tags never move)."""
        new_ref_name(name, "tag")
        self.commit(at)
        if not self.refs.set(TAGS + name, at, None, actor=author, reason="tag"):
            raise RefExistsError(f"tag {name!r} already exists; delete it first to move it")

    def delete_tag(self, name: str, author: str = "") -> None:
        """Delete a tag."""
        refuse_nul(name, "tag name")
        current = self.refs.get(TAGS + name)
        if current is None:
            raise RefNotFoundError(f"tag {name!r} does not exist; tags: {self._names(TAGS)}")
        self.refs.delete(TAGS + name, current, actor=author, reason="tag: deleted")

    def reset(self, branch: str, to: ChunkId, author: str = "", message: str | None = None) -> None:
        """Point ``branch`` at commit ``to`` (the old head stays in the reflog, with ``message`` as the reason)."""
        self.commit(to)
        reason = f"reset: to {to.hex()}" + (f": {message}" if message else "")
        while True:
            current = self.head(branch)
            if self.refs.set(HEADS + branch, to, current, actor=author, reason=reason):
                self._moved(branch)
                return

    #: Seconds a commit may take under contention (waiting its turn, re-applying its edits) before it gives up.
    commit_timeout: float = COMMIT_TIMEOUT

    def commit_edits(
        self,
        branch: str,
        edits: Mapping[bytes, bytes | None] | Callable[[ChunkId], Mapping[bytes, bytes | None]],
        *,
        author: str,
        message: str,
        metadata: dict[str, Any] | None = None,
        base: ChunkId | None = None,
        strict: bool = False,
    ) -> Commit:
        """Apply ``edits`` to ``branch`` as one commit, safely under concurrent writers.

        ``base`` is the commit the edits were prepared against (default: the head at call time).
        When the head has moved, the edits are re-applied on the new head (a three-way merge of the
        edit set). If another writer changed an edited key differently meanwhile, ``strict`` raises
        :class:`ConflictError` and writes nothing; otherwise these edits win (both stay in history).
        ``edits`` may be a function of the head's tree root, called again on every retry (so values
        derived from the current state, like ``created_at``, stay right under contention).
        Writers of one branch take turns (threads on a lock, processes through ``RefStore.lock`` where the
        backend queues them); a commit that cannot land within :attr:`commit_timeout` seconds raises
        :class:`UnavailableError` and writes nothing.
        Returns the new commit, or the head when the edits change nothing.
        """
        deadline = time.monotonic() + self.commit_timeout
        turn = self._writing(branch)
        if not turn.acquire(timeout=self.commit_timeout):
            raise UnavailableError(
                f"gave up after waiting {self.commit_timeout:g} s for the writers of {branch!r}", 1.0
            )
        try:
            with self.refs.lock(HEADS + branch, timeout=max(deadline - time.monotonic(), 0.001)):
                return self._commit_edits(branch, edits, author, message, metadata, base, strict, deadline)
        finally:
            turn.release()

    def _writing(self, branch: str) -> threading.RLock:
        """The lock writers of ``branch`` in this process take in turn: threads sharing a repository queue
        instead of racing each other's compare-and-swap (other processes queue on the ref store's lock)."""
        with self._lock:
            found = self._branch_locks.get(branch)
            if found is None:
                found = self._branch_locks[branch] = threading.RLock()
            return found

    def _commit_edits(
        self,
        branch: str,
        edits: Mapping[bytes, bytes | None] | Callable[[ChunkId], Mapping[bytes, bytes | None]],
        author: str,
        message: str,
        metadata: dict[str, Any] | None,
        base: ChunkId | None,
        strict: bool,
        deadline: float,
    ) -> Commit:
        ref = HEADS + branch
        base_tree: ChunkId | None = None if base is None else self.commit(base).tree
        for attempt in itertools.count(1):
            head = self.head(branch)
            head_commit = self.commit(head)
            if base_tree is None:
                base_tree = head_commit.tree
            batch = edits(head_commit.tree) if callable(edits) else edits
            if base_tree != head_commit.tree and strict:
                self._check_conflicts(branch, base_tree, head_commit.tree, batch)
            writer = self.nodes.writer()
            tree = mutate(self.nodes, head_commit.tree, batch, writer)
            if tree == head_commit.tree:
                return head_commit
            cid, data = encode_commit(tree, (head,), now_ms(), author, message, metadata)
            writer.pending[cid] = data
            writer.flush()  # chunks first: one batch for the nodes and the commit
            new = self.commit(cid)
            if self.refs.set(ref, new.id, head, actor=author, reason=f"commit: {message}"):
                observe.commit_written()
                self._moved(branch)
                return new
            pause = random.uniform(0, 0.0005 * min(attempt, 20))  # writers the ref store cannot queue back off
            if time.monotonic() + pause > deadline:
                raise UnavailableError(
                    f"branch {branch!r} kept moving; gave up after {self.commit_timeout:g} s and {attempt} attempts; "
                    "nothing was written",
                    1.0,
                )
            time.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_conflicts(
        self, branch: str, base_tree: ChunkId, head_tree: ChunkId, edits: Mapping[bytes, bytes | None]
    ) -> None:
        clashes = [
            key
            for key, value in edits.items()
            if (now := get(self.nodes, head_tree, key)) != get(self.nodes, base_tree, key) and now != value
        ]
        if clashes:
            conflicts = [
                Conflict(k, get(self.nodes, base_tree, k), get(self.nodes, head_tree, k), edits[k]) for k in clashes
            ]
            raise MergeConflictError(
                f"{len(clashes)} key(s) changed on {branch!r} by another writer since this transaction "
                "began; nothing was written. Re-read and retry.",
                conflicts,
            )

    def merge(
        self,
        source: ChunkId,
        branch: str,
        *,
        resolve: Resolver | None,
        author: str,
        message: str | None = None,
    ) -> tuple[Commit, list[Conflict], bool]:
        """Merge commit ``source`` into ``branch`` with a two-parent merge commit.

        With ``resolve=None`` unresolved conflicts raise :class:`MergeConflictError` and nothing is
        written. Returns the new head, the conflicts that ``resolve`` decided, and whether ``branch`` was
        already up to date (``source`` is in its history: nothing written, the head returned).
        """
        for _ in range(MAX_RETRIES):
            head = self.head(branch)
            if self.is_ancestor(source, head):
                return self.commit(head), [], True
            base = self.merge_base(head, source)
            base_tree = empty_tree(self.nodes) if base is None else self.commit(base).tree
            decided: list[Conflict] = []
            record = None if resolve is None else _recording(resolve, decided)
            result = merge_trees(
                self.nodes,
                base_tree,
                self.commit(head).tree,
                self.commit(source).tree,
                record,
            )
            if result.conflicts:
                raise MergeConflictError(
                    f"merge into {branch!r} has {_conflicts(result.conflicts)}; nothing was written. "
                    "Choose a strategy: ours, theirs or newest.",
                    result.conflicts,
                )
            text = message or f"merge {source.hex()[:10]} into {branch}"
            new = self.write_commit(result.root, (head, source), author, text)
            if self.refs.set(HEADS + branch, new.id, head, actor=author, reason=f"merge: {text}"):
                self._moved(branch)
                return new, decided, False
        raise ConflictError(f"branch {branch!r} kept moving during the merge; try again")

    def revert(
        self, target: ChunkId, branch: str, *, resolve: Resolver | None, author: str, message: str | None = None
    ) -> Commit:
        """Undo the changes ``target`` made (relative to its first parent) with a new commit on ``branch``; when
        the branch already lacks them (``target`` is not in its history, or was reverted), nothing is written
        and the head is returned."""
        commit = self.commit(target)
        if not commit.parents:
            raise ConflictError("cannot revert the first commit of a repository")
        parent_tree = self.commit(commit.parents[0]).tree
        for _ in range(MAX_RETRIES):
            head = self.head(branch)
            result = merge_trees(self.nodes, commit.tree, self.commit(head).tree, parent_tree, resolve)
            if result.conflicts:
                raise MergeConflictError(
                    f"reverting {commit.short_id} conflicts with later changes ({_conflicts(result.conflicts)}); "
                    "nothing was written. Choose a strategy: ours, theirs or newest.",
                    result.conflicts,
                )
            current = self.commit(head)
            if result.root == current.tree:  # the branch already lacks what ``target`` changed: no commit
                return current
            text = message or f"revert {commit.short_id}: {commit.message}"
            new = self.write_commit(result.root, (head,), author, text, {"reverts": target.hex()})
            if self.refs.set(HEADS + branch, new.id, head, actor=author, reason=text):
                self._moved(branch)
                return new
        raise ConflictError(f"branch {branch!r} kept moving during the revert; try again")

    def iter_first_parents(self, start: ChunkId) -> Iterator[Commit]:
        """Yield ``start`` and its first-parent ancestors, newest first."""
        cid: ChunkId | None = start
        while cid is not None:
            commit = self.commit(cid)
            yield commit
            cid = commit.parents[0] if commit.parents else None

    def iter_log(self, start: ChunkId) -> Iterator[Commit]:
        """Yield every commit reachable from ``start``, newest first (by time, then id)."""
        first = self.commit(start)
        heap: list[tuple[int, bytes, Commit]] = [(-first.time, first.id, first)]
        seen = {first.id}
        while heap:
            _, _, commit = heapq.heappop(heap)
            yield commit
            for pid in commit.parents:
                if pid not in seen:
                    seen.add(pid)
                    parent = self.commit(pid)
                    heapq.heappush(heap, (-parent.time, parent.id, parent))

    def changes(self, commit: Commit, start: bytes | None = None, end: bytes | None = None) -> Iterator[Change]:
        """The changes ``commit`` made relative to its first parent (all additions for a root commit)."""
        parent_tree = self.commit(commit.parents[0]).tree if commit.parents else empty_tree(self.nodes)
        return diff_trees(self.nodes, parent_tree, commit.tree, start, end)

    def is_ancestor(self, ancestor: ChunkId, of: ChunkId) -> bool:
        """True when ``ancestor`` is ``of`` or one of its ancestors."""
        if ancestor == of:
            return True
        limit = self.commit(ancestor).time
        for commit in self.iter_log(of):
            if commit.id == ancestor:
                return True
            if commit.time < limit:
                return False
        return False

    def merge_base(self, a: ChunkId, b: ChunkId) -> ChunkId | None:
        """The newest common ancestor of two commits (None if they share none)."""
        seen_a: set[ChunkId] = set()
        seen_b: set[ChunkId] = set()
        heap: list[tuple[int, bytes, int]] = []
        for side, cid in ((0, a), (1, b)):
            heapq.heappush(heap, (-self.commit(cid).time, cid, side))
        while heap:
            _, cid, side = heapq.heappop(heap)
            mine, other = (seen_a, seen_b) if side == 0 else (seen_b, seen_a)
            if cid in other:
                return cid
            if cid in mine:
                continue
            mine.add(cid)
            for pid in self.commit(cid).parents:
                heapq.heappush(heap, (-self.commit(pid).time, pid, side))
        return None

    def fsck(self, progress: Callable[[int], None] | None = None) -> FsckReport:
        """Check that every chunk reachable from every ref and reflog entry exists and hashes right."""
        return maintenance.fsck(self.chunks, self.refs, self.nodes, progress)

    def gc(
        self,
        keep_reflog_ms: int | None = None,
        progress: Callable[[int], None] | None = None,
        *,
        grace_ms: int = GC_GRACE_MS,
    ) -> GcReport:
        """Delete chunks unreachable from refs and the (kept) reflog (see :func:`engram.maintenance.gc`)."""
        report = maintenance.gc(self.chunks, self.refs, self.nodes, keep_reflog_ms, progress, grace_ms=grace_ms)
        with self._lock:
            self._commits.clear()
        return report


def _recording(resolve: Resolver, decided: list[Conflict]) -> Resolver:
    """Wrap a resolver so the conflicts it decides are collected."""

    def record(conflict: Conflict) -> bytes | None:
        decided.append(conflict)
        return resolve(conflict)

    return record


def _conflicts(found: Sequence[object]) -> str:
    return "1 conflict" if len(found) == 1 else f"{len(found)} conflicts"
