"""HTTP routes for channels, messages, notes and events: one library call per route.

The agent a request acts as comes from its API key (``Channels.actor_for_key``): a key bound to one agent
acts as it; a key bound to several names one with the ``X-Engram-Agent`` header; a server without keys
takes the header as is (local development, no authentication). Events stream as Server-Sent Events with
``Last-Event-ID`` resume.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from engram.channels import Actor, Channels, to_json
from engram.channels.hub import topic_matches
from engram.errors import AuthenticationError, EngramError
from engram.server.deps import Admin, Caller, Read, Write
from engram.server.errors import ApiError, StrictRoute
from engram.server.schemas import responses

Mode = Literal["hybrid", "semantic", "keyword"]
Profile = Literal["similarity", "balanced", "recent", "quality"]
AgentHeader = Annotated[str | None, Header(alias="X-Engram-Agent", description="the agent to act as, if the key "
                                           "may act for several")]  # fmt: skip
routes = APIRouter(route_class=StrictRoute, tags=["channels"], responses=responses())  # every error documented


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class NewChannel(_Body):
    """A channel to create."""

    name: str
    scope: Literal["global", "project"] = "project"
    access: Literal["open", "members", "private"] = "open"
    description: str = ""
    default: bool = False


class Invite(_Body):
    """An agent to add to a channel, with its capabilities."""

    agent: str
    capabilities: list[Literal["send", "invite", "manage", "leave"]] = ["send", "invite", "leave"]


class NewMessage(_Body):
    """A message: content, nested metadata, confidence (0..1, default 0.5), reply_to."""

    content: str
    metadata: dict[str, Any] | None = None
    confidence: float | None = None  # checked by the library: 422 invalid_confidence
    reply_to: str | None = None


class DirectMessage(NewMessage):
    """A direct message to another agent."""

    to: str


class Edit(_Body):
    """Fields of one's own message to change."""

    content: str | None = None
    metadata: dict[str, Any] | None = None
    confidence: float | None = None  # checked by the library: 422 invalid_confidence


class Feedback(_Body):
    """Whether a message's or note's advice worked."""

    worked: bool
    note: str | None = None


class Breadcrumb(_Body):
    """A typed breadcrumb."""

    type: Literal["file", "commit", "decision", "pattern", "json"]
    value: Any


class NewNote(_Body):
    """A private note."""

    content: str
    confidence: float | None = None  # checked by the library: 422 invalid_confidence
    tags: list[str] = []
    breadcrumbs: list[Breadcrumb] = []
    session: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class Search(_Body):
    """A search over messages or notes."""

    query: str | None = None
    channels: list[str] | None = None
    senders: list[str] | None = None
    projects: list[str] | None = None
    filter: dict[str, Any] | None = None
    tags: list[str] | None = None
    tags_mode: Literal["all", "any"] = "all"
    min_confidence: float | None = None
    since: str | None = None
    until: str | None = None
    profile: Profile = "similarity"
    mode: Mode | None = None
    limit: int = Field(10, ge=0, le=1000)
    offset: int = Field(0, ge=0)
    min_score: float | None = None
    explain: bool = False
    at: str | None = None


class NoteSearch(Search):
    """A search over notes: one's own, or (with notes:read-all) other agents'."""

    agents: list[str] | None = None


class Patterns(_Body):
    """Pattern detection over channels."""

    channels: list[str] | None = None
    since: str | None = None
    min_cluster: int = Field(3, ge=2)
    threshold: float | None = Field(None, ge=-1, le=1)
    filter: dict[str, Any] | None = None
    on: str = "message"
    write: bool = False


async def _act(caller: Caller, agent: str | None, call: Callable[[Actor], Any]) -> Any:
    """Run one library call as the agent the caller's key makes, on a worker thread; its result as JSON."""

    caller.who.require_unrestricted("channels")

    def work() -> Any:
        hub = caller.services().channels.for_caller(caller.on())
        return to_json(call(hub.actor_for_key(caller.who.key_id, agent)))

    return await run_in_threadpool(work)


class NewProject(_Body):
    """A project to register."""

    id: str
    name: str = ""
    description: str = ""


