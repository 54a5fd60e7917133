"""The ``engram`` command line: one library call per command, rich output, ``--json`` for machines.

Reads ``--store URL`` or the ``ENGRAM_STORE`` environment variable (default ``./.engram``). A user
mistake prints one line to stderr and exits 1; it never shows a traceback.
"""

from __future__ import annotations

import importlib
import json
import sys
from datetime import timedelta
from typing import ClassVar

import click
from rich.markup import escape
from rich.progress import Progress

from engram.cli._common import (
    commit_dict,
    counter,
    default_vector_cache,
    emit,
    err,
    friendly,
    out,
    parse_json,
    parse_ns,
    plural,
    store_of,
    store_url,
    when,
    with_provenance,
)
from engram.store.connect import POSTGRES_SCHEMES, check_out, checkout_path, schema_status
from engram.store.connect import migrate as run_migrations
from engram.store.transfer import export_items, import_items

_strategy = click.option(
    "--strategy",
    type=click.Choice(["fail", "ours", "theirs", "newest"]),
    default="fail",
    show_default=True,
    help="How to decide items both sides changed (fail writes nothing and lists them).",
)


class _LazyGroup(click.Group):
    """A group whose heavier commands (server, MCP) are imported only when invoked or listed."""

    LAZY: ClassVar[dict[str, tuple[str, str]]] = {
        "serve": ("engram.cli.serve:serve", "Serve the HTTP API (loopback only until API keys exist)."),
        "keys": ("engram.cli.serve:keys", "Create, list and revoke API keys for `engram serve`."),
        "mcp": ("engram.cli.mcp:command", "Serve the store to MCP clients over stdio or streamable HTTP."),
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
    "--store", envvar="ENGRAM_STORE", help="Store URL: a directory, sqlite:///file.db or :memory: (default ./.engram)."
)
@click.option(
    "--branch", envvar="ENGRAM_BRANCH", help="Branch to read and write (default: the checked-out one, else main)."
)
@click.option("--embedder", default="minilm", show_default=True, help="minilm, hashing, or openai:<model>@<base url>.")
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
    ctx: click.Context, store: str | None, branch: str | None, embedder: str, redis: str | None, vector_cache: str
) -> None:
    """engram: versioned, searchable memory for AI agents.

    \b
    Examples:
      engram put users/alice prefs '{"theme": "dark"}'
      engram search users "dark mode" --explain
      engram log
      engram diff HEAD~1 HEAD
      engram get users/alice prefs --at main@{2026-11-20T11:15:00Z}
    """
    ctx.ensure_object(dict)


@cli.command()
@click.pass_context
@friendly
def init(ctx: click.Context) -> None:
    """Create the store (if needed) and show its branches."""
    mem = store_of(ctx)
    out.print(f"store ready on branch [bold]{mem.branch}[/bold]; branches: {', '.join(mem.branches())}")


@cli.command()
@click.argument("namespace")
@click.argument("key")
@click.argument("value")
@click.option("--author", help="Who writes this (default: engram).")
@click.option("--message", "-m", help="Commit message.")
@click.pass_context
@friendly
def put(ctx: click.Context, namespace: str, key: str, value: str, author: str | None, message: str | None) -> None:
    """Store VALUE (a JSON object) at NAMESPACE (a/b/c) and KEY, as one commit."""
    parsed = parse_json(value, "VALUE")
    commit = store_of(ctx).put(parse_ns(namespace), key, parsed, author=author, message=message)
    out.print(f"[green]{commit.short_id}[/green] {commit.message}")


