"""memoir's ``ProllyTreeStore`` over engram: change the import, keep the code.

``from memoir.store.prolly_adapter import ProllyTreeStore`` becomes ``from engram.compat.memoir import
ProllyTreeStore``; the constructor (``path``, ``enable_versioning``, ``auto_commit``, ``cache_size``) and the calls
(``store_memory_async``, ``search``, ``get``, ``put``, ``delete``, ``commit``, ``create_time_snapshot``,
``get_state_at_snapshot``, ``get_key_history``, ``export_namespace``, ``tree.checkout``/``create_branch``/
``merge``/...) keep their shapes. Not mapped: memoir's semantic retrieval (``retrieve_memories*``, which needs its
search engine; use engram's ``search(namespace, query)``) and its LangGraph ``BaseStore`` methods (use
:class:`engram.integrations.langgraph.EngramStore`).

The data is an ordinary engram store, so ``engram.open(path)`` (or the CLI, the UI, the server) reads it too, with
engram's history, diff, blame and revert.

Mapping:

- ``path`` is a store directory (``engram.open(path)`` keeps ``engram.db`` in it); a store URL (``:memory:``,
  ``sqlite:///...``, ``postgresql://...``) is used as it is.
- A namespace is a tuple of labels, as in engram; memoir's string form splits at ``:`` (``"org:alice"`` is
  ``("org", "alice")``, as memoir's own key prefix ``org:alice:`` has it). engram refuses ``.`` in a label
  (:class:`~engram.errors.InvalidNamespaceError`).
- A memoir path (``"preferences.ui.theme"``) is the item key, unchanged. ``search(("org",))`` also lists items of
  sub-namespaces, as memoir's key-prefix scan does, with the rest of the namespace joined by ``:`` before the key.
- Values are JSON objects. ``put`` of a value that is not a dict stores ``{"memoir_value": value}`` and reads give
  the value back.
- ``store_memory_async(namespace, content, key)`` aggregates as memoir does: the item at ``key`` is a dict with a
  ``memories`` list of ``{"content", "confidence", "timestamp", "metadata"}`` entries and ``path``, ``count``,
  ``first_timestamp``, ``last_timestamp``, ``last_updated``; a second memory at the same key is appended (one
  commit, read and written atomically: a concurrent writer makes it raise
  :class:`~engram.errors.MergeConflictError` rather than lose an entry).

Versioning (the differences are in docs/migrate.md):

- memoir keeps one checkout for the whole process; here each ``ProllyTreeStore`` has its own (``store.tree``), so
  two stores on one path can sit on different branches. engram's own API needs no checkout at all:
  ``store.memory.at("day2").get(...)`` reads any version.
- ``create_time_snapshot(name)`` is an engram tag at the head of the current branch (memoir makes a branch).
  Checked out at a snapshot or a commit, reads see that version and writes raise
  :class:`~engram.errors.ReadOnlyError`: check out a branch to write.
- ``tree.create_branch(name)`` creates the branch at the current checkout and switches to it, as prollytree's
  ``VersionedKvStore.create_branch`` does (``tree.branch(name)`` only creates it).
- ``tree.merge(branch)`` is engram's three-way merge into the current branch; it returns the merge commit's id.
  ``ConflictResolution.IgnoreAll`` (the default) and ``TakeDestination`` keep this branch's version of an item both
  sides changed, ``TakeSource`` takes the merged branch's.
- Unknown snapshots, branches and commits raise :class:`~engram.errors.RefNotFoundError`; errors are never
  logged and dropped (memoir logs some and returns ``None``/``False``).
- ``enable_versioning`` and ``cache_size`` are accepted: engram always versions and sizes its caches itself.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import engram
from engram import Commit, Item, Memory, View
from engram.embed import Embedder
from engram.errors import InvalidInputError, ReadOnlyError

__all__ = ["AggregatedMemoryEntry", "ConflictResolution", "MemoryItem", "ProllyTreeStore", "VersionTree"]

#: The field a value that is not a JSON object is kept under (engram stores JSON objects).
VALUE_FIELD = "memoir_value"

Namespace = str | Sequence[str]
#: A staged change (``auto_commit=False``): the value to write, or None to delete.
Staged = dict[tuple[tuple[str, ...], str], dict[str, Any] | None]
AggregatedMemoryEntry = dict[str, Any]


@dataclass
class MemoryItem:
    """What ``store_memory_async`` returns (memoir's ``MemoryItem``); ``version`` is the commit id (hex), or None
    while the write is staged."""

    key: str
    namespace: str
    content: Any
    metadata: dict[str, Any] = field(default_factory=dict)
    timestamp: float = field(default_factory=time.time)
    version: str | None = None
    confidence: float = 1.0


class ConflictResolution:
    """How ``tree.merge`` settles an item both branches changed (prollytree's names)."""

    IgnoreAll = "ignore_all"
    TakeSource = "take_source"
    TakeDestination = "take_destination"


_STRATEGIES: dict[str, Literal["ours", "theirs"]] = {
    ConflictResolution.IgnoreAll: "ours",
    ConflictResolution.TakeDestination: "ours",
    ConflictResolution.TakeSource: "theirs",
}


def as_namespace(namespace: Namespace) -> tuple[str, ...]:
    """The namespace memoir takes (a tuple, or a string whose ``:`` separates labels) as engram's tuple of labels."""
    if isinstance(namespace, str):
        return tuple(namespace.split(":"))
    return tuple(namespace)


def _wrap(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {VALUE_FIELD: value}


def _unwrap(value: dict[str, Any]) -> Any:
    return value[VALUE_FIELD] if len(value) == 1 and VALUE_FIELD in value else value


def _store_url(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    if text == ":memory:" or "://" in text:
        return text
    Path(text).mkdir(parents=True, exist_ok=True)  # memoir's path is a directory it creates
    return text


class VersionTree:
    """``store.tree``: the checkout of one :class:`ProllyTreeStore` and the versioning verbs of prollytree's
    ``VersionedKvStore`` that memoir code calls (``checkout``, ``create_branch``, ``merge``, ...)."""

    def __init__(self, memory: Memory) -> None:
        self._memory = memory
        #: The snapshot or commit checked out (reads see it, writes are refused), or None on a branch.
        self._detached: str | None = None
        self._view: View | None = None

    @property
    def memory(self) -> Memory:
        """The engram handle (on the checked-out branch)."""
        return self._memory

    @property
    def detached(self) -> str | None:
        """The snapshot or commit checked out, or None when a branch is."""
        return self._detached

    def reader(self) -> Memory | View:
        """What reads see: the checked-out version."""
        return self._memory if self._view is None else self._view

    def check_writable(self) -> None:
        """Raise :class:`ReadOnlyError` when a snapshot or a commit is checked out."""
        if self._detached is not None:
            raise ReadOnlyError(
                f"{self._detached!r} is checked out, a snapshot or commit, which is read-only: nothing was "
                f"written; check out a branch to write, e.g. store.tree.checkout({self._memory.branch!r})"
            )

    def checkout(self, branch_or_commit: str) -> None:
        """Check out a branch (reads and writes follow it), or a snapshot or commit id (read-only).

        Raises :class:`RefNotFoundError` for a name that is none of them."""
        if branch_or_commit in self._memory.branches():
            self._memory.checkout(branch_or_commit)
            self._detached, self._view = None, None
            return
        view = self._memory.at(branch_or_commit)  # raises RefNotFoundError for an unknown name
        self._detached, self._view = branch_or_commit, view

    def current_branch(self) -> str:
        """The name checked out: a branch, or the snapshot or commit when one is."""
        return self._memory.branch if self._detached is None else self._detached

    def list_branches(self) -> list[str]:
        """The branches, sorted (snapshots are tags: :meth:`ProllyTreeStore.list_snapshots`)."""
        return sorted(self._memory.branches())

    def branch(self, name: str) -> None:
        """Create a branch at the current checkout, staying where this store is."""
        self._memory.create_branch(name, at=self.head_commit().id.hex())

    def create_branch(self, name: str) -> None:
        """Create a branch at the current checkout and check it out (as prollytree's ``create_branch``)."""
        self.branch(name)
        self.checkout(name)

    def merge(self, source_branch: str, conflict_resolution: str | None = None) -> str:
        """Merge a branch (or snapshot, or commit) into the current branch; return the merge commit's id (hex)."""
        self.check_writable()
        choice = ConflictResolution.IgnoreAll if conflict_resolution is None else conflict_resolution
        if choice not in _STRATEGIES:
            raise InvalidInputError(
                f"conflict_resolution must be one of ConflictResolution.IgnoreAll, TakeSource, TakeDestination, "
                f"not {conflict_resolution!r}"
            )
        commit = self._memory.merge(source_branch, strategy=_STRATEGIES[choice])
        return commit.id.hex()

    def head_commit(self) -> Commit:
        """The commit checked out."""
        return self._memory.head if self._view is None else self._view.commit

    def get_head(self) -> str:
        """The id (hex) of the commit checked out."""
        return self.head_commit().id.hex()

    def log(self) -> list[dict[str, Any]]:
        """The commits reachable from the checkout, newest first, as prollytree's commit dicts."""
        return [commit_info(commit) for commit in self._memory.log(self.get_head())]


def commit_info(commit: Commit) -> dict[str, Any]:
    """A commit as prollytree's commit dict: ``id``, ``author``, ``committer``, ``message``, ``timestamp`` (seconds)."""
    return {
        "id": commit.id.hex(),
        "author": commit.author,
        "committer": commit.author,
        "message": commit.message,
        "timestamp": commit.time // 1000,
    }


class ProllyTreeStore:
    """memoir's store of aggregated memories at semantic paths, over an engram store (see the module docstring).

    ``memory`` is the engram handle, for everything memoir has no verb for (``store.memory.at(...)``,
    ``diff``, ``history``, ``revert``). ``embedder`` is engram's (None: no vectors; memoir's store searches by
    key prefix, not by meaning).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        enable_versioning: bool = True,
        auto_commit: bool = True,
        cache_size: int = 10000,
        *,
        embedder: Embedder | str | None = None,
        author: str = "memoir",
    ) -> None:
        url = _store_url(path)
        self.path = Path(os.fspath(path))
        self.enable_versioning = enable_versioning
        self.auto_commit = auto_commit
        self.cache_size = cache_size
        self.memory = engram.open(url, embedder=embedder, author=author)
        self.tree = VersionTree(self.memory)
        self._staged: Staged = {}

    def close(self) -> None:
        """Close the engram handle."""
        self.memory.close()

    # -- reads (at the checkout) -------------------------------------------------------------------------------

    def get(self, namespace: Namespace, key: str) -> Any:
        """The value at (namespace, key) at the checkout, or None."""
        ns = as_namespace(namespace)
        if self.tree.detached is None and (ns, key) in self._staged:
            staged = self._staged[(ns, key)]
            return None if staged is None else _unwrap(staged)
        item = self.tree.reader().get(ns, key)
        return None if item is None else _unwrap(item.value)

    def search(
        self, namespace: Namespace, *, filter: Mapping[str, Any] | None = None, limit: int = 10
    ) -> list[tuple[Any, str, Any]]:
        """Up to ``limit`` ``(namespace, path, value)`` tuples under ``namespace`` at the checkout, in key order;
        ``filter`` keeps dict values whose fields equal its values. The namespace is returned as given."""
        found: list[tuple[Any, str, Any]] = []
        if limit <= 0:
            return found
        prefix = as_namespace(namespace)
        for ns, key, value in self._entries(prefix):
            if filter and isinstance(value, dict) and not all(value.get(k) == v for k, v in filter.items()):
                continue
            found.append((namespace, ":".join((*ns[len(prefix) :], key)), value))
            if len(found) >= limit:
                break
        return found

    def _entries(self, prefix: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str, Any]]:
        staged = {} if self.tree.detached is not None else dict(self._staged)
        items: Iterator[Item] = self.tree.reader().iter_items(prefix)
        for item in items:
            where = (item.namespace, item.key)
            value: dict[str, Any] | None = staged.pop(where) if where in staged else item.value
            if value is not None:
                yield item.namespace, item.key, _unwrap(value)
        for (ns, key), value in sorted(staged.items(), key=lambda entry: entry[0]):
            if value is not None and ns[: len(prefix)] == prefix:
                yield ns, key, _unwrap(value)

    async def asearch(self, namespace: str, path_prefix: str) -> list[tuple[str, Any]]:
        """``(path, value)`` of the items of ``namespace`` whose path starts with ``path_prefix`` (memoir reads at
        most 100)."""
        return [(path, data) for _, path, data in self.search(namespace, limit=100) if path.startswith(path_prefix)]

    def get_state_at_snapshot(self, namespace: Namespace, snapshot_name: str) -> dict[str, Any]:
        """Key -> value of the namespace's own items at a snapshot (or branch, or commit), without a checkout."""
        ns = as_namespace(namespace)
        view = self.memory.at(snapshot_name)
        return {item.key: _unwrap(item.value) for item in view.iter_items(ns) if item.namespace == ns}

    def get_key_history(self, namespace: Namespace, key: str, limit: int = 10) -> list[dict[str, Any]]:
        """The commits that changed one item, newest first, as prollytree's commit dicts."""
        ns = as_namespace(namespace)
        return [commit_info(v.commit) for v in self.memory.history(ns, key, self.tree.get_head())[:limit]]

    def export_namespace(self, namespace: str, output_path: str | os.PathLike[str]) -> None:
        """Write the namespace's items at the checkout (up to 1,000, as memoir) to a JSON file:
        ``{"namespace", "timestamp", "memories": {path: value}}``."""
        memories = {path: data for _, path, data in self.search((namespace,), limit=1000)}
        document = {"namespace": namespace, "timestamp": time.time(), "memories": memories}
        Path(output_path).write_text(json.dumps(document, indent=2), encoding="utf-8")

    # -- writes (on the checked-out branch) --------------------------------------------------------------------

    def put(self, namespace: Namespace, key: str, value: Any) -> None:
        """Store a value (a commit, or staged until :meth:`commit` when ``auto_commit`` is off)."""
        self._write(as_namespace(namespace), key, _wrap(value), self.auto_commit)

    def delete(self, namespace: Namespace, key: str) -> None:
        """Delete an item (deleting a missing one changes nothing)."""
        self._write(as_namespace(namespace), key, None, self.auto_commit)

    def put_without_commit(self, namespace: Namespace, key: str, value: Any) -> None:
        """Stage a put for the next :meth:`commit`."""
        self._write(as_namespace(namespace), key, _wrap(value), False)

    def delete_without_commit(self, namespace: Namespace, key: str) -> None:
        """Stage a delete for the next :meth:`commit`."""
        self._write(as_namespace(namespace), key, None, False)

    def _write(self, ns: tuple[str, ...], key: str, value: dict[str, Any] | None, commit: bool) -> None:
        self.tree.check_writable()
        if not commit:
            self._staged[(ns, key)] = value
            return
        where = ":".join(ns)
        if value is None:
            self.memory.delete(ns, key, message=f"Delete {key} from {where}")
        else:
            self.memory.put(ns, key, value, message=f"Store {key} in {where}")

    def commit(self, message: str = "Manual commit") -> str:
        """Commit the staged changes as one commit; return the id (hex) of the branch's head."""
        self.tree.check_writable()
        if self._staged:
            with self.memory.transaction(message) as tx:
                for (ns, key), value in self._staged.items():
                    if value is None:
                        tx.delete(ns, key)
                    else:
                        tx.put(ns, key, value)
            self._staged.clear()
        return self.memory.head.id.hex()

    def create_time_snapshot(self, snapshot_name: str) -> bool:
        """Name the current version (an engram tag at the checkout); True. A taken name raises
        :class:`RefExistsError`."""
        self.memory.tag(snapshot_name, at=self.tree.get_head())
        return True

    def list_snapshots(self) -> list[str]:
        """The snapshots (engram tags), oldest first."""
        tags = self.memory.tags()
        return sorted(tags, key=lambda name: (self.memory.resolve(tags[name]).time, name))

    # -- memories ----------------------------------------------------------------------------------------------

    async def store_memory_async(self, namespace: Namespace, content: Any, key: str) -> MemoryItem:
        """Append a memory to the aggregated item at ``key`` (creating it), as memoir does."""
        return self.store_memory(namespace, content, key)

    async def store_memory_async_without_commit(self, namespace: Namespace, content: Any, key: str) -> MemoryItem:
        """:meth:`store_memory_async`, staged until :meth:`commit`."""
        return self._store_memory(namespace, content, key, False)

    def store_memory(self, namespace: Namespace, content: Any, key: str) -> MemoryItem:
        """Synchronous :meth:`store_memory_async`."""
        return self._store_memory(namespace, content, key, self.auto_commit)

    def _store_memory(self, namespace: Namespace, content: Any, key: str, commit: bool) -> MemoryItem:
        self.tree.check_writable()
        ns = as_namespace(namespace)
        now = time.time()
        entry: AggregatedMemoryEntry = {"content": content, "confidence": 1.0, "timestamp": now, "metadata": {}}
        label = namespace if isinstance(namespace, str) else ":".join(ns)
        item = MemoryItem(key=key, namespace=label, content=content, timestamp=now)
        if not commit:
            self._staged[(ns, key)] = _aggregate(self.get(ns, key), entry, key, now)
            return item
        with self.memory.transaction(f"Store {key} in {':'.join(ns)}") as tx:
            found = tx.get(ns, key)
            tx.put(ns, key, _aggregate(None if found is None else found.value, entry, key, now))
        item.version = None if tx.commit is None else tx.commit.id.hex()
        return item


def _aggregate(existing: Any, entry: AggregatedMemoryEntry, key: str, now: float) -> dict[str, Any]:
    """The aggregated memory (memoir's shape) at a path with ``entry`` appended (a new one when there is none)."""
    if isinstance(existing, dict) and isinstance(existing.get("memories"), list):
        memories = [*existing["memories"], entry]
        return {
            **existing,
            "memories": memories,
            "count": int(existing.get("count", len(memories) - 1)) + 1,
            "last_timestamp": now,
            "last_updated": now,
        }
    return {
        "path": key,
        "memories": [entry],
        "count": 1,
        "first_timestamp": now,
        "last_timestamp": now,
        "last_updated": now,
    }
