"""The HTTP API: LangGraph Agent Server's ``/store`` routes, engram's versioned ``/v1`` routes; health and metrics
are in :mod:`engram.server.ops`.

``create_app(ServerConfig(...))`` builds a FastAPI app. Each route is one call into the synchronous
library, run on a worker thread. Each tenant (one per API key's ``tenant``) has its own repository;
a server without keys serves its base store as the single tenant ``default`` with every scope.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, TypeVar

from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import StringConstraints
from starlette.concurrency import run_in_threadpool

from engram.errors import ItemNotFoundError
from engram.objects import Commit
from engram.ops.access import LOCAL, KeyRing, Principal, authenticate
from engram.server import schemas as s
from engram.server.config import ServerConfig, Tenants
from engram.server.consistency import ConsistencyHeaders, ReplicaRouter, note_commit, note_written, routed
from engram.server.errors import StrictRoute, install
from engram.server.framing import RefuseAmbiguousLength
from engram.store import Memory, SearchResults
from engram.store.aio import check_put
from engram.store.ops import NOT_PROVIDED, PutOp
from engram.store.serialize import change_json, commit_json, details_json, item_json, search_json, version_json

T = TypeVar("T")


@dataclass
class State:
    """What the routes of one app share."""

    config: ServerConfig
    keyring: KeyRing
    tenants: Tenants

    @property
    def local(self) -> bool:
        """True when the server runs without keys (one tenant, every scope)."""
        return self.tenants.local

    def authenticate(self, secret: str | None) -> Principal:
        """The caller a key makes; a 401 for a missing or unknown key (every caller is local without keys)."""
        return LOCAL if self.local else authenticate(self.keyring, secret)


@dataclass
class Caller:
    """An authenticated request: who calls, their tenant and its Memory (leased for the request)."""

    who: Principal
    tenant: str
    memory: Memory
    branch: str
    tenants: Tenants
    #: Who serves this request's reads, and where its write's token goes (issue #17: engram.server.consistency).
    served_by: str = "primary"
    request_state: Any = None

    def on(self, branch: str | None = None) -> Memory:
        """A handle on ``branch`` (default: the server's) acting as this caller (read-only without write scope)."""
        return self.who.handle(self.memory, branch or self.branch)

    def committed(self, made: Commit, branch: str | None = None) -> dict[str, Any]:
        """The JSON of a write's commit with its consistency token (``branch@commit``)."""
        return {"commit": commit_json(made), "token": note_commit(self.request_state, branch or self.branch, made)}

    async def write(self, op: PutOp, branch: str | None = None) -> Commit:
        """One put (or delete: a put of None), batched with the concurrent plain writes of this tenant, branch
        and author into one commit (the next one when another of them writes the same key); returns the commit
        holding this write (the head when nothing changed)."""
        target = branch or self.branch
        self.on(target).check_writable()
        batcher = self.tenants.coalescer(self.tenant, target, self.who.author)
        commit = (await batcher.submit([check_put(op)]))[1]
        made = commit if commit is not None else await run(lambda: self.on(target).head)
        note_commit(self.request_state, target, made)
        return made

    async def commit(self, fn: Callable[[], T], branch: str | None = None) -> T:
        """A write that makes its own commit (it names an author or message, or is a versioning verb)."""
        done = await run(fn)
        self.tenants.pool.written(self.tenant, branch or self.branch)
        await note_written(self, branch or self.branch, done)  # the consistency token (issue #17)
        return done


_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="X-API-Key: <API key>")


def _caller(scope: str) -> Callable[..., Any]:
    async def dependency(
        request: Request,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        api_key: Annotated[str | None, Depends(_api_key)],
    ) -> AsyncIterator[Caller]:
        state: State = request.app.state.engram
        who = state.authenticate(bearer.credentials if bearer is not None else api_key)
        who.require(scope)
        pool = state.tenants.pool
        memory = pool.try_acquire(who.tenant)
        if memory is None:
            memory = await run_in_threadpool(pool.acquire, who.tenant)
        caller = Caller(who, who.tenant, memory, state.config.branch, state.tenants)
        try:
            async with routed(request, caller, scope):  # read replicas and consistency tokens (issue #17)
                yield caller
        finally:
            pool.release(who.tenant, memory)

    return dependency


