"""Commands that read the timeline: ``log``, ``diff``, ``show``, ``history`` (``blame``), ``reflog``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.markup import escape

from engram.cli._common import FOLD, commit_dict, emit, friendly, out, parse_ns, plural, shown, store_of, when
from engram.cli._graph import draw
from engram.store.item import Item, ItemChange
from engram.store.serialize import change_json, iso, version_json

_full = click.option("--full", is_flag=True, help="Never fold long values.")


def _change_options(json_help: str) -> Callable[[F], F]:
    """``--stat``, ``--name-only``, ``--full`` and ``--json`` of the commands that print changes."""

    def apply(fn: F) -> F:
        for option in reversed([
            click.option("--stat", is_flag=True, help="Only the changed items and a summary (no values)."),
            click.option("--name-only", is_flag=True, help="Only the changed items' paths."),
            _full,
            click.option("--json", "as_json", is_flag=True, help=json_help),
        ]):  # fmt: skip
            fn = option(fn)
        return fn

    return apply


F = TypeVar("F", bound=Callable[..., Any])
_SIGNS = {"added": "[green]+[/green]", "removed": "[red]-[/red]", "modified": "[yellow]~[/yellow]"}


@click.command()
@click.argument("ref", default="HEAD")
@click.option("--namespace", help="Only commits that touched items under a/b.")
@click.option("--key", help="With --namespace: only commits that touched this item.")
@click.option("--limit", "-n", type=int, default=20, show_default=True)
@click.option("--graph", is_flag=True, help="Draw branches and merges beside the commits.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (times in ISO 8601).")
@click.pass_context
@friendly
def log(ctx: click.Context, ref: str, namespace: str | None, key: str | None, limit: int, graph: bool,
        as_json: bool) -> None:  # fmt: skip
    """Show commits reachable from REF, newest first: id, time (local, with offset), author, message.

    \b
    Examples:
      engram log --graph
      engram log main@{yesterday} -n 5
      engram log --namespace users/alice --key prefs
    """
    if key is not None and namespace is None:
        raise click.UsageError("--key needs --namespace (the item's namespace)")
    ns = parse_ns(namespace) if namespace is not None else None
    commits = store_of(ctx).log(ref, namespace=ns, key=key, limit=limit)
    if as_json:
        emit([commit_dict(c) for c in commits])
        return
    width = max((len(c.author) for c in commits), default=0)
    rows = draw(commits) if graph else [("M" if len(c.parents) > 1 else "*", c) for c in commits]
    for lanes, c in rows:
        if c is None:
            out.print(lanes, markup=False)
            continue
        out.print(f"{escape(lanes)} [yellow]{c.short_id}[/yellow] [dim]{when(c.time)}[/dim] "
                  f"{escape(c.author):<{width}}  {escape(c.message)}")  # fmt: skip


@click.command()
@click.argument("old")
@click.argument("new", default="HEAD")
@click.option("--namespace", default="", help="Only items under a/b.")
@_change_options("Print JSON: each change with its old and new item.")
@click.pass_context
@friendly
def diff(ctx: click.Context, old: str, new: str, namespace: str, stat: bool, name_only: bool, full: bool,
         as_json: bool) -> None:  # fmt: skip
    """Show what changed from version OLD to NEW (default HEAD): each item with its old -> new values.

    OLD may name both sides as git does: A..B is the same as A B, and A...B is what B introduces since the
    merge base of A and B (what merging B into A brings in).

    \b
    Examples:
      engram diff HEAD~1
      engram diff main@{3 days ago} main --namespace users/alice
      engram diff v1 v2 --stat
      engram diff main...hotfix
    """
    changes = store_of(ctx).diff(old, new, namespace=parse_ns(namespace))
    if as_json:
        emit([change_json(c) for c in changes])
        return
    _print_changes(changes, stat=stat, name_only=name_only, fold=None if full else FOLD)


@click.command()
@click.argument("ref", default="HEAD")
@_change_options("Print JSON: the commit and each change's old and new item.")
@click.pass_context
@friendly
def show(ctx: click.Context, ref: str, stat: bool, name_only: bool, full: bool, as_json: bool) -> None:
    """Show one commit (default HEAD) and what it changed, with old -> new values."""
    details = store_of(ctx).show(ref)
    if as_json:
        emit({**commit_dict(details.commit), "changes": [change_json(c) for c in details.changes]})
        return
    c = details.commit
    if not name_only:
        parents = " ".join(p.hex()[:10] for p in c.parents)
        out.print(f"[yellow]commit {c.id.hex()}[/yellow]" + (f"\nmerge  {parents}" if len(c.parents) > 1 else ""))
        out.print(f"author {escape(c.author)}\ndate   {when(c.time)}\n\n    {escape(c.message)}\n")
    _print_changes(details.changes, stat=stat, name_only=name_only, fold=None if full else FOLD)


def _print_changes(changes: list[ItemChange], *, stat: bool, name_only: bool, fold: int | None) -> None:
    for c in changes:
        path = escape("/".join((*c.namespace, c.key)))
        if name_only:
            out.print(path)
            continue
        if stat or c.kind == "modified":
            out.print(f" {_SIGNS[c.kind]} {path}")
            if not stat:
                for line in _field_changes(c.old, c.new, fold):
                    out.print(f"     {line}")
        else:
            side = c.new if c.kind == "added" else c.old
            assert side is not None
            out.print(f" {_SIGNS[c.kind]} {path} {escape(shown(side.value, fold))}")
    if name_only:
        return
    counts = {kind: sum(1 for c in changes if c.kind == kind) for kind in _SIGNS}
    out.print(f" {plural(len(changes), 'item')} changed: {counts['added']} added, {counts['modified']} modified, "
              f"{counts['removed']} removed")  # fmt: skip


def _field_changes(old: Item | None, new: Item | None, fold: int | None) -> list[str]:
    """A modified item's changes, field by field: ``~ field: old -> new``, ``+ field: new``, ``- field: old``."""
    assert old is not None and new is not None
    a, b = old.value, new.value
    lines = []
    for field in [*a, *(f for f in b if f not in a)]:
        if field not in b:
            lines.append(f"[red]-[/red] {escape(field)}: {escape(shown(a[field], fold))}")
        elif field not in a:
            lines.append(f"[green]+[/green] {escape(field)}: {escape(shown(b[field], fold))}")
        elif a[field] != b[field]:
            lines.append(f"[yellow]~[/yellow] {escape(field)}: {escape(shown(a[field], fold))} -> "
                         f"{escape(shown(b[field], fold))}")  # fmt: skip
    if not lines:
        lines.append(f"[dim](same value; {', '.join(_meta_changes(old, new)) or 'stored again'})[/dim]")
    return lines