class NewAgent(_Body):
    """An agent to register."""

    id: str
    project: str | None = None
    description: str = ""
    dm_policy: Literal["open", "restricted", "closed"] = "open"
    allow: list[str] = []
    block: list[str] = []
    discoverability: Literal["public", "project", "private"] = "public"
    opt_out: list[str] = []


class KeyBinding(_Body):
    """The agents an API key may act as."""

    key_id: str
    agents: list[str] = Field(min_length=1)
    read_all_notes: bool = False


async def _admin(caller: Caller, call: Callable[[Channels], Any]) -> Any:
    caller.who.require_unrestricted("channels")
    return await run_in_threadpool(lambda: to_json(call(caller.services().channels.for_caller(caller.on()))))


@routes.post("/v1/projects", status_code=201)
async def create_project(caller: Admin, body: NewProject) -> Any:
    """Register a project (admin)."""
    return {"id": await _admin(caller, lambda h: h.create_project(body.id, name=body.name,
                                                                   description=body.description))}  # fmt: skip


@routes.post("/v1/agents", status_code=201)
async def register_agent(caller: Admin, body: NewAgent) -> Any:
    """Register an agent (admin)."""
    fields = body.model_dump(exclude={"id"})
    return await _admin(caller, lambda h: h.register_agent(body.id, **fields))


@routes.post("/v1/agents/keys")
async def bind_key(caller: Admin, body: KeyBinding) -> Any:
    """Let an API key act as the listed agents (admin); ``read_all_notes`` grants notes:read-all."""
    await _admin(caller, lambda h: h.bind_key(body.key_id, body.agents, read_all_notes=body.read_all_notes))
    return body.model_dump()


def _search_options(body: Search) -> dict[str, Any]:
    return body.model_dump(exclude={"query", "channels", "agents"})


@routes.post("/v1/channels", status_code=201)
async def create_channel(caller: Write, body: NewChannel, agent: AgentHeader = None) -> Any:
    """Create a channel (and join it with every capability)."""
    return await _act(caller, agent, lambda a: a.create_channel(**body.model_dump()))


@routes.get("/v1/channels")
async def list_channels(caller: Read, agent: AgentHeader = None, include_archived: bool = False) -> Any:
    """Channels the agent may read or join."""
    return await _act(caller, agent, lambda a: a.list_channels(include_archived=include_archived))


@routes.post("/v1/channels/{channel}/join")
async def join_channel(caller: Write, channel: str, agent: AgentHeader = None) -> Any:
    """Join an open or members channel in scope."""
    return await _act(caller, agent, lambda a: a.join(channel))


@routes.post("/v1/channels/{channel}/leave")
async def leave_channel(caller: Write, channel: str, agent: AgentHeader = None) -> Any:
    """Leave a channel."""
    return await _act(caller, agent, lambda a: a.leave(channel))


@routes.post("/v1/channels/{channel}/invite")
async def invite(caller: Write, channel: str, body: Invite, agent: AgentHeader = None) -> Any:
    """Add an agent to a channel (needs the invite capability)."""
    return await _act(caller, agent, lambda a: a.invite(channel, body.agent, body.capabilities))


@routes.post("/v1/channels/{channel}/archive")
async def archive(caller: Write, channel: str, agent: AgentHeader = None) -> Any:
    """Archive a channel (needs the manage capability)."""
    return await _act(caller, agent, lambda a: a.archive(channel))


@routes.get("/v1/channels/{channel}/members")
async def members(caller: Read, channel: str, agent: AgentHeader = None) -> Any:
    """A channel's members."""
    return await _act(caller, agent, lambda a: a.members(channel))


@routes.get("/v1/channels/{channel}/messages")
async def get_messages(
    caller: Read, channel: str, agent: AgentHeader = None, limit: Annotated[int, Query(ge=0, le=1000)] = 50,
    after: Annotated[int | None, Query(ge=0)] = None, at: str | None = None,
) -> Any:  # fmt: skip
    """A channel's messages, oldest first (the last ``limit``, or those after message number ``after``)."""
    return await _act(caller, agent, lambda a: a.messages(channel, limit=limit, after=after, at=at))


@routes.post("/v1/channels/{channel}/messages", status_code=201)
async def send(caller: Write, channel: str, body: NewMessage, agent: AgentHeader = None) -> Any:
    """Post a message to a channel."""
    return await _act(caller, agent, lambda a: a.send(channel, **body.model_dump()))


