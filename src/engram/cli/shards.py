"""``engram shard``: the shard map of a sharded deployment (library: :mod:`engram.ops.shards`).

Every subcommand reads the catalog from ``--catalog URL`` or ``ENGRAM_SHARD_CATALOG``. Map changes print the
tenants they pin (those that now hash to another shard); ``--plan`` prints them without changing anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click
from rich.markup import escape

from engram.cli._common import emit, err, friendly, out, plural
from engram.errors import ConfigError
from engram.ops import shards
from engram.ops.shards import ShardCatalog
from engram.ops.shards.catalog import redact


@contextmanager
def _catalog(ctx: click.Context) -> Iterator[ShardCatalog]:
    found = ctx.find_object(dict)
    url = found.get("catalog") if found is not None else None
    if not url:
        raise ConfigError("name the shard catalog: engram shard --catalog postgresql://... (or ENGRAM_SHARD_CATALOG)")
    catalog = ShardCatalog(url)
    try:
        yield catalog
    finally:
        catalog.close()


def _print_moves(moves: dict[str, tuple[str, str]], planned: bool, as_json: bool) -> None:
    if as_json:
        emit({"planned": planned, "moves": {t: {"from": a, "to": b} for t, (a, b) in sorted(moves.items())}})
        return
    verb = "would move" if planned else "pinned where they are (run `engram shard rebalance` to move them)"
    out.print(f"{plural(len(moves), 'tenant')} {verb}")
    for tenant, (old, new) in sorted(moves.items()):
        out.print(escape(f"  {tenant}: {old} -> {new}"))


_plan = click.option("--plan", "planned", is_flag=True, help="Only show what the change would move.")
_json = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_replica = click.option("--replica", "replicas", multiple=True, metavar="URL",
                        help="A read replica of the shard (a streaming standby's URL); repeatable.")  # fmt: skip


@click.group()
@click.option("--catalog", envvar="ENGRAM_SHARD_CATALOG", metavar="URL", help="PostgreSQL URL of the shard catalog.")
@click.pass_context
def shard(ctx: click.Context, catalog: str | None) -> None:
    """Shard tenants over PostgreSQL databases: add shards, plan and move tenants (docs/scaling.md)."""
    ctx.ensure_object(dict)
    ctx.obj["catalog"] = catalog


@shard.command("add")
@click.argument("url")
@click.option("--name", help="Shard name (default: the database's name).")
@click.option("--weight", default=1.0, show_default=True, type=float, help="Share of tenants, relative.")
@click.option("--status", default="active", show_default=True, type=click.Choice(shards.STATUSES))
@_replica
@_plan
@_json
@click.pass_context
@friendly
def add(
    ctx: click.Context, url: str, name: str | None, weight: float, status: str, replicas: tuple[str, ...],
    planned: bool, as_json: bool,
) -> None:  # fmt: skip
    """Add the PostgreSQL database URL as a shard."""
    with _catalog(ctx) as catalog:
        moves = shards.add_shard(catalog, url, name=name, weight=weight, status=status, replicas=replicas,
                                 dry_run=planned)  # fmt: skip
    if not planned and not as_json:
        err.print(f"added shard {escape(name or url.rsplit('/', 1)[-1].split('?')[0])}")
    _print_moves(moves, planned, as_json)


@shard.command("list")
@_json
@click.pass_context
@friendly
def list_shards(ctx: click.Context, as_json: bool) -> None:
    """List the shards (URLs without passwords), the map version and the tenants being moved."""
    with _catalog(ctx) as catalog:
        current = catalog.load()
    rows = [{"name": s.name, "url": redact(s.url), "weight": s.weight, "status": s.status,
             "replicas": [redact(url) for url in current.replicas.get(s.name, ())]}
            for s in current.shards.values()]  # fmt: skip
    if as_json:
        emit({"version": current.version, "shards": rows, "overrides": len(current.overrides),
              "moving": current.moving})  # fmt: skip
        return
    out.print(f"shard map version {current.version}, {plural(len(current.overrides), 'pinned tenant')}")
    for row in rows:
        out.print(escape(f"{row['name']:<16} {row['status']:<9} weight {row['weight']:<6g} {row['url']}"))
        for replica in current.replicas.get(str(row["name"]), ()):
            out.print(escape(f"{'':<16} replica {redact(replica)}"))
    for tenant, target in sorted(current.moving.items()):
        out.print(escape(f"moving: {tenant} -> {target}"))


@shard.command("set-status")
@click.argument("name")
@click.argument("status", type=click.Choice(shards.STATUSES))
@_plan
@_json
@click.pass_context
@friendly
def set_status(ctx: click.Context, name: str, status: str, planned: bool, as_json: bool) -> None:
    """Set shard NAME's status: active, readonly (no writes) or draining (no new tenants)."""
    with _catalog(ctx) as catalog:
        moves = shards.set_status(catalog, name, status, dry_run=planned)
    _print_moves(moves, planned, as_json)