Read = Annotated[Caller, Depends(_caller("read"))]
Write = Annotated[Caller, Depends(_caller("write"))]
Admin = Annotated[Caller, Depends(_caller("admin"))]


async def run(fn: Callable[[], T]) -> T:
    """Run one library call on a worker thread (the core is synchronous)."""
    return await run_in_threadpool(fn)


def _ns(values: list[str]) -> tuple[str, ...]:
    """A namespace from query parameters: one dot-joined value (``a.b``) or one value per label."""
    return tuple(values[0].split(".")) if len(values) == 1 else tuple(values)


def _prefix(text: str | None) -> tuple[str, ...] | None:
    """An optional dot-joined namespace prefix; empty means the root."""
    return None if text is None else tuple(text.split(".")) if text else ()


_DOTTED = r"^[^.]+(\.[^.]+)*$"
NsQuery = Annotated[
    list[Annotated[str, StringConstraints(pattern=_DOTTED)]],
    Query(min_length=1, description="namespace, dot-joined (a.b) or repeated (namespace=a&namespace=b)"),
]
KeyQuery = Annotated[str, Query(description="item key")]
_REF = "a ref: branch, tag, commit id, HEAD~n, main@{ISO time}"
RefQuery = Annotated[str, Query(min_length=1, description=_REF)]
AtQuery = Annotated[str | None, Query(min_length=1, description="read as of " + _REF)]
BranchQuery = Annotated[str | None, Query(min_length=1, description="branch (default: the server's, main)")]
PrefixQuery = Annotated[
    str | None, Query(pattern=r"^([^.]+(\.[^.]+)*)?$", description="namespace prefix, dot-joined (a.b); empty: root")
]

F = TypeVar("F", bound=Callable[..., Any])


class _Routes:
    """Routes declared once at import and added to each app, flat in ``app.routes``."""

    def __init__(self, prefix: str, tag: str) -> None:
        self.prefix = prefix
        self.tag = tag
        self.entries: list[tuple[str, str, Callable[..., Any], dict[str, Any]]] = []

    def _route(self, method: str, path: str, options: dict[str, Any]) -> Callable[[F], F]:
        def register(endpoint: F) -> F:
            self.entries.append((method, self.prefix + path, endpoint, options))
            return endpoint

        return register

    def get(self, path: str, **options: Any) -> Callable[[F], F]:
        return self._route("GET", path, options)

    def put(self, path: str, **options: Any) -> Callable[[F], F]:
        return self._route("PUT", path, options)

    def post(self, path: str, **options: Any) -> Callable[[F], F]:
        return self._route("POST", path, options)

    def delete(self, path: str, **options: Any) -> Callable[[F], F]:
        return self._route("DELETE", path, options)

    def install(self, app: FastAPI) -> None:
        """Add these routes to ``app``."""
        for method, path, endpoint, options in self.entries:
            app.router.add_api_route(path, endpoint, methods=[method], tags=[self.tag],
                                     route_class_override=StrictRoute, **options)  # fmt: skip


store = _Routes("/store", "store (LangGraph)")
v1 = _Routes("/v1", "versioned")


# ------------------------------------------------------------------------- LangGraph store routes


@store.put("/items", status_code=204, response_class=Response, responses=s.responses())
async def put_item(caller: Write, body: s.PutItem) -> Response:
    """Store or replace an item (one commit). Leaving ``ttl`` out uses the store's default TTL."""
    ns = caller.who.check(body.namespace)
    ttl = body.ttl if "ttl" in body.model_fields_set else NOT_PROVIDED
    await caller.write(PutOp(ns, body.key, body.value, body.index, ttl))
    return Response(status_code=204)