@routes.post("/v1/channels/{channel}/read")
async def mark_read(caller: Write, channel: str, agent: AgentHeader = None, upto: int | None = None) -> Any:
    """Move the agent's read cursor."""
    return await _act(caller, agent, lambda a: a.mark_read(channel, upto))


@routes.post("/v1/messages/direct", status_code=201)
async def direct(caller: Write, body: DirectMessage, agent: AgentHeader = None) -> Any:
    """Send a direct message."""
    fields = body.model_dump(exclude={"to", "content"})
    return await _act(caller, agent, lambda a: a.dm(body.to, body.content, **fields))


@routes.post("/v1/messages/search")
async def search_messages(caller: Read, body: Search, agent: AgentHeader = None) -> Any:
    """Search the messages of the channels the agent may read."""
    return await _act(caller, agent, lambda a: a.search_messages(body.query, channels=body.channels,
                                                                 **_search_options(body)))  # fmt: skip


@routes.get("/v1/messages/{message_id}")
async def get_message(caller: Read, message_id: str, agent: AgentHeader = None, at: str | None = None) -> Any:
    """One message or note (``#`` in its id is sent as ``%23``)."""
    return await _act(caller, agent, lambda a: a.message(message_id, at=at))


@routes.get("/v1/messages/{message_id}/history")
async def message_history(caller: Read, message_id: str, agent: AgentHeader = None) -> Any:
    """Every version of a message, newest first."""
    return await _act(caller, agent, lambda a: a.message_history(message_id))


@routes.patch("/v1/messages/{message_id}")
async def edit(caller: Write, message_id: str, body: Edit, agent: AgentHeader = None) -> Any:
    """Edit one's own message (the old version stays in history)."""
    return await _act(caller, agent, lambda a: a.edit(message_id, **body.model_dump()))


@routes.delete("/v1/messages/{message_id}")
async def delete(caller: Write, message_id: str, agent: AgentHeader = None) -> Any:
    """Soft-delete a message."""
    return await _act(caller, agent, lambda a: a.delete(message_id))


@routes.post("/v1/messages/{message_id}/feedback")
async def feedback(caller: Write, message_id: str, body: Feedback, agent: AgentHeader = None) -> Any:
    """Record whether a message's or note's advice worked; returns it with its new confidence."""
    return await _act(caller, agent, lambda a: a.feedback(message_id, body.worked, note=body.note))


@routes.post("/v1/notes", status_code=201)
async def write_note(caller: Write, body: NewNote, agent: AgentHeader = None) -> Any:
    """Write a private note."""
    fields = body.model_dump(exclude={"content"})
    return await _act(caller, agent, lambda a: a.write_note(body.content, **fields))


@routes.get("/v1/notes/recent")
async def recent_notes(
    caller: Read, agent: AgentHeader = None, limit: Annotated[int, Query(ge=0, le=1000)] = 20
) -> Any:
    """The agent's newest notes."""
    return await _act(caller, agent, lambda a: a.recent_notes(limit))


@routes.post("/v1/notes/search")
async def search_notes(caller: Read, body: NoteSearch, agent: AgentHeader = None) -> Any:
    """Search the agent's notes (and, with notes:read-all, audited, other agents')."""
    return await _act(caller, agent, lambda a: a.search_notes(body.query, agents=body.agents, **_search_options(body)))


@routes.get("/v1/notes/peek/{other}")
async def peek_notes(
    caller: Write, other: str, agent: AgentHeader = None, query: str | None = None,
    limit: Annotated[int, Query(ge=0, le=1000)] = 20, offset: Annotated[int, Query(ge=0)] = 0,
    min_score: float | None = None,
) -> Any:  # fmt: skip
    """Another agent's notes: only for keys with notes:read-all; every peek is written as an event (so it needs
    the write scope too)."""
    return await _act(caller, agent, lambda a: a.peek_notes(other, query=query, limit=limit, offset=offset,
                                                            min_score=min_score))  # fmt: skip


@routes.post("/v1/patterns")
async def detect_patterns(caller: Write, body: Patterns, agent: AgentHeader = None) -> Any:
    """Cluster similar messages; ``write`` records each cluster as a pattern note."""
    return await _act(
        caller, agent, lambda a: a.detect_patterns(body.channels, **body.model_dump(exclude={"channels"}))
    )


