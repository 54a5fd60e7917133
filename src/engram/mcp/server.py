"""The MCP server over the tools of :mod:`engram.mcp.tools`, :mod:`~engram.mcp.channel_tools` and
:mod:`~engram.mcp.writer_tools`: stdio, streamable HTTP, and API keys over HTTP.

``build_server(memory)`` returns the official SDK's low-level :class:`mcp.server.Server`. Each tool call is
checked against its schema, then the caller's access (scope, namespace prefix), then runs on a worker thread;
engram's errors come back as one-line tool errors (``isError``) and never stop the server.
"""

from __future__ import annotations

import importlib.metadata
import json
import weakref
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
import uvicorn
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp, Receive, Scope, Send

from engram.errors import AuthenticationError, EngramError, MergeConflictError
from engram.logs import uvicorn_config
from engram.mcp.channel_tools import CHANNEL_TOOLS
from engram.mcp.registry import Registry, Tool, join
from engram.mcp.tools import MEMORY_TOOLS
from engram.mcp.writer_tools import WRITER_TOOLS
from engram.ops.access import LOCAL, KeyRing, Principal, authenticate, key_from_headers
from engram.ops.rerankers import requested_reranker
from engram.ops.services import TenantServices, WriterFactory, default_writer
from engram.ops.tenants import TenantPool
from engram.store import Memory
from engram.store.serialize import conflict_json

#: Where the streamable HTTP endpoint is served.
HTTP_PATH = "/mcp"
#: At most this many conflicts are listed in a merge or revert error.
MAX_CONFLICTS = 50

INSTRUCTIONS = """\
engram is versioned memory: every write is a commit, so nothing is lost and the past can be read.
Namespaces are arrays of labels, e.g. ["users", "alice"]; an item is (namespace, key) -> a JSON object.
Find memories with memory_search (query + MongoDB-style filter), read one with memory_get, store one with
memory_write; memory_context gives the memories on a topic as prompt text within a token budget. Read tools
take `at` (a branch, tag, commit id, HEAD~n or main@{ISO time}) to read the past;
memory_log, memory_diff and memory_history show what changed, when and who wrote it. Write tools take
`branch`: try risky changes on a branch (memory_create_branch; memory_list_branches lists them), then
memory_merge it; memory_revert undoes a commit.\
"""

#: Every tool, by name, in the order clients list them: the memory tools, then the channel tools,
#: then the memory writer's.
TOOLS: Registry = join(MEMORY_TOOLS, CHANNEL_TOOLS, WRITER_TOOLS)


def tools_for(who: Principal) -> list[Tool]:
    """The tools ``who`` may call, in order: a key without the ``write`` scope sees only the read tools."""
    return [tool for tool in TOOLS.values() if who.holds(tool.scope)]


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


async def call_tool(
    memory: Memory,
    name: str,
    arguments: dict[str, Any],
    who: Principal = LOCAL,
    services: TenantServices | None = None,
    rerank: str | None = None,
) -> types.CallToolResult:
    """Check ``arguments`` against tool ``name``'s schema and the caller's access (scope, namespace prefix), run
    it on a worker thread, and shape the result. ``who`` is the authenticated caller (over HTTP with API keys);
    ``memory`` is their tenant's store and ``services`` its services (channels, the writer), which the channel
    and writer tools act through with the caller's handle (None: built for this call). ``rerank`` is the operator's
    reranker spec: a tool's ``rerank: true`` runs it, and is refused without one."""
    tool = TOOLS.get(name)
    if tool is None:
        return _failure("UnknownTool", f"no tool {name!r}; the tools are: {', '.join(TOOLS)}")
    problem = tool.problem(arguments)
    if problem is not None:
        return _failure("InvalidArguments", problem)
    try:
        args = {**tool.defaults, **arguments}
        if "rerank" in args:  # a client asks for the operator's reranker; it never names one
            args["rerank"] = requested_reranker(rerank, args["rerank"])
        if who is not LOCAL:
            who.require(tool.scope)
            args = tool.guard(who, args) if tool.guard is not None else args
            memory = who.handle(memory)
        if tool.service is not None and services is not None:
            call = partial(tool.service, services, memory, **args)
        else:
            call = partial(tool.run, memory, **args)
        data = await anyio.to_thread.run_sync(call)
        if isinstance(data.get("branches"), dict):  # a prefix-restricted key: other targets' review branches hidden
            data = {**data, "branches": {n: c for n, c in data["branches"].items() if who.sees_branch(n)}}
    except MergeConflictError as exc:
        conflicts = [conflict_json(c) for c in exc.conflicts[:MAX_CONFLICTS]]
        return _failure(type(exc).__name__, str(exc), conflict_count=len(exc.conflicts), conflicts=conflicts)
    except EngramError as exc:
        return _failure(type(exc).__name__, str(exc))
    return _result(data)


def _version() -> str:
    try:
        return importlib.metadata.version("engram")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


def _request_secret(ctx: ServerRequestContext[Any]) -> str | None:
    """The API key of the HTTP request behind a protocol request (None in process or over stdio)."""
    headers = getattr(ctx.request, "headers", None)
    return None if headers is None else key_from_headers(headers)


