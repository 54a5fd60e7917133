"""HTTP routes the web UI needs beyond the versioning verbs: a paged, filtered timeline and
"who am I" (so a client can hide what its key may not do). Public API like every ``/v1`` route, one library
call each."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from engram.errors import InvalidInputError
from engram.server.deps import PrefixQuery, Read, RefQuery, prefix_of, run
from engram.server.errors import StrictRoute
from engram.server.schemas import CommitOut, responses
from engram.store.serialize import commit_json
from engram.store.timeline import MAX_SCAN, Touched, timeline

routes = APIRouter(route_class=StrictRoute, tags=["versioned"])


class TouchedOut(BaseModel):
    """A namespace a commit changed: how many of its counted changes are there, and the first keys."""

    namespace: list[str]
    changed: int
    keys: list[str]


class TimelineCommit(CommitOut):
    """A commit and how many items it changed (under the namespace filter; ``changed_capped``: at least); the
    number of items after it (``items``) and the change from its first parent (``items_delta``); the first
    namespaces it touched (``touched``) and how many it touched (``touched_namespaces``)."""

    changed: int
    changed_capped: bool
    items: int
    items_delta: int
    touched: list[TouchedOut]
    touched_namespaces: int


class TimelineOut(BaseModel):
    """One page of commits, newest first; pass ``cursor`` back for the next (null: no more)."""

    commits: list[TimelineCommit]
    cursor: str | None
    scanned: int


class WhoAmI(BaseModel):
    """The caller an API key makes (``local``: a server without keys, every caller holds every scope)."""

    tenant: str
    scopes: list[str]
    namespace_prefix: list[str]
    author: str
    local: bool
    branch: str


def _time(name: str, text: str | None) -> datetime | None:
    """An ISO 8601 time of a query parameter (no offset: UTC)."""
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInputError(f"{name} must be an ISO 8601 time such as 2026-11-20T11:15:00Z, not {text!r}") from None


@routes.get("/v1/timeline", response_model=None, responses=responses(TimelineOut))
async def v1_timeline(
    caller: Read,
    ref: RefQuery = "HEAD",
    branch: Annotated[str | None, Query(min_length=1, description="branch (default: the server's)")] = None,
    namespace: PrefixQuery = None,
    key: Annotated[str | None, Query(min_length=1, description="only commits that changed this key")] = None,
    author: Annotated[str | None, Query(min_length=1, description="only commits by this author")] = None,
    since: Annotated[str | None, Query(description="only commits at or after this ISO 8601 time")] = None,
    until: Annotated[str | None, Query(description="only commits at or before this ISO 8601 time")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: Annotated[str | None, Query(min_length=1, max_length=20_000, description="from the last page")] = None,
    max_scan: Annotated[int, Query(ge=1, le=100_000, description="commits looked at per page, at most")] = MAX_SCAN,
    all_branches: Annotated[bool, Query(description="every branch's commits together (instead of ref)")] = False,
) -> dict[str, Any]:
    """A page of commits reachable from ``ref`` (``all_branches``: from every branch head at once), newest first,
    each with the number of items it changed; filtered by namespace prefix, key, author and time. A page ends
    after ``limit`` commits or ``max_scan`` commits looked at; ``cursor`` continues (null: the history ends)."""
    if key is not None:
        scope: tuple[str, ...] | None = caller.who.check(prefix_of(namespace) or ())
    else:
        scope = caller.who.narrow(prefix_of(namespace))
    after, before = _time("since", since), _time("until", until)
    page = await run(lambda: timeline(
        caller.on(branch), ref, namespace=scope, key=key, author=author, since=after, until=before, limit=limit,
        cursor=cursor, max_scan=max_scan, all_branches=all_branches))  # fmt: skip
    commits = [{**commit_json(e.commit), "changed": e.changed, "changed_capped": e.capped, "items": e.items,
                "items_delta": e.delta, "touched": [_touched(t) for t in e.touched], "touched_namespaces": e.namespaces}
               for e in page.entries]  # fmt: skip
    return {"commits": commits, "cursor": page.cursor, "scanned": page.scanned}


def _touched(touched: Touched) -> dict[str, Any]:
    return {"namespace": list(touched.namespace), "changed": touched.changed, "keys": list(touched.keys)}


@routes.get("/v1/whoami", response_model=None, responses=responses(WhoAmI))
async def v1_whoami(caller: Read) -> dict[str, Any]:
    """The caller's tenant, scopes and namespace restriction (clients hide what the key may not do)."""
    who = caller.who
    scopes = sorted(s for s in ("read", "write", "admin", "system") if who.holds(s))
    return {"tenant": caller.tenant, "scopes": scopes, "namespace_prefix": list(who.namespace_prefix),
            "author": who.author, "local": who.key_id is None, "branch": caller.branch}  # fmt: skip


__all__ = ["routes"]
