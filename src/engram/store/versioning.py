"""Versioning verbs of a memory handle: refs, log, show, diff, history, branches, tags, merge, revert, reset.

A mixin for :class:`~engram.store.Memory`: it needs ``repo``, ``author``, ``pool`` and the handle's
current branch (``_branch``). Each verb is one call into :mod:`engram.repo`, translated to items.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from engram import _names, _refs, codec
from engram.backends.base import now_ms
from engram.errors import ConflictError, InvalidInputError, MergeConflictError, ReadOnlyError, RefNotFoundError
from engram.hashing import ChunkId
from engram.maintenance import FsckReport, GcReport
from engram.objects import Commit, Record, decode_record, encode_record
from engram.repo import HEADS, Repository
from engram.store import _validate
from engram.store import system as sysns
from engram.store.item import CommitDetails, Item, ItemChange, ItemConflict, MergeOutcome, Version
from engram.store.view import View
from engram.tree import Change, Conflict, Resolver, diff_trees, empty_tree, get

if TYPE_CHECKING:
    from engram.store.indexing import IndexPool

Ref = str | datetime
Strategy = Literal["fail", "ours", "theirs", "newest"] | Callable[[ItemConflict], "Item | dict[str, Any] | None"]


class Versioned:
    """The versioning verbs, on the handle's branch."""

    repo: Repository
    author: str
    pool: IndexPool
    _branch: str
    #: False: system namespaces are hidden and refused, and so are raw refs outside branches and tags
    #: (see :mod:`engram.store.system`).
    system: bool

    def _guard(self, namespace: Sequence[str], action: str = "read") -> None:
        if not self.system:
            sysns.check(namespace, action)

    def _commit_id(self, ref: Ref) -> ChunkId:
        """The commit a ref expression names, refusing a service's own refs (not a branch or a tag) to a
        handle without the system scope."""
        if not self.system and isinstance(ref, str):
            sysns.check_ref(self.repo, ref)
        return self.repo.resolve(ref, self._branch)

    def check_writable(self) -> None:
        """Raise :class:`ReadOnlyError` when this handle may not write (see ``Memory.read_only``)."""
        if getattr(self, "read_only", False):
            raise ReadOnlyError(
                "this handle is read-only (e.g. an API key without the write scope): nothing was written"
            )

    def resolve(self, ref: Ref = "HEAD") -> Commit:
        """The commit a ref expression names (``HEAD`` is this handle's branch head)."""
        return self.repo.commit(self._commit_id(ref))

    def at(self, ref: Ref) -> View:
        """A read-only view of the memory at a branch, tag, commit, ``HEAD~n``, ``main@{time}`` or datetime."""
        view = View(self.repo, self.resolve(ref), pool=self.pool, branch=self._branch)
        view.system = self.system
        return view

    def checkout(self, branch: str) -> None:
        """Make this handle read and write ``branch`` (other handles are unaffected)."""
        self.repo.head(branch)
        self._branch = branch

    def log(
        self,
        ref: Ref = "HEAD",
        *,
        namespace: Sequence[str] | None = None,
        key: str | None = None,
        limit: int | None = None,
    ) -> list[Commit]:
        """Commits reachable from ``ref``, newest first; optionally only those that touched a namespace
        prefix, or one key (with ``namespace``)."""
        bounds: tuple[bytes, bytes] | None = None
        if key is not None:
            self._guard(namespace or ())
            raw = codec.encode_key(_validate.namespace(namespace or ()), _validate.key(key))
            bounds = (raw, raw + b"\x00")
        elif namespace is not None:
            self._guard(namespace)
            bounds = codec.prefix_range(_validate.namespace(namespace, allow_empty=True))
        hidden = not self.system and (bounds is None or bounds[0] < sysns.RANGE[1] <= bounds[1])
        out: list[Commit] = []
        for commit in self.repo.iter_log(self._commit_id(ref)):
            if bounds is not None and next(self.repo.changes(commit, *bounds), None) is None:
                continue
            if hidden and not sysns.changes_visible(self.repo, commit):  # a service's commit
                continue
            out.append(commit)
            if limit is not None and len(out) >= limit:
                break
        return out

    def show(self, ref: Ref = "HEAD") -> CommitDetails:
        """A commit and the item changes it made."""
        commit = self.resolve(ref)
        if self.system:
            return CommitDetails(commit, [_item_change(c) for c in self.repo.changes(commit)])
        if not sysns.changes_visible(self.repo, commit):
            raise sysns.refused_commit(commit)
        changes = self.repo.changes(commit)
        return CommitDetails(commit, [_item_change(c) for c in changes if not sysns.is_system_key(c.key)])

    def diff(self, old: Ref, new: Ref = "HEAD", *, namespace: Sequence[str] = ()) -> list[ItemChange]:
        """Item changes from version ``old`` to version ``new``, optionally under a namespace prefix.

        ``old`` may name both sides as git does (``new`` left out): ``"main..hotfix"`` is the same as
        ``diff("main", "hotfix")``, and ``"main...hotfix"`` is what ``hotfix`` introduces since the merge base
        of the two (what merging it would bring in; from the empty memory when they share no commit).
        """
        return list(self.iter_diff(old, new, namespace=namespace))

    def iter_diff(self, old: Ref, new: Ref = "HEAD", *, namespace: Sequence[str] = ()) -> Iterator[ItemChange]:
        """Like :meth:`diff`, as a generator (cost grows with the change, not the store)."""
        prefix = _validate.namespace(namespace, allow_empty=True)
        self._guard(prefix)
        a, b = self._diff_roots(old, new)
        for lo, hi in sysns.visible_ranges(prefix, self.system):
            for change in diff_trees(self.repo.nodes, a, b, lo, hi):
                yield _item_change(change)

    def diff_sides(self, old: Ref, new: Ref = "HEAD") -> tuple[Commit | None, Commit]:
        """The two commits a :meth:`diff` of ``old`` and ``new`` compares: for ``"main...fix"`` the merge base
        (None: the empty memory, when they share no commit) and the head of ``fix``."""
        span = _refs.parse_range(old) if isinstance(old, str) else None
        if span is None:
            return self.resolve(old), self.resolve(new)
        if new != "HEAD":
            raise InvalidInputError(f"{old!r} names both versions of the diff: leave the new version out")
        end = self.repo.commit(self._commit_id(span.new))
        if not span.from_base:
            return self.resolve(span.old), end
        base = self.repo.merge_base(self._commit_id(span.old), end.id)
        return (None if base is None else self.repo.commit(base)), end

    def _diff_roots(self, old: Ref, new: Ref) -> tuple[ChunkId, ChunkId]:
        """The two tree roots a diff compares: ``old`` and ``new``, or the sides of a range in ``old``."""
        start, end = self.diff_sides(old, new)
        return (empty_tree(self.repo.nodes) if start is None else start.tree), end.tree

    def history(self, namespace: Sequence[str], key: str, ref: Ref = "HEAD") -> list[Version]:
        """Every version of one item, newest first, each with the commit that made it (blame).

        A merge commit is listed only when the item differs from every parent (it resolved a
        conflict); otherwise the version is credited to the commit that made it on its branch.
        """
        ns, k = _validate.namespace(namespace), _validate.key(key)
        self._guard(ns)
        raw = codec.encode_key(ns, k)
        versions: list[Version] = []
        for commit in self.repo.iter_log(self._commit_id(ref)):
            now = get(self.repo.nodes, commit.tree, raw)
            before = [get(self.repo.nodes, self.repo.commit(p).tree, raw) for p in commit.parents] or [None]
            if now not in before:  # a merge that took this version from one side did not make it
                item = None if now is None else Item.from_record(ns, k, decode_record(now))
                versions.append(Version(commit, item))
        return versions

    def branches(self) -> dict[str, str]:
        """Branch name -> head commit id (hex)."""
        return {name: cid.hex() for name, cid in self.repo.branches().items()}

    def create_branch(self, name: str, at: Ref = "HEAD") -> None:
        """Create a branch at a version (this handle stays on its branch; use :meth:`checkout`)."""
        self.check_writable()
        self.repo.create_branch(name, self.repo.resolve(at, self._branch), self.author)

    def delete_branch(self, name: str) -> None:
        """Delete a branch."""
        self.check_writable()
        if name == self._branch:
            raise ConflictError(f"cannot delete {name!r}: it is the branch in use; switch to another branch first")
        self.repo.delete_branch(name, self.author)

    def tags(self) -> dict[str, str]:
        """Tag name -> commit id (hex)."""
        return {name: cid.hex() for name, cid in self.repo.tags().items()}

    def tag(self, name: str, at: Ref = "HEAD") -> None:
        """Name a version, e.g. ``mem.tag("checkpoint")``."""
        self.check_writable()
        self.repo.tag(name, self.repo.resolve(at, self._branch), self.author)

    def delete_tag(self, name: str) -> None:
        """Delete a tag."""
        self.check_writable()
        self.repo.delete_tag(name, self.author)

    def reflog(self, branch: str | None = None, limit: int | None = 50) -> list[dict[str, Any]]:
        """How a branch (default this handle's) moved, newest first: ``time`` (UTC ms), ``old`` and ``new`` commit ids
        (hex, None when absent), ``actor`` and ``reason``. A deleted branch keeps its reflog until gc prunes it."""
        name = self._branch if branch is None else branch
        _names.refuse_nul(name, "branch name")
        entries = self.repo.refs.reflog(HEADS + name, limit)
        if not entries and name not in self.repo.branches():
            raise RefNotFoundError(f"branch {name!r} does not exist and has no reflog; branches: "
                                   f"{', '.join(sorted(self.repo.branches())) or 'none'}")  # fmt: skip
        return [
            {"time": e.time, "old": None if e.old is None else e.old.hex(),
             "new": None if e.new is None else e.new.hex(), "actor": e.actor, "reason": e.reason}
            for e in entries
        ]  # fmt: skip

    def merge(
        self, source: Ref, *, strategy: Strategy = "fail", message: str | None = None, author: str | None = None
    ) -> Commit:
        """Merge a branch or version into this handle's branch with a two-parent merge commit.

        ``strategy`` decides items both sides changed differently: ``fail`` (raise
        :class:`MergeConflictError` with the conflicts, write nothing), ``ours``, ``theirs``, ``newest``
        (later ``updated_at``; a modification beats a deletion), or a function of an
        :class:`ItemConflict` returning the Item to keep, a new value dict, or None to delete.
        When the branch already holds ``source`` nothing is written and its head is returned
        (:meth:`merge_outcome` says which happened).
        """
        return self.merge_outcome(source, strategy=strategy, message=message, author=author).commit

    def merge_outcome(
        self, source: Ref, *, strategy: Strategy = "fail", message: str | None = None, author: str | None = None
    ) -> MergeOutcome:
        """:meth:`merge`, returning what it did: the commit, whether the branch was already up to date (no
        commit), and the conflicts the strategy decided."""
        self.check_writable()
        _validate.provenance(author, message)
        source_id = self._commit_id(source)
        if not self.system:
            sysns.check_merge(self.repo, self.repo.head(self._branch), source_id)
        text = message or f"merge {source if isinstance(source, str) else source_id.hex()[:10]} into {self._branch}"
        who = author or self.author
        with item_conflicts():
            commit, decided, up_to_date = self.repo.merge(
                source_id, self._branch, resolve=_resolver(strategy, who), author=who, message=text
            )
        return MergeOutcome(commit, up_to_date, tuple(item_conflict(c) for c in decided))

    def revert(
        self, ref: Ref, *, strategy: Strategy = "fail", author: str | None = None, message: str | None = None
    ) -> Commit:
        """Undo what one commit changed, with a new commit on this branch (by ``author``, default the handle's;
        ``message`` defaults to ``revert <id>: <its message>``)."""
        self.check_writable()
        _validate.provenance(author, message)
        target = self._commit_id(ref)
        sysns.check_revert(self.repo, self.repo.commit(target))
        who = author or self.author
        with item_conflicts():
            return self.repo.revert(target, self._branch, resolve=_resolver(strategy, who), author=who, message=message)

    def reset(self, ref: Ref, *, author: str | None = None, message: str | None = None) -> None:
        """Move this branch to a version (the old head stays reachable through the reflog, whose entry records
        ``author`` and ``message``)."""
        self.check_writable()
        _validate.provenance(author, message)
        target = self._commit_id(ref)
        if not self.system:
            sysns.check_reset(self.repo, self.repo.head(self._branch), target)
        self.repo.reset(self._branch, target, author or self.author, message)

    def gc(
        self,
        keep_reflog: timedelta | None = None,
        *,
        grace: timedelta = timedelta(minutes=10),
        progress: Callable[[int], None] | None = None,
    ) -> GcReport:
        """Delete chunks no ref or reflog entry reaches; ``keep_reflog`` first prunes older reflog entries.

        Chunks written within ``grace`` are kept (a concurrent writer may not have moved its branch yet).
        ``progress`` is called with the number of chunks deleted since its last call.
        """
        self.check_writable()
        keep = None if keep_reflog is None else int(keep_reflog.total_seconds() * 1000)
        return self.repo.gc(keep, progress, grace_ms=int(grace.total_seconds() * 1000))

    def fsck(self, progress: Callable[[int], None] | None = None) -> FsckReport:
        """Verify every chunk reachable from refs and the reflog is present and hashes right
        (``progress`` is called once per chunk checked)."""
        return self.repo.fsck(progress)