@shard.command("set-weight")
@click.argument("name")
@click.argument("weight", type=float)
@_plan
@_json
@click.pass_context
@friendly
def set_weight(ctx: click.Context, name: str, weight: float, planned: bool, as_json: bool) -> None:
    """Set shard NAME's weight (its share of tenants)."""
    with _catalog(ctx) as catalog:
        moves = shards.set_weight(catalog, name, weight, dry_run=planned)
    _print_moves(moves, planned, as_json)


@shard.command("set-replicas")
@click.argument("name")
@_replica
@click.pass_context
@friendly
def set_replicas(ctx: click.Context, name: str, replicas: tuple[str, ...]) -> None:
    """Set shard NAME's read replicas (replacing its old ones; no --replica removes them)."""
    with _catalog(ctx) as catalog:
        shards.set_replicas(catalog, name, replicas)
    out.print(escape(f"shard {name}: {plural(len(replicas), 'read replica')}"))


@shard.command("plan")
@_json
@click.pass_context
@friendly
def plan(ctx: click.Context, as_json: bool) -> None:
    """Show the tenants `engram shard rebalance` would move (pinned ones that hash to another shard)."""
    with _catalog(ctx) as catalog:
        moves = shards.misplaced(catalog)
    _print_moves(moves, True, as_json)


@shard.command("where")
@click.argument("tenant")
@click.pass_context
@friendly
def where(ctx: click.Context, tenant: str) -> None:
    """Print the shard TENANT lives on."""
    with _catalog(ctx) as catalog:
        out.print(escape(catalog.load().route(tenant).name))


def _print_report(report: shards.MoveReport, as_json: bool) -> None:
    if as_json:
        emit(report.as_dict())
        return
    out.print(escape(
        f"moved {report.tenant} from {report.source} to {report.target}: {plural(report.chunks, 'chunk')}, "
        f"{report.reflog} reflog entries in {report.seconds:.2f} s; writes paused "
        f"{report.frozen_seconds * 1000:.0f} ms"
    ))  # fmt: skip


@shard.command("move")
@click.argument("tenant")
@click.option("--to", "target", required=True, help="The shard to move the tenant to.")
@_json
@click.pass_context
@friendly
def move(ctx: click.Context, tenant: str, target: str, as_json: bool) -> None:
    """Move TENANT's repository to another shard, verified, while writes continue; then switch its route."""
    with _catalog(ctx) as catalog:
        report = shards.move_tenant(catalog, tenant, target, progress=lambda line: err.print(escape(line)))
    _print_report(report, as_json)


@shard.command("rebalance")
@_json
@click.pass_context
@friendly
def rebalance(ctx: click.Context, as_json: bool) -> None:
    """Move every tenant `engram shard plan` lists to the shard it hashes to."""
    with _catalog(ctx) as catalog:
        reports = shards.rebalance(catalog)
    if as_json:
        emit([r.as_dict() for r in reports])
        return
    for report in reports:
        _print_report(report, False)
    if not reports:
        out.print("nothing to move")


@shard.command("gc")
@click.option("--yes", is_flag=True, help="Drop the copies (without it, only list them).")
@_json
@click.pass_context
@friendly
def gc(ctx: click.Context, yes: bool, as_json: bool) -> None:
    """List (or with --yes drop) the copies that moves left on the shards tenants moved away from."""
    with _catalog(ctx) as catalog:
        found = shards.collect(catalog, dry_run=not yes)
    if as_json:
        emit({"dropped": yes, "copies": found})
        return
    total = sum(map(len, found.values()))
    copies = "1 old copy" if total == 1 else f"{total} old copies"
    out.print(f"{'dropped' if yes else 'would drop'} {copies}")
    for name, tenants in sorted(found.items()):
        out.print(escape(f"  {name}: {', '.join(tenants)}"))


__all__ = ["shard"]
