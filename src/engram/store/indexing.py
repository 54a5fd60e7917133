"""The search indexes of a repository: one per branch head, moved along by diffs, and past versions.

A search at a branch head syncs that branch's index to the head root (cost: the diff since the last
search). A search in the past scores the items that differ between the index's root and the past
root as an overlay; when too many differ it builds a temporary index for that root, cached by root.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram import runtime
from engram.embed import embedder_from_spec
from engram.embed.base import Embedder, EmbedderMismatchError, embedder_spec
from engram.errors import ConfigError, RefNotFoundError
from engram.hashing import ChunkId
from engram.index.cache import VectorCache
from engram.index.doclist import make_doc
from engram.index.docs import PACK_AFTER, SCOPE_EXACT, DocIndex, Phases
from engram.index.embedtext import EMBED_TEXT_VERSION
from engram.index.engine import Overlay
from engram.index.keyword import OverlayStats
from engram.repo import Repository
from engram.store.background import BackgroundIndexer
from engram.store.engines import InProcessSearch, PostgresSearch, SearchEngine
from engram.store.querycache import QueryCache

if TYPE_CHECKING:
    from engram.store.pgsearch import PgSearch
from engram.tree import build_tree, diff_trees, get

#: Seconds a search spends embedding what writes left without vectors, when a background indexer makes the rest
#: (items without a vector are found by keyword meanwhile, and the search reports them as ``lag``).
SEARCH_EMBED = 0.25
#: An overlay is used while at most this many items (or this share of the index) differ.
OVERLAY_MIN = 2_000
OVERLAY_SHARE = 0.05
TEMP_INDEXES = 2
#: A branch index is saved once this many documents (or this share of it) changed since its last save.
SAVE_AFTER = 5_000
SAVE_SHARE = 0.2

#: :meth:`IndexPool.lag` walks at most this many commits back from a head looking for the index's root.
LAG_SCAN = 1_000


@dataclass(frozen=True, slots=True)
class IndexLag:
    """How far a branch's search index is behind the branch (what metrics and health checks read).

    Attributes:
        commits: commits from the head back to the version the kept index reflects (0: current). A search
            applies them first, so it never misses them, but pays for them; ``LAG_SCAN`` when at least
            that many (or the index was never built in this process).
        vectors: items whose vectors are still to be made (the embedder failed or is catching up): keyword
            search finds them, semantic search does not yet (``SearchResults.lag`` of a search).
        graph: vectors waiting to join the ANN graph (scored exactly meanwhile: slower, never missed).
    """

    commits: int
    vectors: int
    graph: int


#: The ref that records which embedder a store's vectors come from (a one-leaf tree: spec and model id).
EMBEDDER_REF = "meta/embedder"

_log = logging.getLogger(__name__)


def recorded_embedder(repo: Repository) -> tuple[str, str] | None:
    """The (spec, model id) of the embedder the store records, or None when it records none yet."""
    root = repo.refs.get(EMBEDDER_REF)
    if root is None:
        return None
    spec, model = get(repo.nodes, root, b"spec"), get(repo.nodes, root, b"model")
    return None if spec is None or model is None else (spec.decode(), model.decode())


def record_embedder(repo: Repository, embedder: Embedder, *, replace: bool = False) -> None:
    """Record ``embedder`` as the store's (first use; ``replace=True`` for an explicit re-embed)."""
    old = repo.refs.get(EMBEDDER_REF)
    if old is not None and not replace:
        return
    entries = [(b"model", embedder.model_id.encode()), (b"spec", embedder_spec(embedder).encode())]
    root = build_tree(repo.nodes, entries)
    if root != old:
        repo.refs.set(EMBEDDER_REF, root, old, reason=f"embedder: {embedder_spec(embedder)}")


# Embedders made for "auto", one per spec: every store (every tenant of a server) that records the same
# embedder shares one loaded model.
_AUTO: dict[str, Embedder] = {}
_AUTO_LOCK = threading.Lock()


def _forget_embedders() -> None:
    """Close (where they hold a client) and forget the shared embedders: the next "auto" store loads its own."""
    with _AUTO_LOCK:
        made = list(_AUTO.values())
        _AUTO.clear()
    runtime.close_each(each for each in made if callable(getattr(each, "close", None)))


runtime.register("engram.store.indexing.embedders", close=_forget_embedders, reset=_forget_embedders)