@store.get("/items", response_model=None, responses=s.responses(s.ItemOut))
async def get_item(
    caller: Read, namespace: NsQuery, key: KeyQuery, refresh_ttl: bool | None = None, at: AtQuery = None
) -> dict[str, Any]:
    """Get an item (404 when there is none); ``at`` reads it as of a ref."""
    ns = caller.who.check(_ns(namespace))
    if at is None:
        item = await run(lambda: caller.on().get(ns, key, refresh_ttl=refresh_ttl))
    else:
        item = await run(lambda: caller.on().at(at).get(ns, key))
    if item is None:
        raise ItemNotFoundError(f"no item {'.'.join(ns)} / {key}" + (f" at {at}" if at else ""))
    return item.dict()


@store.delete("/items", status_code=204, response_class=Response, responses=s.responses())
async def delete_item(caller: Write, body: s.DeleteItem) -> Response:
    """Delete an item (one commit; deleting a missing item changes nothing)."""
    ns = caller.who.check(body.namespace)
    await caller.write(PutOp(ns, body.key, None))
    return Response(status_code=204)


def _search(caller: Caller, body: s.SearchItems, branch: str | None = None) -> Callable[[], SearchResults]:
    prefix = caller.who.narrow(body.namespace_prefix) or ()
    return lambda: caller.on(branch).search(
        prefix, body.query, filter=body.filter, limit=body.limit, offset=body.offset, mode=body.mode,
        profile=body.ranking(), explain=body.explain, min_score=body.min_score, refresh_ttl=body.refresh_ttl,
        at=body.at,
    )  # fmt: skip


@store.post("/items/search", response_model=None, responses=s.responses(s.SearchOut))
async def search_items(caller: Read, body: s.SearchItems) -> JSONResponse:
    """Search items by meaning, keywords and filters (without ``query``: newest first).

    The mode that ran is in the ``X-Engram-Search-Mode`` header (``X-Engram-Degraded: true`` when the
    embedder failed and a hybrid search ran as keyword).
    """
    results = await run(_search(caller, body))
    headers = {"X-Engram-Search-Mode": results.mode}
    if results.degraded:
        headers["X-Engram-Degraded"] = "true"
    return JSONResponse({"items": [r.dict() for r in results]}, headers=headers)


def _namespaces(caller: Caller, body: s.ListNamespaces, branch: str | None = None) -> dict[str, Any]:
    prefix = caller.who.narrow_pattern(body.prefix)
    mem = caller.on(branch)
    reader = mem if body.at is None else mem.at(body.at)
    found = reader.list_namespaces(prefix=prefix, suffix=body.suffix, max_depth=body.max_depth, limit=body.limit,
                                   offset=body.offset)  # fmt: skip
    return {"namespaces": [list(ns) for ns in found]}


@store.post("/namespaces", response_model=None, responses=s.responses(s.NamespacesOut))
async def list_namespaces(caller: Read, body: s.ListNamespaces) -> dict[str, Any]:
    """List namespaces holding items; ``*`` in ``prefix``/``suffix`` matches any one label."""
    return await run(lambda: _namespaces(caller, body))


# ------------------------------------------------------------------------------- /v1 routes


@v1.get("/items", response_model=None, responses=s.responses(s.FullItemOut))
async def v1_get_item(
    caller: Read, namespace: NsQuery, key: KeyQuery, at: AtQuery = None, branch: BranchQuery = None
) -> dict[str, Any]:
    """Get an item with its expiry and provenance, on a branch or as of a ref."""
    ns = caller.who.check(_ns(namespace))
    item = await run(lambda: (caller.on(branch).at(at) if at else caller.on(branch)).get(ns, key))
    found = item_json(item)
    if found is None:
        raise ItemNotFoundError(f"no item {'.'.join(ns)} / {key}" + (f" at {at}" if at else ""))
    return found


