"""The MCP server: a memory store's verbs as tools for MCP clients, over stdio or streamable HTTP.

``build_server(memory)`` returns the official SDK's low-level :class:`mcp.server.Server` with eleven tools
(``memory_search``, ``memory_get``, ``memory_write`` ...). Each tool is one call into the library, run on a
worker thread; its arguments are first checked against the tool's JSON schema, so an unknown argument is an
error, never silently ignored. engram's own errors come back as tool errors (``isError``) with a one-line
message; they never stop the server. ``engram mcp`` (the click :data:`command`) serves it.

Namespaces are JSON arrays of labels (``["users", "alice"]``), in arguments and in results; versions are
ref expressions (``main``, a tag, a commit id, ``HEAD~2``, ``main@{2026-11-20T11:15:00Z}``).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from itertools import islice
from typing import Any, Literal, TypeVar

import anyio
import anyio.to_thread
import click
import uvicorn
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import best_match  # type: ignore[import-untyped]
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from engram import codec
from engram.cli import _friendly, _store, err
from engram.errors import EngramError, MergeConflictError
from engram.objects import Commit, decode_record
from engram.store import Item, ItemConflict, Memory
from engram.store.ops import NOT_PROVIDED, Mode
from engram.store.ranking import PROFILES

F = TypeVar("F", bound=Callable[..., dict[str, Any]])
Strategy = Literal["fail", "ours", "theirs", "newest"]

#: Where the streamable HTTP endpoint is served.
HTTP_PATH = "/mcp"
#: At most this many conflicts are listed in a merge or revert error.
MAX_CONFLICTS = 50

INSTRUCTIONS = """\
engram is versioned memory: every write is a commit, so nothing is lost and the past can be read.
Namespaces are arrays of labels, e.g. ["users", "alice"]; an item is (namespace, key) -> a JSON object.
Find memories with memory_search (query + MongoDB-style filter), read one with memory_get, store one with
memory_write. Read tools take `at` (a branch, tag, commit id, HEAD~n or main@{ISO time}) to read the past;
memory_log, memory_diff and memory_history show what changed, when and who wrote it. Write tools take
`branch`: try risky changes on a branch (memory_branch), then memory_merge it; memory_revert undoes a commit.\
"""


# ------------------------------------------------------------------ tool registry


@dataclass(frozen=True, slots=True)
class Tool:
    """One MCP tool: its name, description, JSON schema of arguments, and the library call it makes."""

    name: str
    description: str
    properties: dict[str, dict[str, Any]]
    required: tuple[str, ...]
    run: Callable[..., dict[str, Any]]
    read_only: bool
    destructive: bool
    validator: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        Draft202012Validator.check_schema(self.input_schema)
        object.__setattr__(self, "validator", Draft202012Validator(self.input_schema))

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments: an object with exactly these properties."""
        return {
            "type": "object",
            "properties": self.properties,
            "required": list(self.required),
            "additionalProperties": False,
        }

    @property
    def defaults(self) -> dict[str, Any]:
        """Argument defaults, from the schema (the one place they are written)."""
        return {name: prop["default"] for name, prop in self.properties.items() if "default" in prop}

    def problem(self, arguments: dict[str, Any]) -> str | None:
        """Why ``arguments`` do not fit the schema (one line), or None when they do."""
        unknown = sorted(set(arguments) - set(self.properties))
        if unknown:
            names = ", ".join(repr(name) for name in unknown)
            return f"unknown argument(s) {names} for {self.name}; it takes: {', '.join(self.properties)}"
        error = best_match(self.validator.iter_errors(arguments))
        if error is None:
            return None
        where = ".".join(str(part) for part in error.absolute_path)
        return f"invalid argument {where!r}: {error.message}" if where else f"invalid arguments: {error.message}"

    def describe(self) -> types.Tool:
        """The tool as the protocol lists it."""
        hints = types.ToolAnnotations(
            read_only_hint=self.read_only, destructive_hint=self.destructive, open_world_hint=False
        )
        return types.Tool(
            name=self.name, description=self.description, input_schema=self.input_schema, annotations=hints
        )


