"""The item routes: LangGraph Agent Server's ``/store`` routes, and ``/v1``'s items, search and namespaces (with
branches, versions ``at`` a ref, provenance and commits). One library call each, run on a worker thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from engram.errors import ItemNotFoundError
from engram.ops.rerankers import requested_reranker
from engram.server import schemas as s
from engram.server.deps import (
    AtQuery,
    BranchQuery,
    Caller,
    KeyQuery,
    NsQuery,
    PrefixQuery,
    Read,
    Write,
    namespace_of,
    prefix_of,
    run,
)
from engram.server.errors import StrictRoute
from engram.store import SearchResults
from engram.store.operations import NOT_PROVIDED, PutOp
from engram.store.serialize import item_json, search_json
from engram.store.timerank import when_of_json

#: LangGraph's store routes.
store_routes = APIRouter(prefix="/store", tags=["store (LangGraph)"], route_class=StrictRoute)
#: engram's ``/v1`` item routes.
routes = APIRouter(prefix="/v1", tags=["versioned"], route_class=StrictRoute)


def _search(caller: Caller, body: s.SearchItems, branch: str | None = None) -> Callable[[], SearchResults]:
    prefix = caller.who.narrow(body.namespace_prefix) or ()
    rerank = requested_reranker(caller.tenants.config.rerank, getattr(body, "rerank", False))
    when = when_of_json(_json(getattr(body, "when", None)))
    return lambda: caller.on(branch).search(
        prefix, body.query, filter=body.filter, limit=body.limit, offset=body.offset, mode=body.mode,
        profile=body.ranking(), explain=body.explain, min_score=body.min_score, refresh_ttl=body.refresh_ttl,
        at=body.at, rerank=rerank, when=when, reference_time=getattr(body, "reference_time", None),
    )  # fmt: skip


def _json(when: str | s.TimeRange | None) -> str | dict[str, Any] | None:
    """A body's ``when`` as its JSON (a range as an object), as every door hands it to the library."""
    return when.model_dump() if isinstance(when, s.TimeRange) else when


def _namespaces(
    caller: Caller, body: s.ListNamespaces, branch: str | None = None, counts: bool = False
) -> dict[str, Any]:
    prefix = caller.who.narrow_pattern(body.prefix)
    mem = caller.on(branch)
    reader = mem if body.at is None else mem.at(body.at)
    found = reader.list_namespaces(prefix=prefix, suffix=body.suffix, max_depth=body.max_depth, limit=body.limit,
                                   offset=body.offset)  # fmt: skip
    out: dict[str, Any] = {"namespaces": [list(ns) for ns in found]}
    if counts:  # from the counts the tree's nodes keep: O(log n) each, never a listing of items
        out["counts"] = [reader.count(ns) for ns in found]
        out["total"] = None if prefix and "*" in prefix else reader.count(prefix or ())
    return out


@store_routes.put("/items", status_code=204, response_class=Response, responses=s.responses())
async def put_item(caller: Write, body: s.PutItem) -> Response:
    """Store or replace an item (one commit). Leaving ``ttl`` out uses the store's default TTL."""
    ns = caller.who.check(body.namespace)
    ttl = body.ttl if "ttl" in body.model_fields_set else NOT_PROVIDED
    await caller.write(PutOp(ns, body.key, body.value, body.index, ttl))
    return Response(status_code=204)


@store_routes.get("/items", response_model=None, responses=s.responses(s.ItemOut))
async def get_item(
    caller: Read, namespace: NsQuery, key: KeyQuery, refresh_ttl: bool | None = None, at: AtQuery = None
) -> dict[str, Any]:
    """Get an item (404 when there is none); ``at`` reads it as of a ref."""
    ns = caller.who.check(namespace_of(namespace))
    if at is None:
        item = await run(lambda: caller.on().get(ns, key, refresh_ttl=refresh_ttl))
    else:
        item = await run(lambda: caller.on().at(at).get(ns, key))
    if item is None:
        raise ItemNotFoundError(f"no item {'.'.join(ns)} / {key}" + (f" at {at}" if at else ""))
    return item.dict()


@store_routes.delete("/items", status_code=204, response_class=Response, responses=s.responses())
async def delete_item(caller: Write, body: s.DeleteItem) -> Response:
    """Delete an item (one commit; deleting a missing item changes nothing)."""
    ns = caller.who.check(body.namespace)
    await caller.write(PutOp(ns, body.key, None))
    return Response(status_code=204)


