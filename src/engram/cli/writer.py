"""``engram writer``: feed conversations to the background memory writer and review its runs.

The writer's settings (extractor, interval, policy, trace folder) are options of the group, given on each call;
runs happen in the command's own process (``append`` runs the writer when the turn makes a run due), and its log
lines go to stderr at ``--log-level``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from engram.cli._common import emit, friendly, opened_url, out, plural, store_of, when
from engram.cli._writer import writer_config, writer_options
from engram.logs import LEVELS, log_to_stderr
from engram.writer import MemoryWriter
from engram.writer.traces import run_trace, store_dir
from engram.writer.writer import Decision


@click.group()
@writer_options()
@click.option("--traces", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Where failed runs leave their traces: a new or empty folder, or one engram made (default: "
                   "<db name>-traces beside the store's file).")  # fmt: skip
@click.option("--log-level", default="warning", show_default=True, type=click.Choice(LEVELS),
              help="The writer's log lines on stderr (runs: info; skips: debug; failures: warning).")  # fmt: skip
@click.pass_context
def writer(ctx: click.Context, /, traces: Path | None, log_level: str, **settings: Any) -> None:
    """The background memory writer: conversations in, reviewed memories out.

    The options are the writer's settings, the same as `engram serve --writer-*` and `engram mcp --writer-*`
    take; runs happen in this command's own process (`append` runs the writer when the turn makes a run due).

    \b
    Examples:
      engram writer append chat-1 user "I moved to Lyon last month." --target users/alice
      engram writer append chat-1 assistant "Noted, Lyon it is."
      engram writer status users/alice
      engram writer --policy review run-now users/alice
      engram writer runs users/alice
      engram writer approve users/alice RUN_ID
      engram writer retry users/alice          # after repeated failures stopped its runs
      engram writer trace users/alice RUN_ID
    """
    log_to_stderr(log_level)
    ctx.obj["writer_options"] = {"traces": traces, **settings}


@contextmanager
def _writer(ctx: click.Context, *, create: bool = False) -> Iterator[MemoryWriter]:
    options = dict(ctx.obj["writer_options"])
    traces = options.pop("traces")
    config = writer_config(options, background=False)  # refuses a bad value before the store opens
    mem = store_of(ctx, create=create)
    if traces is None:
        traces = store_dir(opened_url(ctx))
    made = replace(config, trace_dir=traces).build(mem, api_key=os.environ.get("OPENAI_API_KEY"))
    try:
        yield made
    finally:
        made.close()


@writer.command()
@click.argument("conversation")
@click.argument("role", type=click.Choice(["user", "assistant", "system", "tool"]))
@click.argument("text")
@click.option("--target", help="The namespace the conversation's memories go to (starts a new conversation).")
@click.option("--message-id", help="The message's id (default: <conversation>:<n>); memories cite it as a source.")
@click.option("--aborted", is_flag=True, help="The turn did not complete (it never counts towards a run).")
@click.pass_context
@friendly
def append(ctx: click.Context, conversation: str, role: str, text: str, target: str | None, message_id: str | None,
           aborted: bool) -> None:  # fmt: skip
    """Append a turn to CONVERSATION; a completed assistant turn may make a run due, which runs now."""
    with _writer(ctx, create=True) as made:
        if target is not None:
            made.start_conversation(conversation, target.replace("/", "."))
        appended = made.append(conversation, role, text, message_id=message_id,
                               status="aborted" if aborted else "completed")  # fmt: skip
        out.print(f"appended {escape(appended.turn.message_id)} to {escape(conversation)}")
        _decision(appended.decision, made.interval)


def _decision(decision: Decision, interval: int) -> None:
    if decision.run is not None:
        _run_line(decision.run)
    elif decision.action == "skipped":
        out.print(f"writer skipped: {escape(decision.reason or '')}")
    elif decision.action == "waiting":
        out.print(f"writer waits: {decision.pending} of {interval} completed assistant turns since its last run")


def _run_line(run: dict[str, Any]) -> None:
    if run.get("review") == "pending" and run.get("branch"):
        review = f" on {run['branch']} (review with approve/reject)"
    elif run.get("review") in ("approved", "rejected"):
        review = f", {run['review']}" + (f" with run {run['approved_with']}" if run.get("approved_with") else "")
    else:
        review = ""
    left = run.get("left") or {}
    review += f", {left['turns']} turns left pending ({left['reason']})" if left.get("turns") else ""
    trace = f", trace {run['trace']}" if run.get("trace") else ""
    error = f": {run['error']}" if run.get("error") else ""
    started = when(run["started_at"]) if isinstance(run.get("started_at"), int) else "?"
    actions = plural(int(run.get("actions") or 0), "action")
    out.print(escape(f"run {run['id']} {run['outcome']}{error}{review}: {actions}, "
                     f"{float(run.get('duration_ms') or 0):.0f} ms, started {started}{trace}"))  # fmt: skip


@writer.command()
@click.argument("target")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def status(ctx: click.Context, target: str, as_json: bool) -> None:
    """TARGET's scheduling state: pending turns, the run in flight, watermarks and the last run."""
    with _writer(ctx) as made:
        found = made.status(target.replace("/", "."))
    if as_json:
        emit(found)
        return
    out.print(escape(f"target {found['target']}: {found['pending_turns']} of {found['interval']} completed assistant "
                     f"turns pending, policy {found['policy']}, model {found['model']}"))  # fmt: skip
    lease = found["in_flight"]
    if lease is not None:
        state = "expired: the next turn recovers it" if lease.get("expired") else "running"
        out.print(escape(f"run {lease.get('run')} in flight by {lease.get('owner')} ({state})"))
    letter = found.get("dead_letter")
    if letter:
        last = f"last: run {letter.get('run')}, {letter.get('outcome')}"
        out.print(escape(f"dead-lettered after {letter.get('failures')} failed runs ({last}): runs stopped, turns "
                         f"kept; `engram writer retry {target}`"))  # fmt: skip
    elif found.get("failures"):
        out.print(escape(f"{found['failures']} failed runs in a row"))
    for conversation, mark in found["watermarks"].items():
        out.print(escape(f"  {conversation}: processed up to {mark.get('message_id') or '(nothing yet)'}"))
    if found["last_run"]:
        _run_line(found["last_run"])


