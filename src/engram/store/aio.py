"""The async facade: :class:`AsyncMemory` runs the synchronous core on worker threads and coalesces
concurrent calls made in one event-loop tick into one :meth:`Memory.batch` (so one commit)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from engram.objects import Commit
from engram.store import _validate
from engram.store.item import Item, SearchResults
from engram.store.memory import Memory
from engram.store.ops import NOT_PROVIDED, GetOp, ListNamespacesOp, Mode, Op, PutOp, SearchOp
from engram.store.ranking import Profile

Outcome = tuple[list[Any], Commit | None]


class Coalescer:
    """Collects the ops submitted during one event-loop tick and runs them as one batch in a thread.

    ``run`` executes a list of ops and returns their results and the commit their writes made (see
    :meth:`Memory.execute`); every submitter gets its own results and that shared commit.
    """

    def __init__(self, run: Callable[[list[Op]], Outcome]) -> None:
        self._run = run
        self._pending: list[tuple[list[Op], asyncio.Future[Outcome]]] = []
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, ops: Sequence[Op]) -> Awaitable[Outcome]:
        """Queue ops for this tick's batch; the awaitable gives their results, in order, and the commit."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outcome] = loop.create_future()
        self._pending.append((list(ops), future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        pending, self._pending, self._scheduled = self._pending, [], False
        task = asyncio.ensure_future(self._execute(pending))
        self._tasks.add(task)  # keep a reference until it is done
        task.add_done_callback(self._tasks.discard)

    async def _execute(self, pending: list[tuple[list[Op], asyncio.Future[Outcome]]]) -> None:
        ops = [op for group, _ in pending for op in group]
        try:
            results, commit = await asyncio.to_thread(self._run, ops)
        except BaseException as exc:  # every caller of this batch sees the failure
            for _, future in pending:
                if not future.done():
                    future.set_exception(exc)
            return
        start = 0
        for group, future in pending:
            if not future.done():
                future.set_result((results[start : start + len(group)], commit))
            start += len(group)


def check_put(op: PutOp) -> PutOp:
    """Validate a put before it joins a shared batch, so one bad write cannot fail the others' commit."""
    ns, key = _validate.namespace(op.namespace), _validate.key(op.key)
    _validate.provenance(sources=op.sources)
    if op.value is not None:
        _validate.value(op.value)
    if op.ttl is not NOT_PROVIDED and op.ttl is not None:
        _validate.ttl(op.ttl)
    if op.index is not None and op.index is not False:
        _validate.index_fields(op.index)
    return PutOp(ns, key, op.value, op.index, op.ttl, tuple(op.sources))


class AsyncMemory:
    """Async twins of :class:`Memory` (``aput``, ``aget``, ``asearch`` ...).

    Reads, writes and searches issued concurrently in one tick become one batch: one commit for all
    their writes. Every other method of :class:`Memory` is available with an ``a`` prefix and runs in
    a worker thread (``await amem.alog()``, ``await amem.amerge("fix")``).
    """

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self._coalescer = Coalescer(memory.execute)

    async def abatch(self, ops: Iterable[Op]) -> list[Any]:
        """Run ops as part of this tick's batch."""
        return (await self._coalescer.submit(list(ops)))[0]

    async def aget(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        """Async :meth:`Memory.get`."""
        op = GetOp(_validate.namespace(namespace), _validate.key(key), refresh_ttl)
        return (await self.abatch([op]))[0]  # type: ignore[no-any-return]

    async def _write(self, op: PutOp, author: str | None, message: str | None) -> Commit:
        op = check_put(op)
        if author is not None or message is not None:  # a commit of its own: it names its author or message
            if op.value is None:
                return await asyncio.to_thread(self.memory.delete, op.namespace, op.key, author=author, message=message)
            return await asyncio.to_thread(
                self.memory.put, op.namespace, op.key, op.value, op.index, ttl=op.ttl, author=author,
                sources=op.sources, message=message,
            )  # fmt: skip
        commit = (await self._coalescer.submit([op]))[1]
        return commit if commit is not None else self.memory.head

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
        """Async :meth:`Memory.put`; concurrent puts in one tick share one commit (returned to each), unless
        a put names its own ``author`` or ``message``."""
        return await self._write(PutOp(tuple(namespace), key, value, index, ttl, tuple(sources)), author, message)

    async def adelete(
        self, namespace: Sequence[str], key: str, *, author: str | None = None, message: str | None = None
    ) -> Commit:
        """Async :meth:`Memory.delete`; concurrent deletes and puts in one tick share one commit."""
        return await self._write(PutOp(tuple(namespace), key, None), author, message)

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
    ) -> SearchResults:
        """Async :meth:`Memory.search`."""
        op = SearchOp(
            _validate.namespace(namespace_prefix, allow_empty=True), query, filter, limit, offset, mode, profile,
            explain, min_score, refresh_ttl,
        )  # fmt: skip
        return (await self.abatch([op]))[0]  # type: ignore[no-any-return]

    async def alist_namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """Async :meth:`Memory.list_namespaces`."""
        op = ListNamespacesOp(
            None if prefix is None else tuple(prefix),
            None if suffix is None else tuple(suffix),
            max_depth,
            limit,
            offset,
        )
        return (await self.abatch([op]))[0]  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name.startswith("a") and hasattr(Memory, name[1:]) and callable(getattr(Memory, name[1:])):
            method = getattr(self.memory, name[1:])

            async def twin(*args: Any, **kwargs: Any) -> Any:
                return await asyncio.to_thread(method, *args, **kwargs)

            twin.__doc__ = f"Async twin of Memory.{name[1:]} (runs in a worker thread)."
            return twin
        raise AttributeError(f"AsyncMemory has no attribute {name!r}")

    async def aclose(self) -> None:
        """Close the store."""
        await asyncio.to_thread(self.memory.close)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