@v1.put("/items", response_model=None, responses=s.responses(s.CommitResult))
async def v1_put_item(caller: Write, body: s.WriteItem) -> dict[str, Any]:
    """Store or replace an item as one commit on ``branch``; returns the commit."""
    ns = caller.who.check(body.namespace)
    ttl = body.ttl if "ttl" in body.model_fields_set else NOT_PROVIDED
    if body.author is None and body.message is None:
        made = await caller.write(PutOp(ns, body.key, body.value, body.index, ttl, tuple(body.sources)), body.branch)
    else:
        made = await caller.commit(lambda: caller.on(body.branch).put(
            ns, body.key, body.value, body.index, ttl=ttl, author=body.author, sources=body.sources,
            message=body.message), body.branch)  # fmt: skip
    return caller.committed(made, body.branch)


@v1.delete("/items", response_model=None, responses=s.responses(s.CommitResult))
async def v1_delete_item(
    caller: Write, namespace: NsQuery, key: KeyQuery, branch: BranchQuery = None, message: str | None = None
) -> dict[str, Any]:
    """Delete an item as one commit on ``branch``; returns the commit (the head when nothing changed)."""
    ns = caller.who.check(_ns(namespace))
    if message is None:
        made = await caller.write(PutOp(ns, key, None), branch)
    else:
        made = await caller.commit(lambda: caller.on(branch).delete(ns, key, message=message), branch)
    return caller.committed(made, branch)


@v1.post("/search", response_model=None, responses=s.responses(s.SearchV1Out))
async def v1_search(caller: Read, body: s.SearchV1) -> dict[str, Any]:
    """Search a branch (or the version ``at``); says which mode ran and why it was degraded."""
    return search_json(await run(_search(caller, body, body.branch)))


@v1.get("/namespaces", response_model=None, responses=s.responses(s.NamespacesOut))
async def v1_namespaces(
    caller: Read,
    prefix: PrefixQuery = None,
    max_depth: Annotated[int | None, Query(ge=1)] = None,
    limit: Annotated[int, Query(ge=0, le=s.MAX_LIMIT)] = 100,
    offset: Annotated[int, Query(ge=0, le=s.MAX_OFFSET)] = 0,
    at: AtQuery = None,
    branch: BranchQuery = None,
) -> dict[str, Any]:
    """List namespaces holding items under a prefix."""
    labels = _prefix(prefix)
    body = s.ListNamespaces(prefix=None if not labels else list(labels), max_depth=max_depth, limit=limit,
                            offset=offset, at=at)  # fmt: skip
    return await run(lambda: _namespaces(caller, body, branch))


@v1.get("/log", response_model=None, responses=s.responses(s.LogOut))
async def v1_log(
    caller: Read,
    ref: RefQuery = "HEAD",
    namespace: PrefixQuery = None,
    key: Annotated[str | None, Query(description="only commits that changed this key (needs namespace)")] = None,
    limit: Annotated[int, Query(ge=1, le=s.MAX_LIMIT)] = 50,
    branch: BranchQuery = None,
) -> dict[str, Any]:
    """Commits reachable from ``ref``, newest first; only those touching a namespace prefix or one key."""
    if key is not None:
        scope: tuple[str, ...] | None = caller.who.check(_prefix(namespace) or ())
    else:
        scope = caller.who.narrow(_prefix(namespace))
    commits = await run(lambda: caller.on(branch).log(ref, namespace=scope, key=key, limit=limit))
    return {"commits": [commit_json(c) for c in commits]}


@v1.get("/commits/{ref:path}", response_model=None, responses=s.responses(s.ShowOut))
async def v1_show(
    caller: Read, ref: Annotated[str, PathParam(description=_REF)], branch: BranchQuery = None
) -> dict[str, Any]:
    """One commit and the item changes it made (for a restricted key, only those under its prefix)."""
    details = await run(lambda: caller.on(branch).show(ref))
    return details_json(details, caller.who.namespace_prefix)


