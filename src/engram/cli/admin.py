"""Commands that look after a store: ``gc``, ``fsck``, ``reindex``, ``export``, ``import``, ``db``, ``tenants``."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import click
from rich.markup import escape
from rich.progress import Progress

from engram.cli._common import (
    counter,
    discover,
    err,
    friendly,
    out,
    parse_ns,
    phase_progress,
    plural,
    store_of,
    store_url,
)
from engram.compat.importers import KINDS, ImportSourceError, count_source, import_from
from engram.errors import ConfigError
from engram.maintenance import GC_GRACE_MS
from engram.ops.access import KeyRing, default_keys_path
from engram.redaction import redact_url
from engram.store import open as open_store
from engram.store.connect import migrate as run_migrations
from engram.store.connect import schema_status, tenant_url
from engram.store.transfer import export_history, export_items, import_history, import_items, is_history
from engram.store.urls import DB_NAME, StoreUrl, is_postgres


@click.command()
@click.option("--keep-reflog-days", type=float, help="First drop reflog entries older than this.")
@click.pass_context
@friendly
def gc(ctx: click.Context, keep_reflog_days: float | None) -> None:
    """Delete chunks no ref or reflog entry reaches (chunks written in the last 10 minutes are always kept, so
    a commit still being made survives)."""
    keep = None if keep_reflog_days is None else timedelta(days=keep_reflog_days)
    with counter("deleting unreachable chunks") as advance:
        report = store_of(ctx).gc(keep, progress=advance)
    grace = f"{GC_GRACE_MS // 60_000} minutes"
    pruned = f", pruned {plural(report.reflog_pruned, 'reflog entry')}" if report.reflog_pruned else ""
    if report.removed == 0:
        out.print(f"nothing to remove{pruned}: every chunk is reachable or was written in the last {grace} "
                  f"(the grace period; run gc again later to collect those)")  # fmt: skip
        return
    out.print(f"removed {plural(report.removed, 'chunk')}, kept {report.kept:,} reachable{pruned} "
              f"(chunks written in the last {grace} are kept)")  # fmt: skip


@click.command()
@click.pass_context
@friendly
def fsck(ctx: click.Context) -> None:
    """Check every reachable chunk exists and hashes right (exit status 2 on damage)."""
    with counter("checking chunks") as advance:
        report = store_of(ctx).fsck(progress=advance)
    out.print(f"{plural(report.commits, 'commit')}, {plural(report.nodes, 'tree node')}: " + ("[green]ok[/green]" if
              report.ok else f"[red]{len(report.missing)} missing, {len(report.corrupt)} corrupt[/red]"))  # fmt: skip
    if not report.ok:
        sys.exit(2)


@click.command()
@click.option("--embedder", "switch_to", help="Re-embed every item with this embedder (minilm, hashing, onnx:<dir>, "
              "openai:...) and record it as the store's from now on, e.g. after a model change.")  # fmt: skip
@click.pass_context
@friendly
def reindex(ctx: click.Context, switch_to: str | None) -> None:
    """Rebuild the branch's search index from scratch, re-embedding what the vector cache lacks; progress bars
    cover reading the items and embedding them."""
    mem = store_of(ctx)
    with phase_progress() as phases:
        done = mem.reindex(embedder=switch_to, phases=phases)
    switched = f" with embedder {escape(switch_to)} (the store's from now on)" if switch_to else ""
    out.print(f"indexed {plural(done, 'item')} on branch {escape(mem.branch)}{switched}")


@click.command(name="export")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True), default="-")
@click.option("--at", "at", help="Export the version at a ref (default: the branch head).")
@click.option("--namespace", default="", help="Only items under a/b.")
@click.option("--embeddings", is_flag=True, help="Include each item's vector (import then skips embedding).")
@click.option(
    "--with-history", is_flag=True, help="Every commit of every branch and tag, with authors, times and messages."
)
@click.pass_context
@friendly
def export_(
    ctx: click.Context, file: str, at: str | None, namespace: str, embeddings: bool, with_history: bool
) -> None:
    """Write the items (with timestamps, authors, sources) as JSON Lines to FILE (default stdout)."""
    mem = store_of(ctx)
    if with_history:
        if at or namespace or embeddings:
            raise click.UsageError("--with-history exports every commit: it takes no --at, --namespace or --embeddings")
        with click.open_file(file, "w", encoding="utf-8") as fp, counter("exporting commits") as advance:
            commits = export_history(mem.repo, fp, progress=advance)
        err.print(
            f"exported {plural(commits, 'commit')} with their changes" + (f" to {escape(file)}" if file != "-" else "")
        )
        return
    prefix = parse_ns(namespace)
    total = mem.at(at).count(prefix) if at else mem.count(prefix)
    with click.open_file(file, "w", encoding="utf-8") as fp, Progress(console=err, transient=True) as progress:
        task = progress.add_task("exporting", total=total)
        done = export_items(mem, fp, at=at, namespace_prefix=prefix, embeddings=embeddings,
                            progress=lambda n: progress.advance(task, n))  # fmt: skip
    err.print(f"exported {plural(done, 'item')}" + (f" to {escape(file)}" if file != "-" else ""))


IMPORT_EXAMPLES = """
Examples:

\b
  engram import backup.jsonl                              an `engram export` file
  engram import --from mem0 ~/.mem0                       mem0: history.db (+ its qdrant/ folder)
  engram import --from langgraph-sqlite store.sqlite      LangGraph's SqliteStore
  engram import --from langgraph-postgres postgresql://user@host/db
  engram import --from claude-slack ~/.claude/claude-slack/data/claude-slack.db
  engram import --from mem0 ~/.mem0 --dry-run             count what would come in, write nothing
