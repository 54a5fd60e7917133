"""Commands for channels, messages and notes: ``engram channel``, ``engram msg``, ``engram note``.

One library call each, printed as JSON. The CLI is a local door: ``--as AGENT`` (or ``ENGRAM_AGENT``) names the
agent that acts, as a server without API keys does. It goes before the subcommand (``engram msg --as bob send``)
or after it (``engram msg send --as bob``); the one after the subcommand wins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from engram.channels import Actor, Channels, to_json
from engram.cli._common import emit, friendly, parse_json, store_of

as_option = click.option("--as", "agent", help="The agent acting (or --as before the subcommand, or ENGRAM_AGENT).")
group_as = click.option("--as", "agent", envvar="ENGRAM_AGENT", help="The agent acting, for every subcommand.")
at_option = click.option("--at", help="Read as of a ref or time (commit id, tag, HEAD~n, main@{ISO time}).")


def _hub(ctx: click.Context) -> Channels:
    return Channels(store_of(ctx, create=True))


def _agent(ctx: click.Context, agent: str | None) -> str:
    """The agent acting: the subcommand's ``--as``, else the group's (``--as`` before the subcommand or
    ``ENGRAM_AGENT``)."""
    chosen = agent or (ctx.parent.params.get("agent") if ctx.parent is not None else None)
    if not chosen:
        raise click.UsageError("name the agent acting: --as AGENT (before or after the subcommand) or ENGRAM_AGENT")
    return str(chosen)


def _act(ctx: click.Context, agent: str | None, call: Callable[[Actor], Any]) -> None:
    emit(to_json(call(_hub(ctx).as_agent(_agent(ctx, agent)))))


@click.group("channel")
@group_as
def channel(agent: str | None) -> None:
    """Projects, agents, channels and membership."""


@channel.command("project")
@click.argument("project_id")
@click.option("--description", default="")
@click.pass_context
@friendly
def channel_project(ctx: click.Context, project_id: str, description: str) -> None:
    """Register a project."""
    emit({"id": _hub(ctx).create_project(project_id, description=description)})


@channel.command("agent")
@click.argument("agent_id")
@click.option("--project", help="The agent's project (none: a global agent).")
@click.option("--description", default="")
@click.option("--dm-policy", type=click.Choice(["open", "restricted", "closed"]), default="open")
@click.option("--discoverability", type=click.Choice(["public", "project", "private"]), default="public")
@click.pass_context
@friendly
def channel_agent(ctx: click.Context, agent_id: str, project: str | None, description: str, dm_policy: Any,
                  discoverability: Any) -> None:  # fmt: skip
    """Register an agent."""
    emit(to_json(_hub(ctx).register_agent(agent_id, project=project, description=description, dm_policy=dm_policy,
                                          discoverability=discoverability)))  # fmt: skip


@channel.command("create")
@click.argument("name")
@click.option("--scope", type=click.Choice(["project", "global"]), default="project")
@click.option("--access", type=click.Choice(["open", "members", "private"]), default="open")
@click.option("--description", default="")
@click.option("--default", "default", is_flag=True, help="Every agent in scope joins it.")
@as_option
@click.pass_context
@friendly
def channel_create(ctx: click.Context, name: str, scope: str, access: Any, description: str, default: bool,
                   agent: str | None) -> None:  # fmt: skip
    """Create a channel and join it."""
    _act(ctx, agent, lambda a: a.create_channel(name, scope=scope, access=access, description=description,
                                                default=default))  # fmt: skip


@channel.command("ls")
@as_option
@click.pass_context
@friendly
def channel_ls(ctx: click.Context, agent: str | None) -> None:
    """List the channels the agent may read or join."""
    _act(ctx, agent, lambda a: a.list_channels())


@channel.command("join")
@click.argument("name")
@as_option
@click.pass_context
@friendly
def channel_join(ctx: click.Context, name: str, agent: str | None) -> None:
    """Join a channel."""
    _act(ctx, agent, lambda a: a.join(name))


@channel.command("leave")
@click.argument("name")
@as_option
@click.pass_context
@friendly
def channel_leave(ctx: click.Context, name: str, agent: str | None) -> None:
    """Leave a channel."""
    _act(ctx, agent, lambda a: a.leave(name))


@channel.command("invite")
@click.argument("name")
@click.argument("invitee")
@as_option
@click.pass_context
@friendly
def channel_invite(ctx: click.Context, name: str, invitee: str, agent: str | None) -> None:
    """Add another agent to a channel."""
    _act(ctx, agent, lambda a: a.invite(name, invitee))


@click.group("msg")
@group_as
def msg(agent: str | None) -> None:
    """Messages, direct messages, search, feedback, patterns and events."""


@msg.command("send")
@click.argument("channel_name")
@click.argument("text")
@click.option("--metadata", help="Nested JSON metadata.")
@click.option("--confidence", type=float)
@click.option("--reply-to", help="The message this answers.")
@as_option
@click.pass_context
@friendly
def msg_send(ctx: click.Context, channel_name: str, text: str, metadata: str | None, confidence: float | None,
             reply_to: str | None, agent: str | None) -> None:  # fmt: skip
    """Post a message to a channel."""
    meta = None if metadata is None else parse_json(metadata, "--metadata")
    _act(ctx, agent, lambda a: a.send(channel_name, text, metadata=meta, confidence=confidence, reply_to=reply_to))


@msg.command("dm")
@click.argument("to")
@click.argument("text")
@as_option
@click.pass_context
@friendly
def msg_dm(ctx: click.Context, to: str, text: str, agent: str | None) -> None:
    """Send a direct message."""
    _act(ctx, agent, lambda a: a.dm(to, text))


@msg.command("ls")
@click.argument("channel_name")
@click.option("--limit", type=int, default=50, show_default=True)
@at_option
@as_option
@click.pass_context
@friendly
def msg_ls(ctx: click.Context, channel_name: str, limit: int, at: str | None, agent: str | None) -> None:
    """A channel's messages, oldest first."""
    _act(ctx, agent, lambda a: a.messages(channel_name, limit=limit, at=at))


