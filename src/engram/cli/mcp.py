"""``engram mcp``: the store's tools for MCP clients, over stdio or streamable HTTP.

Over HTTP the server applies the same access policy as ``engram serve``: with API keys (``engram keys``)
every request needs one and acts on its key's tenant with its scopes and namespace prefix; without keys it
binds to 127.0.0.1 only, whatever ``--host`` says.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import click

from engram.cli._common import err, friendly, locate, loopback_only, opened_url, store_of, vector_cache_of
from engram.cli._writer import writer_config, writer_options
from engram.logs import LEVELS, log_to_stderr
from engram.mcp import KeyedAccess, build_server, close_server, http_url, serve_http, serve_stdio
from engram.ops.access import KeyRing, default_keys_path
from engram.ops.rerankers import operator_reranker
from engram.ops.tenants import TenantPool, store_opener
from engram.store import Memory, tenant_url
from engram.writer import MemoryWriter, WriterConfig
from engram.writer.traces import store_dir


@click.command(name="mcp")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio: for a client that launches engram; http: streamable HTTP at http://HOST:PORT/mcp.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: interface (needs API keys off loopback).")
@click.option("--port", type=int, default=8765, show_default=True, help="HTTP: the port to listen on.")
@click.option("--keys-file", envvar="ENGRAM_KEYS_FILE", type=click.Path(dir_okay=False, path_type=Path),
              help="HTTP: API keys file (default: <store dir>/keys.json, as `engram serve`).")  # fmt: skip
@click.option("--log-level", default="info", show_default=True, type=click.Choice(LEVELS),
              help="engram's log lines (writer runs: info; skips: debug) on stderr, never stdout.")  # fmt: skip
@click.option("--rerank", envvar="ENGRAM_RERANK", metavar="onnx:DIR[@K]",
              help="A local ONNX cross-encoder that memory_search runs when a call asks for rerank.")  # fmt: skip
@writer_options("writer-")
@click.pass_context
@friendly
def command(
    ctx: click.Context, /, transport: str, host: str, port: int, keys_file: Path | None, log_level: str,
    rerank: str | None, **writer: Any,
) -> None:  # fmt: skip
    """Serve the memory to MCP clients (Claude Desktop, IDEs, agents) over stdio or streamable HTTP.

    \b
    Examples:
      engram --store ~/notes mcp
      engram mcp --transport http --port 8765    # clients connect to http://127.0.0.1:8765/mcp
    """
    config = writer_config(writer, "writer-")  # a bad writer setting fails before anything starts
    operator_reranker(rerank)  # and so does a bad --rerank
    if transport == "stdio":  # stdout carries the protocol: only stderr for people
        log_to_stderr(log_level)
        memory = store_of(ctx, create=True)
        err.print(f"engram MCP server on stdio, branch {memory.branch}")
        server = build_server(memory, writer=_local_writer(ctx, config), rerank=rerank)
        try:
            anyio.run(serve_stdio, server)
        except KeyboardInterrupt:
            pass
        finally:
            close_server(server)  # the writer drains its queued runs while the store is open
            memory.close()
        return
    url = locate(ctx, create=True)
    path = keys_file or default_keys_path(url)
    keyring = KeyRing(path) if path is not None else None
    if keyring is None or not keyring.keys():
        _serve_local(ctx, host, port, log_level, config, rerank)
        return
    opts = ctx.find_root().params
    embedder = opts.get("embedder") or "auto"
    opener = store_opener(
        url, local=False, embedder=embedder, redis=opts.get("redis"), vector_cache=vector_cache_of(ctx)
    )
    tenants = TenantPool(opener, writer=partial(_tenant_writer, url, config))
    err.print(f"engram MCP server at {http_url(host, port)} (API keys from {path}; Ctrl+C stops it)", soft_wrap=True)
    try:
        server = build_server(access=KeyedAccess(keyring, tenants), rerank=rerank)
        anyio.run(partial(serve_http, server, host=host, port=port, keyring=keyring, log_level=log_level))
    except KeyboardInterrupt:
        pass
    finally:
        tenants.close()


def _local_writer(ctx: click.Context, config: WriterConfig) -> Callable[[Memory, str], MemoryWriter]:
    """The writer factory of the one store served (opened): its traces inside that store."""
    url = opened_url(ctx)
    return lambda memory, tenant: _built(config, memory, store_dir(url, tenant))


def _tenant_writer(url: str | None, config: WriterConfig, memory: Memory, tenant: str) -> MemoryWriter:
    """A tenant's writer, its traces in the tenant's own store."""
    return _built(config, memory, store_dir(tenant_url(url, tenant), tenant))


def _built(config: WriterConfig, memory: Memory, traces: Path) -> MemoryWriter:
    return replace(config, trace_dir=traces).build(memory, api_key=os.environ.get("OPENAI_API_KEY"))


def _serve_local(
    ctx: click.Context, host: str, port: int, log_level: str, config: WriterConfig, rerank: str | None
) -> None:
    host = loopback_only(host)
    memory = store_of(ctx, create=True)
    err.print(f"engram MCP server at {http_url(host, port)}, branch {memory.branch}, no API keys: local access only "
              "(Ctrl+C stops it)", soft_wrap=True)  # fmt: skip
    server = build_server(memory, writer=_local_writer(ctx, config), rerank=rerank)
    try:
        anyio.run(partial(serve_http, server, host=host, port=port, log_level=log_level))
    except KeyboardInterrupt:
        pass
    finally:
        close_server(server)
        memory.close()


__all__ = ["command"]