#: Every tool, by name, in the order clients list them.
TOOLS: dict[str, Tool] = {}


def _tool(
    *, required: Sequence[str] = (), read_only: bool = False, destructive: bool = False, **properties: dict[str, Any]
) -> Callable[[F], F]:
    """Register a function ``memory_<verb>(memory, **arguments)`` as a tool; its docstring is the description."""

    def register(fn: F) -> F:
        TOOLS[fn.__name__] = Tool(
            fn.__name__, inspect.cleandoc(fn.__doc__ or ""), properties, tuple(required), fn, read_only, destructive
        )
        return fn

    return register


# ----------------------------------------------------------- argument schemas

_LABELS: dict[str, Any] = {"type": "array", "items": {"type": "string", "minLength": 1}}
_REF_HELP = (
    "a branch, tag, commit id (7+ hex characters), HEAD~n, or <branch>@{ISO time} e.g. main@{2026-11-20T11:15:00Z}"
)


def _namespace(description: str, **extra: Any) -> dict[str, Any]:
    return {**_LABELS, "description": description, **extra}


def _string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "description": description, **extra}


def _integer(description: str, default: int, minimum: int = 1, maximum: int = 1000) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum, "default": default, "description": description}


def _enum(values: Sequence[str], description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "enum": list(values), "description": description, **extra}


NAMESPACE = _namespace('The item\'s namespace: an array of labels, e.g. ["users", "alice"].', minItems=1)
KEY = _string("The item's key, unique within its namespace.")
AT = _string(f"Read the memory as it was at this version: {_REF_HELP}. Omit for the current head.")
AUTHOR = _string("Who makes this change (an agent or user id), recorded on the commit. Default: the server's.")
MESSAGE = _string("Commit message: why this change was made. Default: a generated one.")
BRANCH = _string("The branch to write to (it must exist). Default: the server's branch.")
STRATEGY = _enum(
    ["fail", "ours", "theirs", "newest"],
    "How to decide items both sides changed differently: fail (write nothing and list the conflicts), ours, "
    "theirs, or newest (the later write; a change beats a deletion).",
    default="fail",
)


# --------------------------------------------------------------- result shapes


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


def commit_dict(commit: Commit) -> dict[str, Any]:
    """A commit as JSON: ``{id, short_id, parents, time (ISO), author, message, metadata}``."""
    return {
        "id": commit.id.hex(),
        "short_id": commit.short_id,
        "parents": [p.hex() for p in commit.parents],
        "time": _time(commit.time),
        "author": commit.author,
        "message": commit.message,
        "metadata": commit.metadata,
    }


def item_dict(item: Item | None) -> dict[str, Any] | None:
    """An item as JSON: ``Item.dict()`` (plus ``score`` for search results) and its expiry and provenance."""
    if item is None:
        return None
    expires = None if item.expires_at is None else item.expires_at.isoformat()
    return {**item.dict(), "expires_at": expires, "author": item.author, "sources": list(item.sources)}


def _conflict_dict(conflict: Any) -> dict[str, Any]:
    """One conflict of a refused merge or revert, with the item on each side (None: absent there)."""
    if isinstance(conflict, ItemConflict):
        namespace, key, sides = conflict.namespace, conflict.key, [conflict.base, conflict.ours, conflict.theirs]
    else:  # a tree-level Conflict: raw key and record bytes
        namespace, key = codec.decode_key(conflict.key)
        raw = (conflict.base, conflict.ours, conflict.theirs)
        sides = [None if data is None else Item.from_record(namespace, key, decode_record(data)) for data in raw]
    base, ours, theirs = (item_dict(item) for item in sides)
    return {"namespace": list(namespace), "key": key, "base": base, "ours": ours, "theirs": theirs}


def _on(memory: Memory, branch: str | None, author: str | None = None) -> Memory:
    """The handle to write through: the server's, or one on ``branch`` / as ``author``."""
    if (branch is None or branch == memory.branch) and author is None:
        return memory
    return memory.handle(branch, author=author)