def _shared_embedder(spec: str) -> Embedder:
    with _AUTO_LOCK:
        found = _AUTO.get(spec)
        if found is None:
            found = _AUTO[spec] = embedder_from_spec(spec)
        return found


def choose_embedder(repo: Repository, embedder: Embedder | str | None, *, reembed: bool = False) -> Embedder | None:
    """The embedder a store opens with: ``"auto"`` is the one it records (else MiniLM); another one than it
    records raises :class:`EmbedderMismatchError` unless ``reembed`` (then it is recorded instead)."""
    if embedder is None:
        return None
    found = recorded_embedder(repo)
    if embedder == "auto":
        spec, model = found if found is not None else ("minilm", "")
        try:
            made = _shared_embedder(spec)
        except ConfigError:
            raise ConfigError(
                f"this store was indexed with {model!r}, which no embedder spec names: pass that embedder to "
                "engram.open(embedder=...)"
            ) from None
        if found is not None and made.model_id != model:
            raise EmbedderMismatchError(model, made.model_id)
        return made
    chosen = embedder_from_spec(embedder) if isinstance(embedder, str) else embedder
    if found is not None and found[1] != chosen.model_id:
        if not reembed:
            raise EmbedderMismatchError(found[0], embedder_spec(chosen))
        record_embedder(repo, chosen, replace=True)
    return chosen


# id(repo) -> its pool, for as long as some handle keeps the pool (and so the repository) alive. Keyed
# by id, not weakly by the repository: a pool refers to its repository, so a weak key would never die.
_POOLS: weakref.WeakValueDictionary[int, IndexPool] = weakref.WeakValueDictionary()
runtime.register("engram.store.indexing.pools", reset=_POOLS.clear)