@v1.get("/diff", response_model=None, responses=s.responses(s.DiffOut))
async def v1_diff(
    caller: Read, old: RefQuery, new: RefQuery = "HEAD", namespace: PrefixQuery = None, branch: BranchQuery = None
) -> dict[str, Any]:
    """Items that differ between versions ``old`` and ``new``, optionally under a namespace prefix."""
    scope = caller.who.narrow(_prefix(namespace)) or ()
    changes = await run(lambda: caller.on(branch).diff(old, new, namespace=scope))
    return {"changes": [change_json(c) for c in changes]}


@v1.get("/history", response_model=None, responses=s.responses(s.HistoryOut))
async def v1_history(
    caller: Read, namespace: NsQuery, key: KeyQuery, ref: RefQuery = "HEAD", branch: BranchQuery = None
) -> dict[str, Any]:
    """Every version of one item, newest first, each with the commit that made it (blame)."""
    ns = caller.who.check(_ns(namespace))
    versions = await run(lambda: caller.on(branch).history(ns, key, ref))
    return {"versions": [version_json(v) for v in versions]}


@v1.get("/branches", response_model=None, responses=s.responses(s.RefsOut))
async def v1_branches(caller: Read) -> dict[str, Any]:
    """Branch name -> head commit id (a prefix-restricted key sees the writer's review branches of its own
    targets only)."""
    refs = await run(lambda: caller.on().branches())
    return {"refs": {name: cid for name, cid in refs.items() if caller.who.sees_branch(name)}}


@v1.post("/branches", status_code=201, response_model=None, responses=s.responses(s.RefOut, 201))
async def v1_create_branch(caller: Write, body: s.CreateRef) -> dict[str, Any]:
    """Create a branch at version ``at`` (``HEAD`` is the head of ``branch``)."""

    def create() -> dict[str, Any]:
        mem = caller.on(body.branch)
        mem.create_branch(body.name, body.at)
        return {"name": body.name, "commit": mem.branches()[body.name]}

    return await caller.commit(create, body.name)


@v1.delete("/branches/{name:path}", status_code=204, response_class=Response, responses=s.responses())
async def v1_delete_branch(caller: Admin, name: str, branch: BranchQuery = None) -> Response:
    """Delete a branch (not the one named by ``branch``, the server's by default); not with a key restricted
    to a namespace prefix, since a branch holds every namespace."""
    caller.who.require_unrestricted("delete a branch")
    await run(lambda: caller.on(branch).delete_branch(name))
    return Response(status_code=204)


@v1.get("/tags", response_model=None, responses=s.responses(s.RefsOut))
async def v1_tags(caller: Read) -> dict[str, Any]:
    """Tag name -> commit id."""
    return {"refs": await run(lambda: caller.on().tags())}


@v1.post("/tags", status_code=201, response_model=None, responses=s.responses(s.RefOut, 201))
async def v1_create_tag(caller: Write, body: s.CreateRef) -> dict[str, Any]:
    """Name version ``at`` (``HEAD`` is the head of ``branch``); tags never move."""

    def create() -> dict[str, Any]:
        mem = caller.on(body.branch)
        mem.tag(body.name, body.at)
        return {"name": body.name, "commit": mem.tags()[body.name]}

    return await run(create)


@v1.delete("/tags/{name:path}", status_code=204, response_class=Response, responses=s.responses())
async def v1_delete_tag(caller: Admin, name: str) -> Response:
    """Delete a tag (not with a key restricted to a namespace prefix)."""
    caller.who.require_unrestricted("delete a tag")
    await run(lambda: caller.on().delete_tag(name))
    return Response(status_code=204)


@v1.post("/merge", response_model=None, responses=s.responses(s.CommitResult))
async def v1_merge(caller: Write, body: s.Merge) -> dict[str, Any]:
    """Merge ``source`` into ``into`` with a two-parent commit; conflicts the strategy leaves are a 409."""
    caller.who.require_unrestricted("merge")
    made = await caller.commit(
        lambda: caller.on(body.into).merge(body.source, strategy=body.strategy, message=body.message), body.into
    )
    return caller.committed(made, body.into)


