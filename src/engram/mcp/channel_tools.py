"""MCP tools for channels, messages, notes, feedback, patterns and events: one library call each.

The agent a tool acts as comes from the caller's API key (its handle's author is ``key:<id>``, bound to agents
with ``Channels.bind_key``); ``agent`` may only pick one of the agents that key is bound to. A local server
without keys acts as ``agent`` or, by default, as its handle's author.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import closing
from typing import Any

from engram.channels import Actor, to_json
from engram.mcp.registry import Registry, Tool
from engram.ops.access import Principal
from engram.ops.services import TenantServices
from engram.store import Memory
from engram.store.ranking import PROFILES

#: The channel tools, by name, in the order clients list them.
CHANNEL_TOOLS = Registry()

AGENT = {
    "type": "string",
    "description": "Which of the agents your API key may act as (only when it may act "
    "as several). Never another agent: the key decides.",
}
CHANNEL = {"type": "string", "minLength": 1, "description": "A channel name (debugging) or id (acme:debugging)."}
CONTENT = {"type": "string", "description": "The text."}
METADATA = {
    "type": "object",
    "description": 'Nested JSON metadata, e.g. {"type": "debug_start", "resolution": {"status": "solved"}}.',
}
CONFIDENCE = {"type": "number", "minimum": 0, "maximum": 1, "description": "How sure you are, 0..1 (default 0.5)."}
MESSAGE_ID = {"type": "string", "pattern": "#[0-9]+$", "description": "A message or note id, e.g. acme:debugging#4."}
LIMIT = {"type": "integer", "minimum": 0, "maximum": 1000, "default": 20, "description": "Most results to return."}
STRINGS = {"type": "array", "items": {"type": "string"}}
TAGS = {**STRINGS, "description": 'Tags, e.g. ["postgres", "connection-refused"].'}
BREADCRUMBS = {
    "type": "array",
    "description": "Typed breadcrumbs: where this came from or points to.",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["type", "value"],
        "properties": {"type": {"enum": ["file", "commit", "decision", "pattern", "json"]}, "value": {}},
    },
}
SEARCH: dict[str, dict[str, Any]] = {
    "query": {"type": "string", "description": "What to look for, in words. Omit to list the newest matches."},
    "filter": {
        "type": "object",
        "description": "MongoDB filter on the metadata (dotted paths), e.g. "
        '{"type": {"$in": ["debug_start"]}, "resolution.status": "solved"}.',
    },
    "senders": {**STRINGS, "description": "Only messages of these agents."},
    "tags": TAGS,
    "tags_mode": {
        "type": "string",
        "enum": ["all", "any"],
        "default": "all",
        "description": "Match all the tags, or any.",
    },
    "min_confidence": {**CONFIDENCE, "description": "Leave out messages less confident than this."},
    "since": {"type": "string", "description": "ISO time: only messages written at or after it."},
    "until": {"type": "string", "description": "ISO time: only messages written before it."},
    "profile": {
        "type": "string",
        "enum": list(PROFILES),
        "default": "similarity",
        "description": "Ranking: similarity, or mixed with confidence and recency (balanced, recent, quality).",
    },
    "limit": {**LIMIT, "default": 10},
    "offset": {
        "type": "integer",
        "minimum": 0,
        "default": 0,
        "description": "Skip this many results: the next_offset of the previous page.",
    },
    "min_score": {
        "type": "number",
        "description": "Leave out results scoring below this (scores are 0..1 with "
        "the built-in profiles; a listing without a query has no scores).",
    },
    "explain": {"type": "boolean", "default": False, "description": "Add each signal's score to every result."},
    "at": {"type": "string", "description": "Search as of a version: a commit id, tag, HEAD~n or main@{ISO time}."},
}


def _guard(who: Principal, args: dict[str, Any]) -> dict[str, Any]:
    who.require_unrestricted("channels")  # channels reach their own namespaces, outside any key prefix
    return args


def _register(
    tool: str,
    /,
    *,
    read_only: bool,
    required: tuple[str, ...] = (),
    destructive: bool = False,
    props: dict[str, dict[str, Any]] | None = None,
    **more: dict[str, Any],
) -> Callable[[Callable[..., Any]], Callable[..., dict[str, Any]]]:
    """Add ``call(actor, **arguments)`` to :data:`CHANNEL_TOOLS` as tool ``tool`` (run as the caller's agent, its
    ``agent`` argument first, on the tenant's hub acting through the caller's handle); the docstring is the
    description."""
    properties = {**(props or {}), **more}

    def wrap(call: Callable[..., Any]) -> Callable[..., dict[str, Any]]:
        def serve(
            services: TenantServices, memory: Memory, agent: str | None = None, **arguments: Any
        ) -> dict[str, Any]:
            actor = services.channels.for_caller(memory).actor_for_author(memory.author, agent)
            return {"result": to_json(call(actor, **arguments))}

        def run(memory: Memory, agent: str | None = None, **arguments: Any) -> dict[str, Any]:
            with closing(TenantServices(memory)) as services:
                return serve(services, memory, agent, **arguments)

        params = [inspect.Parameter("memory", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        params += [
            inspect.Parameter(
                p,
                inspect.Parameter.KEYWORD_ONLY,
                **({} if p in required or "default" in properties.get(p, {}) else {"default": None}),
            )
            for p in ("agent", *properties)
        ]
        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        CHANNEL_TOOLS.add(
            Tool(
                tool,
                inspect.cleandoc(call.__doc__ or ""),
                {"agent": AGENT, **properties},
                required,
                run,
                read_only,
                destructive,
                "read" if read_only else "write",
                _guard,
                serve,
            )
        )
        return run

    return wrap


@_register(
    "channel_create",
    read_only=False,
    required=("name",),
    name={"type": "string", "description": "The channel name: lowercase letters, digits, hyphens."},
    scope={
        "type": "string",
        "enum": ["global", "project"],
        "default": "project",
        "description": "global: every agent; project: your project's agents.",
    },
    access={
        "type": "string",
        "enum": ["open", "members", "private"],
        "default": "open",
        "description": "open: readable in scope; members: members read; private: invitation only.",
    },
    description={"type": "string", "default": "", "description": "What the channel is for."},
    default={"type": "boolean", "default": False, "description": "Joined by every agent in scope."},
)
def channel_create(actor: Actor, **args: Any) -> Any:
    """Create a channel (lowercase letters, digits, hyphens; at most 80) and join it with every capability.
    A default channel is joined by every agent in its scope. Returns the channel."""
    return actor.create_channel(args.pop("name"), **args)


@_register(
    "channel_list",
    read_only=True,
    include_archived={"type": "boolean", "default": False, "description": "List archived channels too."},
)
def channel_list(actor: Actor, include_archived: bool) -> Any:
    """List the channels you may read or join (DMs included). Returns a list of channels."""
    return actor.list_channels(include_archived=include_archived)


@_register("channel_join", read_only=False, required=("channel",), channel=CHANNEL)
def channel_join(actor: Actor, channel: str) -> Any:
    """Join an open or members channel in your scope. Returns your membership."""
    return actor.join(channel)


@_register("channel_leave", read_only=False, required=("channel",), channel=CHANNEL)
def channel_leave(actor: Actor, channel: str) -> Any:
    """Leave a channel (a default channel is not joined again). Returns null."""
    return actor.leave(channel)


@_register(
    "channel_invite",
    read_only=False,
    required=("channel", "invitee"),
    channel=CHANNEL,
    invitee={"type": "string", "description": "The agent to add."},
    capabilities={
        "type": "array",
        "items": {"enum": ["send", "invite", "manage", "leave"]},
        "default": ["send", "invite", "leave"],
        "description": "What the invitee may do.",
    },
)
def channel_invite(actor: Actor, channel: str, invitee: str, capabilities: list[str]) -> Any:
    """Add another agent to a channel (needs the invite capability). Returns its membership."""
    return actor.invite(channel, invitee, capabilities)


@_register(
    "message_send",
    read_only=False,
    required=("channel", "content"),
    channel=CHANNEL,
    content=CONTENT,
    metadata=METADATA,
    confidence=CONFIDENCE,
    reply_to={**MESSAGE_ID, "description": "The message this answers (same channel)."},
)
def message_send(actor: Actor, channel: str, content: str, **fields: Any) -> Any:
    """Post a message to a channel you are a member of; @agent mentions must name agents. Returns the message."""
    return actor.send(channel, content, **fields)


@_register(
    "message_direct",
    read_only=False,
    required=("to", "content"),
    to={"type": "string", "description": "The agent to write to."},
    content=CONTENT,
    metadata=METADATA,
    confidence=CONFIDENCE,
)
def message_direct(actor: Actor, to: str, content: str, **fields: Any) -> Any:
    """Send a direct message to another agent (its DM policy may refuse). Returns the message."""
    return actor.dm(to, content, **fields)


@_register(
    "message_list",
    read_only=True,
    required=("channel",),
    channel=CHANNEL,
    limit=LIMIT,
    after={"type": "integer", "minimum": 0, "description": "Only messages after this message number."},
    at=SEARCH["at"],
)
def message_list(actor: Actor, channel: str, limit: int, **fields: Any) -> Any:
    """Get a channel's messages, oldest first (the last `limit`, or those after `after`). Returns a list."""
    return actor.messages(channel, limit=limit, **fields)


