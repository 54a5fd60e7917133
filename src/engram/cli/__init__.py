"""The ``engram`` command line: one library call per command, rich output, ``--json`` for machines.

The store is ``--store URL`` or ``ENGRAM_STORE``, else the nearest ``.engram`` folder at or above the
current one (like git); only ``init`` and writes to a named store create one. A user mistake prints one
line to stderr and exits 1; it never shows a traceback. Commands live in :mod:`.items`, :mod:`.timeline`,
:mod:`.branching` and :mod:`.admin`; ``serve``, ``keys`` and ``mcp`` are imported only when used.
"""

from __future__ import annotations

import importlib
from typing import ClassVar

import click

from engram.cli import admin, branching, channels, items, timeline
from engram.cli._common import default_vector_cache


class _LazyGroup(click.Group):
    """A group whose heavier commands (server, MCP) are imported only when invoked or listed."""

    LAZY: ClassVar[dict[str, tuple[str, str]]] = {
        "serve": ("engram.cli.serve:serve", "Serve the HTTP API (loopback only until API keys exist)."),
        "keys": ("engram.cli.serve:keys", "Create, list and revoke API keys for `engram serve`."),
        "mcp": ("engram.cli.mcp:command", "Serve the store to MCP clients over stdio or streamable HTTP."),
        "writer": ("engram.cli.writer:writer", "Feed conversations to the background memory writer; review its runs."),
        "remote": ("engram.cli.remotes:remote", "Name the remotes of this store (dir:///path, s3://bucket/prefix)."),
        "push": ("engram.cli.remotes:push", "Send branches or tags and the chunks a remote lacks; refs move last."),
        "fetch": ("engram.cli.remotes:fetch", "Copy a remote's branches (as remotes/NAME/BRANCH) and tags."),
        "pull": ("engram.cli.remotes:pull", "Fetch, then fast-forward or merge the current branch."),
        "clone": ("engram.cli.remotes:clone", "Copy a remote's branches, tags and history into a new store."),
        "backup": ("engram.cli.remotes:backup", "Incremental, verified backups to a remote: create, list, restore."),
        "doctor": ("engram.cli.doctor:doctor", "Check the store, cache, embedder, index and remotes, as /readyz does."),
        "shard": ("engram.cli.shards:shard", "Shard tenants over PostgreSQL databases: add, plan, move (#17)."),
    }

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List commands without importing the lazy ones (their short help is kept here)."""
        rows = []
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        for name in names:
            if name in self.LAZY:
                rows.append((name, self.LAZY[name][1]))
            elif (command := super().get_command(ctx, name)) is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = self.LAZY.get(cmd_name)
        if found is None:
            return super().get_command(ctx, cmd_name)
        module, _, name = found[0].partition(":")
        command: click.Command = getattr(importlib.import_module(module), name)
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    envvar="ENGRAM_STORE",
    help="Store URL: a directory, sqlite:///file.db, postgresql://... or :memory: (default: the nearest .engram "
    "folder at or above this one).",
)
@click.option(
    "--tenant", envvar="ENGRAM_TENANT", help="Use this tenant's store (where `engram serve` writes its items)."
)
@click.option(
    "--branch", envvar="ENGRAM_BRANCH", help="Branch to read and write (default: the checked-out one, else main)."
)
@click.option(
    "--embedder",
    default="auto",
    show_default=True,
    help="minilm, hashing, onnx:<model folder> or openai:<model>@<base url>; auto: the one the store records, else "
    "minilm.",
)
@click.option("--redis", envvar="ENGRAM_REDIS_URL", help="Redis URL caching a PostgreSQL store (redis://host:6379/0).")
@click.option(
    "--vector-cache",
    envvar="ENGRAM_VECTOR_CACHE",
    default=default_vector_cache,
    show_default="~/.cache/engram/vectors.db",
    help="File of embeddings shared by every store (a text is embedded once); 'none': in each store.",
)
@click.version_option(package_name="engram", message="engram %(version)s")
@click.pass_context
def cli(
    ctx: click.Context,
    store: str | None,
    tenant: str | None,
    branch: str | None,
    embedder: str,
    redis: str | None,
    vector_cache: str,
) -> None:
    """engram: versioned, searchable memory for AI agents.

    \b
    Examples:
      engram put users/alice prefs '{"theme": "dark"}'
      engram search users "dark mode" --explain
      engram log
      engram diff HEAD~1 HEAD
      engram get users/alice prefs --at 'main@{3 days ago}'
      engram blame users/alice prefs
    """
    ctx.ensure_object(dict)


for _module in (items, timeline, branching, admin, channels):
    for _command in _module.COMMANDS:
        cli.add_command(_command)


def main() -> None:
    """Entry point of the ``engram`` console script."""
    cli(obj={})


if __name__ == "__main__":
    main()
