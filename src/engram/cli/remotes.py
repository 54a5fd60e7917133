"""Remotes and backups: ``remote``, ``push``, ``fetch``, ``pull``, ``clone``, ``backup`` (library:
:mod:`engram.ops.remotes`, :mod:`engram.ops.backup`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

import click
from rich import filesize
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from engram.backends import MemoryChunkStore, MemoryRefStore
from engram.cli._common import counter, emit, err, friendly, locate, opened_url, out, plural, store_of, when
from engram.hashing import ChunkId
from engram.ops import backup as backups
from engram.ops.metrics import write_textfile
from engram.ops.remotes import Remote, RemoteConfig, TransferReport, open_remote, remote_config
from engram.ops.remotes import clone_into as clone_remote
from engram.ops.remotes import fetch as fetch_remote
from engram.ops.remotes import pull as pull_remote
from engram.ops.remotes import push as push_remote
from engram.redaction import redact_url
from engram.repo import Repository
from engram.store.connect import local_file, open_repository

STRATEGIES = click.Choice(["fail", "ours", "theirs", "newest"])


def _config(ctx: click.Context) -> RemoteConfig:
    mem = store_of(ctx)
    return remote_config(mem.repo, opened_url(ctx))


def _remote(ctx: click.Context, name: str) -> tuple[str, Remote]:
    """A remote by name (``engram remote add``) or by URL; returns (name for tracking refs, remote)."""
    if "://" in name:
        return "origin", open_remote(name)
    return name, open_remote(_config(ctx).url(name))


@contextlib.contextmanager
def _progress() -> Iterator[Callable[[str, int, int | None], None]]:
    """A progress bar on stderr: chunks examined, then chunks copied out of the total."""
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,.0f}/{task.total}"),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task("finding missing chunks", total=None)

        def update(phase: str, done: int, total: int | None) -> None:
            label = "finding missing chunks" if phase == "finding" else "copying chunks"
            progress.update(task, description=label, completed=done, total=total)

        yield update


def _size(n: int) -> str:
    return filesize.decimal(n)


def _print_transfer(report: TransferReport, verb: str) -> None:
    out.print(f"{verb} {plural(report.chunks, 'chunk')} ({_size(report.bytes)}); "
              f"{report.present:,} already there")  # fmt: skip
    for name, (old, new) in report.updated.items():
        was = old.hex()[:10] if old is not None else "(new)"
        out.print(f"  {escape(name)}: {was} -> {new.hex()[:10]}")
    for name, why in report.rejected.items():
        err.print(f"  [red]rejected[/red] {escape(name)}: {escape(why)}")


@click.group()
def remote() -> None:
    """Name the remotes of this store (dir:///path or s3://bucket/prefix?endpoint=...)."""


@remote.command(name="add")
@click.argument("name")
@click.argument("url")
@click.pass_context
@friendly
def remote_add(ctx: click.Context, name: str, url: str) -> None:
    """Name a remote: `engram remote add origin s3://backups/agents`."""
    _config(ctx).add(name, url)
    out.print(f"added remote {escape(name)}: {escape(redact_url(url))}")


@remote.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def remote_list(ctx: click.Context, as_json: bool) -> None:
    """List the remotes of this store (a password or secret parameter in a URL is shown as ***)."""
    found = _config(ctx).shown()
    if as_json:
        emit(found)
    elif not found:
        out.print("no remotes: `engram remote add origin dir:///path/to/folder` names one")
    for name, url in found.items() if not as_json else ():
        out.print(f"{escape(name)}  {escape(url)}")


@remote.command(name="remove")
@click.argument("name")
@click.pass_context
@friendly
def remote_remove(ctx: click.Context, name: str) -> None:
    """Forget a remote (nothing on it is deleted)."""
    _config(ctx).remove(name)
    out.print(f"removed remote {escape(name)}")


@click.command()
@click.argument("remote_name", metavar="REMOTE", default="origin")
@click.argument("refs", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every branch, tag and store record.")
@click.option("--force", is_flag=True, help="Move remote branches that diverged and tags that differ.")
@click.option("--thorough", is_flag=True,
              help="Read back every chunk the refs reach on the remote, check its hash, and re-send the missing "
                   "and corrupt ones (the repair after `backup verify` found damage).")  # fmt: skip
@click.pass_context
@friendly
def push(ctx: click.Context, remote_name: str, refs: tuple[str, ...], everything: bool, force: bool,
         thorough: bool) -> None:  # fmt: skip
    """Send branches or tags (default: the current branch) and the chunks the remote lacks; refs move last.

    \b
    Examples:
      engram push origin          # the current branch
      engram push origin main v1  # a branch and a tag
      engram push origin --all
    """
    mem = store_of(ctx)
    _, target = _remote(ctx, remote_name)
    names = None if everything else (list(refs) or [mem.branch])
    with _progress() as progress:
        report = push_remote(mem.repo, target.chunks, target.refs, names, force=force, thorough=thorough,
                             actor=mem.author, progress=progress)  # fmt: skip
    _print_transfer(report, "sent")
    if not report.ok:
        sys.exit(1)


@click.command()
@click.argument("remote_name", metavar="REMOTE", default="origin")
@click.pass_context
@friendly
def fetch(ctx: click.Context, remote_name: str) -> None:
    """Copy a remote's branches (as remotes/REMOTE/BRANCH) and tags, and the chunks this store lacks."""
    mem = store_of(ctx)
    name, source = _remote(ctx, remote_name)
    with _progress() as progress:
        report = fetch_remote(mem.repo, source.chunks, source.refs, name, actor=mem.author, progress=progress)
    _print_transfer(report, "received")


@click.command()
@click.argument("remote_name", metavar="REMOTE", default="origin")
@click.argument("branch", required=False)
@click.option("--strategy", type=STRATEGIES, default="fail", show_default=True,
              help="How a merge decides items both sides changed.")  # fmt: skip
@click.pass_context
@friendly
def pull(ctx: click.Context, remote_name: str, branch: str | None, strategy: str) -> None:
    """Fetch, then fast-forward the current branch to the remote's BRANCH (default: the same name) or merge it."""
    mem = store_of(ctx)
    name, source = _remote(ctx, remote_name)
    with _progress() as progress:
        report = pull_remote(mem, source, name, branch, strategy=strategy, progress=progress)  # type: ignore[arg-type]
    _print_transfer(report.fetched, "received")
    out.print(f"{escape(mem.branch)}: {report.how} at [green]{report.head.short_id}[/green]")


@click.command()
@click.argument("url")
@click.option("--force", is_flag=True, help="Overwrite the branches of a store that has history.")
@click.pass_context
@friendly
def clone(ctx: click.Context, url: str, force: bool) -> None:
    """Copy a remote's branches, tags and history into a new store (--store), then name the remote origin.

    \b
    Example:
      engram --store ./copy clone dir:///srv/engram-remote
    """
    store = locate(ctx, create=True)
    repo = open_repository(store, redis=ctx.find_root().params.get("redis"))
    source = open_remote(url)
    with _progress() as progress:
        report = clone_remote(repo, source.chunks, source.refs, force=force, progress=progress)
    config = remote_config(repo, store)
    if "origin" not in config.list():
        config.add("origin", url)
    fetch_remote(repo, source.chunks, source.refs, "origin")  # tracking refs: remotes/origin/<branch>
    _print_transfer(report, "received")


@click.group()
def backup() -> None:
    """Incremental, verified backups to a remote (a backup is a push; a restore is a clone + fsck)."""


remote_option = click.option("--remote", "remote_name", default="origin", show_default=True,
                             help="Remote name or URL.")  # fmt: skip


@backup.command(name="create")
@remote_option
@click.option("--name", help="Backup name (default: the UTC time, e.g. 20261120T111500Z-123).")
@click.option("--metrics-file", type=click.Path(dir_okay=False),
              help="On success, write the backup's time (engram_last_backup_success_timestamp_seconds) here, "
                   "for node_exporter's textfile collector.")  # fmt: skip
@click.option(
    "--thorough",
    is_flag=True,
    help="Read back every chunk on the remote, check its hash and re-send the missing and corrupt ones.",
)
@click.pass_context
@friendly
def backup_create(ctx: click.Context, remote_name: str, name: str | None, metrics_file: str | None,
                  thorough: bool) -> None:  # fmt: skip
    """Back up every branch, tag and store record, sending only the chunks the remote lacks."""
    mem = store_of(ctx)
    _, target = _remote(ctx, remote_name)
    with _progress() as progress:
        made, report = backups.create_backup(mem.repo, target, name, actor=mem.author, progress=progress,
                                             thorough=thorough)  # fmt: skip
    if metrics_file is not None:
        write_textfile(metrics_file)
    items, sent = plural(sum(made.items.values()), "item"), plural(report.chunks, "chunk")
    out.print(f"backup [green]{escape(made.name)}[/green]: {items}, sent {sent} ({_size(report.bytes)}), "
              f"{report.present:,} already there")  # fmt: skip


@backup.command(name="list")
@remote_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def backup_list(ctx: click.Context, remote_name: str, as_json: bool) -> None:
    """List the complete backups on a remote, oldest first."""
    _, source = _remote(ctx, remote_name)
    found = backups.list_backups(source)
    if as_json:
        emit([{"name": b.name, "time": b.when.isoformat(), "author": b.author, "items": b.items, "bytes": b.bytes,
               "refs": {ref: cid.hex() for ref, cid in b.refs.items()}} for b in found])  # fmt: skip
        return
    if not found:
        out.print("no backups yet: `engram backup create` makes one")
    for b in found:
        out.print(f"{escape(b.name)}  {when(b.time)}  {plural(sum(b.items.values()), 'item')}  "
                  f"{plural(len(b.refs), 'ref')}  sent {_size(b.bytes)}")  # fmt: skip


@backup.command(name="verify")
@click.argument("name", required=False)
@remote_option
@click.pass_context
@friendly
def backup_verify(ctx: click.Context, name: str | None, remote_name: str) -> None:
    """Read back every chunk of a backup (default: all of them) and check its hash; name each missing or corrupt
    chunk, the objects holding it and every pack whose index cannot be read; exit 2 on any damage."""
    _, source = _remote(ctx, remote_name)
    chosen = [backups.get_backup(source, name)] if name else backups.list_backups(source)
    damaged = 0
    for b in chosen:
        with counter(f"verifying {b.name}") as advance:
            report = backups.verify_backup(source, b, advance)
        state = "[green]ok[/green]" if report.ok else (
            f"[red]{len(report.missing)} missing, {len(report.corrupt)} corrupt[/red]")  # fmt: skip
        if report.damaged:
            state += f" [red]({len(report.damaged)} unreadable pack index(es))[/red]"
        out.print(f"{escape(b.name)}: {plural(report.commits, 'commit')}, {plural(report.nodes, 'tree node')}: {state}")
        _print_damage(report.missing, report.corrupt, report.places, report.damaged)
        damaged += not report.ok
    if damaged:
        sys.exit(2)


@backup.command(name="restore")
@click.argument("name")
@click.option("--to", "to", required=True, help="Store URL to restore into (a new store, unless --force).")
@click.option("--dry-run", is_flag=True, help="Report what would be copied and changed; write nothing.")
@click.option("--force", is_flag=True, help="Overwrite the refs of a store that has history.")
@remote_option
@click.pass_context
@friendly
def backup_restore(ctx: click.Context, name: str, to: str, dry_run: bool, force: bool, remote_name: str) -> None:
    """Restore backup NAME (or `latest`) into the store at --to, then fsck that store (exit 2 on damage)."""
    _, source = _remote(ctx, remote_name)
    chosen = backups.get_backup(source, name)
    path = local_file(to)
    if path is not None and not path.exists():  # plan against what opening would create: nothing written yet
        target = Repository(MemoryChunkStore(), MemoryRefStore())
        target.init()
    else:
        target = open_repository(to)
    plan = backups.plan_restore(source, chosen, target)
    items, copying = plural(sum(chosen.items.values()), "item"), plural(plan.chunks, "chunk")
    out.print(f"backup {escape(chosen.name)} ({when(chosen.time)}): {items}, {plural(plan.commits, 'commit')}; "
              f"{copying} ({_size(plan.bytes)}) to copy")  # fmt: skip
    for ref, (old, new) in plan.changes.items():
        change = "unchanged" if old == new else f"{_was(target, old)} -> {new.hex()[:10]}"
        out.print(f"  {escape(ref)}: {change}")
    if not plan.ok:
        note = " (dry run: nothing written)" if dry_run else ""
        err.print(f"[red]the backup is damaged on the remote: {len(plan.missing)} missing, {len(plan.corrupt)} "
                  f"corrupt; a restore refuses it[/red]{note}")  # fmt: skip
        bad = {hex_id: source.chunks.bad_copies(bytes.fromhex(hex_id)) for hex_id in plan.corrupt}
        _print_damage(plan.missing, plan.corrupt, bad)
        sys.exit(2)
    if dry_run:
        out.print("dry run: nothing written")
        return
    if path is not None and not path.exists():  # a damaged backup (above) leaves no store behind
        target = open_repository(to)
    with _progress() as progress:
        report = backups.restore_backup(source, chosen, target, force=force, progress=progress)
    fsck = report.fsck
    out.print(f"restored into {escape(to)}; fsck: {plural(fsck.commits, 'commit')}, "
              f"{plural(fsck.nodes, 'tree node')}: " + ("[green]ok[/green]" if fsck.ok else
              f"[red]{len(fsck.missing)} missing, {len(fsck.corrupt)} corrupt[/red]"))  # fmt: skip
    if not fsck.ok:
        sys.exit(2)


#: At most this many damaged chunks are named (the summary says how many there are).
MAX_NAMED = 100


def _print_damage(
    missing: list[str], corrupt: list[str], places: dict[str, list[str]], unreadable: dict[str, str] | None = None
) -> None:  # fmt: skip
    """Name each damaged pack index and each missing or corrupt chunk (with the objects holding a bad copy)."""
    for pack, why in (unreadable or {}).items():
        err.print(f"  [red]unreadable index[/red] {escape(pack)}.idx: {escape(why)}", soft_wrap=True)
    named = [(hex_id, "corrupt") for hex_id in corrupt] + [(hex_id, "missing") for hex_id in missing]
    for hex_id, kind in named[:MAX_NAMED]:
        where = ", ".join(places.get(hex_id, []))
        err.print(f"  [red]{kind}[/red] chunk {hex_id}" + (f" in {escape(where)}" if where else ""), soft_wrap=True)
    if len(named) > MAX_NAMED:
        err.print(f"  ... and {len(named) - MAX_NAMED} more")


def _was(target: Repository, old: ChunkId | None) -> str:
    """A ref's value before a restore, as the plan shows it: a new store's first commit is ``(new store)``, the
    same in a dry run (planned against the store opening would create) and in the real run."""
    if old is None:
        return "(new)"
    commit = target.commit(old)
    return (
        "(new store)"
        if not commit.parents and commit.message == "init" and old == target.head("main")
        else old.hex()[:10]
    )


@backup.command(name="prune")
@click.option("--keep-last", type=click.IntRange(min=0), help="Keep the newest N backups.")
@click.option("--keep-days", type=click.FloatRange(min=0), help="Keep the backups younger than D days.")
@click.option("--dry-run", is_flag=True, help="Say which backups would go; delete nothing.")
@remote_option
@click.pass_context
@friendly
def backup_prune(ctx: click.Context, keep_last: int | None, keep_days: float | None, dry_run: bool,
                 remote_name: str) -> None:  # fmt: skip
    """Remove backups past the retention rules, then delete the remote's chunks no kept backup reaches
    (chunks written in the last 10 minutes are kept). It holds the remote's lease: it waits for running backups
    and backups wait for it. Do not run it while a push to that remote runs."""
    _, source = _remote(ctx, remote_name)
    with counter("sweeping chunks") as advance:
        report = backups.prune_backups(source, keep_last=keep_last, keep_days=keep_days, dry_run=dry_run,
                                       progress=advance)  # fmt: skip
    gone = ", ".join(report.removed) or "none"
    out.print(f"{'would remove' if dry_run else 'removed'} {plural(len(report.removed), 'backup')} ({escape(gone)}); "
              f"kept {plural(len(report.kept), 'backup')}")  # fmt: skip
    if not dry_run:
        out.print(f"deleted {plural(report.chunks_removed, 'chunk')} no kept backup reaches")


COMMANDS = [remote, push, fetch, pull, clone, backup]
