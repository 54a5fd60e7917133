"""Read-your-writes over HTTP: consistency tokens on writes, read replicas for reads.

Every write answers with the commit it made as a token, ``Engram-Commit: <branch>@<commit id>`` (and
``"token"`` in the JSON body of the ``/v1`` writes that return a commit). A read may send tokens back in the same
request header (several, comma-separated); a server with read replicas (``ServerConfig.replicas``, ``--replica``,
or ``?replica=`` in the store URL) serves it from a replica only if the replica has every token's commit
(:mod:`engram.store.replicas`), else from the primary, and says which in ``Engram-Served-By: replica|primary``.
A read without a token goes to a healthy replica that lags at most ``replica_max_lag`` seconds. With a shard
catalog, each shard's replicas are recorded in the catalog and serve the reads of that shard's tenants.

Clients that never send a token back (LangGraph's SDK) still read their writes: the server remembers the last
write of each caller (its API key; without keys, its address) for ``REMEMBER_SECONDS`` and treats the caller's
token-less reads meanwhile as if they carried it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram.errors import ConfigError, NotFoundError, StorageError
from engram.objects import Commit
from engram.ops.shards import ShardRouter
from engram.ops.shards.router import GatedRefStore
from engram.server.config import ServerConfig
from engram.store import Memory, tenant_url
from engram.store.replicas import Replica, ReplicatedStore, Routed, Token, parse_tokens, replica_opener, replica_urls
from engram.store.urls import is_postgres

__all__ = [
    "COMMIT_HEADER",
    "REMEMBER_MAX",
    "REMEMBER_SECONDS",
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
_WHO = "engram_writer_of"
#: Seconds a caller's last write stands in for the token its reads do not send; callers remembered at most.
REMEMBER_SECONDS = 10.0
REMEMBER_MAX = 10_000


class ReplicaRouter:
    """The server's read replicas: one :class:`~engram.store.replicas.ReplicatedStore` per tenant (the routing
    state and the replicas' handles), made on the tenant's first read, at most ``max_open`` kept (LRU).

    Without a shard catalog the replicas are the server's (``replicas``, ``?replica=``), each serving every
    tenant's repository. With one (``shards``, the tenant pool's :class:`~engram.ops.shards.ShardRouter`) each
    tenant reads from the replicas the catalog records for the shard its store is on (``engram shard
    set-replicas``); a tenant whose shard or whose shard's replicas changed gets a new replicated store.
    """

    def __init__(
        self, config: ServerConfig, local: bool, max_open: int = 256, *, shards: ShardRouter | None = None
    ) -> None:
        self.urls = [*replica_urls(config.store), *getattr(config, "replicas", ())]
        self.max_lag = float(getattr(config, "replica_max_lag", 10.0))
        self.store = config.store
        self.local = local
        self.max_open = max_open
        self.shards = shards
        if self.urls and not is_postgres(config.store):
            raise ConfigError("read replicas are PostgreSQL standbys: the store must be a postgresql:// URL")
        if self.urls and (shards is not None or getattr(config, "shard_catalog", None) is not None):
            raise ConfigError("with a shard catalog, each shard's read replicas are in the catalog: "
                              "engram shard set-replicas NAME --replica URL (not --replica on the server)")  # fmt: skip
        self._stores: OrderedDict[str, tuple[tuple[str, ...], ReplicatedStore]] = OrderedDict()
        self._lock = threading.Lock()
        self._written: OrderedDict[tuple[str, str], tuple[float, dict[str, Token]]] = OrderedDict()

    def remember(self, caller: tuple[str, str], token: Token) -> None:
        """Note the last write of ``caller`` (tenant, identity) on its branch, for its token-less reads."""
        now = time.monotonic()
        with self._lock:
            found = self._written.pop(caller, None)
            tokens = found[1] if found is not None and now - found[0] < REMEMBER_SECONDS else {}
            tokens[token.branch] = token
            self._written[caller] = (now, tokens)
            while len(self._written) > REMEMBER_MAX:
                self._written.popitem(last=False)

    def recent(self, caller: tuple[str, str]) -> list[Token]:
        """The tokens of ``caller``'s writes of the last ``REMEMBER_SECONDS`` (none after that)."""
        with self._lock:
            found = self._written.get(caller)
            if found is None or time.monotonic() - found[0] >= REMEMBER_SECONDS:
                return []
            return list(found[1].values())

    @property
    def enabled(self) -> bool:
        """True when the server has read replicas (with a shard catalog: when any shard may have them)."""
        return bool(self.urls) or self.shards is not None

    def _placement(self, tenant: str, primary: Memory) -> tuple[str, list[str]]:
        """The URL of the tenant's primary store and those of its replicas."""
        if self.shards is None:
            primary_url = self.store if self.local else tenant_url(self.store, tenant)
            return primary_url or "", self.urls if self.local else [tenant_url(url, tenant) for url in self.urls]
        refs = primary.repo.refs
        current = self.shards.map()
        name = refs.shard if isinstance(refs, GatedRefStore) else self.shards.route(tenant).name
        shard = current.shards.get(name)
        if shard is None:
            return "", []  # a store opened on a shard the map no longer lists: the primary serves it
        return tenant_url(shard.url, tenant), [tenant_url(url, tenant) for url in current.replicas.get(name, ())]

    def replicated(self, tenant: str, primary: Memory) -> ReplicatedStore:
        """The tenant's replicated store (made on first use, and again when its replicas changed)."""
        primary_url, urls = self._placement(tenant, primary)
        key = (primary_url, *urls)
        with self._lock:
            found = self._stores.get(tenant)
            if found is not None and found[0] == key:
                self._stores.move_to_end(tenant)
                return found[1]
        made = ReplicatedStore(primary, max_lag=self.max_lag)
        made.replicas = [
            Replica(f"replica-{i + 1}", replica_opener(url, primary_url, lambda: made.primary))
            for i, url in enumerate(urls)
        ]
        evicted: list[ReplicatedStore] = []
        chosen = made
        with self._lock:
            found = self._stores.get(tenant)
            if found is not None and found[0] == key:
                evicted.append(made)  # another thread made it meanwhile
                chosen = found[1]
            else:
                if found is not None:
                    evicted.append(found[1])  # moved, or its replicas changed
                self._stores[tenant] = (key, made)
            self._stores.move_to_end(tenant)
            while len(self._stores) > self.max_open:
                evicted.append(self._stores.popitem(last=False)[1][1])
        for store in evicted:
            for replica in store.replicas:
                replica.close()
        return chosen

    def route(self, tenant: str, primary: Memory, tokens: list[Token]) -> tuple[ReplicatedStore, Routed | None]:
        """Where a read of ``tenant`` carrying ``tokens`` goes; None when the tenant has no replicas (runs store
        I/O: call it on a worker thread)."""
        store = self.replicated(tenant, primary)
        if not store.replicas:
            return store, None
        return store, store.route(tokens, primary)

    def status(self) -> dict[str, list[dict[str, Any]]]:
        """Each open tenant's replicas' status."""
        with self._lock:
            return {tenant: store.status() for tenant, (_, store) in self._stores.items()}

    def close(self) -> None:
        """Close every replica handle (the primaries belong to the tenant pool)."""
        with self._lock:
            stores, self._stores = [store for _, store in self._stores.values()], OrderedDict()
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
    enabled = router is not None and router.enabled
    who = (caller.tenant, _identity(request, caller))
    if scope != "read" and enabled:
        setattr(request.state, _WHO, (router, who))  # note_commit remembers the write for the caller's next reads
    if scope != "read" or router is None or not enabled or not request.url.path.startswith(REPLICA_ROUTES):
        yield
        return
    tokens = tokens or router.recent(who)
    store, where = await run_in_threadpool(router.route, caller.tenant, caller.memory, tokens)
    if where is None:  # the tenant's shard has no replicas
        yield
        return
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
    made = Token(branch, commit.id)
    token = str(made)
    if request_state is not None:
        setattr(request_state, _TOKEN, token)
        writer = getattr(request_state, _WHO, None)
        if writer is not None:
            router, who = writer
            router.remember(who, made)
    return token


async def note_written(caller: Any, branch: str, done: Any) -> None:
    """Record the token of a write that made its own commit: the commit it returned, else the branch's head."""
    if not isinstance(done, Commit):
        try:
            done = await run_in_threadpool(lambda: caller.on(branch).head)
        except NotFoundError:
            return  # the write removed the branch: no token to give
    note_commit(caller.request_state, branch, done)


def _identity(request: Request, caller: Any) -> str:
    """Who a caller is for remembering its writes: its API key, else (a server without keys) its address."""
    key_id = getattr(caller.who, "key_id", None)
    if key_id is not None:
        return f"key:{key_id}"
    client = request.client
    return f"addr:{client.host if client is not None else ''}"


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
                # A header value holds visible ASCII only: a token of a branch named before the name rules (a
                # newline in it) is left out rather than breaking the response.
                headers += [(name.lower().encode(), value.encode()) for name, value in extra
                            if value and value.isascii() and value.isprintable()]  # fmt: skip
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