@cli.command()
@click.argument("namespace")
@click.argument("key")
@click.option("--at", "at", help="Read as of a ref: branch, tag, commit, HEAD~n, main@{time}.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def get(ctx: click.Context, namespace: str, key: str, at: str | None, as_json: bool) -> None:
    """Print the item at NAMESPACE and KEY."""
    mem = store_of(ctx)
    item = (mem.at(at) if at else mem).get(parse_ns(namespace), key)
    if item is None:
        err.print(f"[red]error:[/red] no item {namespace}/{key}" + (f" at {at}" if at else ""))
        sys.exit(1)
    emit(with_provenance(item) if as_json else item.value)


@cli.command()
@click.argument("namespace")
@click.argument("key")
@click.pass_context
@friendly
def rm(ctx: click.Context, namespace: str, key: str) -> None:
    """Delete the item at NAMESPACE and KEY, as one commit (a missing item: nothing to do, no commit)."""
    mem = store_of(ctx)
    before = mem.head.id
    commit = mem.delete(parse_ns(namespace), key)
    if commit.id == before:
        out.print(f"nothing to delete: no item {escape(namespace)}/{escape(key)}")
        return
    out.print(f"[green]{commit.short_id}[/green] {escape(commit.message)}")


@cli.command()
@click.argument("namespace", default="")
@click.argument("query", required=False)
@click.option("--filter", "filter_", help='MongoDB-style JSON filter, e.g. \'{"kind": "pref"}\'.')
@click.option("--limit", default=10, show_default=True)
@click.option("--mode", type=click.Choice(["hybrid", "semantic", "keyword"]))
@click.option("--profile", default="similarity", show_default=True, help="similarity, balanced, recent or quality.")
@click.option("--explain", is_flag=True, help="Show each signal's score.")
@click.option("--at", "at", help="Search the memory as of a ref.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def search(ctx: click.Context, namespace: str, query: str | None, filter_: str | None, limit: int, mode: str | None,
           profile: str, explain: bool, at: str | None, as_json: bool) -> None:  # fmt: skip
    """Search under NAMESPACE for QUERY (without QUERY: list newest first)."""
    spec = parse_json(filter_, "--filter") if filter_ else None
    mem = store_of(ctx)
    reader = mem.at(at) if at else mem
    results = reader.search(parse_ns(namespace), query, filter=spec, limit=limit, mode=mode, profile=profile,  # type: ignore[arg-type]
                            explain=explain)  # fmt: skip
    if as_json:
        emit({"mode": results.mode, "degraded": results.degraded, "items": [with_provenance(r) for r in results]})
        return
    if results.degraded:
        err.print(f"[yellow]note:[/yellow] {results.degraded}")
    for r in results:
        score = "" if r.score is None else f"{r.score:.3f} "
        out.print(f"{score}[cyan]{'/'.join(r.namespace)}/{r.key}[/cyan] {json.dumps(r.value)}")
        if explain and r.explain:
            out.print(f"      {json.dumps({k: v for k, v in r.explain.items() if k != 'weights'})}")


@cli.command()
@click.option("--prefix", default="", help="Only namespaces under a/b.")
@click.option("--max-depth", type=int)
@click.option("--at", "at", help="As of a ref.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def ls(ctx: click.Context, prefix: str, max_depth: int | None, at: str | None, as_json: bool) -> None:
    """List namespaces that hold items."""
    mem = store_of(ctx)
    found = (mem.at(at) if at else mem).list_namespaces(
        prefix=parse_ns(prefix) or None, max_depth=max_depth, limit=10_000
    )
    if as_json:
        emit([list(ns) for ns in found])
        return
    for ns in found:
        out.print("/".join(ns))


@cli.command()
@click.argument("ref", default="HEAD")
@click.option("--namespace", help="Only commits that touched a/b.")
@click.option("--limit", "-n", type=int, default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def log(ctx: click.Context, ref: str, namespace: str | None, limit: int, as_json: bool) -> None:
    """Show commits reachable from REF, newest first (like git log --oneline --graph)."""
    commits = store_of(ctx).log(ref, namespace=parse_ns(namespace) if namespace else None, limit=limit)
    if as_json:
        emit([commit_dict(c) for c in commits])
        return
    width = max((len(c.author) for c in commits), default=0)
    for c in commits:
        mark = "M" if len(c.parents) > 1 else "*"
        out.print(f"{mark} [yellow]{c.short_id}[/yellow] [dim]{when(c.time)}[/dim] {c.author:<{width}}  {c.message}")


@cli.command()
@click.argument("old")
@click.argument("new", default="HEAD")
@click.option("--namespace", default="", help="Only items under a/b.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def diff(ctx: click.Context, old: str, new: str, namespace: str, as_json: bool) -> None:
    """Show items that differ between versions OLD and NEW (like git diff --stat)."""
    changes = store_of(ctx).diff(old, new, namespace=parse_ns(namespace))
    if as_json:
        rows = [
            {"namespace": list(c.namespace), "key": c.key, "kind": c.kind,
             "old": c.old.value if c.old else None, "new": c.new.value if c.new else None}
            for c in changes
        ]  # fmt: skip
        emit(rows)
        return
    signs = {"added": "[green]+[/green]", "removed": "[red]-[/red]", "modified": "[yellow]~[/yellow]"}
    for c in changes:
        out.print(f" {signs[c.kind]} {'/'.join(c.namespace)}/{c.key}")
    counts = {kind: sum(1 for c in changes if c.kind == kind) for kind in signs}
    out.print(f" {plural(len(changes), 'item')} changed: {counts['added']} added, {counts['modified']} modified, "
              f"{counts['removed']} removed")  # fmt: skip


@cli.command()
@click.argument("ref", default="HEAD")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def show(ctx: click.Context, ref: str, as_json: bool) -> None:
    """Show one commit and the items it changed."""
    details = store_of(ctx).show(ref)
    if as_json:
        emit({**commit_dict(details.commit), "changes": [
            {"namespace": list(c.namespace), "key": c.key, "kind": c.kind} for c in details.changes]})  # fmt: skip
        return
    c = details.commit
    out.print(f"[yellow]commit {c.id.hex()}[/yellow]\nauthor {c.author}\ndate   {when(c.time)}\n\n    {c.message}\n")
    for change in details.changes:
        out.print(f" {change.kind:<8} {'/'.join(change.namespace)}/{change.key}")


@cli.command()
@click.argument("namespace")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def history(ctx: click.Context, namespace: str, key: str, as_json: bool) -> None:
    """Every version of one item with the commit that made it (blame)."""
    versions = store_of(ctx).history(parse_ns(namespace), key)
    if as_json:
        emit([{**commit_dict(v.commit), "value": v.item.value if v.item else None} for v in versions])
        return
    for v in versions:
        shown = json.dumps(v.item.value) if v.item else "[red](deleted)[/red]"
        out.print(f"[yellow]{v.commit.short_id}[/yellow] [dim]{when(v.commit.time)}[/dim] {v.commit.author}: {shown}")


@cli.command()
@click.argument("name", required=False)
@click.option("--at", "at", default="HEAD", show_default=True, help="Where a new branch starts.")
@click.option("--delete", "-d", is_flag=True, help="Delete branch NAME.")
@click.pass_context
@friendly
def branch(ctx: click.Context, name: str | None, at: str, delete: bool) -> None:
    """List branches, create branch NAME at a ref, or delete it (-d)."""
    mem = store_of(ctx)
    if name is None:
        for b, cid in mem.branches().items():
            out.print(f"{'*' if b == mem.branch else ' '} {b} [yellow]{cid[:10]}[/yellow]")
    elif delete:
        mem.delete_branch(name)
        out.print(f"deleted branch {name}")
    else:
        mem.create_branch(name, at)
        out.print(f"created branch {name} at {mem.resolve(at).short_id}")


@cli.command()
@click.argument("name", required=False)
@click.option("--at", "at", default="HEAD", show_default=True, help="The version to name.")
@click.option("--delete", "-d", is_flag=True, help="Delete tag NAME.")
@click.pass_context
@friendly
def tag(ctx: click.Context, name: str | None, at: str, delete: bool) -> None:
    """List tags, name the version --at (default HEAD) NAME, or delete tag NAME (-d)."""
    mem = store_of(ctx)
    if name is None:
        if delete:
            raise click.UsageError("tag -d needs the NAME of the tag to delete")
        for t, cid in mem.tags().items():
            out.print(f"{escape(t)} [yellow]{cid[:10]}[/yellow]")
        return
    if delete:
        was = mem.tags().get(name)
        mem.delete_tag(name)
        out.print(f"deleted tag {escape(name)}" + (f" (was {was[:10]})" if was else ""))
        return
    mem.tag(name, at)
    out.print(f"tagged {mem.resolve(name).short_id} as {name}")


@cli.command()
@click.argument("branch", required=False)
@click.option("--limit", "-n", type=int, default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def reflog(ctx: click.Context, branch: str | None, limit: int, as_json: bool) -> None:
    """How BRANCH (default --branch) moved, newest first: time, old -> new, actor, reason (also after a reset or
    a delete)."""
    entries = store_of(ctx).reflog(branch, limit)
    if as_json:
        emit(entries)
        return
    for e in entries:
        old, new = (e[side][:10] if e[side] else "(none)" for side in ("old", "new"))
        out.print(f"[dim]{when(e['time'])}[/dim] [yellow]{old}[/yellow] -> [yellow]{new}[/yellow] "
                  f"{escape(e['actor'] or '-')}: {escape(e['reason'])}")  # fmt: skip


@cli.command()
@click.argument("source")
@_strategy
@click.pass_context
@friendly
def merge(ctx: click.Context, source: str, strategy: str) -> None:
    """Merge branch or version SOURCE into --branch with a two-parent commit (nothing new: no commit)."""
    mem = store_of(ctx)
    before = mem.head.id
    commit = mem.merge(source, strategy=strategy)  # type: ignore[arg-type]
    if commit.id == before:
        out.print(f"already up to date: {mem.branch} has everything in {escape(source)}")
        return
    out.print(f"[green]{commit.short_id}[/green] {commit.message}")


@cli.command()
@click.argument("ref")
@_strategy
@click.pass_context
@friendly
def revert(ctx: click.Context, ref: str, strategy: str) -> None:
    """Undo what commit REF changed, with a new commit."""
    commit = store_of(ctx).revert(ref, strategy=strategy)  # type: ignore[arg-type]
    out.print(f"[green]{commit.short_id}[/green] {commit.message}")


@cli.command()
@click.argument("ref")
@click.pass_context
@friendly
def reset(ctx: click.Context, ref: str) -> None:
    """Move --branch to version REF (the old head stays in the reflog)."""
    mem = store_of(ctx)
    mem.reset(ref)
    out.print(f"{mem.branch} is now at {mem.head.short_id}")


@cli.command()
@click.option("--keep-reflog-days", type=float, help="First drop reflog entries older than this.")
@click.pass_context
@friendly
def gc(ctx: click.Context, keep_reflog_days: float | None) -> None:
    """Delete chunks no ref or reflog entry reaches (chunks younger than 10 minutes are kept)."""
    keep = None if keep_reflog_days is None else timedelta(days=keep_reflog_days)
    with counter("deleting unreachable chunks") as advance:
        report = store_of(ctx).gc(keep, progress=advance)
    out.print(f"removed {report.removed} chunks, kept {report.kept}, pruned {report.reflog_pruned} reflog entries")


@cli.command()
@click.pass_context
@friendly
def fsck(ctx: click.Context) -> None:
    """Check every reachable chunk exists and hashes right."""
    with counter("checking chunks") as advance:
        report = store_of(ctx).fsck(progress=advance)
    out.print(f"{report.commits} commits, {report.nodes} tree nodes: " + ("[green]ok[/green]" if report.ok else
              f"[red]{len(report.missing)} missing, {len(report.corrupt)} corrupt[/red]"))  # fmt: skip
    if not report.ok:
        sys.exit(2)


@cli.command()
@click.pass_context
@friendly
def reindex(ctx: click.Context) -> None:
    """Rebuild the branch's search index from scratch, re-embedding what the vector cache lacks
    (after a model change); shows a progress bar."""
    mem = store_of(ctx)
    total = mem.count()
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task("indexing", total=total)
        done = mem.reindex(progress=lambda n: progress.advance(task, n))
    out.print(f"indexed {plural(done, 'item')} on branch {mem.branch}")


@cli.command()
@click.argument("name")
@click.option("-b", "create", is_flag=True, help="Create branch NAME first.")
@click.option("--at", "at", default="HEAD", show_default=True, help="Where a branch created with -b starts.")
@click.pass_context
@friendly
def checkout(ctx: click.Context, name: str, create: bool, at: str) -> None:
    """Make NAME the branch later commands read and write (remembered beside the store)."""
    url = store_url(ctx)
    if checkout_path(url) is None:
        raise click.UsageError("this store keeps no checkout (no local file): pass --branch or ENGRAM_BRANCH")
    mem = store_of(ctx)
    if create:
        mem.create_branch(name, at)
    elif name not in mem.branches():
        raise click.UsageError(f"no branch {name!r} (create it with: engram checkout -b {name})")
    check_out(mem, url, name)
    out.print(f"on branch [bold]{name}[/bold] at [yellow]{mem.resolve(name).short_id}[/yellow]")


@cli.command(name="export")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True), default="-")
@click.option("--at", "at", help="Export the version at a ref (default: the branch head).")
@click.option("--namespace", default="", help="Only items under a/b.")
@click.option("--embeddings", is_flag=True, help="Include each item's vector (import then skips embedding).")
@click.pass_context
@friendly
def export_(ctx: click.Context, file: str, at: str | None, namespace: str, embeddings: bool) -> None:
    """Write the items (with timestamps, authors, sources) as JSON Lines to FILE (default stdout)."""
    mem = store_of(ctx)
    prefix = parse_ns(namespace)
    total = mem.at(at).count(prefix) if at else mem.count(prefix)
    with click.open_file(file, "w", encoding="utf-8") as fp, Progress(console=err, transient=True) as progress:
        task = progress.add_task("exporting", total=total)
        done = export_items(mem, fp, at=at, namespace_prefix=prefix, embeddings=embeddings,
                            progress=lambda n: progress.advance(task, n))  # fmt: skip
    err.print(f"exported {plural(done, 'item')}" + (f" to {file}" if file != "-" else ""))


@cli.command(name="import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--message", "-m", help="Commit message (default: import N item(s)).")
@click.pass_context
@friendly
def import_(ctx: click.Context, file: str, message: str | None) -> None:
    """Write the items of an `engram export` FILE to the branch as one commit."""
    mem = store_of(ctx)
    try:
        with click.open_file(file, "r", encoding="utf-8") as fp:
            lines = fp.readlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.UsageError(f"cannot read {file}: {exc}") from None
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task("importing", total=max(0, len(lines) - 1))
        done, commit = import_items(mem, lines, message=message, progress=lambda n: progress.advance(task, n))
    if commit is None:
        out.print("nothing to import")
    else:
        out.print(f"[green]{commit.short_id}[/green] imported {plural(done, 'item')} into {mem.branch}")


@cli.group()
def db() -> None:
    """PostgreSQL schema: `engram --store postgresql://... db migrate`."""


def _postgres_url(ctx: click.Context) -> str:
    url = store_url(ctx)
    if url is None or not url.startswith(POSTGRES_SCHEMES):
        raise click.UsageError("db commands need a PostgreSQL store: --store postgresql://user@host/db")
    return url


@db.command()
@click.pass_context
@friendly
def migrate(ctx: click.Context) -> None:
    """Create or upgrade engram's tables (safe to run again; concurrent runs wait for each other)."""
    report = run_migrations(_postgres_url(ctx))
    if not report.search_in_database:
        err.print("[yellow]no pgvector on this server: search runs in process (see docs/postgres.md)[/yellow]")
    for version, description in report.applied:
        out.print(f"applied {version}: {description}")
    out.print("schema up to date" if report.applied else "schema already up to date")


@db.command()
@click.pass_context
@friendly
def status(ctx: click.Context) -> None:
    """Show the schema version of the database and the newest one this engram knows."""
    found = schema_status(_postgres_url(ctx))
    core, search = found["core"], found["search"]
    out.print(f"schema version {core[0]} (this engram: {core[1]})")
    out.print(f"search schema version {search[0] or 'none'} (this engram: {search[1]})")


def main() -> None:
    """Entry point of the ``engram`` console script."""
    cli(obj={})


if __name__ == "__main__":
    main()
