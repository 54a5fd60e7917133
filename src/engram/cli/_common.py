"""What every ``engram`` command shares: the consoles, friendly errors, the store of the invocation."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from engram.errors import ConfigError, EngramError, MergeConflictError
from engram.objects import Commit
from engram.redaction import redact_url
from engram.store import Item, Memory
from engram.store import open as open_store
from engram.store.connect import checked_out, local_file, tenant_url
from engram.store.serialize import commit_json, conflict_json, item_json
from engram.store.urls import DB_NAME, DEFAULT_DIR

F = TypeVar("F", bound=Callable[..., Any])
#: soft_wrap: lines are never cut at the console width (the terminal wraps; a pipe or file gets whole lines)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def store_url(ctx: click.Context) -> str | None:
    """The store the user named (``--store`` or ``ENGRAM_STORE``), or None."""
    found: str | None = ctx.find_root().params.get("store") or os.environ.get("ENGRAM_STORE")
    return found


def discover(start: Path | None = None) -> Path | None:
    """The nearest ``.engram`` store folder at or above ``start`` (default: the current folder), like git."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / DEFAULT_DIR
        if (candidate / DB_NAME).is_file():
            return candidate
    return None


#: What a command that needs a store says when there is none.
NO_STORE = "no engram store here or in any parent folder (run `engram init` to create ./.engram, or pass --store)"


def locate(ctx: click.Context, *, create: bool = False, here: bool = False) -> str | None:
    """The store URL of this invocation (None: ``./.engram``), checked to exist unless it may be created.

    ``--store``/``ENGRAM_STORE`` win; else the nearest ``.engram`` above the current folder. ``create``: a
    store named explicitly may be created (writes); ``here``: ``./.engram`` may be created (``init``). With
    ``--tenant T`` the URL is that tenant's store under the located one (the store ``engram serve`` writes
    T's items to).
    """
    explicit = store_url(ctx)
    url: str | None
    if explicit is not None:
        url = explicit
        if not create and not _exists(url):
            raise ConfigError(f"no engram store at {explicit} (create it with `engram --store {explicit} init`)")
    else:
        found = discover()
        if found is None and not here:
            raise ConfigError(NO_STORE)
        url = None if found is None else str(found)
    tenant: str | None = ctx.find_root().params.get("tenant")
    if tenant:
        url = tenant_url(url, tenant)
        if not create and not _exists(url):
            raise ConfigError(
                f"no store for tenant {tenant!r} at {redact_url(url or '')} (`engram tenants` lists them)"
            )
    return url


def _exists(url: str | None) -> bool:
    path = local_file(url)
    return path is None or path.is_file()


def store_of(ctx: click.Context, *, create: bool = False, here: bool = False) -> Memory:
    """The store of this invocation, opened once (see :func:`locate` for ``create`` and ``here``)."""
    opts = ctx.find_root().params
    if "memory" not in ctx.obj:
        url = ctx.obj["url"] = locate(ctx, create=create, here=here)
        branch = opts.get("branch") or checked_out(url)
        ctx.obj["memory"] = open_store(url, branch=branch, embedder=opts.get("embedder"), redis=opts.get("redis"),
                                       vector_cache=vector_cache_of(ctx))  # fmt: skip
    memory: Memory = ctx.obj["memory"]
    return memory


def served_store(ctx: click.Context) -> str | None:
    """The store ``engram serve`` serves: the one named, else the nearest ``.engram`` above, else ``./.engram``
    (created: ``make run`` starts on a fresh checkout)."""
    if store_url(ctx) is not None:
        return store_url(ctx)
    found = discover()
    return None if found is None else str(found)


def opened_url(ctx: click.Context) -> str | None:
    """The URL :func:`store_of` opened (None: ``./.engram``)."""
    url: str | None = ctx.obj.get("url")
    return url


