"""Operations routes: ``/healthz`` (alive), ``/readyz`` (ready, and each component's status and latency) and
``/metrics`` (Prometheus text format); one library call each (:mod:`engram.ops.health`, :mod:`engram.ops.metrics`).

Auth: ``/healthz`` and ``/readyz`` answer without a key (orchestrators' probes carry none), but on a server with
API keys ``/readyz`` tells such a caller only whether the server is ready: 200 ``{"status": "ok"}`` or 503
``not_ready``, no component, latency or error. Its details (what ``engram doctor`` prints) need a key with the
``admin`` scope and no namespace prefix, the rule of the other operator routes (``/v1/gc``, ``/v1/fsck``), which
``/metrics`` follows too; without keys every caller is an admin. Even then what they show is scrubbed
(:func:`engram.redaction.scrub_value`): no credential, no file system or socket path.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from engram.errors import EngramError
from engram.ops import metrics
from engram.ops.access import LOCAL_TENANT, key_from_headers
from engram.ops.health import TIMEOUT, Check, Readiness, readiness
from engram.ops.remotes.config import remote_config
from engram.ops.shards.health import ShardProbe
from engram.redaction import scrub, scrub_value
from engram.repo import Repository
from engram.runtime import Threads
from engram.server import schemas as s
from engram.server.consistency import ReplicaRouter
from engram.server.deps import RequestKey, State
from engram.server.errors import ErrorBody, StrictRoute, error_response
from engram.store import Memory
from engram.store.connect import local_file

routes = APIRouter(route_class=StrictRoute, tags=["health"])
#: Threads that answer readiness probes and scrapes, apart from the request threads (which may all be waiting
#: on a store that is down).
_THREADS = Threads("engram-readyz", 2)  # owned by engram.runtime: close_all stops them


@dataclass
class _Ops:
    """What one app's ops routes share: the target readiness probes (one object, so a hung probe is shared
    by later checks instead of piling up), and the tracking of its tenants and disk for ``/metrics``."""

    state: State
    replicas_router: ReplicaRouter | None = None

    def __post_init__(self) -> None:
        metrics.track_pool(self.state.tenants.pool)
        path = local_file(self.state.config.store)
        if path is not None:
            metrics.track_disk(path.parent, name="store")
        router, catalog = self.state.tenants.router, self.state.config.shard_catalog
        #: With a shard catalog: the catalog and every shard are probed too, and decide readiness.
        self.essential = {} if router is None or catalog is None else {
            "shards": ShardProbe(catalog, known=lambda: router.map(refresh=False))
        }  # fmt: skip

    def __call__(self) -> Repository | Memory:
        """The served store (a server without keys), else the base store readiness writes to."""
        tenants = self.state.tenants
        if tenants.local:
            with tenants.pool.lease(LOCAL_TENANT) as memory:
                return memory
        return tenants.probe()

    def remotes(self) -> dict[str, str]:
        """The remotes named for the probed store (``engram remote add``)."""
        found = self()
        return remote_config(found.repo if isinstance(found, Memory) else found, self.state.config.store).list()

    def check(self, timeout: float = TIMEOUT) -> Readiness:
        """Readiness of every component, within ``timeout`` seconds."""
        return readiness(self, timeout=timeout, remotes=self.remotes, essential=self.essential,
                         components={"replicas": self.replicas})  # fmt: skip

    def replicas(self) -> Check | None:
        """Each read replica's state and lag (seconds behind the primary, as last probed), per tenant that read
        from them; None without replicas. A replica that is down makes the status ``degraded``."""
        router = self.replicas_router
        if router is None or not router.enabled:
            return None
        tenants = router.status()
        down = sorted(f"{tenant}/{found['name']}" for tenant, found_all in tenants.items() for found in found_all
                      if not found["up"])  # fmt: skip
        check: Check = {"ok": not down, "tenants": tenants, "down": down}
        if down:
            check["error"] = f"read replica(s) down: {', '.join(down)}; reads go to the primary"
        return check


def _ops(request: Request) -> _Ops:
    found: _Ops | None = getattr(request.app.state, "engram_ops", None)
    if found is None:
        replicas = getattr(request.app.state, "replicas", None)
        found = request.app.state.engram_ops = _Ops(request.app.state.engram, replicas)
    return found


async def _check(request: Request) -> Readiness:
    # Its own threads: requests queued on a database that is down must not delay the answer.
    return await asyncio.get_running_loop().run_in_executor(_THREADS.get(), _ops(request).check)


@routes.get("/healthz", response_model=None, responses={200: {"model": s.Health}})
async def healthz() -> dict[str, Any]:
    """Liveness: the process serves requests."""
    return {"status": "ok", "checks": {}}


@routes.get("/readyz", response_model=None, responses={200: {"model": s.Health}, 503: {"model": ErrorBody}})
async def readyz(request: Request) -> JSONResponse:
    """Readiness, within a second: the store answers a read and a write, and with a shard catalog the catalog
    and every active shard answer (else 503). Without a key (or a key that is not an unrestricted ``admin``) on a
    server with keys, that is all it says. An admin also sees each component: the cache, embedder, search index,
    remotes, circuit breakers and readonly or draining shards are reported too, and one that fails makes the
    status ``degraded`` (still 200: the store answers without it); a 503 names what failed."""
    report = await _check(request)
    if not _admin(request.app.state.engram, key_from_headers(request.headers)):  # read here, not declared
        if not report.ready:
            return error_response(503, "not_ready", "the server is not ready", None, {"Retry-After": "1"})
        return JSONResponse({"status": "ok", "checks": {}})
    checks: dict[str, Any] = scrub_value(report.checks)
    if not report.ready:
        name = next(n for n in ("store", *_ops(request).essential) if n in checks and not checks[n]["ok"])
        reason = checks[name].get("error", "no answer")
        what = "the shards are" if name == "shards" else f"the {name} is"
        return error_response(503, "not_ready", scrub(f"{what} not ready: {reason}"), {"checks": checks},
                              {"Retry-After": "1"})  # fmt: skip
    return JSONResponse({"status": report.status, "checks": checks})


def _admin(state: State, secret: str | None) -> bool:
    """True when the caller may see the readiness details: an ``admin`` key without a namespace prefix, or any
    caller of a server without keys. A missing, unknown or weaker key is no error here: the caller gets the
    short answer (an orchestrator's probe must not fail on a key that was rotated)."""
    if state.local:
        return True
    if not secret:
        return False
    try:
        who = state.authenticate(secret)
    except EngramError:
        return False
    return who.holds("admin") and not who.namespace_prefix


@routes.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {metrics.CONTENT_TYPE: {}}, "description": "Prometheus text format"},
               **s.responses()},
)  # fmt: skip
async def metrics_text(request: Request, secret: RequestKey) -> Response:
    """Every engram metric in the Prometheus text format, readiness checked first (``engram_ready``); needs the
    ``admin`` scope on a server with keys."""
    state: State = request.app.state.engram
    who = state.authenticate(secret)
    who.require("admin")
    who.require_unrestricted("read the metrics")
    await _check(request)
    body = await asyncio.get_running_loop().run_in_executor(_THREADS.get(), metrics.exposition)
    return Response(body, media_type=metrics.CONTENT_TYPE)


__all__ = ["routes"]
