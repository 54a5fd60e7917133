"""Bounded lookups the web UI needs to say what is true: several items read at once at one point (does each
still exist there?), and the items that cite one source (``sources``), found by a scan of at most ``scan`` items
in key order. Public ``/v1`` routes like the others, read scope, one worker-thread call each."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from engram.server import schemas as s
from engram.server.deps import AtQuery, BranchQuery, Caller, PrefixQuery, Read, prefix_of, run
from engram.server.errors import StrictRoute
from engram.store.serialize import item_json

routes = APIRouter(prefix="/v1", tags=["versioned"], route_class=StrictRoute)

#: Items one lookup reads at most.
MAX_LOOKUP = 100
#: Items a source scan reads at most (its default reads the first 10,000).
MAX_SCAN = 100_000


class ItemRef(s._Body):
    """One item by namespace and key."""

    namespace: s.Namespace
    key: Annotated[str, Field(min_length=1)]


class Lookup(s._Body):
    """``POST /v1/items/lookup``: read up to 100 items at once, on ``branch`` or as of ``at``."""

    items: list[ItemRef] = Field(max_length=MAX_LOOKUP)
    at: s.RefText | None = None
    branch: str | None = None


class LookupOut(BaseModel):
    """One entry per asked item, in the order asked: the item, or null when it does not exist there."""

    items: list[s.FullItemOut | None]


class SourceItemsOut(BaseModel):
    """The items citing ``source`` among the first ``scanned`` items in key order (``complete``: every item
    under the prefix was scanned; false: the scan or the limit stopped it, narrow ``prefix`` to see more)."""

    source: str
    items: list[s.FullItemOut]
    scanned: int
    complete: bool


@routes.post("/items/lookup", response_model=None, responses=s.responses(LookupOut))
async def v1_lookup(caller: Read, body: Lookup) -> dict[str, Any]:
    """Read up to 100 items at one point at once; a missing (or expired) item is null."""
    wanted = [(caller.who.check(tuple(ref.namespace)), ref.key) for ref in body.items]

    def read() -> list[dict[str, Any] | None]:
        mem = caller.on(body.branch)
        reader = mem.at(body.at) if body.at else mem
        return [item_json(reader.get(ns, key)) for ns, key in wanted]

    return {"items": await run(read)}


@routes.get("/sources/items", response_model=None, responses=s.responses(SourceItemsOut))
async def v1_source_items(
    caller: Read,
    source: Annotated[str, Query(min_length=1, max_length=1000, description="a source id items cite")],
    prefix: PrefixQuery = None,
    at: AtQuery = None,
    branch: BranchQuery = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    scan: Annotated[int, Query(ge=1, le=MAX_SCAN, description="items to scan at most")] = 10_000,
) -> dict[str, Any]:
    """The items whose ``sources`` hold ``source``, scanning at most ``scan`` items (key order) under ``prefix``;
    stops early once ``limit`` are found."""
    return await run(lambda: _source_items(caller, source, prefix_of(prefix), at, branch, limit, scan))


def _source_items(
    caller: Caller, source: str, prefix: tuple[str, ...] | None, at: str | None, branch: str | None, limit: int,
    scan: int,
) -> dict[str, Any]:  # fmt: skip
    mem = caller.on(branch)
    reader = mem.at(at) if at else mem
    found: list[dict[str, Any]] = []
    scanned = 0
    complete = True
    for item in reader.iter_items(caller.who.narrow(prefix) or ()):
        if scanned >= scan or len(found) >= limit:
            complete = False
            break
        scanned += 1
        if source in item.sources:
            found.append(item_json(item) or {})
    return {"source": source, "items": found, "scanned": scanned, "complete": complete}


__all__ = ["routes"]
