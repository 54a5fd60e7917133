"""The async facade: :class:`AsyncMemory` runs the synchronous core on worker threads and coalesces
concurrent calls made in one event-loop tick into one :meth:`Memory.batch` (so one commit), or into consecutive
ones when two of them write the same key (so every write is a version).

Every twin is written out with the sync method's signature, return value and docstring (a test compares
the two surfaces so they cannot drift); the logic lives once, in :class:`Memory`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Literal, TypeVar

from engram.embed import Embedder
from engram.embed.rerank import Reranker
from engram.embed.tokens import TokenCounter
from engram.index.corpus import CorpusStats
from engram.index.docs import Phases
from engram.maintenance import FsckReport, GcReport
from engram.objects import Commit
from engram.store import _validate, context
from engram.store.indexing import IndexLag
from engram.store.item import CommitDetails, Item, ItemChange, MergeOutcome, SearchResults, Version
from engram.store.memory import Memory
from engram.store.operations import NOT_PROVIDED, GetOp, ListNamespacesOp, Mode, Op, PutOp, SearchOp, When
from engram.store.ranking import Profile
from engram.store.versioning import Ref, Strategy

F = TypeVar("F", bound=Callable[..., Any])


def twin(sync: Callable[..., Any]) -> Callable[[F], F]:
    """Give an async twin the docstring of its sync method."""

    def mark(fn: F) -> F:
        fn.__doc__ = f"Async :meth:`Memory.{sync.__name__}`: {sync.__doc__ or ''}"
        return fn

    return mark


Outcome = tuple[list[Any], Commit | None]
Pending = list[tuple[list[Op], asyncio.Future[Outcome]]]


def written_key(op: object) -> Hashable | None:
    """The (namespace, key) an engram put writes, or None for any other op (or one too malformed to tell)."""
    if not isinstance(op, PutOp):
        return None
    try:
        found = (tuple(op.namespace), op.key)
        hash(found)
    except TypeError:  # validation rejects it when its batch runs
        return None
    return found


class Coalescer:
    """Collects the ops submitted while the previous batch runs (at least one event-loop tick's) and runs them
    as few batches as it can in a thread: a group commit.

    ``run`` executes a list of ops and returns their results and the commit their writes made (see
    :meth:`Memory.execute`); every submitter gets its own results and the commit that holds its writes. One
    batch takes the submissions in arrival order until one writes a (namespace, key) an earlier one in it
    already writes; that one starts the next batch, committed right after. So every acknowledged write is a
    version in history (a batch never keeps only the last of two writes to a key), the last submitted value
    is the final one, and writes to distinct keys still share one commit. Batches of one coalescer run one at
    a time (writers of one branch queue on it anyway), so under load each commit carries what arrived while
    the previous one was being written. ``written`` names the key an op writes (None: it writes nothing).
    """

    def __init__(
        self, run: Callable[[list[Op]], Outcome], written: Callable[[Any], Hashable | None] = written_key
    ) -> None:
        self._run = run
        self._written = written
        self._pending: Pending = []
        self._scheduled = False
        self._running = False
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, ops: Sequence[Op]) -> Awaitable[Outcome]:
        """Queue ops for the next batch; the awaitable gives their results, in order, and the commit."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outcome] = loop.create_future()
        self._pending.append((list(ops), future))
        if not self._scheduled and not self._running:
            self._scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._scheduled = False
        if self._running or not self._pending:
            return
        pending, self._pending = self._pending, []
        self._running = True
        task = asyncio.ensure_future(self._execute(pending))
        self._tasks.add(task)  # keep a reference until it is done
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._running = False
        if self._pending and not self._scheduled:  # what arrived meanwhile goes as the next batch
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _split(self, pending: Pending) -> list[Pending]:
        """Cut the submissions, in order, into batches in which no two submissions write the same key (one
        submission is never cut: its own repeated writes keep :meth:`Memory.batch`'s last-wins rule)."""
        batches: list[Pending] = []
        current: Pending = []
        seen: set[Hashable] = set()
        for entry in pending:
            keys = {key for op in entry[0] if (key := self._written(op)) is not None}
            if current and not seen.isdisjoint(keys):
                batches.append(current)
                current, seen = [], set()
            current.append(entry)
            seen |= keys
        if current:
            batches.append(current)
        return batches

    async def _execute(self, pending: Pending) -> None:
        batches = self._split(pending)
        for n, batch in enumerate(batches):
            ops = [op for group, _ in batch for op in group]
            try:
                results, commit = await asyncio.to_thread(self._run, ops)
            except Exception as exc:  # every caller of this batch sees the failure; the next batches still run
                _fail(batch, exc)
                continue
            except BaseException as exc:  # cancelled or exiting: nothing more runs
                for rest in batches[n:]:
                    _fail(rest, exc)
                return
            start = 0
            for group, future in batch:
                if not future.done():
                    future.set_result((results[start : start + len(group)], commit))
                start += len(group)


def _fail(batch: Pending, exc: BaseException) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)