class IndexPool:
    """Search indexes of one repository, shared by every handle on it."""

    def __init__(
        self,
        repo: Repository,
        *,
        embedder: Embedder | None = None,
        fields: Sequence[str] = ("$",),
        cache: VectorCache | None = None,
        snapshots: Path | None = None,
        background: bool = False,
        scope_exact: int = SCOPE_EXACT,
        ann_min: int | None = None,
        pack_after: int = PACK_AFTER,
        vector_settings: Mapping[str, Any] | None = None,
        sql: PgSearch | None = None,
        query_cache: QueryCache | None = None,
    ) -> None:
        self.repo = repo
        #: Index settings (:class:`DocIndex`): the scope scored exactly, the vectors from which on a graph is built,
        #: the changes from which on an index is packed, and the vector index's own (:class:`VectorIndex`).
        self.scope_exact = scope_exact
        self.ann_min = ann_min
        self.pack_after = pack_after
        self.vector_settings = dict(vector_settings or {})
        self.embedder = embedder
        self.fields = tuple(fields)
        self.cache = cache
        self.snapshots = snapshots
        #: The search tables when the store is PostgreSQL with pgvector (engram.index.pgengine), else None.
        self.sql = sql
        #: The engine every search runs on, chosen here once: PostgreSQL's tables, or the in-process indexes.
        self.engine: SearchEngine = InProcessSearch(self) if sql is None else PostgresSearch(sql, InProcessSearch(self))
        #: Search results by (root, request): never stale, shared by every handle (engram.store.querycache).
        self.query_cache: QueryCache | None = query_cache if query_cache is not None else QueryCache()
        self._branches: dict[str, DocIndex] = {}
        self._temp: OrderedDict[ChunkId, DocIndex] = OrderedDict()
        self._overlays: OrderedDict[tuple[ChunkId, ChunkId], Overlay] = OrderedDict()
        self._lock = threading.Lock()
        self._recorded = False
        #: Brings the indexes of branches written in this process up to date in the background (library handles).
        self.indexer = BackgroundIndexer(self.catch_up) if background else None
        if self.indexer is not None:
            repo.watch(self.indexer.wrote)
        _POOLS[id(repo)] = self

    def use_embedder(self, embedder: Embedder | None) -> None:
        """Switch to another embedder (an explicit re-embed): forget every index, record the new one."""
        with self._lock:
            self.embedder = embedder
            self._branches.clear()
            self._temp.clear()
            self._overlays.clear()
        if self.sql is not None:
            self.sql.embedder = embedder
        if embedder is not None:
            record_embedder(self.repo, embedder, replace=True)
            self._recorded = True

    def note_embedded(self) -> None:
        """Record the pool's embedder as the store's, once vectors were made with it (first use)."""
        if not self._recorded and self.embedder is not None:
            record_embedder(self.repo, self.embedder)
            self._recorded = True

    @classmethod
    def for_repository(cls, repo: Repository) -> IndexPool:
        """The pool registered for ``repo``, or a keyword-only one."""
        found = _POOLS.get(id(repo))
        return found if found is not None and found.repo is repo else cls(repo)

    def _new(self) -> DocIndex:
        return self._searching(DocIndex(
            self.repo.nodes, fields=self.fields, embedder=self.embedder, cache=self.cache,
            scope_exact=self.scope_exact, ann_min=self.ann_min, pack_after=self.pack_after,
            vector_settings=self.vector_settings,
        ))  # fmt: skip

    def _searching(self, index: DocIndex) -> DocIndex:
        """``index`` with the time a search may spend embedding (``SEARCH_EMBED`` with a background indexer)."""
        index.embed_budget = SEARCH_EMBED if self.indexer is not None else None
        return index

    def index(self, branch: str) -> DocIndex:
        """The (possibly stale) index kept for a branch: in memory, else its saved snapshot, else empty."""
        with self._lock:
            found = self._branches.get(branch)
            if found is None:
                found = self._branches[branch] = self._restore(branch) or self._new()
            return found

    def synced(self) -> dict[str, ChunkId | None]:
        """Branch -> the tree root its in-memory index reflects, for the indexes loaded now (index lag, #15)."""
        with self._lock:
            return {branch: index.root for branch, index in self._branches.items()}

    def _snapshot_path(self, branch: str) -> Path | None:
        if self.snapshots is None:
            return None
        model = self.embedder.model_id if self.embedder is not None else ""
        key = f"{branch}\0{self.fields}\0{model}\0{EMBED_TEXT_VERSION}"  # what is embedded: a new version re-embeds
        name = hashlib.blake2b(key.encode(), digest_size=10).hexdigest()
        return self.snapshots / f"{name}.idx"

    def _restore(self, branch: str) -> DocIndex | None:
        path = self._snapshot_path(branch)
        if path is None:
            return None
        found = DocIndex.restore(
            path, self.repo.nodes, fields=self.fields, embedder=self.embedder, cache=self.cache,
            scope_exact=self.scope_exact, ann_min=self.ann_min, pack_after=self.pack_after,
            vector_settings=self.vector_settings,
        )  # fmt: skip
        if found is None or found.root is None or self.repo.chunks.has_many([found.root]):
            return None  # absent, built differently, or its root was garbage-collected
        return self._searching(found)

    def current(
        self, branch: str, root: ChunkId, phases: Phases | None = None, *, search: bool = False, embed: bool = True
    ) -> DocIndex:
        """The branch's index, synced to ``root`` (its head); saved once enough has changed. For a ``search``
        with a background indexer, embedding stops after ``SEARCH_EMBED`` seconds: the rest is left to it; without
        ``embed`` nothing is embedded here (the indexer's own sync, which embeds a step at a time after)."""
        index = self.index(branch)
        budget = index.embed_budget if search else None
        budget = 0.0 if not embed else budget
        with index.lock:
            if index.root == root and index.pending and index.vector_error is not None:
                index.embed_pending(budget=budget)  # the embedder failed before: catch up once it answers
            index.sync(root, phases=phases, embed_budget=budget)
            if search and index.pending and self.indexer is not None:
                self.indexer.wrote(branch)  # what the search left to embed
            if index.unsaved >= max(SAVE_AFTER, int(len(index) * SAVE_SHARE)):
                self._save(branch, index)
        if not self._recorded and index.vectors is not None and index.vectors.count:
            self.note_embedded()
        return index

    def _save(self, branch: str, index: DocIndex) -> None:
        path = self._snapshot_path(branch)
        if path is None or index.root is None:
            return
        try:
            index.save(path)
        except OSError as exc:  # a snapshot is an optimisation: never fail a search over it
            _log.warning("could not save the search index of %s to %s: %s", branch, path, exc)

    def catch_up(self, branch: str) -> bool:
        """Bring a branch's index up to date with its head, a step of embedding at a time (the background
        indexer's work); True while vectors remain to be made."""
        try:
            root = self.repo.commit(self.repo.head(branch)).tree
        except RefNotFoundError:
            return False  # deleted meanwhile
        if self.sql is not None:
            self.sql.ensure(branch, root)
            return False
        index = self.current(branch, root, embed=False)
        return index.embed_step()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the background indexer has indexed every branch written so far; False on timeout."""
        return True if self.indexer is None else self.indexer.flush(timeout)

    def close(self) -> None:
        """Stop the background threads of these indexes (the indexer, PostgreSQL's vector mover)."""
        if self.indexer is not None:
            self.indexer.close()
        if self.sql is not None:
            self.sql.settler.close()

    def save(self) -> None:
        """Save every branch index that changed since its last snapshot, or whose vector graph grew a lot
        (on close)."""
        with self._lock:
            branches = list(self._branches.items())
        for branch, index in branches:
            with index.lock:
                graph = index.vectors.unsaved if index.vectors is not None else 0
                if index.unsaved or graph >= max(SAVE_AFTER, int(len(index) * SAVE_SHARE)):
                    self._save(branch, index)

    def past(self, branch: str, root: ChunkId) -> tuple[DocIndex, Overlay | None]:
        """An index and overlay that together reflect ``root`` (any version)."""
        index = self.index(branch)
        with index.lock:
            if index.root is None:
                index.sync(self.repo.commit(self.repo.head(branch)).tree)
            if index.root == root:
                return index, None
            assert index.root is not None
            key = (index.root, root)
            with self._lock:
                cached = self._overlays.get(key)
            if cached is not None:
                return index, cached
            limit = max(OVERLAY_MIN, int(len(index) * OVERLAY_SHARE))
            changes = []
            for change in diff_trees(self.repo.nodes, index.root, root):
                changes.append(change)
                if len(changes) > limit:
                    return self._temporary(root), None
            stats = OverlayStats(index.keyword.stats)
            excluded: set[int] = set()
            docs = []
            for change in changes:
                slot = index.slot_of.get(change.key)
                if slot is not None:
                    excluded.add(slot)
                    if index.indexed[slot] and (old := index.docs[slot]) is not None:
                        stats.add(Counter(old.terms), -1)
                if change.new is not None:
                    doc = make_doc(change.key, change.new, self.fields)
                    docs.append(doc)
                    if doc.indexed:
                        stats.add(Counter(doc.terms))
            overlay = Overlay(excluded, docs, stats)
            with self._lock:
                self._overlays[key] = overlay
                while len(self._overlays) > TEMP_INDEXES * 4:
                    self._overlays.popitem(last=False)
            return index, overlay

    def _temporary(self, root: ChunkId) -> DocIndex:
        with self._lock:
            found = self._temp.get(root)
            if found is not None:
                self._temp.move_to_end(root)
                return found
        index = self._new()
        index.sync(root)
        with self._lock:
            self._temp[root] = index
            while len(self._temp) > TEMP_INDEXES:
                self._temp.popitem(last=False)
        return index

    def lag(self, branch: str) -> IndexLag:
        """How far the branch's search index is behind its head, without bringing it up to date (cheap: no
        diff, at most ``LAG_SCAN`` commits read)."""
        head = self.repo.head(branch)
        if self.sql is not None:
            found = self.sql.head_state(branch)
            if found is not None:
                root, vectors, graph = found
                return IndexLag(_commits_behind(self.repo, head, root), vectors, graph)
        with self._lock:
            index = self._branches.get(branch)
        if index is None:
            return IndexLag(_commits_behind(self.repo, head, None), 0, 0)
        graph = index.vectors.backlog if index.vectors is not None else 0
        return IndexLag(_commits_behind(self.repo, head, index.root), len(index.pending), graph)

    def rebuild(
        self,
        branch: str,
        root: ChunkId,
        progress: Callable[[int], None] | None = None,
        phases: Phases | None = None,
    ) -> DocIndex:
        """Drop the branch's index and build it again from ``root`` (``engram reindex``)."""
        index = self._new()
        index.sync(root, progress, phases)
        self.note_embedded()
        with self._lock:
            self._branches[branch] = index
        with index.lock:
            self._save(branch, index)
        return index


def _commits_behind(repo: Repository, head: ChunkId, root: ChunkId | None) -> int:
    """First-parent commits from ``head`` back to the first whose tree is ``root`` (``LAG_SCAN`` at most); every
    commit of a shorter history when none has that tree (or nothing is indexed)."""
    walked = 0
    for behind, commit in enumerate(repo.iter_first_parents(head)):
        if behind >= LAG_SCAN:
            return LAG_SCAN
        if root is not None and commit.tree == root:
            return behind
        walked = behind + 1
    return walked
