"""The versioning routes of ``/v1``: log, show, diff, history, branches, tags, merge, revert, reset, and the
operator's gc and fsck. One library call each, run on a worker thread; the verbs that reach every namespace
refuse a key restricted to a namespace prefix."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi import Path as PathParam

from engram.objects import Commit
from engram.server import schemas as s
from engram.server.deps import (
    REF_HELP,
    Admin,
    BranchQuery,
    KeyQuery,
    NsQuery,
    PrefixQuery,
    Read,
    RefQuery,
    Write,
    namespace_of,
    prefix_of,
    run,
)
from engram.server.errors import StrictRoute
from engram.store.serialize import change_json, commit_json, details_json, version_json

routes = APIRouter(prefix="/v1", tags=["versioned"], route_class=StrictRoute)


@routes.get("/log", response_model=None, responses=s.responses(s.LogOut))
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
        scope: tuple[str, ...] | None = caller.who.check(prefix_of(namespace) or ())
    else:
        scope = caller.who.narrow(prefix_of(namespace))
    commits = await run(lambda: caller.on(branch).log(ref, namespace=scope, key=key, limit=limit))
    return {"commits": [commit_json(c) for c in commits]}


@routes.get("/commits/{ref:path}", response_model=None, responses=s.responses(s.ShowOut))
async def v1_show(
    caller: Read, ref: Annotated[str, PathParam(description=REF_HELP)], branch: BranchQuery = None
) -> dict[str, Any]:
    """One commit and the item changes it made (for a restricted key, only those under its prefix)."""
    details = await run(lambda: caller.on(branch).show(ref))
    return details_json(details, caller.who.namespace_prefix)


@routes.get("/diff", response_model=None, responses=s.responses(s.DiffOut))
async def v1_diff(
    caller: Read, old: RefQuery, new: RefQuery = "HEAD", namespace: PrefixQuery = None, branch: BranchQuery = None
) -> dict[str, Any]:
    """Items that differ between versions ``old`` and ``new``, optionally under a namespace prefix; ``old`` may
    name both sides as git does: ``main...hotfix`` (what hotfix introduces since the merge base) or
    ``main..hotfix`` (the same as old=main&new=hotfix). ``old_commit`` and ``new_commit`` name the commits
    compared (for ``main...hotfix``, the merge base: null when the two share no commit)."""
    scope = caller.who.narrow(prefix_of(namespace)) or ()

    def diff() -> dict[str, Any]:
        mem = caller.on(branch)
        start, end = mem.diff_sides(old, new)  # diffed by id: the changes are those of the commits named
        sides = (old, new) if start is None else (start.id.hex(), end.id.hex())
        changes = mem.diff(*sides, namespace=scope)
        return {"changes": [change_json(c) for c in changes], "new_commit": end.id.hex(),
                "old_commit": None if start is None else start.id.hex()}  # fmt: skip

    return await run(diff)


@routes.get("/history", response_model=None, responses=s.responses(s.HistoryOut))
async def v1_history(
    caller: Read, namespace: NsQuery, key: KeyQuery, ref: RefQuery = "HEAD", branch: BranchQuery = None
) -> dict[str, Any]:
    """Every version of one item, newest first, each with the commit that made it (blame)."""
    ns = caller.who.check(namespace_of(namespace))
    versions = await run(lambda: caller.on(branch).history(ns, key, ref))
    return {"versions": [version_json(v) for v in versions]}


@routes.get("/branches", response_model=None, responses=s.responses(s.RefsOut))
async def v1_branches(caller: Read) -> dict[str, Any]:
    """Branch name -> head commit id (a prefix-restricted key sees the writer's review branches of its own
    targets only)."""
    refs = await run(lambda: caller.on().branches())
    return {"refs": {name: cid for name, cid in refs.items() if caller.who.sees_branch(name)}}


@routes.post("/branches", status_code=201, response_model=None, responses=s.responses(s.RefOut, 201))
async def v1_create_branch(caller: Write, body: s.CreateRef) -> dict[str, Any]:
    """Create a branch at version ``at`` (``HEAD`` is the head of ``branch``)."""

    def create() -> dict[str, Any]:
        mem = caller.on(body.branch)
        mem.create_branch(body.name, body.at)
        return {"name": body.name, "commit": mem.branches()[body.name]}

    return await caller.commit(create, body.name)


@routes.delete("/branches/{name:path}", status_code=204, response_class=Response, responses=s.responses())
async def v1_delete_branch(caller: Admin, name: str, branch: BranchQuery = None) -> Response:
    """Delete a branch (not the one named by ``branch``, the server's by default); not with a key restricted
    to a namespace prefix, since a branch holds every namespace."""
    caller.who.require_unrestricted("delete a branch")
    await run(lambda: caller.on(branch).delete_branch(name))
    return Response(status_code=204)


@routes.get("/tags", response_model=None, responses=s.responses(s.RefsOut))
async def v1_tags(caller: Read) -> dict[str, Any]:
    """Tag name -> commit id."""
    return {"refs": await run(lambda: caller.on().tags())}


@routes.post("/tags", status_code=201, response_model=None, responses=s.responses(s.RefOut, 201))
async def v1_create_tag(caller: Write, body: s.CreateRef) -> dict[str, Any]:
    """Name version ``at`` (``HEAD`` is the head of ``branch``); tags never move."""

    def create() -> dict[str, Any]:
        mem = caller.on(body.branch)
        mem.tag(body.name, body.at)
        return {"name": body.name, "commit": mem.tags()[body.name]}

    return await run(create)


@routes.delete("/tags/{name:path}", status_code=204, response_class=Response, responses=s.responses())
async def v1_delete_tag(caller: Admin, name: str) -> Response:
    """Delete a tag (not with a key restricted to a namespace prefix)."""
    caller.who.require_unrestricted("delete a tag")
    await run(lambda: caller.on().delete_tag(name))
    return Response(status_code=204)


@routes.post("/merge", response_model=None, responses=s.responses(s.MergeOut))
async def v1_merge(caller: Write, body: s.Merge) -> dict[str, Any]:
    """Merge ``source`` into ``into`` with a two-parent commit; conflicts the strategy leaves are a 409.
    ``up_to_date`` is true (and the head unchanged) when ``into`` already had everything in ``source``."""
    caller.who.require_unrestricted("merge")
    done = await caller.commit(lambda: caller.on(body.into).merge_outcome(
        body.source, strategy=body.strategy, message=body.message, author=body.author), body.into)  # fmt: skip
    return {**caller.committed(done.commit, body.into), "up_to_date": done.up_to_date}


@routes.post("/revert", response_model=None, responses=s.responses(s.RevertOut))
async def v1_revert(caller: Write, body: s.Revert) -> dict[str, Any]:
    """Undo what commit ``ref`` changed, with a new commit on ``branch``; ``nothing_to_revert`` is true (and the
    head unchanged) when the branch already lacked those changes."""
    caller.who.require_unrestricted("revert")

    def revert() -> tuple[Commit, bool]:
        mem = caller.on(body.branch)
        target = mem.resolve(body.ref).id
        before = mem.head.id
        made = mem.revert(target.hex(), strategy=body.strategy, author=body.author, message=body.message)
        # a commit the revert wrote is new and records what it reverts; the head it returned otherwise is not
        return made, made.id == before or made.metadata.get("reverts") != target.hex()

    made, nothing = await caller.commit(revert, body.branch)
    return {**caller.committed(made, body.branch), "nothing_to_revert": nothing}


@routes.post("/reset", response_model=None, responses=s.responses(s.ResetOut))
async def v1_reset(caller: Admin, body: s.Reset) -> dict[str, Any]:
    """Move ``branch`` to version ``ref`` (the old head stays in the reflog)."""
    caller.who.require_unrestricted("reset")

    def reset() -> dict[str, Any]:
        mem = caller.on(body.branch)
        mem.reset(body.ref)
        return {"branch": mem.branch, "commit": commit_json(mem.head)}

    return await caller.commit(reset, body.branch)


@routes.post("/gc", response_model=None, responses=s.responses(s.GcOut))
async def v1_gc(caller: Admin, body: s.Gc) -> dict[str, Any]:
    """Delete chunks no ref or reflog entry reaches (chunks younger than 10 minutes are kept)."""
    caller.who.require_unrestricted("gc")
    keep = None if body.keep_reflog_days is None else timedelta(days=body.keep_reflog_days)
    report = await run(lambda: caller.on().gc(keep))
    return {"kept": report.kept, "removed": report.removed, "reflog_pruned": report.reflog_pruned}


@routes.get("/fsck", response_model=None, responses=s.responses(s.FsckOut))
async def v1_fsck(caller: Admin) -> dict[str, Any]:
    """Verify every reachable chunk exists and hashes right."""
    caller.who.require_unrestricted("fsck")
    report = await run(lambda: caller.on().fsck())
    return {"ok": report.ok, "commits": report.commits, "nodes": report.nodes, "missing": report.missing,
            "corrupt": report.corrupt}  # fmt: skip


__all__ = ["routes"]