"""


@click.command(name="import", epilog=IMPORT_EXAMPLES)
@click.argument("file", metavar="FILE|PATH|URL")
@click.option("--from", "kind", type=click.Choice(KINDS), help="Import another memory system's data (PATH or URL) "
              "instead of an engram export; with its history where the source keeps one.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="With --from: print what would be imported, write nothing.")
@click.option("--message", "-m", help="Commit message (default: import N item(s)).")
@click.option("--force", is_flag=True, help="With history: move branches and tags that exist with other history.")
@click.pass_context
@friendly
def import_(ctx: click.Context, file: str, kind: str | None, dry_run: bool, message: str | None, force: bool) -> None:
    """Write the items of an `engram export` FILE to the branch as one commit (an export --with-history
    replays every commit and sets its branches and tags), or, with --from, import mem0's, LangGraph's or
    claude-slack's data. Re-running an import --from adds only what is new."""
    if kind is not None:
        if message or force:
            raise click.UsageError("--message and --force are for an `engram export` file, not with --from")
        _import_from(ctx, kind, file, dry_run)
        return
    if dry_run:
        raise click.UsageError("--dry-run goes with --from (an export's import is one commit: check it with diff)")
    if file != "-" and Path(file).is_dir():
        raise click.UsageError(f"{file} is a directory: give an `engram export` file, or use --from")
    try:
        with click.open_file(file, "r", encoding="utf-8") as fp:
            lines = fp.readlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.UsageError(f"cannot read {file}: {exc}") from None
    mem = store_of(ctx, create=True)
    if lines and is_history(lines[0]):
        with counter("replaying commits") as advance:
            commits, same = import_history(mem.repo, lines, force=force, progress=advance)
        out.print(f"replayed {plural(commits, 'commit')} ({same:,} with their original ids); "
                  f"branches: {escape(', '.join(sorted(mem.branches())))}")  # fmt: skip
        return
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task("importing", total=max(0, len(lines) - 1))
        done, commit = import_items(mem, lines, message=message, progress=lambda n: progress.advance(task, n))
    if commit is None:
        out.print("nothing to import")
        return
    with phase_progress() as phases:  # index now, with progress, so the first search after it waits for nothing
        mem.update_index(phases)
    out.print(f"[green]{commit.short_id}[/green] imported {plural(done, 'item')} into {escape(mem.branch)}")


def _import_from(ctx: click.Context, kind: str, location: str, dry_run: bool) -> None:
    """``engram import --from KIND PATH|URL``: progress bars on stderr, the counts on stdout."""
    if kind != "langgraph-postgres" and "://" in location:
        raise click.UsageError(f"--from {kind} reads a file or folder, not a URL: {redact_url(location)}")
    if kind == "langgraph-postgres" and not is_postgres(location):
        raise click.UsageError(f"--from langgraph-postgres takes a postgresql:// URL, got {location!r}")
    try:
        total = count_source(kind, location)
        if dry_run:
            try:
                mem = store_of(ctx)
            except ConfigError:  # no store yet: everything would be new
                mem = open_store(":memory:", embedder="hashing")
        else:
            mem = store_of(ctx, create=True)
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task(f"importing from {kind}", total=total)
            report = import_from(kind, location, mem, dry_run=dry_run,
                                 progress=lambda n: progress.advance(task, n))  # fmt: skip
    except ImportSourceError as exc:
        raise click.UsageError(str(exc)) from None
    if report.versions and not dry_run:
        with phase_progress() as phases:  # index now, so the first search after the import waits for nothing
            mem.update_index(phases)
    out.print(("[yellow]dry run:[/yellow] " if dry_run else "") + escape(report.summary()))


@click.command()
@click.option("--keys-file", envvar="ENGRAM_KEYS_FILE", type=click.Path(dir_okay=False, path_type=Path),
              help="API keys file (default: <store dir>/keys.json, as `engram serve`).")  # fmt: skip
@click.pass_context
@friendly
def tenants(ctx: click.Context, keys_file: Path | None) -> None:
    """List the tenant stores `engram serve` writes to when API keys are in use (read one with --tenant NAME).

    \b
    Example:
      engram tenants
      engram --tenant acme log
    """
    explicit = store_url(ctx)
    base = explicit if explicit is not None else (str(found) if (found := discover()) is not None else None)
    keyed: dict[str, int] = {}
    path = keys_file or default_keys_path(base)
    if path is not None and path.is_file():
        for key in KeyRing(path).keys():  # noqa: SIM118 (KeyRing.keys() lists API keys)
            keyed[key.tenant] = keyed.get(key.tenant, 0) + 1
    on_disk: set[str] = set()
    parsed = StoreUrl.parse(base)
    if parsed.path is not None:  # a file store: each tenant's file is under <store dir>/tenants/
        folder = parsed.path.parent / "tenants"
        if folder.is_dir():
            on_disk = {p.name for p in folder.iterdir() if (p / DB_NAME).is_file()}
    names = sorted(on_disk | set(keyed))
    if not names:
        out.print("no tenants yet: `engram keys create --tenant NAME ...` makes one (its store appears on first use)")
        return
    for name in names:
        state = "store" if name in on_disk or base is None or parsed.kind == "postgres" else "no store yet"
        keys = plural(keyed.get(name, 0), "key")
        out.print(f"{escape(name)}  {keys}, {state}: {escape(tenant_url(base, name))}")


@click.group()
def db() -> None:
    """PostgreSQL schema: `engram --store postgresql://... db migrate`."""


def _postgres_url(ctx: click.Context) -> str:
    url = store_url(ctx)
    if url is None or not is_postgres(url):
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


COMMANDS = [gc, fsck, reindex, export_, import_, tenants, db]