@msg.command("search")
@click.argument("query", required=False)
@click.option("--channel", "channels", multiple=True, help="Only this channel (repeatable).")
@click.option("--filter", "filter_", help="MongoDB filter on the metadata (JSON).")
@click.option("--profile", type=click.Choice(["similarity", "balanced", "recent", "quality"]), default="similarity")
@click.option("--min-confidence", type=float)
@click.option("--min-score", type=float, help="Leave out results scoring below this.")
@click.option("--limit", type=int, default=10, show_default=True)
@click.option("--offset", type=int, default=0, show_default=True, help="Skip this many (a page's next_offset).")
@at_option
@as_option
@click.pass_context
@friendly
def msg_search(ctx: click.Context, query: str | None, channels: tuple[str, ...], filter_: str | None, profile: str,
               min_confidence: float | None, min_score: float | None, limit: int, offset: int, at: str | None,
               agent: str | None) -> None:  # fmt: skip
    """Search the messages of the channels the agent may read (the JSON says has_more and next_offset)."""
    spec = None if filter_ is None else parse_json(filter_, "--filter")
    _act(ctx, agent, lambda a: a.search_messages(query, channels=list(channels) or None, filter=spec,
                                                 profile=profile, min_confidence=min_confidence, limit=limit,
                                                 offset=offset, at=at, min_score=min_score))  # fmt: skip


@msg.command("feedback")
@click.argument("message_id")
@click.option("--worked/--failed", required=True, help="Did its advice work?")
@click.option("--note")
@as_option
@click.pass_context
@friendly
def msg_feedback(ctx: click.Context, message_id: str, worked: bool, note: str | None, agent: str | None) -> None:
    """Record whether a message's or note's advice worked."""
    _act(ctx, agent, lambda a: a.feedback(message_id, worked, note=note))


