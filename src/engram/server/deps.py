"""What every route of the HTTP API shares: the app's :class:`State`, the :class:`Caller` a request makes (the
``Read``/``Write``/``Admin`` dependencies), :func:`run`, and the query parameters the routes have in common.

The route modules (:mod:`engram.server.items`, :mod:`~engram.server.versions`, :mod:`~engram.server.channels`,
:mod:`~engram.server.writer`, :mod:`~engram.server.browse`, :mod:`~engram.server.ops`) import this module;
:mod:`engram.server.app` imports them and builds the app.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Query, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import StringConstraints
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import State as RequestState

from engram.objects import Commit
from engram.ops.access import LOCAL, KeyRing, Principal, authenticate, key_from_headers
from engram.ops.services import TenantServices
from engram.server.config import ServerConfig, Tenants
from engram.server.consistency import note_commit, note_written, routed
from engram.store import Memory
from engram.store.aio import check_put
from engram.store.operations import PutOp
from engram.store.serialize import commit_json

T = TypeVar("T")


async def run(fn: Callable[[], T]) -> T:
    """Run one library call on a worker thread (the core is synchronous)."""
    return await run_in_threadpool(fn)


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
    #: Who serves this request's reads, and where its write's token goes (engram.server.consistency).
    served_by: str = "primary"
    request_state: RequestState | None = None

    def services(self) -> TenantServices:
        """The tenant's services (one channels hub, one memory writer, kept with its store); act through them with
        this caller's handle (``services().channels.for_caller(self.on())``)."""
        return self.tenants.services(self.tenant, self.memory)

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
        await note_written(self, branch or self.branch, done)  # the consistency token
        return done


_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="X-API-Key: <API key>")


def api_key(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    header: Annotated[str | None, Depends(_api_key)],
) -> str | None:
    """The API key of a request, read by :func:`engram.ops.access.key_from_headers` (the rule of every door).

    ``bearer`` and ``header`` declare the two ways to send a key, so the OpenAPI document lists them; the key
    itself comes from the one rule."""
    return key_from_headers(request.headers)


RequestKey = Annotated[str | None, Depends(api_key)]


def _caller(scope: str) -> Callable[..., AsyncIterator[Caller]]:
    async def dependency(request: Request, secret: RequestKey) -> AsyncIterator[Caller]:
        state: State = request.app.state.engram
        who = state.authenticate(secret)
        who.require(scope)
        pool = state.tenants.pool
        memory = pool.try_acquire(who.tenant)
        if memory is None:
            memory = await run_in_threadpool(pool.acquire, who.tenant)
        caller = Caller(who, who.tenant, memory, state.config.branch, state.tenants)
        try:
            async with routed(request, caller, scope):  # read replicas and consistency tokens
                yield caller
        finally:
            pool.release(who.tenant, memory)

    return dependency


#: A caller with the ``read`` scope (the route's first parameter).
Read = Annotated[Caller, Depends(_caller("read"))]
#: A caller with the ``write`` scope.
Write = Annotated[Caller, Depends(_caller("write"))]
#: A caller with the ``admin`` scope.
Admin = Annotated[Caller, Depends(_caller("admin"))]


def namespace_of(values: list[str]) -> tuple[str, ...]:
    """A namespace from query parameters: one dot-joined value (``a.b``) or one value per label."""
    return tuple(values[0].split(".")) if len(values) == 1 else tuple(values)


def prefix_of(text: str | None) -> tuple[str, ...] | None:
    """An optional dot-joined namespace prefix; empty means the root."""
    return None if text is None else tuple(text.split(".")) if text else ()


_DOTTED = r"^[^.]+(\.[^.]+)*$"
#: A ref expression, as the query parameters and path segments that take one describe it.
REF_HELP = "a ref: branch, tag, commit id, HEAD~n, main@{ISO time}"
NsQuery = Annotated[
    list[Annotated[str, StringConstraints(pattern=_DOTTED)]],
    Query(min_length=1, description="namespace, dot-joined (a.b) or repeated (namespace=a&namespace=b)"),
]
KeyQuery = Annotated[str, Query(description="item key")]
RefQuery = Annotated[str, Query(min_length=1, description=REF_HELP)]
AtQuery = Annotated[str | None, Query(min_length=1, description="read as of " + REF_HELP)]
BranchQuery = Annotated[str | None, Query(min_length=1, description="branch (default: the server's, main)")]
PrefixQuery = Annotated[
    str | None, Query(pattern=r"^([^.]+(\.[^.]+)*)?$", description="namespace prefix, dot-joined (a.b); empty: root")
]

__all__ = [
    "REF_HELP",
    "Admin",
    "AtQuery",
    "BranchQuery",
    "Caller",
    "KeyQuery",
    "NsQuery",
    "PrefixQuery",
    "Read",
    "RefQuery",
    "RequestKey",
    "State",
    "Write",
    "api_key",
    "namespace_of",
    "prefix_of",
    "run",
]