def friendly(fn: F) -> F:
    """Turn engram's errors (user mistakes) into one red line and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (EngramError, NotImplementedError) as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
            if isinstance(exc, MergeConflictError):
                _print_conflicts(exc)
            sys.exit(1)
        except OSError as exc:  # a file the user named: missing, a directory, not writable, disk full
            where = f": {exc.filename}" if exc.filename else ""
            err.print(f"[red]error:[/red] {escape((exc.strerror or str(exc)) + where)}", soft_wrap=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


#: At most this many conflicts are printed (the error says how many there are).
MAX_CONFLICTS = 50


def _print_conflicts(exc: MergeConflictError) -> None:
    """Each conflict of a refused merge or revert: its item and the base, ours and theirs values (one shape with
    HTTP and MCP: :func:`engram.store.serialize.conflict_json`)."""
    for conflict in exc.conflicts[:MAX_CONFLICTS]:
        shown = conflict_json(conflict)
        err.print(f"  conflict {escape('/'.join(shown['namespace']))}/{escape(shown['key'])}", soft_wrap=True)
        for side in ("base", "ours", "theirs"):
            item = shown[side]
            value = "(absent)" if item is None else json.dumps(item["value"], ensure_ascii=False)
            err.print(f"    {side:<6} {escape(value)}", soft_wrap=True)
    if len(exc.conflicts) > MAX_CONFLICTS:
        err.print(f"  ... and {len(exc.conflicts) - MAX_CONFLICTS} more")


#: ``--author`` and ``-m/--message`` of every command that writes (provenance of the commit or reflog entry).
author_option = click.option("--author", help="Who makes this change (default: engram).")
message_option = click.option("--message", "-m", help="Commit message (default: one describing the change).")


def print_commit(commit: Commit, before: bytes, nothing: str) -> None:
    """Print the commit a write made, or ``nothing`` (already escaped) when it made none (the head is
    still ``before``): a no-op says so instead of showing the head as if it were new."""
    if commit.id == before:
        out.print(nothing)
        return
    out.print(f"[green]{commit.short_id}[/green] {escape(commit.message)}")


def parse_json(text: str, what: str) -> Any:
    """``text`` parsed as JSON, else a usage error naming the argument or option (``what``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{what} is not JSON: {exc}") from None


def plural(n: int, word: str) -> str:
    """``1 item``, ``2 items``, ``0 items``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def parse_ns(text: str) -> tuple[str, ...]:
    return tuple(part for part in text.split("/") if part) if text else ()


def when(ms: int) -> str:
    """An instant in the local time zone with its offset, like git: ``2026-11-20 12:15:00 +0100`` (JSON output
    carries ISO 8601 instead)."""
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S %z")


#: Values longer than this many characters are folded in diffs, history and search results (``--full``: never).
FOLD = 160


def shown(value: Any, fold: int | None = FOLD) -> str:
    """A value as one line of compact JSON, folded past ``fold`` characters (None: never)."""
    text = json.dumps(value, ensure_ascii=False)
    if fold is None or len(text) <= fold:
        return text
    return f"{text[: fold - 1]}… ({len(text) - fold + 1:,} more characters)"


@contextlib.contextmanager
def counter(what: str) -> Iterator[Callable[[int], None]]:
    """A live count on stderr for work whose total is not known in advance (gc, fsck)."""
    columns = (SpinnerColumn(), TextColumn(what), TextColumn("{task.completed:,.0f}"), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task(what, total=None)
        yield lambda n: progress.advance(task, n)


#: Work smaller than this many items shows no progress bar (it is over before a bar would help).
PROGRESS_FROM = 500


@contextlib.contextmanager
def phase_progress() -> Iterator[Callable[[str, int, int], None]]:
    """Progress bars on stderr for work reported as ``(phase, done, total)`` (indexing: ``index`` reads items,
    ``embed`` finds or computes their vectors); a phase of fewer than :data:`PROGRESS_FROM` items shows none."""
    labels = {"index": "reading items", "embed": "embedding"}
    with Progress(console=err, transient=True) as progress:
        tasks: dict[str, Any] = {}

        def report(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                if total < PROGRESS_FROM:
                    return
                tasks[phase] = progress.add_task(labels.get(phase, phase), total=total)
            progress.update(tasks[phase], completed=done, total=total)

        yield report


def emit(data: Any) -> None:
    out.print_json(json.dumps(data, default=str))


def with_provenance(item: Item) -> dict[str, Any]:
    """An item with its expiry and provenance (the one JSON shape of every door)."""
    found = item_json(item)
    assert found is not None
    return found


def commit_dict(c: Commit) -> dict[str, Any]:
    return commit_json(c)


#: Hosts that keep a server on this machine.
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def loopback_only(host: str) -> str:
    """The host a server without API keys binds to: ``host`` if it is loopback, else 127.0.0.1 (and say so)."""
    if host in LOOPBACK:
        return host
    err.print(
        f"[yellow]warning:[/yellow] no API keys configured, so engram binds to 127.0.0.1 only (not "
        f"{escape(host)}); create one with `engram keys create --tenant NAME --scope read --scope write`",
        soft_wrap=True,
    )
    return "127.0.0.1"


def default_vector_cache() -> str:
    """The per-user file of embeddings every store opened by the CLI shares (``$XDG_CACHE_HOME/engram/vectors.db``,
    else ``~/.cache/engram/vectors.db``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "engram", "vectors.db")


def vector_cache_of(ctx: click.Context) -> str | None:
    """The root ``--vector-cache`` option: a file path, or None for "in each store" (``none``)."""
    chosen: str | None = ctx.find_root().params.get("vector_cache")
    return None if chosen is None or chosen.lower() == "none" else chosen
