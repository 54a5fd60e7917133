"""HTTP routes of the memory writer: conversations in, runs out, reviews decided; one library call each.

A turn appended with ``POST /v1/conversations/{id}/turns`` runs the writer when it makes a run due, and the
response carries the run (call it off your app's hot path). The writer's settings are the server's
(:class:`~engram.server.config.ServerConfig` ``writer_*``); writes need the ``write`` scope, reads ``read``.
A run record's ``trace`` is a trace id, never a server path: ``GET /v1/writer/{target}/runs/{run_id}/trace``
returns the redacted trace from the tenant's own trace folder.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from engram.server.deps import Caller, Read, Write, run
from engram.server.errors import StrictRoute
from engram.server.schemas import responses
from engram.writer import MemoryWriter
from engram.writer.state import target_namespace
from engram.writer.traces import run_trace

routes = APIRouter(route_class=StrictRoute, tags=["writer"], responses=responses())  # every error documented
Target = Annotated[str, PathParam(description="the target namespace, dot-joined (users.alice)", min_length=1)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class NewConversation(_Body):
    """A conversation feeding ``target`` (``parent``: a child/sub-agent conversation, which the writer skips)."""

    conversation_id: str = Field(min_length=1)
    target: list[str] = Field(min_length=1, description="the namespace its memories go to, e.g. ['users', 'alice']")
    parent: str | None = None
    excluded: bool = False
    metadata: dict[str, Any] | None = None


class NewTurn(_Body):
    """A turn: role, text, the app's message id (memories cite it), completed or aborted, tool calls, speaker."""

    role: Literal["user", "assistant", "system", "tool"]
    text: str
    message_id: str | None = None
    status: Literal["completed", "aborted"] = "completed"
    tool_calls: list[dict[str, Any]] = []
    name: str | None = None


class Review(_Body):
    """How to merge a review branch: the merge strategy for memories both sides changed."""

    strategy: Literal["fail", "ours", "theirs", "newest"] = "fail"


def _writer(caller: Caller, target: str | None = None) -> MemoryWriter:
    """The tenant's writer acting through the caller's handle, after checking that ``target`` (dot-joined) lies
    under the key's namespace prefix (and is not a system namespace): a prefix-restricted key reaches only its own
    targets, as at every door."""
    if target is not None:
        caller.who.check(target_namespace(target))
    return caller.services().writer.for_caller(caller.on())


def _decision(decision: Any) -> dict[str, Any]:
    return {"action": decision.action, "reason": decision.reason, "pending": decision.pending, "run": decision.run}


@routes.post("/v1/conversations")
async def start_conversation(caller: Write, body: NewConversation) -> dict[str, Any]:
    """Start (or get) a conversation feeding a target namespace."""
    caller.who.check(body.target)
    writer = _writer(caller)
    found = await run(lambda: writer.start_conversation(body.conversation_id, tuple(body.target), parent=body.parent,
                                                        excluded=body.excluded, metadata=body.metadata))  # fmt: skip
    return found.dict()


@routes.post("/v1/conversations/{conversation_id}/turns")
async def append_turn(caller: Write, conversation_id: str, body: NewTurn) -> dict[str, Any]:
    """Append a turn; when it makes a run due the writer runs, and the response carries the run record."""
    writer = _writer(caller)
    conversation = await run(lambda: writer.conversations.require(conversation_id))
    caller.who.check(target_namespace(conversation.target))
    done = await run(lambda: writer.append(conversation_id, body.role, body.text, message_id=body.message_id,
                                           status=body.status, tool_calls=body.tool_calls, name=body.name))  # fmt: skip
    return {"turn": done.turn.dict(), "decision": _decision(done.decision)}


@routes.get("/v1/writer/{target}/status")
async def writer_status(caller: Read, target: Target) -> dict[str, Any]:
    """The target's scheduling state: pending turns, the run in flight, watermarks, the last run."""
    writer = _writer(caller, target)
    return await run(lambda: writer.status(target))


@routes.get("/v1/writer/{target}/runs")
async def writer_runs(caller: Read, target: Target, limit: Annotated[int, Query(ge=1, le=100)] = 20) -> dict[str, Any]:
    """The target's last runs, newest first (outcome, actions, duration, trace)."""
    writer = _writer(caller, target)
    return {"runs": await run(lambda: writer.runs(target, limit))}


@routes.get("/v1/writer/{target}/runs/{run_id}")
async def writer_run(caller: Read, target: Target, run_id: str) -> dict[str, Any]:
    """One run's record."""
    writer = _writer(caller, target)
    return await run(lambda: writer.run(target, run_id))


@routes.get("/v1/writer/{target}/runs/{run_id}/trace")
async def writer_run_trace(caller: Read, target: Target, run_id: str) -> dict[str, Any]:
    """One run's trace (redacted JSON: prompts, model calls, tool calls, actions); 404 when the run left none or
    it was pruned."""
    writer = _writer(caller, target)
    return await run(lambda: run_trace(writer.traces, writer.run(target, run_id)))


@routes.post("/v1/writer/{target}/runs/{run_id}/approve")
async def writer_approve(caller: Write, target: Target, run_id: str, body: Review | None = None) -> dict[str, Any]:
    """Merge a run's review branch (with ``strategy``) and delete it."""
    writer = _writer(caller, target)
    strategy = (body or Review()).strategy
    return await caller.commit(lambda: writer.approve(target, run_id, strategy=strategy))


@routes.post("/v1/writer/{target}/runs/{run_id}/reject")
async def writer_reject(caller: Write, target: Target, run_id: str) -> dict[str, Any]:
    """Drop a run's review branch (its turns stay processed)."""
    writer = _writer(caller, target)
    return await caller.commit(lambda: writer.reject(target, run_id))


@routes.post("/v1/writer/{target}/run-now")
async def writer_run_now(caller: Write, target: Target) -> dict[str, Any]:
    """Run the writer on the target now, whatever the interval (``nothing_new`` when there is nothing)."""
    writer = _writer(caller, target)
    return _decision(await caller.commit(lambda: writer.run_now(target)))


@routes.get("/v1/writer/{target}/memories")
async def writer_memories(
    caller: Read,
    target: Target,
    query: Annotated[str, Query(description="what the prompt is about")] = "",
    budget_tokens: Annotated[int, Query(ge=1, le=100_000)] = 1000,
) -> dict[str, Any]:
    """The target's memories most relevant to ``query`` within ``budget_tokens``, in a stable order (by key)."""
    writer = _writer(caller, target)
    notes = await run(lambda: writer.memories_for(target, query, budget_tokens))
    return {"memories": [n.dict() for n in notes]}