@_register(
    "message_search",
    read_only=True,
    props={
        "channels": {**STRINGS, "description": "Only these channels."},
        "projects": {**STRINGS, "description": "Only channels of these projects."},
        "mode": {"type": "string", "enum": ["hybrid", "semantic", "keyword"],
                 "description": "How the query matches: meaning and words (hybrid, the default when the store has an "
                                "embedder), meaning only, or words only."},
        **SEARCH,
    },
)  # fmt: skip
def message_search(actor: Actor, query: str | None = None, channels: list[str] | None = None, **opts: Any) -> Any:
    """Search the messages of the channels you may read: query, metadata filter, tags, confidence, time range,
    ranking profile, min_score. Returns {results, mode, degraded, has_more, next_offset}: degraded says why it ran
    on keywords only; has_more whether more results follow (ask again with offset=next_offset)."""
    return actor.search_messages(query, channels=channels, **opts)


@_register(
    "message_feedback",
    read_only=False,
    required=("target", "worked"),
    target=MESSAGE_ID,
    worked={"type": "boolean", "description": "Did its advice work?"},
    note={"type": "string", "description": "What happened when you tried it."},
)
def message_feedback(actor: Actor, target: str, worked: bool, note: str | None = None) -> Any:
    """Record whether a message's or note's advice worked: its confidence moves by 0.1 per agent (each agent
    counted once), clamped to 0..1. Returns the message with its new confidence."""
    return actor.feedback(target, worked, note=note)