@routes.get("/v1/agents")
async def list_agents(caller: Read, agent: AgentHeader = None) -> Any:
    """Agents the agent may discover."""
    return await _act(caller, agent, lambda a: a.list_agents())


@routes.get("/v1/events")
async def events(
    caller: Read, agent: AgentHeader = None, after: Annotated[int, Query(ge=0)] = 0,
    topics: Annotated[list[str] | None, Query()] = None, limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:  # fmt: skip
    """Events after a cursor that the agent may see, oldest first."""
    return await _act(caller, agent, lambda a: a.events(after, topics=topics, limit=limit))


@routes.get("/v1/events/stream", response_class=StreamingResponse)
async def stream(
    request: Request, caller: Read, agent: AgentHeader = None,
    after: Annotated[str | None, Query(description="the cursor to resume after (a non-negative integer)")] = None,
    topics: Annotated[list[str] | None, Query()] = None, last_event_id: Annotated[str | None, Header()] = None,
    timeout: Annotated[float, Query(gt=0, le=3600)] = 300.0,
) -> StreamingResponse:  # fmt: skip
    """Server-Sent Events: ``id`` is the event's cursor, ``event`` its topic; resume with ``Last-Event-ID``.

    A cursor (``Last-Event-ID``, else ``after``) that is not a non-negative integer is a 400 ``invalid_cursor``;
    one beyond the newest event resumes from the newest, and the stream first sends a ``resumed`` event saying
    so (its ``id`` and ``data.cursor`` are the cursor used). The key is checked again every ``RECHECK`` seconds
    while the stream is open: once it is revoked, or no longer bound to the agent, the stream sends a last
    ``revoked`` event and ends."""
    caller.who.require_unrestricted("channels")
    requested = _cursor(last_event_id, "Last-Event-ID") if last_event_id is not None else _cursor(after, "after")
    keyring = request.app.state.engram.keyring

    # the tenant's hub, taken once while the request holds its store: rechecks of the key reuse it
    hub = await run_in_threadpool(lambda: caller.services().channels.for_caller(caller.on()))

    def resolve() -> Actor:
        return hub.actor_for_key(caller.who.key_id, agent)

    actor = await run_in_threadpool(resolve)
    newest = await run_in_threadpool(actor.hub.last_event)
    start = newest if requested is None else min(requested, newest)

    async def feed() -> AsyncIterator[str]:
        nonlocal actor
        if requested is not None and requested > newest:  # a cursor from the future (another store, a reset log)
            said = {"requested": requested, "cursor": start, "reason": "the cursor is beyond the newest event"}
            yield f"id: {start}\nevent: resumed\ndata: {json.dumps(said)}\n\n"
        position, loop = start, asyncio.get_running_loop()
        deadline = loop.time() + timeout
        checked = loop.time()
        while loop.time() < deadline and not await request.is_disconnected():
            if loop.time() - checked >= RECHECK:
                checked = loop.time()
                try:
                    if caller.who.key_id is not None and not await run_in_threadpool(keyring.has, caller.who.key_id):
                        raise AuthenticationError("this API key was revoked", "invalid_key")
                    actor = await run_in_threadpool(resolve)
                except EngramError as exc:
                    yield f"event: revoked\ndata: {json.dumps({'error': str(exc)})}\n\n"
                    return
            batch = await run_in_threadpool(actor.hub.read_events, position, limit=200)
            for event in batch:
                position = event.seq
                if topic_matches(event.topic, topics) and actor.wants(event):
                    yield f"id: {event.seq}\nevent: {event.topic}\ndata: {json.dumps(event.as_dict())}\n\n"
            if not batch:
                await asyncio.sleep(0.05)

    return StreamingResponse(feed(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def _cursor(value: str | None, name: str) -> int | None:
    """An event cursor sent as text (a header or query value): a non-negative integer, else a 400."""
    if value is None:
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit()):
        raise ApiError(400, "invalid_cursor", f"{name} must be an event cursor (a non-negative integer), got "
                       f"{value[:40]!r}")  # fmt: skip
    return int(text)


#: Seconds between two checks of an open event stream's key (revoked, or unbound from its agent: the stream ends).
RECHECK = 1.0
