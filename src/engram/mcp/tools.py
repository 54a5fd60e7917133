"""The memory tools of the MCP server: each one a library call with a strict JSON schema of arguments and an access
guard, in :data:`MEMORY_TOOLS` (a :class:`~engram.mcp.registry.Registry`).

Each tool has a description, the JSON schema of its arguments, the scope it needs (``read`` or ``write``) and the
guard that applies a caller's namespace prefix (the HTTP API's access policy). Namespaces are JSON arrays of labels
(``["users", "alice"]``); versions are ref expressions (``main``, a tag, a commit id, ``HEAD~2``,
``main@{2026-11-20T11:15:00Z}``).
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Literal

from engram.embed.rerank import Reranker
from engram.mcp.registry import (
    AT,
    AUTHOR,
    BRANCH,
    KEY,
    MESSAGE,
    NAMESPACE,
    REF_HELP,
    REFERENCE_TIME,
    STRATEGY,
    WHEN,
    Guard,
    Registry,
    Strategy,
    choice,
    integer,
    labels,
    string,
)
from engram.ops.access import Principal
from engram.store import Memory
from engram.store.operations import NOT_PROVIDED, Mode
from engram.store.ranking import PROFILES
from engram.store.serialize import change_json, commit_json, item_json, version_json
from engram.store.timerank import when_of_json

#: The memory tools, by name, in the order clients list them.
MEMORY_TOOLS = Registry()


def _checked(who: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """One item's namespace: it must lie under the caller's prefix."""
    return {**args, "namespace": list(who.check(args["namespace"]))}


def _narrowed(who: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A namespace prefix: narrowed to the caller's prefix (refused when they do not overlap)."""
    return {**args, "namespace": list(who.narrow(args["namespace"]) or ())}


def _listing(who: Principal, args: dict[str, Any]) -> dict[str, Any]:
    narrowed = who.narrow_pattern(args.get("prefix"))
    return {**args, "prefix": None if narrowed is None else list(narrowed)}


def _log(who: Principal, args: dict[str, Any]) -> dict[str, Any]:
    if args.get("key") is not None:
        return {**args, "namespace": list(who.check(args.get("namespace") or ()))}
    narrowed = who.narrow(args.get("namespace"))
    return {**args, "namespace": None if narrowed is None else list(narrowed)}


def _everywhere(action: str) -> Guard:
    """A verb that reaches every namespace: not for a key restricted to a prefix."""

    def guard(who: Principal, args: dict[str, Any]) -> dict[str, Any]:
        who.require_unrestricted(action)
        return args

    return guard


def _on(memory: Memory, branch: str | None, author: str | None = None) -> Memory:
    """The handle to write through: the server's, or one on ``branch`` / as ``author``."""
    if (branch is None or branch == memory.branch) and author is None:
        return memory
    return memory.handle(branch, author=author)