def _meta_changes(old: Item, new: Item) -> list[str]:
    found = []
    if old.sources != new.sources:
        found.append(f"sources {', '.join(old.sources) or '(none)'} -> {', '.join(new.sources) or '(none)'}")
    if old.author != new.author:
        found.append(f"author {old.author} -> {new.author}")
    if old.expires_at != new.expires_at:
        found.append("expiry changed")
    return [escape(text) for text in found]


@click.command()
@click.argument("namespace")
@click.argument("key")
@click.option("--at", "at", default="HEAD", show_default=True, help="Start from this version.")
@_full
@click.option("--json", "as_json", is_flag=True, help="Print JSON: each version's commit and item (with sources).")
@click.pass_context
@friendly
def history(ctx: click.Context, namespace: str, key: str, at: str, full: bool, as_json: bool) -> None:
    """Every version of one item, newest first, one line each: commit, time, author, value, sources (blame)."""
    versions = store_of(ctx).history(parse_ns(namespace), key, at)
    if as_json:
        emit([version_json(v) for v in versions])
        return
    if not versions:
        out.print(f"no versions of {escape(namespace)}/{escape(key)}: it never existed on this branch")
    for v in versions:
        value = escape(shown(v.item.value, None if full else FOLD)) if v.item else "[red](deleted)[/red]"
        sources = f" [dim]sources: {escape(', '.join(v.item.sources))}[/dim]" if v.item and v.item.sources else ""
        out.print(f"[yellow]{v.commit.short_id}[/yellow] [dim]{when(v.commit.time)}[/dim] "
                  f"{escape(v.commit.author)}: {value}{sources}")  # fmt: skip


#: ``engram blame NS KEY``: the same as ``history``, under git's name.
blame = click.Command(
    "blame",
    callback=history.callback,
    params=history.params,
    help="Who wrote each version of one item, and from which messages (an alias of `history`).",
)


@click.command()
@click.argument("branch", required=False)
@click.option("--limit", "-n", type=int, default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (times in ISO 8601).")
@click.pass_context
@friendly
def reflog(ctx: click.Context, branch: str | None, limit: int, as_json: bool) -> None:
    """How BRANCH (default --branch) moved, newest first: time, old -> new, actor, reason (also after a reset or
    a delete)."""
    entries = store_of(ctx).reflog(branch, limit)
    if as_json:
        emit([_iso_time(e) for e in entries])
        return
    for e in entries:
        old, new = (e[side][:10] if e[side] else "(none)" for side in ("old", "new"))
        out.print(f"[dim]{when(e['time'])}[/dim] [yellow]{old}[/yellow] -> [yellow]{new}[/yellow] "
                  f"{escape(e['actor'] or '-')}: {escape(e['reason'])}")  # fmt: skip


def _iso_time(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "time": iso(entry["time"])}


COMMANDS = [log, diff, show, history, blame, reflog]
