"""MCP tools of the memory writer (issue #14): append turns, look at the writer's state and runs, decide reviews.

The writer runs with the offline extractor, every 2 completed assistant turns, merging each run (``policy``
auto); a target is a namespace the caller's key may write (its prefix applies).
"""

from __future__ import annotations

from typing import Any

from engram.mcp.registry import NAMESPACE, STRATEGY, Registry, Strategy, integer, string
from engram.ops.access import Principal
from engram.store import Memory
from engram.writer import MemoryWriter, OfflineExtractor

#: The memory writer's tools, by name, in the order clients list them.
WRITER_TOOLS = Registry()
TARGET = {**NAMESPACE, "description": 'The namespace the memories go to: an array of labels, e.g. ["users", "alice"].'}
RUN_ID = string("A run id, as memory_writer_runs lists them.", minLength=1)


def _target(who: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """The target namespace must lie under the caller's prefix."""
    return {**args, "target": list(who.check(args["target"]))}


def _writer(memory: Memory) -> MemoryWriter:
    return MemoryWriter(memory, extractor=OfflineExtractor(), background=False)


@WRITER_TOOLS.tool(
    guard=_target,
    required=("conversation_id", "target", "role", "text"),
    conversation_id=string("The conversation (started on its first turn); a label: no '.'.", minLength=1),
    target=TARGET,
    role={"type": "string", "enum": ["user", "assistant", "system", "tool"], "description": "Who spoke."},
    text=string("What was said (secrets are redacted before it is stored)."),
    status={
        "type": "string",
        "enum": ["completed", "aborted"],
        "default": "completed",
        "description": "An aborted turn never counts towards a run.",
    },
    message_id=string("The app's id of the message; the memories made from it cite it in their sources."),
)
def memory_append_turn(
    memory: Memory, *, conversation_id: str, target: list[str], role: str, text: str, status: str,
    message_id: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Append a conversation turn for the memory writer, which extracts memories every 2 completed assistant turns
    (into one commit you can review with memory_history / memory_diff and undo with memory_revert).

    Returns {turn, decision}: decision.action is ran (with the run record), waiting (pending of 2 turns) or skipped
    (with its reason).
    """
    writer = _writer(memory)
    writer.start_conversation(conversation_id, tuple(target))
    done = writer.append(conversation_id, role, text, message_id=message_id, status=status)  # type: ignore[arg-type]
    decision = done.decision
    return {"turn": done.turn.dict(), "decision": {"action": decision.action, "reason": decision.reason,
                                                   "pending": decision.pending, "run": decision.run}}  # fmt: skip


@WRITER_TOOLS.tool(guard=_target, required=("target",), read_only=True, target=TARGET)
def memory_writer_status(memory: Memory, *, target: list[str]) -> dict[str, Any]:
    """The memory writer's state for a target: turns pending, the run in flight, what each conversation has been
    processed up to, and the last run."""
    return _writer(memory).status(tuple(target))


@WRITER_TOOLS.tool(guard=_target, required=("target",), read_only=True, target=TARGET,
       limit=integer("Most runs to return.", 20, maximum=100))  # fmt: skip
def memory_writer_runs(memory: Memory, *, target: list[str], limit: int) -> dict[str, Any]:
    """The memory writer's last runs on a target, newest first: outcome, actions, duration, review state, trace.

    Returns {runs}."""
    return {"runs": _writer(memory).runs(tuple(target), limit)}


@WRITER_TOOLS.tool(guard=_target, required=("target", "run_id"), target=TARGET, run_id=RUN_ID, strategy=STRATEGY)
def memory_writer_approve(memory: Memory, *, target: list[str], run_id: str, strategy: Strategy) -> dict[str, Any]:
    """Approve a memory-writer run left for review: merge its branch into the memory, then delete the branch.

    Returns the run record (with merge: the merge commit id)."""
    return _writer(memory).approve(tuple(target), run_id, strategy=strategy)


@WRITER_TOOLS.tool(guard=_target, required=("target", "run_id"), destructive=True, target=TARGET, run_id=RUN_ID)
def memory_writer_reject(memory: Memory, *, target: list[str], run_id: str) -> dict[str, Any]:
    """Reject a memory-writer run left for review: delete its branch (its turns stay processed).

    Returns the run record."""
    return _writer(memory).reject(tuple(target), run_id)


__all__ = ["WRITER_TOOLS"]