@_register(
    "note_write",
    read_only=False,
    required=("content",),
    content=CONTENT,
    confidence=CONFIDENCE,
    tags=TAGS,
    breadcrumbs=BREADCRUMBS,
    session={"type": "object", "description": "Session context (JSON)."},
    metadata=METADATA,
)
def note_write(actor: Actor, content: str, **fields: Any) -> Any:
    """Write a private note with confidence, tags and typed breadcrumbs. Returns the note."""
    return actor.write_note(content, **{k: v for k, v in fields.items() if v is not None})


@_register(
    "note_search",
    read_only=True,
    props={"agents": {**STRINGS, "description": "Other agents' notes too (needs notes:read-all; audited)."}, **SEARCH},
)
def note_search(actor: Actor, query: str | None = None, agents: list[str] | None = None, **opts: Any) -> Any:
    """Search your notes (options as message_search). Returns {results, mode, degraded, has_more, next_offset}."""
    return actor.search_notes(query, agents=agents, **opts)


@_register("note_recent", read_only=True, limit=LIMIT)
def note_recent(actor: Actor, limit: int) -> Any:
    """Your newest notes, newest first. Returns a list of notes."""
    return actor.recent_notes(limit)


@_register(
    "note_peek",
    read_only=False,
    required=("owner",),
    owner={"type": "string", "description": "The agent whose notes to read."},
    query=SEARCH["query"],
    limit=LIMIT,
    offset=SEARCH["offset"],
    min_score=SEARCH["min_score"],
)
def note_peek(
    actor: Actor, owner: str, limit: int, offset: int, query: str | None = None, min_score: float | None = None
) -> Any:
    """Read another agent's notes: only with the notes:read-all scope; every peek is recorded as an event.
    Returns {results, mode, degraded, has_more, next_offset}."""
    return actor.peek_notes(owner, query=query, limit=limit, offset=offset, min_score=min_score)


