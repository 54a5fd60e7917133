"""MCP tools of the memory writer: append turns, look at the writer's state and runs, decide reviews.

The writer's settings are the door's (``engram mcp --writer-*``, the same as ``engram serve``; by default the
offline extractor, every 2 completed assistant turns, each run merged); runs happen in the writer's background
worker, so an append never waits for the model. A target is a namespace the caller's key may write (its prefix
applies).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from contextlib import closing
from typing import Any

from engram.mcp.registry import NAMESPACE, STRATEGY, Registry, Strategy, integer, string
from engram.ops.access import Principal
from engram.ops.services import TenantServices
from engram.store import Memory
from engram.writer import MemoryWriter

#: The memory writer's tools, by name, in the order clients list them.
WRITER_TOOLS = Registry()
TARGET = {**NAMESPACE, "description": 'The namespace the memories go to: an array of labels, e.g. ["users", "alice"].'}
RUN_ID = string("A run id, as memory_writer_runs lists them.", minLength=1)


def _target(who: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """The target namespace must lie under the caller's prefix."""
    return {**args, "target": list(who.check(args["target"]))}


Call = Callable[..., dict[str, Any]]


def _tool(**spec: Any) -> Callable[[Call], Call]:
    """Add ``call(writer, **arguments)`` to :data:`WRITER_TOOLS` (``spec`` as :meth:`Registry.tool` takes it): doors
    run it with the tenant's writer acting through the caller's handle; its ``run`` takes ``memory`` instead of
    ``writer`` and builds a writer for the one call."""

    def add(call: Call) -> Call:
        def serve(services: TenantServices, memory: Memory, **arguments: Any) -> dict[str, Any]:
            return call(services.writer.for_caller(memory), **arguments)

        def run(memory: Memory, **arguments: Any) -> dict[str, Any]:
            with closing(TenantServices(memory)) as services:
                return serve(services, memory, **arguments)

        signature = inspect.signature(call)
        first, *rest = signature.parameters.values()
        run.__name__, run.__doc__ = call.__name__, call.__doc__
        run.__signature__ = signature.replace(parameters=[first.replace(name="memory"), *rest])  # type: ignore[attr-defined]
        return WRITER_TOOLS.tool(service=serve, **spec)(run)

    return add


@_tool(
    guard=_target,
    required=("conversation_id", "target", "role", "text"),
    conversation_id=string("The conversation (started on its first turn); a label: no '.'.", minLength=1),
    target=TARGET,
    role={"type": "string", "enum": ["user", "assistant", "system", "tool"], "description": "Who spoke."},
    text=string("What was said (stored as sent; secrets are redacted from model prompts, traces and memories)."),
    status={
        "type": "string",
        "enum": ["completed", "aborted"],
        "default": "completed",
        "description": "An aborted turn never counts towards a run.",
    },
    message_id=string("The app's id of the message; the memories made from it cite it in their sources."),
)
def memory_append_turn(
    writer: MemoryWriter, *, conversation_id: str, target: list[str], role: str, text: str, status: str,
    message_id: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Append a conversation turn for the memory writer, which extracts memories every N completed assistant turns
    (N and the other settings: memory_writer_status) into one commit you can review with memory_history /
    memory_diff and undo with memory_revert.

    Returns {turn, decision}: decision.action is queued (a run started in the background: follow it with
    memory_writer_status), waiting (pending of N turns) or skipped (with its reason).
    """
    writer.start_conversation(conversation_id, tuple(target))
    done = writer.append(conversation_id, role, text, message_id=message_id, status=status)  # type: ignore[arg-type]
    decision = done.decision
    return {"turn": done.turn.dict(), "decision": {"action": decision.action, "reason": decision.reason,
                                                   "pending": decision.pending, "run": decision.run}}  # fmt: skip


WAIT = integer("Seconds to wait first for the target's queued runs to finish.", 0, minimum=0, maximum=30)


@_tool(guard=_target, required=("target",), read_only=True, target=TARGET, wait=WAIT)
def memory_writer_status(writer: MemoryWriter, *, target: list[str], wait: int) -> dict[str, Any]:
    """The memory writer's state for a target: turns pending, the run in flight or queued, failures and a dead
    letter, the settings (and those the last run used), what each conversation has been processed up to, and the
    last run."""
    deadline = time.monotonic() + wait
    while wait and writer.busy(tuple(target)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return writer.status(tuple(target))


@_tool(guard=_target, required=("target",), read_only=True, target=TARGET,
       limit=integer("Most runs to return.", 20, maximum=100))  # fmt: skip
def memory_writer_runs(writer: MemoryWriter, *, target: list[str], limit: int) -> dict[str, Any]:
    """The memory writer's last runs on a target, newest first: outcome, actions, duration, review state, trace.

    Returns {runs}."""
    return {"runs": writer.runs(tuple(target), limit)}


@_tool(guard=_target, required=("target", "run_id"), target=TARGET, run_id=RUN_ID, strategy=STRATEGY)
def memory_writer_approve(
    writer: MemoryWriter, *, target: list[str], run_id: str, strategy: Strategy
) -> dict[str, Any]:
    """Approve a memory-writer run left for review: merge its branch into the memory, then delete the branch.

    Returns the run record (with merge: the merge commit id)."""
    return writer.approve(tuple(target), run_id, strategy=strategy)


@_tool(guard=_target, required=("target", "run_id"), destructive=True, target=TARGET, run_id=RUN_ID)
def memory_writer_reject(writer: MemoryWriter, *, target: list[str], run_id: str) -> dict[str, Any]:
    """Reject a memory-writer run left for review: delete its branch (its turns stay processed).

    Returns the run record."""
    return writer.reject(tuple(target), run_id)


@_tool(guard=_target, required=("target",), target=TARGET)
def memory_writer_retry(writer: MemoryWriter, *, target: list[str]) -> dict[str, Any]:
    """Lift a target's dead letter (its runs stopped after repeated failures; its turns were kept) and run the
    writer on it now.

    Returns the decision {action, reason, pending, run}."""
    decision = writer.retry(tuple(target))
    return {"action": decision.action, "reason": decision.reason, "pending": decision.pending, "run": decision.run}


__all__ = ["WRITER_TOOLS"]