def check_put(op: PutOp) -> PutOp:
    """Validate a put before it joins a shared batch, so one bad write cannot fail the others' commit."""
    writing = op.value is not None
    ns, key = _validate.namespace(op.namespace, writing=writing), _validate.key(op.key, writing=writing)
    _validate.provenance(sources=op.sources)
    if op.value is not None:
        _validate.value(op.value)
    if op.ttl is not NOT_PROVIDED and op.ttl is not None:
        _validate.ttl(op.ttl)
    if op.index is not None and op.index is not False:
        _validate.index_fields(op.index)
    return PutOp(ns, key, op.value, op.index, op.ttl, tuple(op.sources))


class AsyncMemory:
    """Async twins of :class:`Memory`: ``aput``, ``aget``, ``asearch``, ``alog``, ``amerge`` ...

    Gets, puts, deletes, searches and namespace listings issued concurrently in one tick become one batch: one
    commit for all their writes, or consecutive commits in call order when two calls write the same key (see
    :class:`Coalescer`; a write naming its own ``author`` or ``message`` makes its own commit). Every other twin
    runs its sync method in a worker thread.
    """

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self._coalescer = Coalescer(memory.execute)

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(partial(fn, *args, **kwargs))

    @twin(Memory.batch)
    async def abatch(self, ops: Iterable[Op], *, author: str | None = None, message: str | None = None) -> list[Any]:
        if author is not None or message is not None:
            return await self._run(self.memory.batch, list(ops), author=author, message=message)  # type: ignore[no-any-return]
        return (await self._coalescer.submit(list(ops)))[0]

    @twin(Memory.execute)
    async def aexecute(
        self, ops: Iterable[Op], *, author: str | None = None, message: str | None = None
    ) -> tuple[list[Any], Commit | None]:
        if author is not None or message is not None:
            return await self._run(self.memory.execute, list(ops), author=author, message=message)  # type: ignore[no-any-return]
        return await self._coalescer.submit(list(ops))

    @twin(Memory.get)
    async def aget(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        op = GetOp(_validate.namespace(namespace), _validate.key(key), refresh_ttl)
        return (await self.abatch([op]))[0]  # type: ignore[no-any-return]

    async def _write(self, op: PutOp, author: str | None, message: str | None) -> Commit:
        op = check_put(op)
        if author is not None or message is not None:  # a commit of its own: it names its author or message
            if op.value is None:
                return await self._run(self.memory.delete, op.namespace, op.key, author=author, message=message)  # type: ignore[no-any-return]
            return await self._run(  # type: ignore[no-any-return]
                self.memory.put, op.namespace, op.key, op.value, op.index, ttl=op.ttl, author=author,
                sources=op.sources, message=message,
            )  # fmt: skip
        commit = (await self._coalescer.submit([op]))[1]
        return commit if commit is not None else self.memory.head

    @twin(Memory.put)
    async def aput(
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
        return await self._write(PutOp(tuple(namespace), key, value, index, ttl, tuple(sources)), author, message)

    @twin(Memory.delete)
    async def adelete(
        self, namespace: Sequence[str], key: str, *, author: str | None = None, message: str | None = None
    ) -> Commit:
        return await self._write(PutOp(tuple(namespace), key, None), author, message)

    @twin(Memory.search)
    async def asearch(
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
        prefix = _validate.namespace(namespace_prefix, allow_empty=True)
        if at is not None:  # a past version: nothing to share a batch with
            return await self._run(  # type: ignore[no-any-return]
                self.memory.search, prefix, query, filter=filter, limit=limit, offset=offset, mode=mode,
                profile=profile, explain=explain, min_score=min_score, at=at, stats=stats, rerank=rerank, when=when,
                reference_time=reference_time,
            )  # fmt: skip
        op = SearchOp(prefix, query, filter, limit, offset, mode, profile, explain, min_score, refresh_ttl, stats,
                      rerank=rerank, when=when, reference_time=reference_time)  # fmt: skip
        return (await self.abatch([op]))[0]  # type: ignore[no-any-return]

    @twin(Memory.list_namespaces)
    async def alist_namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        op = ListNamespacesOp(
            _validate.namespace_pattern(prefix), _validate.namespace_pattern(suffix, "suffix"), max_depth, limit, offset
        )
        return (await self.abatch([op]))[0]  # type: ignore[no-any-return]

    @twin(Memory.count)
    async def acount(self, namespace_prefix: Sequence[str] = ()) -> int:
        return await self._run(self.memory.count, namespace_prefix)  # type: ignore[no-any-return]

    @twin(Memory.update_index)
    async def aupdate_index(self, phases: Phases | None = None) -> None:
        await self._run(self.memory.update_index, phases)

    @twin(Memory.flush_index)
    async def aflush_index(self, timeout: float | None = None) -> bool:
        return await self._run(self.memory.flush_index, timeout)  # type: ignore[no-any-return]

    @twin(Memory.index_lag)
    async def aindex_lag(self, branch: str | None = None) -> IndexLag:
        return await self._run(self.memory.index_lag, branch)  # type: ignore[no-any-return]

    @twin(Memory.index_lags)
    async def aindex_lags(self) -> dict[str, IndexLag]:
        return await self._run(self.memory.index_lags)  # type: ignore[no-any-return]

    @twin(Memory.context)
    async def acontext(
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
        return await self._run(  # type: ignore[no-any-return]
            self.memory.context, namespace_prefix, query, budget_tokens=budget_tokens, filter=filter,
            candidates=candidates, mode=mode, tokenizer=tokenizer, at=at, when=when, reference_time=reference_time,
        )  # fmt: skip

    @twin(Memory.corpus_stats)
    async def acorpus_stats(self, query: str) -> CorpusStats:
        return await self._run(self.memory.corpus_stats, query)  # type: ignore[no-any-return]

    @twin(Memory.reindex)
    async def areindex(
        self,
        progress: Callable[[int], None] | None = None,
        *,
        embedder: Embedder | str | None = None,
        phases: Phases | None = None,
    ) -> int:
        return await self._run(partial(self.memory.reindex, progress, embedder=embedder, phases=phases))  # type: ignore[no-any-return]

    @twin(Memory.sweep_expired)
    async def asweep_expired(self) -> int:
        return await self._run(self.memory.sweep_expired)  # type: ignore[no-any-return]

    @twin(Memory.resolve)
    async def aresolve(self, ref: Ref = "HEAD") -> Commit:
        return await self._run(self.memory.resolve, ref)  # type: ignore[no-any-return]

    @twin(Memory.checkout)
    async def acheckout(self, branch: str) -> None:
        await self._run(self.memory.checkout, branch)

    @twin(Memory.log)
    async def alog(
        self,
        ref: Ref = "HEAD",
        *,
        namespace: Sequence[str] | None = None,
        key: str | None = None,
        limit: int | None = None,
    ) -> list[Commit]:
        return await self._run(self.memory.log, ref, namespace=namespace, key=key, limit=limit)  # type: ignore[no-any-return]

    @twin(Memory.show)
    async def ashow(self, ref: Ref = "HEAD") -> CommitDetails:
        return await self._run(self.memory.show, ref)  # type: ignore[no-any-return]

    @twin(Memory.diff)
    async def adiff(self, old: Ref, new: Ref = "HEAD", *, namespace: Sequence[str] = ()) -> list[ItemChange]:
        return await self._run(self.memory.diff, old, new, namespace=namespace)  # type: ignore[no-any-return]

    @twin(Memory.diff_sides)
    async def adiff_sides(self, old: Ref, new: Ref = "HEAD") -> tuple[Commit | None, Commit]:
        return await self._run(self.memory.diff_sides, old, new)  # type: ignore[no-any-return]

    @twin(Memory.history)
    async def ahistory(self, namespace: Sequence[str], key: str, ref: Ref = "HEAD") -> list[Version]:
        return await self._run(self.memory.history, namespace, key, ref)  # type: ignore[no-any-return]

    @twin(Memory.branches)
    async def abranches(self) -> dict[str, str]:
        return await self._run(self.memory.branches)  # type: ignore[no-any-return]

    @twin(Memory.create_branch)
    async def acreate_branch(self, name: str, at: Ref = "HEAD") -> None:
        await self._run(self.memory.create_branch, name, at)

    @twin(Memory.delete_branch)
    async def adelete_branch(self, name: str) -> None:
        await self._run(self.memory.delete_branch, name)

    @twin(Memory.tags)
    async def atags(self) -> dict[str, str]:
        return await self._run(self.memory.tags)  # type: ignore[no-any-return]

    @twin(Memory.tag)
    async def atag(self, name: str, at: Ref = "HEAD") -> None:
        await self._run(self.memory.tag, name, at)

    @twin(Memory.delete_tag)
    async def adelete_tag(self, name: str) -> None:
        await self._run(self.memory.delete_tag, name)

    @twin(Memory.reflog)
    async def areflog(self, branch: str | None = None, limit: int | None = 50) -> list[dict[str, Any]]:
        return await self._run(self.memory.reflog, branch, limit)  # type: ignore[no-any-return]

    @twin(Memory.merge)
    async def amerge(
        self, source: Ref, *, strategy: Strategy = "fail", message: str | None = None, author: str | None = None
    ) -> Commit:
        return await self._run(self.memory.merge, source, strategy=strategy, message=message, author=author)  # type: ignore[no-any-return]

    @twin(Memory.merge_outcome)
    async def amerge_outcome(
        self, source: Ref, *, strategy: Strategy = "fail", message: str | None = None, author: str | None = None
    ) -> MergeOutcome:
        return await self._run(self.memory.merge_outcome, source, strategy=strategy, message=message, author=author)  # type: ignore[no-any-return]

    @twin(Memory.revert)
    async def arevert(
        self, ref: Ref, *, strategy: Strategy = "fail", author: str | None = None, message: str | None = None
    ) -> Commit:
        return await self._run(self.memory.revert, ref, strategy=strategy, author=author, message=message)  # type: ignore[no-any-return]

    @twin(Memory.reset)
    async def areset(self, ref: Ref, *, author: str | None = None, message: str | None = None) -> None:
        await self._run(self.memory.reset, ref, author=author, message=message)

    @twin(Memory.gc)
    async def agc(
        self,
        keep_reflog: timedelta | None = None,
        *,
        grace: timedelta = timedelta(minutes=10),
        progress: Callable[[int], None] | None = None,
    ) -> GcReport:
        return await self._run(self.memory.gc, keep_reflog, grace=grace, progress=progress)  # type: ignore[no-any-return]

    @twin(Memory.fsck)
    async def afsck(self, progress: Callable[[int], None] | None = None) -> FsckReport:
        return await self._run(self.memory.fsck, progress)  # type: ignore[no-any-return]

    @twin(Memory.close)
    async def aclose(self) -> None:
        await self._run(self.memory.close)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


#: Memory's methods without an async twin, and why (the surface test checks this list).
SYNC_ONLY = {
    "at": "returns a View at once (no I/O); its reads are synchronous",
    "handle": "returns another handle at once (no I/O)",
    "transaction": "a synchronous context manager that buffers writes; commit it in a thread if needed",
    "iter_diff": "an iterator (use adiff)",
    "iter_items": "an iterator",
    "check_writable": "no I/O",
    "lookup": "internal read of one record",
    "make_record": "internal, no I/O",
    "start_ttl_sweeper": "starts a thread (no I/O)",
    "stop_ttl_sweeper": "stops a thread",
}
