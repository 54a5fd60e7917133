"""The memory handle: LangGraph's store operations, TTL, transactions, and (from a mixin) versioning.

Every write call is one commit on the handle's branch; :meth:`Memory.batch` is the one seam the
convenience methods (and the LangGraph adapter) are built on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from types import TracebackType
from typing import Any, Literal

from engram import codec, observe
from engram.backends.base import now_ms
from engram.embed import Embedder, embedder_from_spec
from engram.embed.rerank import Reranker
from engram.embed.tokens import TokenCounter
from engram.errors import InvalidInputError
from engram.hashing import ChunkId
from engram.index.corpus import CorpusStats
from engram.index.docs import Phases
from engram.objects import Commit, Record, decode_record, encode_record
from engram.repo import Repository
from engram.store import _validate, context
from engram.store.indexing import IndexLag, IndexPool
from engram.store.item import Item, SearchResults
from engram.store.operations import (
    NOT_PROVIDED,
    GetOp,
    ListNamespacesOp,
    Mode,
    Op,
    PutOp,
    SearchOp,
    TTLConfig,
    When,
)  # fmt: skip
from engram.store.ranking import Profile
from engram.store.reader import Reader
from engram.store.versioning import Ref, Versioned, item_conflicts
from engram.tree import get

MINUTE_MS = 60_000
#: By default a read refreshes an item's expiry only once this share of its TTL has passed: a refresh is a
#: commit, and this keeps history quiet (see ``Memory.refresh_share``).
REFRESH_SHARE = 0.1


class _AtRoot(Reader):
    """Reads at a fixed root (the state a batch's reads see)."""

    def __init__(self, memory: Memory, root: ChunkId) -> None:
        self.repo = memory.repo
        self.system = memory.system
        self._memory = memory
        self._fixed = root

    def _root(self) -> ChunkId:
        return self._fixed

    def _searched(self) -> tuple[IndexPool, str, bool]:
        return self._memory.pool, self._memory.branch, False


class Memory(Reader, Versioned):
    """A handle on a memory store, reading and writing one branch (``main`` by default).

    Every write is one atomic commit; ``with mem.transaction(...)`` groups many writes into one.
    Two handles on the same store keep their own current branch.
    """

    supports_ttl = True
    #: The share of an item's TTL that must have passed before a read refreshes its expiry (each refresh is a
    #: commit). 0 refreshes on every read, exactly as LangGraph's stores do (the LangGraph adapter's choice).
    refresh_share: float = REFRESH_SHARE

    def __init__(
        self,
        repo: Repository,
        *,
        branch: str = "main",
        author: str = "engram",
        pool: IndexPool | None = None,
        ttl: TTLConfig | None = None,
        read_only: bool = False,
        system: bool = True,
    ) -> None:
        self.repo = repo
        #: A read-only handle never writes: writes raise :class:`ReadOnlyError` and reads refresh no TTL.
        self.read_only = read_only
        #: False: the system namespaces (``_...``) are hidden and refused (see :mod:`engram.store.system`).
        self.system = system
        #: Threads inside ``with self.transaction()``: a plain write there would silently be its own commit.
        self._in_transaction: set[int] = set()
        self.author = author
        repo.head(branch)
        self._branch = branch
        self.pool = pool if pool is not None else IndexPool.for_repository(repo)
        self.ttl_config: TTLConfig = dict(ttl or {})  # type: ignore[assignment]
        self._sweeper: tuple[threading.Thread, threading.Event] | None = None

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

    def _searched(self) -> tuple[IndexPool, str, bool]:
        return self.pool, self._branch, False

    def flush_index(self, timeout: float | None = None) -> bool:
        """Wait until the background indexer has indexed every write made through this store so far (items and
        their vectors), e.g. before measuring or in a test; True when done, False if ``timeout`` seconds passed.
        Searches never need it: they apply the latest writes themselves and report vectors still missing as
        ``lag``."""
        return self.pool.flush(timeout)

    def update_index(self, phases: Phases | None = None) -> None:
        """Bring this branch's search index up to date with its head now, embedding what changed, so the next
        search does not pay for it (a server does this in the background after writes; the CLI's import
        does it before returning). Cheap when nothing changed. ``phases`` gets ``(phase, done, total)`` as
        items are indexed (``"index"``) and their vectors found or embedded (``"embed"``)."""
        root = self._root()
        if self.pool.sql is not None and self.pool.sql.ensure(self._branch, root):
            return
        self.pool.current(self._branch, root, phases)

    def index_lag(self, branch: str | None = None) -> IndexLag:
        """How far the search index of ``branch`` (this handle's by default) is behind its head: commits not
        applied yet, items waiting for vectors, vectors waiting for the ANN graph (see :class:`IndexLag`).
        Cheap, and it changes nothing: metrics and health checks read it."""
        return self.pool.lag(branch or self._branch)

    def index_lags(self) -> dict[str, IndexLag]:
        """:meth:`index_lag` of every branch whose index is loaded in this process (and this handle's branch when
        search runs in PostgreSQL). An index not loaded yet is left out: it is built at the next search, and
        reporting it as lagging would alert on every idle tenant (what ``/readyz`` and ``/metrics`` show)."""
        sql = self.pool.sql
        built = sql is not None and sql.head_state(self._branch) is not None  # in PostgreSQL: built by a search
        branches = set(self.pool.synced()) | ({self._branch} if built else set())
        heads = self.repo.branches()
        return {branch: self.index_lag(branch) for branch in sorted(branches) if branch in heads}

    def reindex(
        self,
        progress: Callable[[int], None] | None = None,
        *,
        embedder: Embedder | str | None = None,
        phases: Phases | None = None,
    ) -> int:
        """Rebuild this branch's search index from scratch, re-embedding what the vector cache lacks; return the
        number of items indexed. ``progress`` gets the number of items read since its last call; ``phases``
        gets ``(phase, done, total)`` through reading (``"index"``) and embedding (``"embed"``). ``embedder``
        switches the store to another embedder (recorded as the store's from now on) and re-embeds."""
        if embedder is not None:
            self.pool.use_embedder(embedder_from_spec(embedder) if isinstance(embedder, str) else embedder)
        if self.pool.sql is not None:
            return self.pool.sql.rebuild(self._branch, self._root(), progress)
        return len(self.pool.rebuild(self._branch, self._root(), progress, phases))

    def handle(
        self,
        branch: str | None = None,
        *,
        author: str | None = None,
        read_only: bool | None = None,
        system: bool | None = None,
    ) -> Memory:
        """Another handle on the same store (sharing its indexes), e.g. on another branch, as another author,
        read-only, or without the system namespaces (``system=False``: what a caller without the ``system``
        scope gets; a service reaches its own namespaces with ``system=True``). None keeps this handle's setting."""
        return Memory(
            self.repo,
            branch=branch or self._branch,
            author=author or self.author,
            pool=self.pool,
            ttl=self.ttl_config,
            read_only=self.read_only if read_only is None else read_only,
            system=self.system if system is None else system,
        )

    def close(self) -> None:
        """Stop the TTL sweeper, save changed search indexes and close the underlying stores."""
        self.stop_ttl_sweeper()
        self.pool.close()
        self.pool.save()
        self.repo.chunks.close()
        self.repo.refs.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        """The item at (namespace, key), or None; reading refreshes its TTL (see ``refresh_ttl``)."""
        return self.batch([GetOp(_validate.namespace(namespace), key, refresh_ttl)])[0]  # type: ignore[no-any-return]

    def search(
        self,
        namespace_prefix: Sequence[str] = (),
        /,
        query: str | None = None,
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        mode: Mode | None = None,
        profile: str | Profile = "similarity",
        explain: bool = False,
        min_score: float | None = None,
        refresh_ttl: bool | None = None,
        at: Ref | None = None,
        stats: CorpusStats | None = None,
        rerank: Reranker | str | None = None,
        when: When = None,
        reference_time: datetime | str | int | None = None,
    ) -> SearchResults:
        """Search this branch's head, or the version ``at`` names (see :meth:`Reader.search`)."""
        if at is not None:
            started = time.perf_counter()
            past = self.at(at).search(
                namespace_prefix, query, filter=filter, limit=limit, offset=offset, mode=mode, profile=profile,
                explain=explain, min_score=min_score, stats=stats, rerank=rerank, when=when,
                reference_time=reference_time,
            )  # fmt: skip
            observe.search_done(past.mode, time.perf_counter() - started)  # metrics
            return past
        op = SearchOp(
            namespace_prefix,  # type: ignore[arg-type]  # checked once, where the batch runs it
            query,
            filter,
            limit,
            offset,
            mode,
            profile,
            explain,
            min_score,
            refresh_ttl,
            stats,
            rerank=rerank,
            when=when,
            reference_time=reference_time,
        )
        return self.batch([op])[0]  # type: ignore[no-any-return]

    def context(
        self,
        namespace_prefix: Sequence[str],
        query: str,
        *,
        budget_tokens: int = context.BUDGET_TOKENS,
        filter: Mapping[str, Any] | None = None,
        candidates: int = context.CANDIDATES,
        mode: Mode | None = None,
        tokenizer: str | TokenCounter | None = None,
        at: Ref | None = None,
        when: When = None,
        reference_time: datetime | str | int | None = None,
    ) -> context.Context:
        """Prompt text for ``query`` at this branch's head, or as the version ``at`` names knew it (see
        :meth:`Reader.context`)."""
        reader: Reader = self if at is None else self.at(at)
        return Reader.context(reader, namespace_prefix, query, budget_tokens=budget_tokens, filter=filter,
                              candidates=candidates, mode=mode, tokenizer=tokenizer, when=when,
                              reference_time=reference_time)  # fmt: skip

    def corpus_stats(self, query: str) -> CorpusStats:
        """The keyword statistics a search of ``query`` at this branch's head scores with (see
        :meth:`Reader.corpus_stats`)."""
        return _AtRoot(self, self._root()).corpus_stats(query)

    def put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | Sequence[str] | None = None,
        *,
        ttl: float | None = NOT_PROVIDED,
        author: str | None = None,
        sources: Sequence[str] = (),
        message: str | None = None,
    ) -> Commit:
        """Store (or replace) an item as one commit; return the commit.

        ``index=False`` keeps the item out of query matches (still gettable and listed); a list of
        field paths chooses what is searchable. ``ttl`` is in minutes (None: never expires).
        """
        op = PutOp(_validate.namespace(namespace), key, value, index, ttl, tuple(sources))
        return self._write([op], author, message)

    def delete(
        self, namespace: Sequence[str], key: str, *, author: str | None = None, message: str | None = None
    ) -> Commit:
        """Delete an item as one commit (deleting a missing item changes nothing)."""
        return self._write([PutOp(_validate.namespace(namespace), key, None)], author, message)

    def batch(self, ops: Iterable[Op], *, author: str | None = None, message: str | None = None) -> list[Any]:
        """Run operations with LangGraph's semantics; results in input order.

        Reads see the state before the batch; writes are de-duplicated by (namespace, key), the last
        one winning, and committed together as one commit (with any TTL refreshes the reads caused).
        """
        return self.execute(ops, author=author, message=message)[0]

    def execute(
        self, ops: Iterable[Op], *, author: str | None = None, message: str | None = None
    ) -> tuple[list[Any], Commit | None]:
        """:meth:`batch`, also returning the commit its writes made (None when it wrote nothing)."""
        ops = list(ops)
        _validate.provenance(author, message, (s for op in ops if isinstance(op, PutOp) for s in op.sources))
        root = self._root()
        snapshot = _AtRoot(self, root)
        now = now_ms()
        results: list[Any] = [None] * len(ops)
        writes: dict[bytes, PutOp] = {}
        touched: dict[bytes, Record] = {}
        for i, op in enumerate(ops):
            if isinstance(op, PutOp):
                writing = op.value is not None
                ns = _validate.namespace(op.namespace, writing=writing)
                self._guard(ns, "write")
                writes[codec.encode_key(ns, _validate.key(op.key, writing=writing))] = op
            elif isinstance(op, GetOp):
                ns, k = _validate.namespace(op.namespace), _validate.key(op.key)
                found = snapshot.lookup(ns, k, now)
                if found is not None:
                    raw, record = found
                    results[i] = Item.from_record(ns, k, record)
                    if self._refreshes(op.refresh_ttl):
                        touched[raw] = record
            elif isinstance(op, SearchOp):
                started = time.perf_counter()
                prefix = _validate.namespace(op.namespace_prefix, allow_empty=True)  # checked here, once
                results[i] = found_items = snapshot._run_search(
                    op if prefix == op.namespace_prefix else replace(op, namespace_prefix=prefix)
                )
                observe.search_done(found_items.mode, time.perf_counter() - started)  # metrics
                if self._refreshes(op.refresh_ttl):
                    for item in found_items:
                        if item.expires_at is None:  # no TTL to refresh: skip the tree read
                            continue
                        raw = codec.encode_key(item.namespace, item.key)
                        data = get(self.repo.nodes, root, raw)
                        if data is not None:
                            touched[raw] = decode_record(data)
            elif isinstance(op, ListNamespacesOp):
                results[i] = snapshot.list_namespaces(
                    prefix=op.prefix, suffix=op.suffix, max_depth=op.max_depth, limit=op.limit, offset=op.offset
                )
            else:
                raise InvalidInputError(f"unknown operation {op!r}")
        if writes:
            self.check_writable()
            self._outside_transaction()
        edits = self._refresh_edits(touched, now)
        if writes:
            edits.update(self._put_edits(root, writes, author or self.author, now))
        if not edits:
            return results, None
        text = message or _describe(writes) or "ttl: refresh on read"
        return results, self.repo.commit_edits(self._branch, edits, author=author or self.author, message=text)

    def _write(self, ops: list[PutOp], author: str | None, message: str | None) -> Commit:
        self.check_writable()
        self._outside_transaction()
        _validate.provenance(author, message, (source for op in ops for source in op.sources))
        who = author or self.author
        writes = {
            codec.encode_key(
                _validate.namespace(op.namespace, writing=op.value is not None),
                _validate.key(op.key, writing=op.value is not None),
            ): op
            for op in ops
        }
        for op in ops:
            self._guard(op.namespace, "write")
        for op in ops:
            if op.value is not None:
                _validate.value(op.value)
        now = now_ms()
        return self.repo.commit_edits(
            self._branch,
            lambda root: self._put_edits(root, writes, who, now),
            author=who,
            message=message or _describe(writes),
        )

    def _put_edits(
        self, root: ChunkId, writes: Mapping[bytes, PutOp], author: str, now: int
    ) -> dict[bytes, bytes | None]:
        edits: dict[bytes, bytes | None] = {}
        for raw, op in writes.items():
            if op.value is None:
                edits[raw] = None
                continue
            old = get(self.repo.nodes, root, raw)
            if old is None:
                edits[raw] = encode_record(self.make_record(op, now, now, author))
            else:
                previous = decode_record(old)
                stamp = _later_than(previous, now)
                edits[raw] = encode_record(self.make_record(op, previous.created_at, stamp, author))
        return edits

    def make_record(self, op: PutOp, created: int, now: int, author: str) -> Record:
        """The record a put stores: value, timestamps, TTL, index settings and provenance."""
        value = dict(_validate.value(op.value))
        ttl = self.ttl_config.get("default_ttl") if op.ttl is NOT_PROVIDED else op.ttl
        extra: dict[str, Any] = {}
        if op.index is not None:
            extra["index"] = False if op.index is False else _validate.index_fields(op.index)
        if ttl is not None:
            extra["ttl"] = _validate.ttl(ttl)
        expires = None if ttl is None else now + int(ttl * MINUTE_MS)
        return Record(value, created, now, expires, author, tuple(op.sources), extra)

    def _refreshes(self, asked: bool | None) -> bool:
        if self.read_only:
            return False
        return asked if asked is not None else self.ttl_config.get("refresh_on_read", True)

    def _refresh_edits(self, touched: Mapping[bytes, Record], now: int) -> dict[bytes, bytes | None]:
        edits: dict[bytes, bytes | None] = {}
        for raw, record in touched.items():
            minutes = record.extra.get("ttl")
            if minutes is None or record.expires_at is None:
                continue
            target = now + int(minutes * MINUTE_MS)
            if target > record.expires_at and target - record.expires_at >= self.refresh_share * minutes * MINUTE_MS:
                refreshed = Record(record.value, record.created_at, record.updated_at, target, record.author,
                                   record.sources, record.extra)  # fmt: skip
                edits[raw] = encode_record(refreshed)
        return edits

    def sweep_expired(self) -> int:
        """Delete every expired item in one commit; return how many."""
        index = self.pool.current(self._branch, self._root())
        now = now_ms()
        with index.lock:
            size = index.size
            expired = [index.docs[s] for s in (index.expires[:size] <= now).nonzero()[0].tolist() if index.alive[s]]
        keys = {doc.key: None for doc in expired if doc is not None}
        if keys:
            self.repo.commit_edits(self._branch, keys, author=self.author, message=f"ttl: sweep {len(keys)} expired")
        return len(keys)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> threading.Event:
        """Sweep expired items every interval (default: the TTL config's, else 5 minutes) in a thread."""
        if self._sweeper is not None and self._sweeper[0].is_alive():
            return self._sweeper[1]
        minutes = sweep_interval_minutes or self.ttl_config.get("sweep_interval_minutes") or 5
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(minutes * 60):
                self.sweep_expired()

        thread = threading.Thread(target=loop, name="engram-ttl-sweeper", daemon=True)
        thread.start()
        self._sweeper = (thread, stop)
        return stop

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True when it is not running any more."""
        if self._sweeper is None:
            return True
        thread, stop = self._sweeper
        stop.set()
        thread.join(timeout)
        self._sweeper = None
        return not thread.is_alive()

    def _outside_transaction(self) -> None:
        if threading.get_ident() in self._in_transaction:
            raise InvalidInputError(
                "this handle has a transaction open in this thread: write through it (tx.put, tx.delete) so the "
                "write joins its commit, or use another handle (mem.handle()) for a separate commit"
            )

    def transaction(
        self, message: str = "transaction", *, author: str | None = None, metadata: dict[str, Any] | None = None
    ) -> Transaction:
        """Group writes into one commit: ``with mem.transaction("import") as tx: tx.put(...)``."""
        self.check_writable()
        _validate.provenance(author, message, (metadata or {}).get("sources", ()))
        return Transaction(self, message, author or self.author, metadata)


def _later_than(previous: Record, now: int) -> int:
    """The time a new version of an item is stamped with: ``now``, or 1 ms after the previous version's
    ``updated_at`` when that is not earlier (two writes in one millisecond, or a clock that stepped back), so
    ``updated_at`` strictly increases across an item's versions."""
    return max(now, previous.updated_at + 1)


