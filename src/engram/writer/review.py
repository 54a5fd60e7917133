"""Deciding a run that waits for review (policy ``review``, or a callable policy that said so), stacked runs included.

A run made while an earlier run of the same target still waits for review **builds on it**: its branch starts
at that run's head, so it reads the memories the earlier run proposed ("I moved to Munich" then updates the
unapproved "I live in Berlin" instead of contradicting it). Approving the later run merges both, and the earlier
one is recorded as approved with it. Rejecting a run that later runs build on is refused until they are decided
(reject the newest first), so a rejected proposal never comes back through a later merge.
"""

from __future__ import annotations

import logging
from typing import Any

from engram.clock import now_ms
from engram.errors import ConflictError, InvalidInputError, NotFoundError
from engram.repo import HEADS
from engram.store import Memory
from engram.writer.run import branch_name
from engram.writer.state import StateStore, WriterState

log = logging.getLogger("engram.writer")


def decide_review(
    mem: Memory, author: str, tid: str, run_id: str, verdict: str, strategy: Any = "fail"
) -> dict[str, Any]:
    """Approve (merge into ``mem``'s branch with ``strategy``) or reject (drop) the review branch of run ``run_id``
    of target ``tid``; returns the run's updated record (see the module docstring for stacked runs)."""
    repo = mem.repo
    store = StateStore(repo, tid, actor=author)
    _, state = store.load()
    found = state.find(run_id)
    if found is None:
        raise NotFoundError(f"no run {run_id!r} on {tid!r}")
    record = dict(found)
    branch = branch_name(tid, run_id)
    head = repo.refs.get(HEADS + branch)
    if record.get("review") != "pending" or head is None:
        raise InvalidInputError(f"run {run_id} has no review pending (review: {record.get('review')})")
    others = {
        str(r["id"]): ref
        for r in state.runs
        if r.get("review") == "pending" and r.get("id") != run_id
        and (ref := repo.refs.get(HEADS + branch_name(tid, str(r["id"])))) is not None
    }  # fmt: skip
    settled: dict[str, str] = {}
    if verdict == "approved":
        merged = mem.merge(branch, strategy=strategy, author=author,
                           message=f"writer: approve run {run_id} into {mem.branch}")  # fmt: skip
        record["merge"] = merged.id.hex()
        settled = {rid: "approved" for rid, ref in others.items() if repo.is_ancestor(ref, merged.id)}
    else:
        above = sorted(rid for rid, ref in others.items() if repo.is_ancestor(head, ref))
        if above:
            raise ConflictError(
                f"run {run_id} cannot be rejected while later runs build on it ({', '.join(above)}): decide those "
                "first (reject the newest first, or approve them, which approves this one too)"
            )
    mem.repo.delete_branch(branch, author)
    for rid in settled:
        repo.delete_branch(branch_name(tid, rid), author)
    decided_at = now_ms()
    record["review"], record["reviewed_at"] = verdict, decided_at

    def change(state: WriterState) -> bool:
        state.record(record)
        for rid in settled:
            earlier = state.find(rid)
            if earlier is not None:
                state.record(earlier | {"review": "approved", "reviewed_at": decided_at, "approved_with": run_id})
        return True

    store.update(change, f"run {run_id}: {verdict}")
    log.info("writer review: run=%s target=%s verdict=%s with=%s", run_id, tid, verdict, sorted(settled) or None)
    return record