@MEMORY_TOOLS.tool(
    guard=_narrowed,
    read_only=True,
    namespace=labels('Namespace prefix to search under, e.g. ["users"]; [] searches everything.', default=[]),
    query=string("What to look for, in words. Omit to list items newest first (by updated_at)."),
    filter={
        "type": "object",
        "description": "MongoDB-style filter on the value's fields (dotted paths), e.g. "
        '{"kind": "preference", "confidence": {"$gte": 0.7}}. Operators: $eq $ne $gt $gte $lt $lte $in $nin '
        "$all $size $exists $and $or $nor $not $regex $contains $between.",
    },
    limit=integer("Most items to return.", 10),
    offset=integer("Items to skip, for paging.", 0, minimum=0, maximum=1_000_000),
    mode=choice(
        ["hybrid", "semantic", "keyword"],
        "hybrid (keywords and meaning, fused), semantic or keyword. Default: hybrid when the store has an "
        "embedder, else keyword.",
    ),
    profile=choice(
        list(PROFILES),
        "Ranking: similarity only, or mixed with confidence and recency (balanced, recent, quality).",
        default="similarity",
    ),
    explain={"type": "boolean", "default": False, "description": "Add each signal's score to every result."},
    min_score={"type": "number", "description": "Leave out results scoring below this."},
    at=AT,
    rerank={
        "type": "boolean",
        "default": False,
        "description": "Rerank the top candidates with the server's cross-encoder (slower, often better); an "
        "error when the server has none.",
    },
    when=WHEN,
    reference_time=REFERENCE_TIME,
)
def memory_search(
    memory: Memory, *, namespace: list[str], query: str | None = None, filter: dict[str, Any] | None = None,
    limit: int, offset: int, mode: Mode | None = None, profile: str, explain: bool, min_score: float | None = None,
    at: str | None = None, rerank: Reranker | None, when: str | dict[str, Any] | None = None,
    reference_time: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Find memories by meaning and keywords under a namespace prefix, filtered and ranked (best first).

    Without a query it lists items newest first. Returns {mode, requested_mode, degraded, items, has_more,
    next_offset} (has_more: more results follow; ask again with offset=next_offset): each item
    has namespace, key, value, created_at, updated_at, expires_at, author, sources and score; `degraded` says
    why a search ran in a weaker mode than asked (e.g. the embedder failed), else null.
    """
    results = memory.search(
        namespace, query, filter=filter, limit=limit, offset=offset, mode=mode, profile=profile, explain=explain,
        min_score=min_score, at=at, rerank=rerank, when=when_of_json(when), reference_time=reference_time,
    )  # fmt: skip
    items = [item_json(item) for item in results]
    return {"mode": results.mode, "requested_mode": results.requested_mode, "degraded": results.degraded,
            "items": items, "has_more": results.has_more, "next_offset": results.next_offset}  # fmt: skip


@MEMORY_TOOLS.tool(
    guard=_narrowed,
    required=("query",),
    read_only=True,
    namespace=labels('Namespace prefix to read under, e.g. ["users", "alice"]; [] reads everything.', default=[]),
    query=string("What the prompt is about, in words."),
    budget_tokens=integer("Most tokens the block may take.", 1000, maximum=1_000_000),
    filter={"type": "object", "description": "MongoDB-style filter on the value's fields, as in memory_search."},
    candidates=integer("Search hits the block is chosen from.", 50),
    mode=choice(["hybrid", "semantic", "keyword"], "The search mode, as in memory_search."),
    at=AT,
    when=WHEN,
    reference_time=REFERENCE_TIME,
)
def memory_context(
    memory: Memory, *, namespace: list[str], query: str, budget_tokens: int, filter: dict[str, Any] | None = None,
    candidates: int, mode: Mode | None = None, at: str | None = None, when: str | dict[str, Any] | None = None,
    reference_time: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The memories most relevant to a query as one block of prompt text within a token budget: current facts
    only, each once, most relevant first, each line "[date] text (source: ids)"; `at` gives what was known then.

    Returns {text, items, tokens, budget_tokens, tokenizer, mode, degraded, left_out, duplicates, superseded}:
    paste `text` into a prompt; `items` lists each line's namespace, key, score and tokens.
    """
    return memory.context(namespace, query, budget_tokens=budget_tokens, filter=filter, candidates=candidates,
                          mode=mode, at=at, when=when_of_json(when), reference_time=reference_time).dict()  # fmt: skip


@MEMORY_TOOLS.tool(required=("namespace", "key"), read_only=True, namespace=NAMESPACE, key=KEY, at=AT, guard=_checked)
def memory_get(memory: Memory, *, namespace: list[str], key: str, at: str | None = None) -> dict[str, Any]:
    """Read one memory by namespace and key, now or as of a past version (`at`).

    Returns {item}: namespace, key, value, timestamps, author and sources; item is null when there is none.
    """
    return {"item": item_json((memory.at(at) if at else memory).get(namespace, key))}


@MEMORY_TOOLS.tool(
    guard=_checked,
    required=("namespace", "key", "value"),
    namespace=NAMESPACE,
    key=KEY,
    value={"type": "object", "description": 'The memory: any JSON object, e.g. {"text": "prefers dark mode"}.'},
    index={
        "anyOf": [
            {"type": "boolean", "const": False},
            {"type": "array", "items": {"type": "string", "minLength": 1}},
        ],
        "description": "What of the value is searchable: false (nothing; still readable and listed) or field "
        'paths such as ["text", "tags[*]"]. Default: the store\'s setting (all text).',
    },
    ttl={
        "type": ["number", "null"],
        "exclusiveMinimum": 0,
        "description": "Minutes until the item expires; null: never. Default: the store's TTL setting.",
    },
    author=AUTHOR,
    sources={
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "default": [],
        "description": "Ids of the messages or inputs this memory came from (provenance).",
    },
    message=MESSAGE,
    branch=BRANCH,
)
def memory_write(
    memory: Memory, *, namespace: list[str], key: str, value: dict[str, Any],
    index: Literal[False] | list[str] | None = None, ttl: float | None = NOT_PROVIDED, author: str | None = None,
    sources: list[str], message: str | None = None, branch: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Store a memory (or replace the one at namespace + key) as one commit.

    Returns {commit}: id, short_id, parents, time, author, message.
    """
    commit = _on(memory, branch).put(
        namespace, key, value, index, ttl=ttl, author=author, sources=sources, message=message
    )
    return {"commit": commit_json(commit)}


@MEMORY_TOOLS.tool(
    guard=_checked,
    required=("namespace", "key"),
    destructive=True,
    namespace=NAMESPACE,
    key=KEY,
    author=AUTHOR,
    message=MESSAGE,
    branch=BRANCH,
)
def memory_delete(
    memory: Memory, *, namespace: list[str], key: str, author: str | None = None, message: str | None = None,
    branch: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Delete a memory as one commit (its history stays readable; memory_revert brings it back).

    Returns {commit}; deleting a missing item changes nothing and returns the current head.
    """
    return {"commit": commit_json(_on(memory, branch).delete(namespace, key, author=author, message=message))}


@MEMORY_TOOLS.tool(
    guard=_listing,
    read_only=True,
    prefix=labels('Only namespaces starting with these labels; "*" matches any one label.'),
    suffix=labels('Only namespaces ending with these labels; "*" matches any one label.'),
    max_depth={"type": "integer", "minimum": 1, "description": "Cut longer namespaces to this many labels."},
    limit=integer("Most namespaces to return.", 100, maximum=10_000),
    offset=integer("Namespaces to skip, for paging.", 0, minimum=0, maximum=1_000_000),
    at=AT,
)
def memory_list_namespaces(
    memory: Memory, *, prefix: list[str] | None = None, suffix: list[str] | None = None,
    max_depth: int | None = None, limit: int, offset: int, at: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """List the namespaces that hold memories, sorted.

    Returns {namespaces}: an array of namespaces, each an array of labels.
    """
    reader = memory.at(at) if at else memory
    found = reader.list_namespaces(prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset)
    return {"namespaces": [list(ns) for ns in found]}


@MEMORY_TOOLS.tool(
    guard=_log,
    read_only=True,
    ref=string(f"Where the log starts: {REF_HELP}.", default="HEAD"),
    namespace=labels("Only commits that changed items under this namespace prefix."),
    key={**KEY, "description": "Only commits that changed this item (needs `namespace`)."},
    limit=integer("Most commits to return.", 20),
)
def memory_log(
    memory: Memory, *, ref: str, namespace: list[str] | None = None, key: str | None = None, limit: int
) -> dict[str, Any]:
    """List commits reachable from a version, newest first: who changed the memory, when and why.

    Returns {commits}: each has id, short_id, parents (two for a merge), time, author, message.
    """
    return {"commits": [commit_json(c) for c in memory.log(ref, namespace=namespace, key=key, limit=limit)]}


@MEMORY_TOOLS.tool(
    guard=_narrowed,
    required=("old",),
    read_only=True,
    old=string(f"The earlier version: {REF_HELP}."),
    new=string("The later version (same forms).", default="HEAD"),
    namespace=labels("Only items under this namespace prefix.", default=[]),
    limit=integer("Most changes to return.", 100, maximum=10_000),
)
def memory_diff(memory: Memory, *, old: str, new: str, namespace: list[str], limit: int) -> dict[str, Any]:
    """Show which memories differ between two versions, with both sides of each.

    Returns {changes, truncated}: each change has namespace, key, kind (added, removed or modified), old and
    new (items, null when absent); truncated is true when there were more than `limit`.
    """
    changes = list(islice(memory.iter_diff(old, new, namespace=namespace), limit + 1))
    return {"changes": [change_json(c) for c in changes[:limit]], "truncated": len(changes) > limit}


@MEMORY_TOOLS.tool(
    guard=_checked,
    required=("namespace", "key"),
    read_only=True,
    namespace=NAMESPACE,
    key=KEY,
    ref=string(f"Whose history: {REF_HELP}.", default="HEAD"),
    limit=integer("Most versions to return.", 20),
)
def memory_history(memory: Memory, *, namespace: list[str], key: str, ref: str, limit: int) -> dict[str, Any]:
    """Every version of one memory, newest first, each with the commit that made it (blame).

    Returns {versions}: each has commit (id, time, author, message ...) and item (null: deleted then).
    """
    versions = memory.history(namespace, key, ref)[:limit]
    return {"versions": [version_json(v) for v in versions]}


@MEMORY_TOOLS.tool(read_only=True)
def memory_list_branches(memory: Memory) -> dict[str, Any]:
    """List the branches and tags. A branch is an isolated line of changes: write to it with `branch`, read it
    with `at`, then memory_merge it; a tag names a version that never moves (read it with `at`).

    Returns {current, branches, tags}: the server's branch, every branch name -> its head commit id, and every
    tag name -> its commit id.
    """
    return {"current": memory.branch, "branches": memory.branches(), "tags": memory.tags()}


@MEMORY_TOOLS.tool(
    required=("name",),
    name=string("The branch to create (letters, digits and . _ / -); it must not exist yet."),
    at=string(f"Where the new branch starts: {REF_HELP}.", default="HEAD"),
)
def memory_create_branch(memory: Memory, *, name: str, at: str) -> dict[str, Any]:
    """Create a branch at a version, to try changes in isolation (nothing else changes).

    Returns {current, branches}: the server's branch and every branch name -> its head commit id.
    """
    memory.create_branch(name, at)
    return {"current": memory.branch, "branches": memory.branches()}


@MEMORY_TOOLS.tool(
    guard=_everywhere("delete a branch"),
    scope="admin",
    required=("name",),
    destructive=True,
    name=string("The branch to delete (not the server's branch)."),
)
def memory_delete_branch(memory: Memory, *, name: str) -> dict[str, Any]:
    """Delete a branch: its name is gone, and its commits stay readable only while another branch, a tag or a
    commit id reaches them. Merge it first to keep its changes.

    Returns {current, branches}: the server's branch and every remaining branch name -> its head commit id.
    """
    memory.delete_branch(name)
    return {"current": memory.branch, "branches": memory.branches()}


@MEMORY_TOOLS.tool(
    guard=_everywhere("merge"),
    required=("source",),
    source=string(f"What to merge: {REF_HELP}."),
    into=string("The branch to merge into. Default: the server's branch."),
    strategy=STRATEGY,
    message=MESSAGE,
    author=AUTHOR,
)
def memory_merge(
    memory: Memory, *, source: str, into: str | None = None, strategy: Strategy, message: str | None = None,
    author: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Merge a branch (or any version) into a branch with a two-parent merge commit.

    Returns {commit, up_to_date}: the merge commit, or the unchanged head with up_to_date true when there was
    nothing to merge. With strategy fail, conflicts are an error listing each conflicting item's base, ours and
    theirs.
    """
    done = _on(memory, into, author).merge_outcome(source, strategy=strategy, message=message)
    return {"commit": commit_json(done.commit), "up_to_date": done.up_to_date}


@MEMORY_TOOLS.tool(
    guard=_everywhere("revert"),
    required=("ref",),
    ref=string(f"The commit to undo: {REF_HELP}."),
    strategy=STRATEGY,
    branch=BRANCH,
    author=AUTHOR,
)
def memory_revert(
    memory: Memory, *, ref: str, strategy: Strategy, branch: str | None = None, author: str | None = None
) -> dict[str, Any]:
    """Undo what one commit changed, with a new commit (history keeps both).

    Returns {commit}: the revert commit. Later changes to the same items are conflicts (see strategy).
    """
    return {"commit": commit_json(_on(memory, branch, author).revert(ref, strategy=strategy))}


__all__ = ["MEMORY_TOOLS"]
