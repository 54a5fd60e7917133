"""``engram serve`` (the HTTP API on uvicorn) and ``engram keys`` (its API keys).

Both read the root options ``--store``, ``--branch`` and ``--embedder``. Without API keys the server
is for local development: it binds to 127.0.0.1 only, whatever ``--host`` says, and says so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from rich.markup import escape

from engram.cli._common import err, friendly, loopback_only, out, served_store, vector_cache_of
from engram.cli._writer import writer_options
from engram.errors import ConfigError, InvalidInputError
from engram.logs import LEVELS, uvicorn_config
from engram.ops.access import SCOPES, KeyRing
from engram.ops.schedule import parse_duration
from engram.ops.tenants import MAX_OPEN
from engram.server.app import create_app
from engram.server.config import MiB, ServerConfig
from engram.server.framing import HEADER_TIMEOUT, uvicorn_options

_keys_file = click.option(
    "--keys-file",
    envvar="ENGRAM_KEYS_FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="API keys file (default: <store dir>/keys.json).",
)


class Duration(click.ParamType):  # type: ignore[type-arg]
    """A duration such as 30m, 6h, 24h or 7d, in seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(str(value))
        except InvalidInputError as exc:
            self.fail(str(exc), param, ctx)


def _config(ctx: click.Context, keys_file: Path | None, max_body: int = MiB, **extra: Any) -> ServerConfig:
    opts = ctx.find_root().params
    return ServerConfig(
        **extra,
        store=served_store(ctx),
        embedder=opts.get("embedder") or "auto",
        keys_file=keys_file,
        max_body=max_body,
        branch=opts.get("branch") or "main",
        redis=opts.get("redis"),
        vector_cache=vector_cache_of(ctx),
    )


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface (needs API keys to leave loopback).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
@_keys_file
@click.option("--max-body", default=MiB, show_default=True, type=click.IntRange(1), help="Largest request body, bytes.")
@click.option("--max-tenants", default=MAX_OPEN, show_default=True, type=click.IntRange(1),
              help="Tenant stores kept open when idle (least recently used ones are closed).")  # fmt: skip
@click.option("--index-delay", default=0.2, show_default=True, type=click.FloatRange(0),
              help="Seconds after a write when the branch's search index is updated in the background.")  # fmt: skip
@click.option("--no-background-index", is_flag=True, help="Update search indexes only when a search needs them.")
@writer_options("writer-")
@click.option("--writer-traces", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Keep each tenant's writer traces in DIR/<tenant> (default: in each tenant's store).")  # fmt: skip
@click.option("--header-timeout", default=HEADER_TIMEOUT, show_default=True, type=click.FloatRange(0, min_open=True),
              metavar="SECONDS", help="Close a connection whose request line and headers take longer.")  # fmt: skip
@click.option("--log-level", default="info", show_default=True, type=click.Choice(LEVELS),
              help="The server's and engram's own log lines (writer runs: info; skips: debug), on stderr.")  # fmt: skip
@click.option("--backup-every", type=Duration(), metavar="DURATION",
              help="Back up the store every DURATION (30m, 6h, 24h, 7d); now if the last backup is older.")  # fmt: skip
@click.option("--backup-remote", default="origin", show_default=True, help="Remote name or URL of --backup-every.")
@click.option("--shard-catalog", envvar="ENGRAM_SHARD_CATALOG", metavar="URL",
              help="Shard catalog (PostgreSQL URL): serve each tenant from its shard (docs/scaling.md).")  # fmt: skip
@click.option("--replica", "replicas", multiple=True, metavar="URL",
              help="A read replica (PostgreSQL standby) of the store; repeatable (see docs/scaling.md).")  # fmt: skip
@click.option("--replica-max-lag", default=10.0, show_default=True, type=click.FloatRange(0), metavar="SECONDS",
              help="Reads without a token skip a replica lagging more than this.")  # fmt: skip
@click.option("--rerank", envvar="ENGRAM_RERANK", metavar="onnx:DIR[@K]",
              help="ONNX cross-encoder for searches asking for rerank (top K candidates, default 50).")  # fmt: skip
@click.option("--channel-max-content", type=click.IntRange(1), metavar="CHARS",
              help="Longest message or note content the channels accept (default: the library's, 32,000).")  # fmt: skip