@dataclass(frozen=True, slots=True)
class KeyedAccess:
    """Tool calls over HTTP with API keys: the caller comes from the request's key (never from a tool
    argument), and acts on its own tenant's store with its scopes and namespace prefix (as over HTTP)."""

    keyring: KeyRing
    tenants: TenantPool


def build_server(
    memory: Memory | None = None,
    *,
    access: KeyedAccess | None = None,
    writer: WriterFactory = default_writer,
    rerank: str | None = None,
) -> Server[Any]:
    """An MCP server (the SDK's low-level :class:`~mcp.server.Server`) whose tools act on ``memory``, or with
    ``access`` on the store of the tenant each request's API key names. ``writer`` builds the memory writer of
    ``memory`` (with ``access``, the tenant pool's ``writer`` factory does): the door's writer settings. ``rerank``
    is the operator's reranker (``onnx:<dir>[@<top_k>]``) that ``memory_search`` runs when a call asks for it.

    Writes go to the handle's branch unless a tool call names another; run it with :func:`serve_stdio`,
    :func:`serve_http`, or in-process with ``mcp.Client(server)``.
    """
    if (memory is None) == (access is None):
        raise ValueError("build_server takes a memory, or access (keys and tenants), not both")
    listed = [tool.describe() for tool in TOOLS.values()]
    served = None if memory is None else TenantServices(memory, writer)  # the one store's services, for every call

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if access is None:
            return types.ListToolsResult(tools=listed)
        try:  # a key sees only the tools its scopes allow (a read-only key: no write tools)
            who = authenticate(access.keyring, _request_secret(ctx))
        except AuthenticationError as exc:
            raise MCPError(types.INVALID_REQUEST, str(exc)) from None
        return types.ListToolsResult(tools=[tool.describe() for tool in tools_for(who)])

    async def on_call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        if memory is not None:
            return await call_tool(memory, params.name, params.arguments or {}, services=served, rerank=rerank)
        assert access is not None
        try:
            who = authenticate(access.keyring, _request_secret(ctx))
            tenant = await anyio.to_thread.run_sync(access.tenants.acquire, who.tenant)
        except EngramError as exc:
            return _failure(type(exc).__name__, str(exc))
        try:  # the tenant's services live with its store in the pool, closed when it is evicted or closed
            services = access.tenants.services(who.tenant, tenant)
            return await call_tool(tenant, params.name, params.arguments or {}, who, services, rerank)
        finally:
            access.tenants.release(who.tenant, tenant)

    def input_schema(name: str) -> dict[str, Any] | None:
        tool = TOOLS.get(name)
        return None if tool is None else tool.input_schema

    server: Server[Any] = Server(
        "engram",
        version=_version(),
        title="engram memory",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=on_call_tool,
        get_tool_input_schema=input_schema,
    )
    if served is not None:
        _SERVICES[server] = served
    return server


#: The one store's services of each server :func:`build_server` made for a store (:func:`close_server` closes them).
_SERVICES: weakref.WeakKeyDictionary[Server[Any], TenantServices] = weakref.WeakKeyDictionary()


def close_server(server: Server[Any]) -> None:
    """Close the services :func:`build_server` made for its store (the writer drains its queued runs): call it
    before closing the store. A server built with ``access`` has none (its tenant pool closes them)."""
    served = _SERVICES.pop(server, None)
    if served is not None:
        served.close()


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin and stdout until it closes them."""
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_url(host: str, port: int) -> str:
    """The streamable HTTP endpoint clients connect to."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{HTTP_PATH}"


class RequireKey:
    """Refuses HTTP requests without a valid API key with a 401 (engram's error shape) before the protocol sees
    them: an MCP server with keys answers nobody else, not even its tool list."""

    def __init__(self, app: ASGIApp, keyring: KeyRing) -> None:
        self.app = app
        self.keyring = keyring

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
            try:
                authenticate(self.keyring, key_from_headers(headers))
            except AuthenticationError as exc:
                body = json.dumps({"error": {"code": exc.code, "message": str(exc), "details": None}}).encode()
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})  # fmt: skip
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: Server[Any], *, host: str = "127.0.0.1", keyring: KeyRing | None = None) -> ASGIApp:
    """The streamable HTTP app of ``server`` at :data:`HTTP_PATH`; with ``keyring`` every request needs a key."""
    app: ASGIApp = server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
    return app if keyring is None else RequireKey(app, keyring)


async def serve_http(
    server: Server[Any], *, host: str = "127.0.0.1", port: int = 8765, keyring: KeyRing | None = None,
    log_level: str = "warning",
) -> None:  # fmt: skip
    """Serve clients over streamable HTTP at :func:`http_url` until interrupted; uvicorn's lines and engram's own
    (the memory writer's runs ...) at ``log_level`` and above go to stderr (no access log: every call is a POST)."""
    app = http_app(server, host=host, keyring=keyring)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                            log_config=uvicorn_config(uvicorn.config.LOGGING_CONFIG, log_level))  # fmt: skip
    await uvicorn.Server(config).serve()


__all__ = [
    "HTTP_PATH",
    "INSTRUCTIONS",
    "TOOLS",
    "KeyedAccess",
    "RequireKey",
    "build_server",
    "call_tool",
    "http_app",
    "http_url",
    "serve_http",
    "serve_stdio",
    "tools_for",
]