@_register(
    "pattern_detect",
    read_only=False,
    channels={**STRINGS, "description": "Channels (default: all yours)."},
    since=SEARCH["since"],
    min_cluster={"type": "integer", "minimum": 2, "default": 3, "description": "Smallest cluster to report."},
    threshold={
        "type": ["number", "null"],
        "minimum": -1,
        "maximum": 1,
        "default": None,
        "description": "Cosine a message needs to join a cluster (null: calibrated for the embedder and on).",
    },
    filter=SEARCH["filter"],
    on={
        "type": "string",
        "default": "message",
        "description": 'Compare messages on "message" (the indexed text), "first_line" of the content, or a metadata '
        'field such as "metadata.error.message" (messages without it are left out).',
    },
    write={"type": "boolean", "default": False, "description": "Record each cluster as a pattern note."},
)
def pattern_detect(actor: Actor, channels: list[str] | None = None, **opts: Any) -> Any:
    """Cluster similar messages (e.g. errors) by embedding; with write, record each as a pattern note (re-running
    never duplicates one). Returns a list of clusters: members, representative text, count, note."""
    return actor.detect_patterns(channels, **opts)


@_register("agent_list", read_only=True)
def agent_list(actor: Actor) -> Any:
    """The agents you may discover. Returns a list of agents."""
    return actor.list_agents()


@_register(
    "event_list",
    read_only=True,
    after={
        "type": "integer",
        "minimum": 0,
        "default": 0,
        "description": "The cursor: the seq of the last event you saw.",
    },
    topics={**STRINGS, "description": 'Glob patterns, e.g. ["message.*"].'},
    limit={**LIMIT, "default": 100},
)
def event_list(actor: Actor, after: int, limit: int, topics: list[str] | None = None) -> Any:
    """Events after a cursor that you may see, oldest first; pass the last seq as `after` next time."""
    return actor.events(after, topics=topics, limit=limit)


@_register("message_get", read_only=True, required=("message_id",), message_id=MESSAGE_ID, at=SEARCH["at"])
def message_get(actor: Actor, message_id: str, at: str | None = None) -> Any:
    """Get one message or note you may read, as it is now or was at a version (`at`). Returns the message."""
    return actor.message(message_id, at=at)


@_register(
    "message_edit",
    read_only=False,
    required=("message_id",),
    message_id=MESSAGE_ID,
    content=CONTENT,
    metadata=METADATA,
    confidence=CONFIDENCE,
)
def message_edit(actor: Actor, message_id: str, **fields: Any) -> Any:
    """Edit your own message or note (content, metadata, confidence); the old version stays in its history.
    Returns the message as edited."""
    return actor.edit(message_id, **fields)


@_register("message_delete", read_only=False, destructive=True, required=("message_id",), message_id=MESSAGE_ID)
def message_delete(actor: Actor, message_id: str) -> Any:
    """Delete a message (its sender, or a channel manager): it leaves every search and listing, and its versions
    stay in history (message_history). Returns null."""
    return actor.delete(message_id)


