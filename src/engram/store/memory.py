"""The memory handle: items plus every versioning verb, on one branch per handle."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Literal

from engram import codec
from engram.backends.base import now_ms
from engram.errors import ConflictError, InvalidInputError, ReadOnlyError
from engram.hashing import ChunkId
from engram.index.docs import DocIndex
from engram.objects import Commit, Record, decode_record, encode_record
from engram.repo import FsckReport, GcReport, Repository
from engram.store import _validate
from engram.store.indexing import IndexPool
from engram.store.item import CommitDetails, Item, ItemChange, ItemConflict, Version
from engram.store.reader import Reader
from engram.store.search import Overlay
from engram.tree import Change, Conflict, Resolver, diff_trees, get

Ref = str | datetime
Strategy = Literal["fail", "ours", "theirs", "newest"] | Callable[[ItemConflict], "Item | dict[str, Any] | None"]


class View(Reader):
    """A read-only view of the memory at one commit (``mem.at(ref)``), with every read method."""

    def __init__(self, repo: Repository, commit: Commit, *, pool: IndexPool | None = None, branch: str = "main"):
        self.repo = repo
        self.commit = commit
        self._pool = pool if pool is not None else IndexPool.for_repository(repo)
        self._near = branch

    def _root(self) -> ChunkId:
        return self.commit.tree

    def _search_index(self) -> tuple[DocIndex, Overlay | None]:
        return self._pool.past(self._near, self.commit.tree)

    def put(self, *args: Any, **kwargs: Any) -> None:
        """Views are read-only."""
        raise ReadOnlyError(f"this is a read-only view of {self.commit.short_id}; write through the Memory handle")

    delete = put

    def __repr__(self) -> str:
        return f"<View {self.commit.short_id} {self.commit.message!r}>"


class Memory(Reader):
    """A handle on a memory store, reading and writing one branch (``main`` by default).

    Every write is one atomic commit; ``with mem.transaction(...)`` groups many writes into one.
    Two handles on the same store keep their own current branch.
    """

    def __init__(
        self, repo: Repository, *, branch: str = "main", author: str = "engram", pool: IndexPool | None = None
    ) -> None:
        self.repo = repo
        self.author = author
        repo.head(branch)
        self._branch = branch
        self.pool = pool if pool is not None else IndexPool.for_repository(repo)

    # ------------------------------------------------------------------ state

    @property
    def branch(self) -> str:
        """The branch this handle reads and writes."""
        return self._branch

    @property
    def head(self) -> Commit:
        """The commit at the head of this handle's branch."""
        return self.repo.commit(self.repo.head(self._branch))

    def _root(self) -> ChunkId:
        return self.head.tree

    def _search_index(self) -> tuple[DocIndex, Overlay | None]:
        return self.pool.head(self._branch, self._root()), None

    def reindex(self) -> int:
        """Rebuild this branch's search index from scratch (re-embedding what the cache lacks); return its size."""
        return len(self.pool.rebuild(self._branch, self._root()))

    def close(self) -> None:
        """Close the underlying stores."""
        self.repo.chunks.close()
        self.repo.refs.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- writes

    def _record(self, root: ChunkId, key: bytes, value: dict[str, Any], author: str, sources: Sequence[str]) -> bytes:
        old = get(self.repo.nodes, root, key)
        stamp = now_ms()
        created = stamp if old is None else decode_record(old).created_at
        return encode_record(Record(value, created, stamp, None, author, tuple(sources)))

    def put(
        self,
        namespace: Sequence[str],
        key: str,
        value: dict[str, Any],
        *,
        author: str | None = None,
        sources: Sequence[str] = (),
        message: str | None = None,
    ) -> Commit:
        """Store (or replace) an item as one commit; return the commit."""
        ns, k, v = _validate.namespace(namespace), _validate.key(key), _validate.value(value)
        who = author or self.author
        raw = codec.encode_key(ns, k)
        record = self._record(self._root(), raw, v, who, sources)
        text = message or f"put {'/'.join(ns)}/{k}"
        return self.repo.commit_edits(self._branch, {raw: record}, author=who, message=text)

    def delete(
        self, namespace: Sequence[str], key: str, *, author: str | None = None, message: str | None = None
    ) -> Commit:
        """Delete an item as one commit (deleting a missing item changes nothing)."""
        ns, k = _validate.namespace(namespace), _validate.key(key)
        who = author or self.author
        text = message or f"delete {'/'.join(ns)}/{k}"
        return self.repo.commit_edits(self._branch, {codec.encode_key(ns, k): None}, author=who, message=text)

    def transaction(
        self, message: str = "transaction", *, author: str | None = None, metadata: dict[str, Any] | None = None
    ) -> Transaction:
        """Group writes into one commit: ``with mem.transaction("import") as tx: tx.put(...)``."""
        return Transaction(self, message, author or self.author, metadata)

    # ------------------------------------------------------------- versioning

    def resolve(self, ref: Ref = "HEAD") -> Commit:
        """The commit a ref expression names (``HEAD`` is this handle's branch head)."""
        return self.repo.commit(self.repo.resolve(ref, self._branch))

    def at(self, ref: Ref) -> View:
        """A read-only view of the memory at a branch, tag, commit, ``HEAD~n``, ``main@{time}`` or datetime."""
        return View(self.repo, self.resolve(ref), pool=self.pool, branch=self._branch)

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
            raw = codec.encode_key(_validate.namespace(namespace or ()), _validate.key(key))
            bounds = (raw, raw + b"\x00")
        elif namespace is not None:
            bounds = codec.prefix_range(_validate.namespace(namespace, allow_empty=True))
        out: list[Commit] = []
        for commit in self.repo.iter_log(self.repo.resolve(ref, self._branch)):
            if bounds is not None and next(self.repo.changes(commit, *bounds), None) is None:
                continue
            out.append(commit)
            if limit is not None and len(out) >= limit:
                break
        return out

    def show(self, ref: Ref = "HEAD") -> CommitDetails:
        """A commit and the item changes it made."""
        commit = self.resolve(ref)
        return CommitDetails(commit, [_item_change(c) for c in self.repo.changes(commit)])

    def diff(self, old: Ref, new: Ref = "HEAD", *, namespace: Sequence[str] = ()) -> list[ItemChange]:
        """Item changes from version ``old`` to version ``new``, optionally under a namespace prefix."""
        return list(self.iter_diff(old, new, namespace=namespace))

    def iter_diff(self, old: Ref, new: Ref = "HEAD", *, namespace: Sequence[str] = ()) -> Iterator[ItemChange]:
        """Like :meth:`diff`, as a generator (cost grows with the change, not the store)."""
        start, end = codec.prefix_range(_validate.namespace(namespace, allow_empty=True))
        a, b = self.resolve(old).tree, self.resolve(new).tree
        for change in diff_trees(self.repo.nodes, a, b, start, end):
            yield _item_change(change)

    def history(self, namespace: Sequence[str], key: str, ref: Ref = "HEAD") -> list[Version]:
        """Every version of one item, newest first, each with the commit that made it (blame)."""
        ns, k = _validate.namespace(namespace), _validate.key(key)
        raw = codec.encode_key(ns, k)
        versions: list[Version] = []
        for commit in self.repo.iter_log(self.repo.resolve(ref, self._branch)):
            now = get(self.repo.nodes, commit.tree, raw)
            parent = get(self.repo.nodes, self.repo.commit(commit.parents[0]).tree, raw) if commit.parents else None
            if now != parent:
                item = None if now is None else Item.from_record(ns, k, decode_record(now))
                versions.append(Version(commit, item))
        return versions

    def branches(self) -> dict[str, str]:
        """Branch name -> head commit id (hex)."""
        return {name: cid.hex() for name, cid in self.repo.branches().items()}

    def create_branch(self, name: str, at: Ref = "HEAD") -> None:
        """Create a branch at a version (this handle stays on its branch; use :meth:`checkout`)."""
        self.repo.create_branch(name, self.repo.resolve(at, self._branch), self.author)

    def delete_branch(self, name: str) -> None:
        """Delete a branch."""
        if name == self._branch:
            raise ConflictError(f"cannot delete {name!r}: this handle has it checked out; checkout another first")
        self.repo.delete_branch(name, self.author)

    def tags(self) -> dict[str, str]:
        """Tag name -> commit id (hex)."""
        return {name: cid.hex() for name, cid in self.repo.tags().items()}

    def tag(self, name: str, at: Ref = "HEAD") -> None:
        """Name a version, e.g. ``mem.tag("checkpoint")``."""
        self.repo.tag(name, self.repo.resolve(at, self._branch), self.author)

    def delete_tag(self, name: str) -> None:
        """Delete a tag."""
        self.repo.delete_tag(name, self.author)

    def merge(self, source: Ref, *, strategy: Strategy = "fail", message: str | None = None) -> Commit:
        """Merge a branch or version into this handle's branch with a two-parent merge commit.

        ``strategy`` decides items both sides changed differently: ``fail`` (raise
        :class:`MergeConflictError` with the conflicts, write nothing), ``ours``, ``theirs``, ``newest``
        (later ``updated_at``; a modification beats a deletion), or a function of an
        :class:`ItemConflict` returning the Item to keep, a new value dict, or None to delete.
        """
        source_id = self.repo.resolve(source, self._branch)
        text = message or f"merge {source if isinstance(source, str) else source_id.hex()[:10]} into {self._branch}"
        commit, _ = self.repo.merge(
            source_id, self._branch, resolve=_resolver(strategy, self.author), author=self.author, message=text
        )
        return commit

    def revert(self, ref: Ref, *, strategy: Strategy = "fail") -> Commit:
        """Undo what one commit changed, with a new commit on this branch."""
        target = self.repo.resolve(ref, self._branch)
        return self.repo.revert(target, self._branch, resolve=_resolver(strategy, self.author), author=self.author)

    def reset(self, ref: Ref) -> None:
        """Move this branch to a version (the old head stays reachable through the reflog)."""
        self.repo.reset(self._branch, self.repo.resolve(ref, self._branch), self.author)

    def gc(self, keep_reflog: timedelta | None = None, *, grace: timedelta = timedelta(minutes=10)) -> GcReport:
        """Delete chunks no ref or reflog entry reaches; ``keep_reflog`` first prunes older reflog entries.

        Chunks written within ``grace`` are kept (a concurrent writer may not have moved its branch yet).
        """
        keep = None if keep_reflog is None else int(keep_reflog.total_seconds() * 1000)
        return self.repo.gc(keep, grace_ms=int(grace.total_seconds() * 1000))

    def fsck(self) -> FsckReport:
        """Verify every chunk reachable from refs and the reflog is present and hashes right."""
        return self.repo.fsck()