@writer.command()
@click.argument("target")
@click.option("--limit", "-n", type=int, default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@friendly
def runs(ctx: click.Context, target: str, limit: int, as_json: bool) -> None:
    """TARGET's last runs, newest first: outcome, actions, duration and trace."""
    with _writer(ctx) as made:
        found = made.runs(target.replace("/", "."), limit)
    if as_json:
        emit(found)
        return
    if not found:
        out.print(f"no runs on {escape(target)} yet")
    for run in found:
        _run_line(run)


@writer.command()
@click.argument("target")
@click.argument("run_id")
@click.pass_context
@friendly
def show(ctx: click.Context, target: str, run_id: str) -> None:
    """One run's record as JSON (its commit: `engram show COMMIT`)."""
    with _writer(ctx) as made:
        emit(made.run(target.replace("/", "."), run_id))


@writer.command()
@click.argument("target")
@click.argument("run_id")
@click.pass_context
@friendly
def trace(ctx: click.Context, target: str, run_id: str) -> None:
    """A failed run's trace as JSON (redacted): prompts, model calls and replies, tool calls, actions."""
    with _writer(ctx) as made:
        emit(run_trace(made.traces, made.run(target.replace("/", "."), run_id)))


@writer.command()
@click.argument("target")
@click.argument("run_id")
@click.option("--strategy", type=click.Choice(["fail", "ours", "theirs", "newest"]), default="fail",
              show_default=True, help="How to decide memories both the run and the branch changed.")  # fmt: skip
@click.pass_context
@friendly
def approve(ctx: click.Context, target: str, run_id: str, strategy: str) -> None:
    """Merge a run's review branch and delete it."""
    with _writer(ctx) as made:
        record = made.approve(target.replace("/", "."), run_id, strategy=strategy)
    out.print(escape(f"approved run {run_id}: merged as {str(record.get('merge'))[:10]}"))


@writer.command()
@click.argument("target")
@click.argument("run_id")
@click.pass_context
@friendly
def reject(ctx: click.Context, target: str, run_id: str) -> None:
    """Drop a run's review branch (its turns stay processed)."""
    with _writer(ctx) as made:
        made.reject(target.replace("/", "."), run_id)
    out.print(escape(f"rejected run {run_id}: its branch is deleted"))


@writer.command(name="run-now")
@click.argument("target")
@click.pass_context
@friendly
def run_now(ctx: click.Context, target: str) -> None:
    """Run the writer on TARGET now, whatever the interval (nothing new: says so)."""
    with _writer(ctx) as made:
        decision = made.run_now(target.replace("/", "."))
    if decision.run is None and decision.action == "skipped" and decision.reason == "nothing_new":
        out.print(f"nothing to do: no new turns for {escape(target)}")
        return
    _decision(decision, ctx.obj["writer_options"]["interval"])


@writer.command()
@click.argument("target")
@click.pass_context
@friendly
def retry(ctx: click.Context, target: str) -> None:
    """Lift TARGET's dead letter (its runs stopped after repeated failures) and run the writer on it now."""
    with _writer(ctx) as made:
        decision = made.retry(target.replace("/", "."))
    _decision(decision, ctx.obj["writer_options"]["interval"])