# ---------------------------------------------------------------------- tools


@_tool(
    read_only=True,
    namespace=_namespace('Namespace prefix to search under, e.g. ["users"]; [] searches everything.', default=[]),
    query=_string("What to look for, in words. Omit to list items newest first (by updated_at)."),
    filter={
        "type": "object",
        "description": "MongoDB-style filter on the value's fields (dotted paths), e.g. "
        '{"kind": "preference", "confidence": {"$gte": 0.7}}. Operators: $eq $ne $gt $gte $lt $lte $in $nin '
        "$all $size $exists $and $or $nor $not $regex $contains $between.",
    },
    limit=_integer("Most items to return.", 10),
    offset=_integer("Items to skip, for paging.", 0, minimum=0, maximum=1_000_000),
    mode=_enum(
        ["hybrid", "semantic", "keyword"],
        "hybrid (keywords and meaning, fused), semantic or keyword. Default: hybrid when the store has an "
        "embedder, else keyword.",
    ),
    profile=_enum(
        list(PROFILES),
        "Ranking: similarity only, or mixed with confidence and recency (balanced, recent, quality).",
        default="similarity",
    ),
    explain={"type": "boolean", "default": False, "description": "Add each signal's score to every result."},
    min_score={"type": "number", "description": "Leave out results scoring below this."},
    at=AT,
)
def memory_search(
    memory: Memory, *, namespace: list[str], query: str | None = None, filter: dict[str, Any] | None = None,
    limit: int, offset: int, mode: Mode | None = None, profile: str, explain: bool, min_score: float | None = None,
    at: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Find memories by meaning and keywords under a namespace prefix, filtered and ranked (best first).

    Without a query it lists items newest first. Returns {mode, requested_mode, degraded, items}: each item
    has namespace, key, value, created_at, updated_at, expires_at, author, sources and score; `degraded` says
    why a search ran in a weaker mode than asked (e.g. the embedder failed), else null.
    """
    results = memory.search(
        namespace, query, filter=filter, limit=limit, offset=offset, mode=mode, profile=profile, explain=explain,
        min_score=min_score, at=at,
    )  # fmt: skip
    items = [item_dict(item) for item in results]
    return {"mode": results.mode, "requested_mode": results.requested_mode, "degraded": results.degraded,
            "items": items}  # fmt: skip


@_tool(required=("namespace", "key"), read_only=True, namespace=NAMESPACE, key=KEY, at=AT)
def memory_get(memory: Memory, *, namespace: list[str], key: str, at: str | None = None) -> dict[str, Any]:
    """Read one memory by namespace and key, now or as of a past version (`at`).

    Returns {item}: namespace, key, value, timestamps, author and sources; item is null when there is none.
    """
    return {"item": item_dict((memory.at(at) if at else memory).get(namespace, key))}


@_tool(
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
    return {"commit": commit_dict(commit)}


@_tool(
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
    return {"commit": commit_dict(_on(memory, branch).delete(namespace, key, author=author, message=message))}


@_tool(
    read_only=True,
    prefix=_namespace('Only namespaces starting with these labels; "*" matches any one label.'),
    suffix=_namespace('Only namespaces ending with these labels; "*" matches any one label.'),
    max_depth={"type": "integer", "minimum": 1, "description": "Cut longer namespaces to this many labels."},
    limit=_integer("Most namespaces to return.", 100, maximum=10_000),
    offset=_integer("Namespaces to skip, for paging.", 0, minimum=0, maximum=1_000_000),
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


@_tool(
    read_only=True,
    ref=_string(f"Where the log starts: {_REF_HELP}.", default="HEAD"),
    namespace=_namespace("Only commits that changed items under this namespace prefix."),
    key=_string("Only commits that changed this item (needs `namespace`)."),
    limit=_integer("Most commits to return.", 20),
)
def memory_log(
    memory: Memory, *, ref: str, namespace: list[str] | None = None, key: str | None = None, limit: int
) -> dict[str, Any]:
    """List commits reachable from a version, newest first: who changed the memory, when and why.

    Returns {commits}: each has id, short_id, parents (two for a merge), time, author, message.
    """
    return {"commits": [commit_dict(c) for c in memory.log(ref, namespace=namespace, key=key, limit=limit)]}


@_tool(
    required=("old",),
    read_only=True,
    old=_string(f"The earlier version: {_REF_HELP}."),
    new=_string("The later version (same forms).", default="HEAD"),
    namespace=_namespace("Only items under this namespace prefix.", default=[]),
    limit=_integer("Most changes to return.", 100, maximum=10_000),
)
def memory_diff(memory: Memory, *, old: str, new: str, namespace: list[str], limit: int) -> dict[str, Any]:
    """Show which memories differ between two versions, with both sides of each.

    Returns {changes, truncated}: each change has namespace, key, kind (added, removed or modified), old and
    new (items, null when absent); truncated is true when there were more than `limit`.
    """
    changes = list(islice(memory.iter_diff(old, new, namespace=namespace), limit + 1))
    rows = [
        {"namespace": list(c.namespace), "key": c.key, "kind": c.kind, "old": item_dict(c.old),
         "new": item_dict(c.new)}
        for c in changes[:limit]
    ]  # fmt: skip
    return {"changes": rows, "truncated": len(changes) > limit}


@_tool(
    required=("namespace", "key"),
    read_only=True,
    namespace=NAMESPACE,
    key=KEY,
    ref=_string(f"Whose history: {_REF_HELP}.", default="HEAD"),
    limit=_integer("Most versions to return.", 20),
)
def memory_history(memory: Memory, *, namespace: list[str], key: str, ref: str, limit: int) -> dict[str, Any]:
    """Every version of one memory, newest first, each with the commit that made it (blame).

    Returns {versions}: each has commit (id, time, author, message ...) and item (null: deleted then).
    """
    versions = memory.history(namespace, key, ref)[:limit]
    return {"versions": [{"commit": commit_dict(v.commit), "item": item_dict(v.item)} for v in versions]}


@_tool(
    destructive=True,
    action=_enum(
        ["list", "create", "delete"],
        "list the branches, create branch `name` at `at`, or delete branch `name`.",
        default="list",
    ),
    name=_string("The branch to create or delete (letters, digits and . _ / -)."),
    at=_string(f"Where a new branch starts: {_REF_HELP}.", default="HEAD"),
)
def memory_branch(
    memory: Memory, *, action: Literal["list", "create", "delete"], name: str | None = None, at: str
) -> dict[str, Any]:
    """List, create or delete branches. A branch is an isolated line of changes: write to it with `branch`,
    read it with `at`, then memory_merge it.

    Returns {current, branches}: the server's branch and every branch name -> its head commit id.
    """
    if action != "list":
        if name is None:
            raise _ArgumentError(f"memory_branch needs `name` to {action} a branch")
        if action == "create":
            memory.create_branch(name, at)
        else:
            memory.delete_branch(name)
    return {"current": memory.branch, "branches": memory.branches()}


@_tool(
    required=("source",),
    source=_string(f"What to merge: {_REF_HELP}."),
    into=_string("The branch to merge into. Default: the server's branch."),
    strategy=STRATEGY,
    message=MESSAGE,
    author=AUTHOR,
)
def memory_merge(
    memory: Memory, *, source: str, into: str | None = None, strategy: Strategy, message: str | None = None,
    author: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Merge a branch (or any version) into a branch with a two-parent merge commit.

    Returns {commit}: the merge commit (the unchanged head when there was nothing to merge). With strategy
    fail, conflicts are an error listing each conflicting item's base, ours and theirs.
    """
    return {"commit": commit_dict(_on(memory, into, author).merge(source, strategy=strategy, message=message))}


@_tool(
    required=("ref",),
    ref=_string(f"The commit to undo: {_REF_HELP}."),
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
    return {"commit": commit_dict(_on(memory, branch, author).revert(ref, strategy=strategy))}


# --------------------------------------------------------------------- server


class _ArgumentError(Exception):
    """Arguments that fit the schema but not each other."""


def _result(data: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(data, ensure_ascii=False)
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=data)


def _failure(kind: str, message: str, **details: Any) -> types.CallToolResult:
    """A tool error: one line of text for the model, and the same as structured ``{"error": {...}}``."""
    line = " ".join(message.split())
    error = {"type": kind, "message": line, **details}
    return types.CallToolResult(
        content=[types.TextContent(text=f"{kind}: {line}")], structured_content={"error": error}, is_error=True
    )


async def call_tool(memory: Memory, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    """Check ``arguments`` against tool ``name``'s schema, run it on a worker thread, and shape the result."""
    tool = TOOLS.get(name)
    if tool is None:
        return _failure("UnknownTool", f"no tool {name!r}; the tools are: {', '.join(TOOLS)}")
    problem = tool.problem(arguments)
    if problem is not None:
        return _failure("InvalidArguments", problem)
    try:
        data = await anyio.to_thread.run_sync(partial(tool.run, memory, **{**tool.defaults, **arguments}))
    except _ArgumentError as exc:
        return _failure("InvalidArguments", str(exc))
    except MergeConflictError as exc:
        conflicts = [_conflict_dict(c) for c in exc.conflicts[:MAX_CONFLICTS]]
        return _failure(type(exc).__name__, str(exc), conflict_count=len(exc.conflicts), conflicts=conflicts)
    except EngramError as exc:
        return _failure(type(exc).__name__, str(exc))
    return _result(data)


def _version() -> str:
    try:
        return importlib.metadata.version("engram")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


def build_server(memory: Memory) -> Server[Any]:
    """An MCP server (the SDK's low-level :class:`~mcp.server.Server`) whose tools act on ``memory``.

    Writes go to ``memory``'s branch unless a tool call names another; run it with :func:`serve_stdio`,
    :func:`serve_http`, or in-process with ``mcp.Client(server)``.
    """
    listed = [tool.describe() for tool in TOOLS.values()]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def on_call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        return await call_tool(memory, params.name, params.arguments or {})

    def input_schema(name: str) -> dict[str, Any] | None:
        tool = TOOLS.get(name)
        return None if tool is None else tool.input_schema

    return Server(
        "engram",
        version=_version(),
        title="engram memory",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=on_call_tool,
        get_tool_input_schema=input_schema,
    )


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin and stdout until it closes them."""
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_url(host: str, port: int) -> str:
    """The streamable HTTP endpoint clients connect to."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{HTTP_PATH}"


async def serve_http(server: Server[Any], *, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve clients over streamable HTTP at :func:`http_url` until interrupted."""
    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
    await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).serve()


@click.command(name="mcp")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio: for a client that launches engram; http: streamable HTTP at http://HOST:PORT/mcp.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: the interface to listen on.")
@click.option("--port", type=int, default=8765, show_default=True, help="HTTP: the port to listen on.")
@click.pass_context
@_friendly
def command(ctx: click.Context, transport: str, host: str, port: int) -> None:
    """Serve the memory to MCP clients (Claude Desktop, IDEs, agents) over stdio or streamable HTTP.

    \b
    Examples:
      engram --store ~/notes mcp
      engram mcp --transport http --port 8765    # clients connect to http://127.0.0.1:8765/mcp
    """
    memory = _store(ctx)
    server = build_server(memory)
    try:
        if transport == "stdio":  # stdout carries the protocol: only stderr for people
            err.print(f"engram MCP server on stdio, branch {memory.branch}")
            anyio.run(serve_stdio, server)
        else:
            err.print(f"engram MCP server at {http_url(host, port)}, branch {memory.branch} (Ctrl+C stops it)")
            anyio.run(partial(serve_http, server, host=host, port=port))
    except KeyboardInterrupt:
        pass
    finally:
        memory.close()


__all__ = [
    "HTTP_PATH",
    "TOOLS",
    "Tool",
    "build_server",
    "call_tool",
    "command",
    "commit_dict",
    "http_url",
    "item_dict",
    "serve_http",
    "serve_stdio",
]
