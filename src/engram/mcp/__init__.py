"""The MCP server: a memory store's verbs as tools for MCP clients, over stdio or streamable HTTP.

``build_server(memory)`` returns the official SDK's low-level :class:`mcp.server.Server` with 35 tools: the
memory's (``memory_search``, ``memory_get``, ``memory_write`` ...) in :mod:`engram.mcp.tools`, the channels' in
:mod:`engram.mcp.channel_tools` and the memory writer's in :mod:`engram.mcp.writer_tools`. Each tool is one
call into the library, run on a worker thread; its arguments are first checked against the tool's JSON schema,
so an unknown argument is an error, never silently ignored. Over HTTP with API keys, each call acts as the key's
caller (:mod:`engram.ops.access`). ``engram mcp`` (in :mod:`engram.cli.mcp`) serves it.
"""

from engram.mcp.registry import Tool
from engram.mcp.server import (
    HTTP_PATH,
    TOOLS,
    KeyedAccess,
    RequireKey,
    build_server,
    call_tool,
    close_server,
    http_app,
    http_url,
    serve_http,
    serve_stdio,
)

__all__ = [
    "HTTP_PATH",
    "TOOLS",
    "KeyedAccess",
    "RequireKey",
    "Tool",
    "build_server",
    "call_tool",
    "close_server",
    "http_app",
    "http_url",
    "serve_http",
    "serve_stdio",
]