@v1.post("/revert", response_model=None, responses=s.responses(s.CommitResult))
async def v1_revert(caller: Write, body: s.Revert) -> dict[str, Any]:
    """Undo what commit ``ref`` changed, with a new commit on ``branch``."""
    caller.who.require_unrestricted("revert")
    made = await caller.commit(lambda: caller.on(body.branch).revert(body.ref, strategy=body.strategy), body.branch)
    return caller.committed(made, body.branch)


@v1.post("/reset", response_model=None, responses=s.responses(s.ResetOut))
async def v1_reset(caller: Admin, body: s.Reset) -> dict[str, Any]:
    """Move ``branch`` to version ``ref`` (the old head stays in the reflog)."""
    caller.who.require_unrestricted("reset")

    def reset() -> dict[str, Any]:
        mem = caller.on(body.branch)
        mem.reset(body.ref)
        return {"branch": mem.branch, "commit": commit_json(mem.head)}

    return await caller.commit(reset, body.branch)


@v1.post("/gc", response_model=None, responses=s.responses(s.GcOut))
async def v1_gc(caller: Admin, body: s.Gc) -> dict[str, Any]:
    """Delete chunks no ref or reflog entry reaches (chunks younger than 10 minutes are kept)."""
    caller.who.require_unrestricted("gc")
    keep = None if body.keep_reflog_days is None else timedelta(days=body.keep_reflog_days)
    report = await run(lambda: caller.on().gc(keep))
    return {"kept": report.kept, "removed": report.removed, "reflog_pruned": report.reflog_pruned}


@v1.get("/fsck", response_model=None, responses=s.responses(s.FsckOut))
async def v1_fsck(caller: Admin) -> dict[str, Any]:
    """Verify every reachable chunk exists and hashes right."""
    caller.who.require_unrestricted("fsck")
    report = await run(lambda: caller.on().fsck())
    return {"ok": report.ok, "commits": report.commits, "nodes": report.nodes, "missing": report.missing,
            "corrupt": report.corrupt}  # fmt: skip


def create_app(config: ServerConfig | None = None) -> FastAPI:
    """Build the HTTP API app for ``config`` (see :class:`ServerConfig`)."""
    config = config or ServerConfig()
    keyring = KeyRing(config.keys_path())
    local = not keyring.keys() if config.require_keys is None else not config.require_keys
    state = State(config, keyring, Tenants(config, local))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        backups = state.tenants.backups()  # --backup-every (issue #15)
        if backups is not None:
            backups.start()
        yield
        if backups is not None:
            await run(backups.stop)
        await run(state.tenants.close)
        await run(app.state.replicas.close)

    app = FastAPI(
        title="engram",
        version="1",
        summary="Versioned, searchable memory for AI agents: LangGraph's store API plus history, diff, branches.",
        lifespan=lifespan,
        docs_url=None,  # served offline by engram.server.ui (issue #16)
        redoc_url=None,
    )
    app.state.engram = state
    app.state.replicas = ReplicaRouter(config, local, shards=state.tenants.router)  # read replicas (issue #17)
    install(app, config.max_body)
    app.add_middleware(ConsistencyHeaders)
    app.add_middleware(RefuseAmbiguousLength)  # outermost: before anything reads the body
    for routes in (store, v1):
        routes.install(app)
    app.include_router(__import__("engram.server.channels", fromlist=["routes"]).routes)  # issue #13 (imports app)
    app.include_router(__import__("engram.server.writer", fromlist=["routes"]).routes)  # issue #14 (imports app)
    __import__("engram.server.ops", fromlist=["install"]).install(app)  # health, metrics (issue #15; imports app)
    app.include_router(__import__("engram.server.browse", fromlist=["routes"]).routes)  # issue #16 (imports app)
    __import__("engram.server.ui", fromlist=["install"]).install(app, {  # the web UI at / (issue #16)
        "name": "engram", "docs": "/docs", "openapi": "/openapi.json", "health": "/healthz",
        "auth": "none (local)" if local else "API key"})  # fmt: skip
    return app


__all__ = ["ServerConfig", "create_app"]