@click.pass_context
@friendly
def serve(
    ctx: click.Context, /, host: str, port: int, keys_file: Path | None, max_body: int, max_tenants: int,
    index_delay: float, no_background_index: bool, writer_traces: Path | None, header_timeout: float, log_level: str,
    backup_every: float | None, backup_remote: str, shard_catalog: str | None, replicas: tuple[str, ...],
    replica_max_lag: float, channel_max_content: int | None, rerank: str | None, **writer: Any,
) -> None:  # fmt: skip
    """Serve the HTTP API: LangGraph's store routes, /v1 versioning routes, docs at /docs."""
    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    delay = None if no_background_index else index_delay
    if ctx.get_parameter_source("backup_remote") is ParameterSource.COMMANDLINE and backup_every is None:
        raise click.UsageError("--backup-remote needs --backup-every (e.g. --backup-every 24h)")
    if writer["writer_extractor"] == "none":
        writer["writer_extractor"] = None
    config = _config(ctx, keys_file, max_body, max_tenants=max_tenants, index_delay=delay, backup_every=backup_every,
                     backup_remote=backup_remote, shard_catalog=shard_catalog, writer_traces=writer_traces,
                     **writer)  # fmt: skip
    config.replicas, config.replica_max_lag = replicas, replica_max_lag  # read replicas
    config.channel_max_content = channel_max_content
    config.rerank = rerank
    app = create_app(config)
    app.state.engram.tenants.probe()  # open the store now: a bad --store fails here, with one line
    app.state.engram.tenants.backups()  # and a bad --backup-remote too
    local: bool = app.state.engram.local
    if local:
        host = loopback_only(host)
    shown = f"[{host}]" if ":" in host else host
    access = "no API keys: local access only, every scope" if local else f"API keys from {config.keys_path()}"
    out.print(
        escape(f"engram serving http://{shown}:{port} (store {config.store or './.engram'}, docs at /docs; {access})"),
        soft_wrap=True,
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level, log_config=uvicorn_config(LOGGING_CONFIG, log_level),
                **uvicorn_options(header_timeout))  # fmt: skip


def _ring(ctx: click.Context) -> KeyRing:
    config = _config(ctx, ctx.obj.get("keys_file"))
    path = config.keys_path()
    if path is None:
        raise ConfigError("this store has no default keys file; pass --keys-file (or ENGRAM_KEYS_FILE)")
    return KeyRing(path)


@click.group()
@_keys_file
@click.pass_context
def keys(ctx: click.Context, keys_file: Path | None) -> None:
    """Create, list and revoke the API keys of `engram serve` (only their hashes are stored)."""
    ctx.ensure_object(dict)
    ctx.obj["keys_file"] = keys_file


@keys.command("create")
@click.option("--tenant", required=True, help="Tenant (its own repository): letters, digits, '-' and '_'.")
@click.option("--scope", "scopes", multiple=True, required=True, type=click.Choice(SCOPES),
              help="read, write or admin (admin implies the others); repeat for several.")  # fmt: skip
@click.option("--namespace-prefix", default="", help="Restrict the key to namespaces under a/b.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with the key).")
@click.pass_context
@friendly
def create(ctx: click.Context, tenant: str, scopes: tuple[str, ...], namespace_prefix: str, as_json: bool) -> None:
    """Create an API key and print it once (it cannot be shown again)."""
    ring = _ring(ctx)
    prefix = [label for label in namespace_prefix.split("/") if label]
    key, secret = ring.create(tenant, scopes, prefix)
    if as_json:
        click.echo(json.dumps({**_public(key.as_dict()), "key": secret}))
        return
    where = f"; namespace prefix {'/'.join(key.namespace_prefix)}" if key.namespace_prefix else ""
    err.print(f"created key {key.id} for tenant {key.tenant} (scopes: {', '.join(key.scopes)}{where}) in {ring.path}")
    err.print("store it now: it is not shown again")
    click.echo(secret)


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in entry.items() if name != "sha256"}


@keys.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def list_keys(ctx: click.Context, as_json: bool) -> None:
    """List API keys (ids, tenants, scopes; never secrets)."""
    found = _ring(ctx).keys()
    if as_json:
        click.echo(json.dumps([_public(key.as_dict()) for key in found]))
        return
    if not found:
        err.print("no API keys: `engram serve` runs for local access only")
    for key in found:
        prefix = "/".join(key.namespace_prefix) or "*"
        out.print(escape(f"{key.id}  {key.tenant:<16} {','.join(key.scopes):<16} {prefix:<20} {key.created}"))


@keys.command("revoke")
@click.argument("key_id")
@click.pass_context
@friendly
def revoke(ctx: click.Context, key_id: str) -> None:
    """Revoke the API key KEY_ID (a running server stops accepting it at once)."""
    if not _ring(ctx).revoke(key_id):
        err.print(f"[red]error:[/red] no API key with id {escape(repr(key_id))}; see `engram keys list`")
        sys.exit(1)
    out.print(f"revoked key {escape(key_id)}")
