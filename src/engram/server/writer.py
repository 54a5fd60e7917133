"""HTTP routes of the memory writer: conversations in, runs out, reviews decided; one library call each.

A turn appended with ``POST /v1/conversations/{id}/turns`` returns at once: when it makes a run due, the decision
is ``queued`` and the tenant's background worker runs the writer (never inside the request, however slow the
model). ``GET /v1/writer/{target}/status`` reports the run in flight, what waits, failures and a dead letter
(``?wait=SECONDS`` first waits, bounded, until the worker is idle for the target), and
``GET /v1/writer/{target}/events`` streams each run as Server-Sent Events. The writer's settings are the
server's (:class:`~engram.server.config.ServerConfig` ``writer_*``); writes need the ``write`` scope, reads ``read``.
A run record's ``trace`` is a trace id, never a server path: ``GET /v1/writer/{target}/runs/{run_id}/trace``
returns the redacted trace from the tenant's own trace folder.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from engram.errors import EngramError
from engram.server.deps import Caller, Read, Write, run
from engram.server.errors import StrictRoute
from engram.server.schemas import responses
from engram.writer import MemoryWriter
from engram.writer.state import target_id, target_namespace
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
    """Append a turn; when it makes a run due, the decision is ``queued`` and the run happens in the background
    (follow it with ``status`` or ``events``). The response never waits for the model."""
    writer = _writer(caller)
    conversation = await run(lambda: writer.conversations.require(conversation_id))
    caller.who.check(target_namespace(conversation.target))
    done = await run(lambda: writer.append(conversation_id, body.role, body.text, message_id=body.message_id,
                                           status=body.status, tool_calls=body.tool_calls, name=body.name))  # fmt: skip
    return {"turn": done.turn.dict(), "decision": _decision(done.decision)}


@routes.get("/v1/writer/{target}/status")
async def writer_status(
    caller: Read, target: Target,
    wait: Annotated[float, Query(ge=0, le=30, description="first wait up to this many seconds for the "
                                 "background worker to finish the target's queued runs")] = 0.0,
) -> dict[str, Any]:  # fmt: skip
    """The target's scheduling state: pending turns, the run in flight or queued, failures, a dead letter, the
    settings, watermarks, the last run."""
    writer = _writer(caller, target)
    tid = target_id(target)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while wait and writer.busy(tid) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    return await run(lambda: writer.status(target))


@routes.get("/v1/writer/{target}/events", response_class=StreamingResponse)
async def writer_events(
    request: Request, caller: Read, target: Target,
    timeout: Annotated[float, Query(gt=0, le=3600, description="close the stream after this many seconds")] = 300.0,
) -> StreamingResponse:  # fmt: skip
    """Server-Sent Events of the target's runs: ``status`` (pending turns, run in flight, queued, dead letter) when
    it changes, and ``run`` (the run record) when a run starts, ends or is reviewed. Works across server processes
    (it follows the target's state in the store). The key is checked again every second: once it is revoked the
    stream sends a last ``revoked`` event and ends."""
    writer = _writer(caller, target)
    keyring = request.app.state.engram.keyring

    async def feed() -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        deadline, checked = loop.time() + timeout, loop.time()
        seen: dict[str, tuple[Any, ...]] = {}
        last: tuple[Any, ...] | None = None
        while loop.time() < deadline and not await request.is_disconnected():
            if loop.time() - checked >= RECHECK:
                checked = loop.time()
                if caller.who.key_id is not None and not await run_in_threadpool(keyring.has, caller.who.key_id):
                    yield f"event: revoked\ndata: {json.dumps({'error': 'this API key was revoked'})}\n\n"
                    return
            try:
                status = await run_in_threadpool(writer.status, target)
            except EngramError as exc:
                yield f"event: error\ndata: {json.dumps({'error': str(exc)})}\n\n"
                return
            brief = {k: status[k] for k in ("pending_turns", "pending_messages", "in_flight", "queued",
                                             "failures", "dead_letter")}  # fmt: skip
            shape = tuple(json.dumps(v, sort_keys=True, default=str) for v in brief.values())
            if shape != last:
                last = shape
                yield f"event: status\ndata: {json.dumps(brief, default=str)}\n\n"
            for record in reversed(await run_in_threadpool(writer.runs, target, 20)):
                mark = (record.get("outcome"), record.get("review"), record.get("completed_at"))
                if seen.get(record["id"]) != mark:
                    seen[record["id"]] = mark
                    yield f"id: {record['id']}\nevent: run\ndata: {json.dumps(record, default=str)}\n\n"
            await asyncio.sleep(POLL)

    return StreamingResponse(feed(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@routes.post("/v1/writer/{target}/retry")
async def writer_retry(caller: Write, target: Target) -> dict[str, Any]:
    """Lift the target's dead letter (after repeated failed runs) and run the writer on it now."""
    writer = _writer(caller, target)
    return _decision(await caller.commit(lambda: writer.retry(target)))


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


#: How often the events stream reads the target's state, and rechecks the key (seconds).
POLL = 0.25
RECHECK = 1.0
