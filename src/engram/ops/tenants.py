"""A bounded pool of tenant stores: each tenant's :class:`Memory`, opened on first use, idle ones closed
least recently used first, with one TTL sweeper and one background indexer for all of them; beside each store
its :class:`~engram.ops.services.TenantServices` (one channels hub, one memory writer), closed with it.

A server with API keys serves one repository per tenant. Keeping every tenant it ever saw open would
keep a store, a sweeper thread and database connections per tenant for good; the pool keeps at most
``max_open`` of them (more only while requests hold them) and shares its threads across tenants.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from engram import observe
from engram.embed import Embedder, embedder_from_spec
from engram.errors import EngramError, NotFoundError
from engram.ops.services import TenantServices, WriterFactory, default_writer
from engram.store import Memory, tenant_url
from engram.store import open as open_store

_log = logging.getLogger(__name__)

#: How many tenant stores stay open when idle, by default.
MAX_OPEN = 64


@dataclass
class _Entry:
    memory: Memory
    leases: int = 0
    services: TenantServices | None = None


class TenantRouter(Protocol):
    """Where tenants live when they are spread over shards (:class:`engram.ops.shards.ShardRouter`)."""

    def open(self, tenant: str, **options: Any) -> Memory:
        """Open the tenant's store on the shard it lives on."""

    def current(self, tenant: str, memory: Memory, *, refresh: bool = True) -> bool:
        """False once the tenant lives elsewhere than where ``memory`` was opened (it moved)."""


def store_opener(
    store: str | None,
    *,
    local: bool,
    branch: str = "main",
    embedder: Embedder | str | None = "minilm",
    author: str = "api",
    router: TenantRouter | None = None,
    **options: Any,
) -> Callable[[str], Memory]:
    """A function opening a tenant's store for a :class:`TenantPool`: the base store ``store`` itself when
    ``local`` (a server without API keys has one tenant), else the tenant's own repository derived from it
    (:func:`engram.store.tenant_url`). One embedder (loaded on first use) serves every tenant; ``options``
    go to :func:`engram.open` (``redis``, ``vector_cache`` ...). With a ``router`` (sharding) each
    tenant's repository is opened on its shard instead."""
    lock = threading.Lock()
    loaded: list[Embedder | None] = []

    def chosen() -> Embedder | str | None:
        if not isinstance(embedder, str) or embedder == "auto":
            return embedder  # "auto": each store's recorded embedder (engram.open shares one per spec)
        with lock:
            if not loaded:
                loaded.append(embedder_from_spec(embedder))
            return loaded[0]

    # the pool's one indexer thread keeps every open tenant's index current (not a thread per tenant)
    options.setdefault("background_index", False)

    def open_tenant(tenant: str) -> Memory:
        if router is not None and not local:
            return router.open(tenant, branch="main", author=author, embedder=chosen(), **options)
        url = store if local else tenant_url(store, tenant)
        return open_store(url, branch=branch if local else "main", author=author, embedder=chosen(), **options)

    return open_tenant