class Transaction:
    """Buffered writes committed as one commit on exit; reads see the buffered writes.

    If another writer changed a key this transaction writes, the commit fails with
    :class:`MergeConflictError` and nothing is written.
    """

    def __init__(self, memory: Memory, message: str, author: str, metadata: dict[str, Any] | None) -> None:
        self.memory = memory
        self.message = message
        self.author = author
        self.metadata = metadata
        self.base = memory.head
        self.edits: dict[bytes, bytes | None] = {}
        self.commit: Commit | None = None

    def put(self, namespace: Sequence[str], key: str, value: dict[str, Any], *, sources: Sequence[str] = ()) -> None:
        """Buffer a put."""
        ns, k, v = _validate.namespace(namespace), _validate.key(key), _validate.value(value)
        raw = codec.encode_key(ns, k)
        old = self.edits.get(raw)
        if old is not None:
            record = decode_record(old)
            self.edits[raw] = encode_record(Record(v, record.created_at, now_ms(), None, self.author, tuple(sources)))
        else:
            self.edits[raw] = self.memory._record(self.base.tree, raw, v, self.author, sources)

    def delete(self, namespace: Sequence[str], key: str) -> None:
        """Buffer a delete."""
        self.edits[codec.encode_key(_validate.namespace(namespace), _validate.key(key))] = None

    def get(self, namespace: Sequence[str], key: str) -> Item | None:
        """Read through the buffered writes."""
        ns, k = _validate.namespace(namespace), _validate.key(key)
        raw = codec.encode_key(ns, k)
        data = self.edits[raw] if raw in self.edits else get(self.memory.repo.nodes, self.base.tree, raw)
        return None if data is None else Item.from_record(ns, k, decode_record(data))

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None and self.edits:
            self.commit = self.memory.repo.commit_edits(
                self.memory.branch,
                self.edits,
                author=self.author,
                message=self.message,
                metadata=self.metadata,
                base=self.base.id,
                strict=True,
            )


def _item(raw: bytes, data: bytes | None) -> Item | None:
    if data is None:
        return None
    ns, key = codec.decode_key(raw)
    return Item.from_record(ns, key, decode_record(data))


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
        ns, key = codec.decode_key(conflict.key)
        sides = [_item(conflict.key, data) for data in (conflict.base, conflict.ours, conflict.theirs)]
        chosen = decide(ItemConflict(ns, key, *sides))
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