@_register("message_history", read_only=True, required=("message_id",), message_id=MESSAGE_ID)
def message_history(actor: Actor, message_id: str) -> Any:
    """Every version of a message, newest first (null where it did not exist): edits, feedback, deletion.
    Returns a list."""
    return actor.message_history(message_id)


@_register(
    "message_send_many",
    read_only=False,
    required=("channel", "messages"),
    channel=CHANNEL,
    messages={
        "type": "array",
        "minItems": 1,
        "items": {"type": "object", "required": ["content"]},
        "description": 'Messages to post as one commit, each {"content", "metadata"?, "confidence"?, "reply_to"?}.',
    },
)
def message_send_many(actor: Actor, channel: str, messages: list[dict[str, Any]]) -> Any:
    """Post many messages to one channel as one commit (an import). Returns the messages."""
    return actor.send_many(channel, messages)


@_register(
    "channel_mark_read",
    read_only=False,
    required=("channel",),
    channel=CHANNEL,
    upto={"type": "integer", "minimum": 0, "description": "The message number read up to (default: the newest)."},
)
def channel_mark_read(actor: Actor, channel: str, upto: int | None = None) -> Any:
    """Move your read cursor in a channel (to message number `upto`, default the newest). Returns your membership."""
    return actor.mark_read(channel, upto)


@_register("channel_unread", read_only=True, required=("channel",), channel=CHANNEL)
def channel_unread(actor: Actor, channel: str) -> Any:
    """How many messages of a channel came after your read cursor. Returns a number."""
    return actor.unread(channel)


@_register("channel_members", read_only=True, required=("channel",), channel=CHANNEL)
def channel_members(actor: Actor, channel: str) -> Any:
    """The members of a channel you may read, with their capabilities. Returns a list."""
    return actor.members(channel)


@_register(
    "channel_mute",
    read_only=False,
    required=("channel",),
    channel=CHANNEL,
    muted={"type": "boolean", "default": True, "description": "true mutes, false unmutes."},
)
def channel_mute(actor: Actor, channel: str, muted: bool) -> Any:
    """Mute (or unmute) a channel: its events are left out of your subscription. Returns your membership."""
    return actor.mute(channel, muted)


@_register("channel_archive", read_only=False, required=("channel",), channel=CHANNEL)
def channel_archive(actor: Actor, channel: str) -> Any:
    """Archive a channel (needs the manage capability): it stays readable and searchable and takes no more
    messages. Returns the channel."""
    return actor.archive(channel)


@_register(
    "channel_set_capabilities",
    read_only=False,
    required=("channel", "member", "capabilities"),
    channel=CHANNEL,
    member={"type": "string", "description": "The member whose capabilities change (the library's `agent`)."},
    capabilities={"type": "array", "items": {"enum": ["send", "invite", "manage", "leave"]},
                  "description": "What the member may do from now on."},
)  # fmt: skip
def channel_set_capabilities(actor: Actor, channel: str, member: str, capabilities: list[str]) -> Any:
    """Change a member's capabilities (needs the manage capability). Returns the membership."""
    return actor.set_capabilities(channel, member, capabilities)


@_register(
    "agent_update_profile",
    read_only=False,
    description={"type": "string", "description": "What you do."},
    status={"type": "string", "description": "What you are doing now."},
    dm_policy={"type": "string", "enum": ["open", "restricted", "closed"], "description": "Who may DM you."},
    allow={**STRINGS, "description": "Agents who may DM you under the restricted policy."},
    block={**STRINGS, "description": "Agents who may never DM you."},
    discoverability={"type": "string", "enum": ["public", "project", "private"],
                     "description": "Who finds you in agent_list."},
)  # fmt: skip
def agent_update_profile(actor: Actor, **fields: Any) -> Any:
    """Change your own profile (only the fields given). Returns your agent."""
    return actor.update_profile(**{k: v for k, v in fields.items() if v is not None})


__all__ = ["CHANNEL_TOOLS"]