@msg.command("patterns")
@click.argument("channels", nargs=-1)
@click.option("--min-cluster", type=int, default=3, show_default=True)
@click.option(
    "--threshold", type=float, help="Cosine to join a cluster [default: calibrated for the embedder and --on]."
)
@click.option("--filter", "filter_", help="MongoDB filter on the metadata (JSON).")
@click.option(
    "--on",
    default="message",
    show_default=True,
    help="Compare on: message, first_line, or a metadata field such as metadata.error.message.",
)
@click.option("--write", is_flag=True, help="Record each cluster as a pattern note.")
@as_option
@click.pass_context
@friendly
def msg_patterns(ctx: click.Context, channels: tuple[str, ...], min_cluster: int, threshold: float | None,
                 filter_: str | None, on: str, write: bool, agent: str | None) -> None:  # fmt: skip
    """Cluster similar messages into patterns."""
    spec = None if filter_ is None else parse_json(filter_, "--filter")
    _act(ctx, agent, lambda a: a.detect_patterns(list(channels) or None, min_cluster=min_cluster,
                                                 threshold=threshold, filter=spec, on=on, write=write))  # fmt: skip


@msg.command("events")
@click.option("--after", type=int, default=0, show_default=True, help="The cursor: the last event seen.")
@click.option("--topic", "topics", multiple=True, help="Glob pattern, e.g. 'message.*' (repeatable).")
@as_option
@click.pass_context
@friendly
def msg_events(ctx: click.Context, after: int, topics: tuple[str, ...], agent: str | None) -> None:
    """Events after a cursor that the agent may see."""
    _act(ctx, agent, lambda a: a.events(after, topics=list(topics) or None))


@click.group("note")
@group_as
def note(agent: str | None) -> None:
    """Private notes with confidence, tags and breadcrumbs."""


@note.command("write")
@click.argument("text")
@click.option("--confidence", type=float)
@click.option("--tag", "tags", multiple=True)
@click.option("--breadcrumb", "crumbs", multiple=True, help="TYPE=VALUE, e.g. file=src/db.py (repeatable).")
@as_option
@click.pass_context
@friendly
def note_write(ctx: click.Context, text: str, confidence: float | None, tags: tuple[str, ...],
               crumbs: tuple[str, ...], agent: str | None) -> None:  # fmt: skip
    """Write a private note."""
    breadcrumbs = [{"type": c.partition("=")[0], "value": c.partition("=")[2]} for c in crumbs]
    _act(ctx, agent, lambda a: a.write_note(text, confidence=confidence, tags=list(tags), breadcrumbs=breadcrumbs))


@note.command("search")
@click.argument("query", required=False)
@click.option("--tag", "tags", multiple=True)
@click.option("--min-score", type=float, help="Leave out results scoring below this.")
@click.option("--limit", type=int, default=10, show_default=True)
@click.option("--offset", type=int, default=0, show_default=True, help="Skip this many (a page's next_offset).")
@as_option
@click.pass_context
@friendly
def note_search(ctx: click.Context, query: str | None, tags: tuple[str, ...], min_score: float | None, limit: int,
                offset: int, agent: str | None) -> None:  # fmt: skip
    """Search the agent's notes (the JSON says has_more and next_offset)."""
    _act(ctx, agent, lambda a: a.search_my_notes(query, tags=list(tags) or None, limit=limit, offset=offset,
                                                 min_score=min_score))  # fmt: skip


@note.command("recent")
@click.option("--limit", type=int, default=20, show_default=True)
@as_option
@click.pass_context
@friendly
def note_recent(ctx: click.Context, limit: int, agent: str | None) -> None:
    """The agent's newest notes."""
    _act(ctx, agent, lambda a: a.recent_notes(limit))


COMMANDS = [channel, msg, note]