@store_routes.post("/items/search", response_model=None, responses=s.responses(s.SearchOut))
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


@store_routes.post("/namespaces", response_model=None, responses=s.responses(s.NamespacesOut))
async def list_namespaces(caller: Read, body: s.ListNamespaces) -> dict[str, Any]:
    """List namespaces holding items; ``*`` in ``prefix``/``suffix`` matches any one label."""
    return await run(lambda: _namespaces(caller, body))


@routes.get("/items", response_model=None, responses=s.responses(s.FullItemOut))
async def v1_get_item(
    caller: Read, namespace: NsQuery, key: KeyQuery, at: AtQuery = None, branch: BranchQuery = None
) -> dict[str, Any]:
    """Get an item with its expiry and provenance, on a branch or as of a ref."""
    ns = caller.who.check(namespace_of(namespace))
    item = await run(lambda: (caller.on(branch).at(at) if at else caller.on(branch)).get(ns, key))
    found = item_json(item)
    if found is None:
        raise ItemNotFoundError(f"no item {'.'.join(ns)} / {key}" + (f" at {at}" if at else ""))
    return found


@routes.put("/items", response_model=None, responses=s.responses(s.CommitResult))
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


@routes.delete("/items", response_model=None, responses=s.responses(s.CommitResult))
async def v1_delete_item(
    caller: Write,
    namespace: NsQuery,
    key: KeyQuery,
    branch: BranchQuery = None,
    message: str | None = None,
    author: str | None = None,
) -> dict[str, Any]:
    """Delete an item as one commit on ``branch`` (with the commit's ``author`` and ``message``, when given);
    returns the commit (the head when nothing changed)."""
    ns = caller.who.check(namespace_of(namespace))
    if message is None and author is None:
        made = await caller.write(PutOp(ns, key, None), branch)
    else:
        made = await caller.commit(lambda: caller.on(branch).delete(ns, key, author=author, message=message), branch)
    return caller.committed(made, branch)


@routes.post("/search", response_model=None, responses=s.responses(s.SearchV1Out))
async def v1_search(caller: Read, body: s.SearchV1) -> dict[str, Any]:
    """Search a branch (or the version ``at``); says which mode ran and why it was degraded."""
    return search_json(await run(_search(caller, body, body.branch)))


@routes.post("/context", response_model=None, responses=s.responses(s.ContextOut))
async def v1_context(caller: Read, body: s.ContextV1) -> dict[str, Any]:
    """The memories most relevant to ``query`` as one block of prompt text within ``budget_tokens`` (current
    facts only, each once, most relevant first, each line with its date and source ids), on a branch or as of
    ``at``; with the list of what it holds."""
    prefix = caller.who.narrow(body.namespace_prefix) or ()
    when = when_of_json(_json(body.when))
    found = await run(lambda: caller.on(body.branch).context(
        prefix, body.query, budget_tokens=body.budget_tokens, filter=body.filter, candidates=body.candidates,
        mode=body.mode, at=body.at, when=when, reference_time=body.reference_time))  # fmt: skip
    return found.dict()


@routes.get("/namespaces", response_model=None, responses=s.responses(s.NamespacesOut))
async def v1_namespaces(
    caller: Read,
    prefix: PrefixQuery = None,
    max_depth: Annotated[int | None, Query(ge=1)] = None,
    limit: Annotated[int, Query(ge=0, le=s.MAX_LIMIT)] = 100,
    offset: Annotated[int, Query(ge=0, le=s.MAX_OFFSET)] = 0,
    at: AtQuery = None,
    branch: BranchQuery = None,
    counts: Annotated[bool, Query(description="add each namespace's item count and the prefix's total")] = False,
) -> dict[str, Any]:
    """List namespaces holding items under a prefix; with ``counts``, how many items each holds (its
    sub-namespaces' included) and how many the prefix holds (``total``; null for a prefix with ``*``)."""
    labels = prefix_of(prefix)
    body = s.ListNamespaces(prefix=None if not labels else list(labels), max_depth=max_depth, limit=limit,
                            offset=offset, at=at)  # fmt: skip
    return await run(lambda: _namespaces(caller, body, branch, counts))


__all__ = ["routes", "store_routes"]
