"""Read-your-writes over HTTP: consistency tokens on writes, read replicas for reads (issue #17).

Every write answers with the commit it made as a token, ``Engram-Commit: <branch>@<commit id>`` (and
``"token"`` in the JSON body of the ``/v1`` writes that return a commit). A read may send tokens back in the same
request header (several, comma-separated); a server with read replicas (``ServerConfig.replicas``, ``--replica``,
or ``?replica=`` in the store URL) serves it from a replica only if the replica has every token's commit
(:mod:`engram.store.replicas`), else from the primary, and says which in ``Engram-Served-By: replica|primary``.
A read without a token goes to a healthy replica that lags at most ``replica_max_lag`` seconds.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram.errors import ConfigError, NotFoundError, StorageError
from engram.objects import Commit
from engram.store import Memory, tenant_url
from engram.store.connect import POSTGRES_SCHEMES
from engram.store.replicas import Replica, ReplicatedStore, Routed, Token, parse_tokens, replica_opener, replica_urls

if TYPE_CHECKING:
    from engram.server.config import ServerConfig

__all__ = [
    "COMMIT_HEADER",
    "REPLICA_ROUTES",
    "SERVED_BY_HEADER",
    "ConsistencyHeaders",
    "ReplicaRouter",
    "note_commit",
    "note_written",
    "routed",
]

#: Written by the server on writes (the token), sent by clients on reads.
COMMIT_HEADER = "Engram-Commit"
#: Who served a read when the server has replicas: ``replica`` or ``primary``.
SERVED_BY_HEADER = "Engram-Served-By"
#: The read routes a replica may serve: the memory routes (LangGraph's and /v1's). Channels, events, the memory
#: writer and the web UI's routes read from the primary (their reads keep cursors and bookkeeping there).
REPLICA_ROUTES = ("/store/", "/v1/items", "/v1/search", "/v1/namespaces", "/v1/log", "/v1/commits/", "/v1/diff",
                  "/v1/history", "/v1/branches", "/v1/tags")  # fmt: skip
_TOKEN = "engram_commit"
_SERVED = "engram_served_by"


class ReplicaRouter:
    """The server's read replicas: one :class:`~engram.store.replicas.ReplicatedStore` per tenant (the routing
    state and the replicas' handles), made on the tenant's first read, at most ``max_open`` kept (LRU)."""

    def __init__(self, config: ServerConfig, local: bool, max_open: int = 256) -> None:
        self.urls = [*replica_urls(config.store), *getattr(config, "replicas", ())]
        self.max_lag = float(getattr(config, "replica_max_lag", 10.0))
        self.store = config.store
        self.local = local
        self.max_open = max_open
        if self.urls and not (config.store or "").startswith(POSTGRES_SCHEMES):
            raise ConfigError("read replicas are PostgreSQL standbys: the store must be a postgresql:// URL")
        if self.urls and getattr(config, "shard_catalog", None) is not None:
            raise ConfigError("read replicas and a shard catalog cannot be combined yet: give one or the other")
        self._stores: OrderedDict[str, ReplicatedStore] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """True when the server has read replicas."""
        return bool(self.urls)

    def replicated(self, tenant: str, primary: Memory) -> ReplicatedStore:
        """The tenant's replicated store (made on first use)."""
        with self._lock:
            found = self._stores.get(tenant)
            if found is not None:
                self._stores.move_to_end(tenant)
                return found
        primary_url = self.store if self.local else tenant_url(self.store, tenant)
        urls = self.urls if self.local else [tenant_url(url, tenant) for url in self.urls]
        made = ReplicatedStore(primary, max_lag=self.max_lag)
        made.replicas = [
            Replica(f"replica-{i + 1}", replica_opener(url, primary_url or "", lambda: made.primary))
            for i, url in enumerate(urls)
        ]
        evicted: list[ReplicatedStore] = []
        with self._lock:
            found = self._stores.setdefault(tenant, made)
            while len(self._stores) > self.max_open:
                evicted.append(self._stores.popitem(last=False)[1])
        for store in [*evicted, *([made] if found is not made else [])]:
            for replica in store.replicas:
                replica.close()
        return found

    def route(self, tenant: str, primary: Memory, tokens: list[Token]) -> tuple[ReplicatedStore, Routed]:
        """Where a read of ``tenant`` carrying ``tokens`` goes (runs store I/O: call it on a worker thread)."""
        store = self.replicated(tenant, primary)
        return store, store.route(tokens, primary)

    def status(self) -> dict[str, list[dict[str, Any]]]:
        """Each open tenant's replicas' status."""
        with self._lock:
            return {tenant: store.status() for tenant, store in self._stores.items()}

    def close(self) -> None:
        """Close every replica handle (the primaries belong to the tenant pool)."""
        with self._lock:
            stores, self._stores = list(self._stores.values()), OrderedDict()
        for store in stores:
            for replica in store.replicas:
                replica.close()


@asynccontextmanager
async def routed(request: Request, caller: Any, scope: str) -> AsyncIterator[None]:
    """Around one request: a read with replicas is routed (``caller.memory`` and ``caller.served_by`` set);
    a replica that fails during the read is skipped for a while."""
    router: ReplicaRouter | None = getattr(request.app.state, "replicas", None)
    caller.request_state = request.state
    tokens = parse_tokens(request.headers.get(COMMIT_HEADER)) if scope == "read" else []  # 422 when malformed
    if scope != "read" or router is None or not router.enabled or not request.url.path.startswith(REPLICA_ROUTES):
        yield
        return
    store, where = await run_in_threadpool(router.route, caller.tenant, caller.memory, tokens)
    caller.memory = where.memory
    caller.served_by = where.served_by
    setattr(request.state, _SERVED, where.served_by)
    try:
        yield
    except StorageError as exc:
        if where.replica is not None:
            store.failed(where.replica, exc)
        raise


def note_commit(request_state: Any, branch: str, commit: Commit) -> str:
    """Record the token of a write (``branch@commit``) for the response header; returns it."""
    token = str(Token(branch, commit.id))
    if request_state is not None:
        setattr(request_state, _TOKEN, token)
    return token


async def note_written(caller: Any, branch: str, done: Any) -> None:
    """Record the token of a write that made its own commit: the commit it returned, else the branch's head."""
    if not isinstance(done, Commit):
        try:
            done = await run_in_threadpool(lambda: caller.on(branch).head)
        except NotFoundError:
            return  # the write removed the branch: no token to give
    note_commit(caller.request_state, branch, done)


class ConsistencyHeaders:
    """ASGI middleware: adds ``Engram-Commit`` (writes) and ``Engram-Served-By`` (routed reads) to responses."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                state = scope.get("state") or {}
                extra = [(COMMIT_HEADER, state.get(_TOKEN)), (SERVED_BY_HEADER, state.get(_SERVED))]
                headers = list(message.get("headers", []))
                headers += [(name.lower().encode(), value.encode()) for name, value in extra if value]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