class TenantPool:
    """Tenant name -> its open :class:`Memory`, at most ``max_open`` idle ones kept (LRU).

    Args:
        opener: opens the store of a tenant (called outside the pool's lock).
        max_open: how many stores stay open; a store in use by a request is never closed, so the pool can
            briefly hold more.
        sweep_minutes: delete expired items of every open store this often (None: never).
        index_delay: after a write, bring the written branch's search index up to date this many seconds
            later in a background thread, so the next search does not pay for it (None: at the next search).
        router: with sharding, where tenants live: a tenant's store is reopened once the tenant moved
            to another shard, and the old one closed when the last request holding it releases it.
        writer: builds each tenant's memory writer (:meth:`services`): the door's one writer configuration.
        max_content: the content limit of each tenant's channels hub, in characters (None: the library's).
    """

    def __init__(
        self,
        opener: Callable[[str], Memory],
        *,
        max_open: int = MAX_OPEN,
        sweep_minutes: float | None = 5.0,
        index_delay: float | None = 0.2,
        router: TenantRouter | None = None,
        writer: WriterFactory = default_writer,
        max_content: int | None = None,
    ) -> None:
        if max_open < 1:
            raise ValueError("max_open is at least 1")
        self._opener = opener
        self._writer = writer
        self._max_content = max_content
        #: With sharding: a tenant's store is reopened once the tenant moved to another shard.
        self.router = router
        self._retired: dict[int, _Entry] = {}  # stores of moved tenants, closed when their last lease ends
        self.max_open = max_open
        self.index_delay = index_delay
        self._open: OrderedDict[str, _Entry] = OrderedDict()
        self._opening: dict[str, threading.Event] = {}
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._dirty: dict[tuple[str, str], float] = {}
        self._threads: list[threading.Thread] = []
        #: Stores opened and closed over the pool's life (for metrics and tests).
        self.opened = 0
        self.evicted = 0
        self.sweep_minutes = sweep_minutes
        self._running = False

    def _start_threads(self) -> None:
        """Start the sweeper and the indexer (with the lock held): on first use, and again after a close."""
        if self._running:
            return
        self._running = True
        self._stop = stop = threading.Event()  # a new one per start: threads of an earlier start keep theirs
        workers: list[tuple[str, Callable[[], None]]] = []
        if self.sweep_minutes is not None:
            workers.append(("engram-ttl-sweeper", partial(self._sweep_loop, self.sweep_minutes * 60, stop)))
        if self.index_delay is not None:
            workers.append(("engram-indexer", partial(self._index_loop, stop)))
        for name, target in workers:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def acquire(self, tenant: str) -> Memory:
        """The tenant's Memory, opened if needed, held until :meth:`release` (it is not closed meanwhile)."""
        self._retire_if_moved(tenant)
        while True:
            with self._lock:
                self._start_threads()
                entry = self._open.get(tenant)
                if entry is not None:
                    entry.leases += 1
                    self._open.move_to_end(tenant)
                    return entry.memory
                waiting = self._opening.get(tenant)
                if waiting is None:
                    self._opening[tenant] = threading.Event()
                    break
            waiting.wait()  # another thread is opening this tenant: take its store
        try:
            memory = self._opener(tenant)
        except BaseException:
            with self._lock:
                self._opening.pop(tenant).set()
            raise
        with self._lock:
            self._open[tenant] = _Entry(memory, leases=1)
            self.opened += 1
            observe.tenants_opened(1)
            self._opening.pop(tenant).set()
            evicted = self._evictable()
        self._close_all(evicted)
        return memory

    def try_acquire(self, tenant: str) -> Memory | None:
        """:meth:`acquire` if the tenant's store is open already (no I/O: safe on an event loop), else None."""
        with self._lock:
            entry = self._open.get(tenant)
            if entry is None or not self._running:
                return None
            if self.router is not None and not self.router.current(tenant, entry.memory, refresh=False):
                return None  # moved: acquire() reopens it on its new shard
            entry.leases += 1
            self._open.move_to_end(tenant)
            return entry.memory

    def release(self, tenant: str, memory: Memory | None = None) -> None:
        """Give back a Memory taken with :meth:`acquire` (pass it as ``memory``: the tenant's store may have
        been replaced meanwhile, after a move). Stores this makes idle beyond the bound are closed in a
        background thread (closing saves search indexes: no caller waits for it)."""
        with self._lock:
            retired = self._retired.get(id(memory)) if memory is not None else None
            entry = retired if retired is not None else self._open.get(tenant)
            if entry is not None:
                entry.leases -= 1
            evicted = self._evictable()
            if retired is not None and retired.leases <= 0:
                evicted.append(self._retired.pop(id(memory)))
        if evicted:
            threading.Thread(target=self._close_all, args=(evicted,), name="engram-evict", daemon=True).start()

    @contextmanager
    def lease(self, tenant: str) -> Iterator[Memory]:
        """``with pool.lease("acme") as mem: ...``: the tenant's Memory for the block."""
        memory = self.acquire(tenant)
        try:
            yield memory
        finally:
            self.release(tenant, memory)

    def _retire_if_moved(self, tenant: str) -> None:
        """With a router: stop handing out a tenant's store once the tenant moved (closed when unused)."""
        if self.router is None:
            return
        with self._lock:
            entry = self._open.get(tenant)
        if entry is None or self.router.current(tenant, entry.memory):
            return
        with self._lock:
            if self._open.get(tenant) is not entry:
                return
            del self._open[tenant]
            observe.tenants_opened(-1)
            if entry.leases > 0:
                self._retired[id(entry.memory)] = entry
                return
        self._close_all([entry])

    def _evictable(self) -> list[_Entry]:
        """Remove idle stores beyond ``max_open``, least recently used first (call with the lock held)."""
        evicted = []
        for name in list(self._open):
            if len(self._open) <= self.max_open:
                break
            if self._open[name].leases == 0:
                evicted.append(self._open.pop(name))
        self.evicted += len(evicted)
        observe.tenants_opened(-len(evicted))
        return evicted

    @staticmethod
    def _close_all(entries: list[_Entry]) -> None:
        """Close each entry's services, then its store (the services work on the store)."""
        for entry in entries:
            closes = [entry.memory.close] if entry.services is None else [entry.services.close, entry.memory.close]
            for close in closes:
                try:
                    close()
                except EngramError as exc:  # closing saves index snapshots: never fail a request over it
                    _log.warning("closing an evicted tenant store failed: %s", exc)

    def services(self, tenant: str, memory: Memory | None = None) -> TenantServices:
        """The services of ``tenant``'s open store (of ``memory``, the store a request leased, when given: after a
        move it may be the tenant's old store), built on first use and closed with the store.

        Raises:
            NotFoundError: the tenant's store (or ``memory``) is not open in this pool (lease it first).
        """
        with self._lock:
            entry = self._open.get(tenant)
            if memory is not None and (entry is None or entry.memory is not memory):
                entry = self._retired.get(id(memory))
            if entry is None or (memory is not None and entry.memory is not memory):
                raise NotFoundError(f"tenant {tenant!r} has no open store here: lease it first")
            if entry.services is None:
                entry.services = TenantServices(entry.memory, self._writer, tenant, max_content=self._max_content)
            return entry.services

    def tenants(self) -> list[str]:
        """The tenants whose stores are open, least recently used first."""
        with self._lock:
            return list(self._open)

    def written(self, tenant: str, branch: str) -> None:
        """Note a write to ``branch`` of ``tenant``: its search index is brought up to date shortly after."""
        if self.index_delay is None:
            return
        with self._lock:
            self._dirty.setdefault((tenant, branch), time.monotonic() + self.index_delay)
            self._lock.notify_all()

    def _index_loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._lock:
                now = time.monotonic()
                due = [key for key, at in self._dirty.items() if at <= now]
                for key in due:
                    del self._dirty[key]
                if not due:
                    wait = min(self._dirty.values(), default=now + 1.0) - now
                    self._lock.wait(timeout=max(0.01, min(wait, 1.0)))
                    continue
            for tenant, branch in due:
                self._in_tenant(tenant, partial(_update_index, branch=branch), "index")

    def _sweep_loop(self, seconds: float, stop: threading.Event) -> None:
        while not stop.wait(seconds):
            for tenant in self.tenants():
                self._in_tenant(tenant, Memory.sweep_expired, "TTL sweep")

    def _in_tenant(self, tenant: str, work: Callable[[Memory], object], what: str) -> None:
        with self._lock:
            if tenant not in self._open or self._stop.is_set():
                return  # closed meanwhile: its next search indexes it, its next sweep finds what expired
        try:
            with self.lease(tenant) as memory:
                work(memory)
        except EngramError as exc:
            _log.warning("background %s of tenant %s failed: %s", what, tenant, exc)
        except Exception:  # a bug (an embedder that raises anything): logged, and the thread serves the others
            _log.exception("background %s of tenant %s failed unexpectedly", what, tenant)

    def close(self) -> None:
        """Stop the background threads and close every open store and its services (a later :meth:`acquire` starts
        afresh)."""
        with self._lock:
            self._stop.set()
            self._running = False
            self._lock.notify_all()
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join(timeout=30)
        with self._lock:
            entries = list(self._open.values())
            self._open.clear()
            observe.tenants_opened(-len(entries))
            entries += self._retired.values()  # stores of moved tenants
            self._retired.clear()
        self._close_all(entries)


def _update_index(memory: Memory, branch: str) -> None:
    memory.handle(branch).update_index()


__all__ = ["MAX_OPEN", "TenantPool", "TenantRouter", "store_opener"]
