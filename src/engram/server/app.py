"""The HTTP API app: ``create_app(ServerConfig(...))`` builds a FastAPI app from the route groups.

Each route group is an :class:`~fastapi.APIRouter` in its own module, over the plumbing of
:mod:`engram.server.deps`: LangGraph Agent Server's ``/store`` routes and ``/v1``'s items
(:mod:`engram.server.items`), the versioning verbs (:mod:`engram.server.versions`), channels
(:mod:`engram.server.channels`), the memory writer (:mod:`engram.server.writer`), health and metrics
(:mod:`engram.server.ops`), the web UI's routes (:mod:`engram.server.browse`) and pages (:mod:`engram.server.ui`).
Each route is one call into the synchronous library, run on a worker thread. Each tenant (one per API key's
``tenant``) has its own repository; a server without keys serves its base store as the single tenant ``default``
with every scope.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI

from engram.ops.access import KeyRing
from engram.ops.rerankers import operator_reranker
from engram.server import browse, channels, items, lookup, ops, ui, versions, writer
from engram.server.config import ServerConfig, Tenants
from engram.server.consistency import ConsistencyHeaders, ReplicaRouter
from engram.server.deps import State, run
from engram.server.errors import install
from engram.server.framing import RefuseAmbiguousLength
from engram.server.metering import RequestMetrics


def _flat(app: FastAPI, routes: APIRouter) -> None:
    """Add ``routes`` to ``app`` one by one, flat in ``app.routes`` (not as one included router): a 405 then
    names every method of the path (:mod:`engram.server.errors`)."""
    app.router.routes.extend(routes.routes)


def create_app(config: ServerConfig | None = None) -> FastAPI:
    """Build the HTTP API app for ``config`` (see :class:`ServerConfig`)."""
    config = config or ServerConfig()
    operator_reranker(config.rerank)  # a bad --rerank fails here, before the first search
    keyring = KeyRing(config.keys_path())
    local = not keyring.keys() if config.require_keys is None else not config.require_keys
    state = State(config, keyring, Tenants(config, local))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        backups = state.tenants.backups()  # --backup-every
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
        docs_url=None,  # served offline by engram.server.ui
        redoc_url=None,
    )
    app.state.engram = state
    app.state.replicas = ReplicaRouter(config, local, shards=state.tenants.router)  # read replicas
    install(app, config.max_body)
    app.add_middleware(ConsistencyHeaders)
    app.add_middleware(RequestMetrics)  # counts what a client sees, errors answered by the layers inside included
    app.add_middleware(RefuseAmbiguousLength)  # outermost: before anything reads the body
    _flat(app, items.store_routes)
    _flat(app, items.routes)
    _flat(app, lookup.routes)
    _flat(app, versions.routes)
    app.include_router(channels.routes)
    app.include_router(writer.routes)
    _flat(app, ops.routes)  # health, metrics
    app.include_router(browse.routes)
    _flat(app, ui.routes({  # the web UI at /
        "name": "engram", "docs": "/docs", "openapi": "/openapi.json", "health": "/healthz",
        "auth": "none (local)" if local else "API key"}))  # fmt: skip
    return app


__all__ = ["ServerConfig", "create_app"]
