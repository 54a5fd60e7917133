"""``engram doctor``: the readiness report of ``/readyz`` for the store of this invocation."""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from engram.cli._common import friendly, locate, out, store_of
from engram.ops.health import Readiness, readiness
from engram.ops.remotes.config import remote_config
from engram.ops.shards.health import ShardProbe
from engram.store import Memory

#: Exit status when the store is not ready (1 is a usage error, as for every command).
NOT_READY = 2
#: Fields shown in the table's "details" column before the others, for each component.
_SKIP = {"ok", "ms", "error", "catalog", "shards"}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (the body of /readyz).")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1, max=600),
    default=5.0,
    show_default=True,
    help="Seconds to wait for the checks (the first embedding loads the model).",
)
@click.option(
    "--shard-catalog",
    envvar="ENGRAM_SHARD_CATALOG",
    metavar="URL",
    help="Also check this shard catalog and every shard in it (PostgreSQL URL).",
)
@click.pass_context
@friendly
def doctor(ctx: click.Context, as_json: bool, timeout: float, shard_catalog: str | None) -> None:
    """Check the store, its cache, embedder, search index, remotes and circuit breakers, as /readyz does.

    Prints each component's status and latency; exits with status 2 when the store is not ready, or with
    --shard-catalog when the catalog or an active shard does not answer (a degraded component, such as a
    Redis cache that is down or a draining shard that does not answer, still exits 0).

    \b
    Examples:
      engram doctor
      engram doctor --json
      engram doctor --shard-catalog postgresql://engram@db/agents?dbname=engram_catalog
    """
    url = locate(ctx)  # a store that does not exist is a usage error; one that fails to open is "down"

    lock = threading.Lock()

    def opened() -> Memory:
        with lock:  # the checks run on threads: open the store once
            return store_of(ctx)

    def remotes() -> dict[str, str]:
        return remote_config(opened().repo, url).list()

    essential = {} if not shard_catalog else {"shards": ShardProbe(shard_catalog, timeout=timeout)}
    report = readiness(opened, timeout=timeout, remotes=remotes, essential=essential)
    if as_json:
        out.print_json(json.dumps({"ready": report.ready, "status": report.status, "checks": report.checks}))
    else:
        _print(report)
    if not report.ready:
        sys.exit(NOT_READY)


def _print(report: Readiness) -> None:
    colour = {"ok": "green", "degraded": "yellow", "down": "red"}[report.status]
    table = Table(show_edge=False, pad_edge=False)
    for column in ("component", "status", "ms", "details"):
        table.add_column(column, justify="right" if column == "ms" else "left", no_wrap=column != "details")
    for name, check in report.checks.items():
        shown = "[green]ok[/green]" if check.get("ok") else "[red]down[/red]"
        if check.get("ok") and name == "breakers" and check.get("open"):
            shown = "[yellow]open[/yellow]"
        table.add_row(name, shown, f"{check.get('ms', 0):.1f}", escape(_details(check)))
        if name == "shards":  # the catalog and each shard on a row of its own
            parts = {"catalog": check.get("catalog") or {}, **check.get("shards", {})}
            for part, found in parts.items():
                state = "[green]ok[/green]" if found.get("ok") else "[red]down[/red]"
                table.add_row(escape(f"  {part}"), state, f"{found.get('ms', 0):.1f}", escape(_details(found)))
    out.print(table)
    failed = [name for name in ("store", "shards") if name in report.checks and not report.checks[name]["ok"]]
    out.print(f"[{colour}]{report.status}[/{colour}]" + ("" if report.ready else f": not ready ({', '.join(failed)})"))


def _details(check: dict[str, Any]) -> str:
    parts = [f"error: {check['error']}"] if check.get("error") else []
    for key, value in check.items():
        if key in _SKIP or value is None or value is False or value == [] or value == {}:
            continue
        if key == "remotes":
            value = ", ".join(f"{n} {'ok' if r['ok'] else 'down'}" for n, r in value.items())
        elif key == "states":
            value = ", ".join(f"{n} {s}" for n, s in value.items())
        elif isinstance(value, list):
            value = ", ".join(map(str, value))
        parts.append(f"{key}: {value}")
    return "; ".join(parts)