def _describe(writes: Mapping[bytes, PutOp]) -> str:
    if len(writes) == 1:
        op = next(iter(writes.values()))
        verb = "delete" if op.value is None else "put"
        return f"{verb} {'/'.join(op.namespace)}/{op.key}"
    if not writes:
        return ""
    deletes = sum(1 for op in writes.values() if op.value is None)
    return f"batch: {len(writes) - deletes} put(s), {deletes} delete(s)"


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

    def put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | Sequence[str] | None = None,
        *,
        ttl: float | None = NOT_PROVIDED,
        sources: Sequence[str] = (),
    ) -> None:
        """Buffer a put."""
        ns, k = _validate.namespace(namespace, writing=True), _validate.key(key, writing=True)
        self.memory._guard(ns, "write")
        _validate.provenance(sources=sources)
        raw = codec.encode_key(ns, k)
        buffered = self.edits.get(raw)
        base = get(self.memory.repo.nodes, self.base.tree, raw) if buffered is None else buffered
        now = now_ms()
        previous = None if base is None else decode_record(base)
        created = now if previous is None else previous.created_at
        stamp = now if previous is None else _later_than(previous, now)
        op = PutOp(ns, k, value, index, ttl, tuple(sources))
        self.edits[raw] = encode_record(self.memory.make_record(op, created, stamp, self.author))

    def delete(self, namespace: Sequence[str], key: str) -> None:
        """Buffer a delete."""
        self.memory._guard(namespace, "write")
        self.edits[codec.encode_key(_validate.namespace(namespace), _validate.key(key))] = None

    def get(self, namespace: Sequence[str], key: str) -> Item | None:
        """Read through the buffered writes."""
        ns, k = _validate.namespace(namespace), _validate.key(key)
        self.memory._guard(ns)
        raw = codec.encode_key(ns, k)
        data = self.edits[raw] if raw in self.edits else get(self.memory.repo.nodes, self.base.tree, raw)
        return None if data is None else Item.from_record(ns, k, decode_record(data))

    def __enter__(self) -> Transaction:
        self.memory._in_transaction.add(threading.get_ident())
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.memory._in_transaction.discard(threading.get_ident())
        if kind is None and self.edits:
            with item_conflicts():
                self.commit = self._commit()

    def _commit(self) -> Commit:
        return self.memory.repo.commit_edits(
            self.memory.branch,
            self.edits,
            author=self.author,
            message=self.message,
            metadata=self.metadata,
            base=self.base.id,
            strict=True,
        )