def _item(raw: bytes, data: bytes | None) -> Item | None:
    if data is None:
        return None
    ns, key = codec.decode_key(raw)
    return Item.from_record(ns, key, decode_record(data))


def item_conflict(conflict: Conflict) -> ItemConflict:
    """A tree-level conflict (encoded key, record bytes) as the memory API's item-level conflict."""
    ns, key = codec.decode_key(conflict.key)
    sides = (_item(conflict.key, data) for data in (conflict.base, conflict.ours, conflict.theirs))
    return ItemConflict(ns, key, *sides)


@contextmanager
def item_conflicts() -> Iterator[None]:
    """Re-raise a :class:`MergeConflictError` from the repository with item-level conflicts: the one place
    where conflicts are decoded, so every door renders :class:`ItemConflict` only."""
    try:
        yield
    except MergeConflictError as exc:
        if any(isinstance(c, Conflict) for c in exc.conflicts):
            converted = [item_conflict(c) if isinstance(c, Conflict) else c for c in exc.conflicts]
            raise MergeConflictError(str(exc), converted) from None
        raise


def _item_change(change: Change) -> ItemChange:
    ns, key = codec.decode_key(change.key)
    return ItemChange(ns, key, _item(change.key, change.old), _item(change.key, change.new))


def _resolver(strategy: Strategy, author: str) -> Resolver | None:
    """Turn a merge strategy into a byte-level conflict resolver (None = fail on conflicts)."""
    if strategy == "fail":
        return None
    if strategy == "ours":
        return lambda c: c.ours
    if strategy == "theirs":
        return lambda c: c.theirs
    if strategy == "newest":
        return _newest
    if callable(strategy):
        return _custom(strategy, author)
    raise InvalidInputError(f"unknown merge strategy {strategy!r}: use fail, ours, theirs, newest or a function")


def _newest(conflict: Conflict) -> bytes | None:
    if conflict.ours is None or conflict.theirs is None:
        return conflict.ours if conflict.theirs is None else conflict.theirs  # keep the modification
    ours, theirs = decode_record(conflict.ours), decode_record(conflict.theirs)
    return conflict.theirs if theirs.updated_at > ours.updated_at else conflict.ours


def _custom(decide: Callable[[ItemConflict], Item | dict[str, Any] | None], author: str) -> Resolver:
    def resolve(conflict: Conflict) -> bytes | None:
        found = item_conflict(conflict)
        sides = [found.base, found.ours, found.theirs]
        chosen = decide(found)
        if chosen is None:
            return None
        for item, data in zip(sides, (conflict.base, conflict.ours, conflict.theirs), strict=True):
            if chosen is item:
                return data
        value = _validate.value(chosen.value if isinstance(chosen, Item) else chosen)
        created = min((i.created_at for i in sides if i is not None), default=None)
        stamp = now_ms()
        created_ms = stamp if created is None else int(created.timestamp() * 1000)
        return encode_record(Record(value, created_ms, stamp, None, author))

    return resolve
