"""Commands on items: ``init``, ``put``, ``get``, ``rm``, ``search``, ``ls``."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from engram.cli._common import (
    author_option,
    emit,
    err,
    friendly,
    message_option,
    out,
    parse_json,
    parse_ns,
    phase_progress,
    print_commit,
    shown,
    store_of,
    with_provenance,
)
from engram.store import Memory, View
from engram.store.serialize import search_json


@click.command()
@click.pass_context
@friendly
def init(ctx: click.Context) -> None:
    """Create the store (./.engram, or --store) if needed and show its branches."""
    mem = store_of(ctx, create=True, here=True)
    out.print(f"store ready on branch [bold]{mem.branch}[/bold]; branches: {', '.join(mem.branches())}")


@click.command()
@click.argument("namespace")
@click.argument("key")
@click.argument("value")
@click.option("--sources", help="Comma-separated ids of the messages this came from (provenance).")
@author_option
@message_option
@click.pass_context
@friendly
def put(ctx: click.Context, namespace: str, key: str, value: str, sources: str | None, author: str | None,
        message: str | None) -> None:  # fmt: skip
    """Store VALUE (a JSON object) at NAMESPACE (a/b/c) and KEY, as one commit.

    \b
    Example:
      engram put users/alice prefs '{"theme": "dark"}' --sources msg-41,msg-42 --author assistant
    """
    parsed = parse_json(value, "VALUE")
    found = [s.strip() for s in sources.split(",") if s.strip()] if sources else []
    commit = store_of(ctx, create=True).put(
        parse_ns(namespace), key, parsed, sources=found, author=author, message=message
    )
    out.print(f"[green]{commit.short_id}[/green] {escape(commit.message)}")


@click.command()
@click.argument("namespace")
@click.argument("key")
@click.option("--at", "at", help="Read as of a ref: branch, tag, commit, HEAD~n, main@{time}, main@{3 days ago}.")
@click.option("--json", "as_json", is_flag=True, help="Print the item with its provenance as JSON.")
@click.pass_context
@friendly
def get(ctx: click.Context, namespace: str, key: str, at: str | None, as_json: bool) -> None:
    """Print the value at NAMESPACE and KEY."""
    mem = store_of(ctx)
    item = (mem.at(at) if at else mem).get(parse_ns(namespace), key)
    if item is None:
        err.print(f"[red]error:[/red] no item {escape(namespace)}/{escape(key)}" + (f" at {escape(at)}" if at else ""))
        sys.exit(1)
    emit(with_provenance(item) if as_json else item.value)


@click.command()
@click.argument("namespace")
@click.argument("key")
@author_option
@message_option
@click.pass_context
@friendly
def rm(ctx: click.Context, namespace: str, key: str, author: str | None, message: str | None) -> None:
    """Delete the item at NAMESPACE and KEY, as one commit (a missing item: nothing to do, no commit)."""
    mem = store_of(ctx)
    before = mem.head.id
    commit = mem.delete(parse_ns(namespace), key, author=author, message=message)
    print_commit(commit, before, f"nothing to delete: no item {escape(namespace)}/{escape(key)}")


@click.command()
@click.argument("namespace", default="")
@click.argument("query", required=False)
@click.option("--filter", "filter_", help='MongoDB-style JSON filter, e.g. \'{"kind": "pref"}\'.')
@click.option("--limit", default=10, show_default=True)
@click.option("--mode", type=click.Choice(["hybrid", "semantic", "keyword"]))
@click.option("--profile", default="similarity", show_default=True, help="similarity, balanced, recent or quality.")
@click.option("--explain", is_flag=True, help="Show each signal's score.")
@click.option("--min-score", type=float, help="Leave out results scoring below this.")
@click.option("--at", "at", help="Search the memory as of a ref.")
@click.option("--full", is_flag=True, help="Never fold long values.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def search(ctx: click.Context, namespace: str, query: str | None, filter_: str | None, limit: int, mode: str | None,
           profile: str, explain: bool, min_score: float | None, at: str | None, full: bool,
           as_json: bool) -> None:  # fmt: skip
    """Search under NAMESPACE (a/b; '' for everything) for QUERY; without QUERY, list newest first.

    \b
    Examples:
      engram search users "dark mode" --explain
      engram search "" "dark mode"            # every namespace
      engram search users/alice --filter '{"theme": "dark"}'
    """
    spec = parse_json(filter_, "--filter") if filter_ else None
    mem = store_of(ctx)
    with phase_progress() as phases:  # a first search after a large import shows its indexing, not a silent wait
        mem.update_index(phases)
    reader = mem.at(at) if at else mem
    prefix = parse_ns(namespace)
    results = reader.search(prefix, query, filter=spec, limit=limit, mode=mode, profile=profile,  # type: ignore[arg-type]
                            explain=explain, min_score=min_score)  # fmt: skip
    if as_json:
        emit(search_json(results))
        return
    if results.degraded:
        err.print(f"[yellow]note:[/yellow] {escape(results.degraded)}")
    for r in results:
        score = "" if r.score is None else f"{r.score:.3f} "
        value = shown(r.value, None if full else 160)
        out.print(f"{score}[cyan]{escape('/'.join(r.namespace))}/{escape(r.key)}[/cyan] {escape(value)}")
        if explain and r.explain:
            out.print(f"      {escape(shown({k: v for k, v in r.explain.items() if k != 'weights'}, None))}")
    if not len(results):
        _why_empty(reader, prefix, namespace, query, spec is not None)


def _why_empty(reader: Memory | View, prefix: tuple[str, ...], namespace: str, query: str | None,
               filtered: bool) -> None:  # fmt: skip
    """Say why a search found nothing: a namespace that holds nothing (the usual slip: a query given as the
    namespace), a filter, or no match."""
    holds = reader.list_namespaces(prefix=prefix or None, limit=1)
    if prefix and not holds:
        top = [ns[0] for ns in reader.list_namespaces(max_depth=1, limit=20)]
        hint = f' To search every namespace for it: engram search "" {_quote(namespace)}' if query is None else ""
        err.print(f"no items under namespace {escape(namespace)!r} (namespaces: {escape(', '.join(top) or 'none')})."
                  + escape(hint))  # fmt: skip
        sys.exit(1)
    where = f"under {namespace!r}" if prefix else "in any namespace"
    what = f"matching {query!r}" if query else "at all"
    err.print(escape(f"no items {what} {where}" + (" that pass the filter" if filtered else "")))


def _quote(text: str) -> str:
    return f'"{text}"' if " " in text or not text else text


@click.command()
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
        out.print(escape("/".join(ns)))


COMMANDS = [init, put, get, rm, search, ls]
