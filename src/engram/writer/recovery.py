"""Recovery of a run that started and never finished (crash, SIGKILL, a lease that ran out).

A run is identified by what it committed: its commit carries the run id in its metadata (``writer.run``), on
every policy path (straight onto the memories' branch under ``auto``, on its review branch otherwise). The new
run, holding the lease now, looks for that commit:

- on the old run's review branch: the work was done. If the commit already reached the memories' branch (the
  crash came after the merge), or the policy keeps runs for review, only the watermark moves; a policy that
  merges merges it now. Outcome ``recovered``.
- in the memories' branch's history since the old run started (``auto`` commits there directly; a merged review
  branch is deleted after its merge): the work was published, only the watermark moves. Outcome ``recovered``.
- nowhere: nothing was published. A leftover branch is dropped, the watermark stays, and the turns are processed
  by the new run. Outcome ``crashed``, with a trace.

Either way no turn is extracted twice. The history walk is bounded: commits older than the old run's start (less
:data:`CLOCK_SLACK_MS` for clocks of other processes) are not read, and at most :data:`MAX_WALK` commits are.
"""

from __future__ import annotations

import logging
from typing import Any

from engram.clock import now_ms
from engram.errors import EngramError, MergeConflictError
from engram.hashing import ChunkId
from engram.repo import HEADS
from engram.store import Memory
from engram.writer.extract import Extractor, model_of
from engram.writer.metrics import WriterMetrics, dead_lettered
from engram.writer.run import branch_name, ours
from engram.writer.settings import WriterSettings
from engram.writer.state import Lease, StateStore, Watermark, WriterState
from engram.writer.traces import write_trace

log = logging.getLogger("engram.writer")

#: How far before the old run's start the history walk still looks (clocks of other writers may lag).
CLOCK_SLACK_MS = 10 * 60_000
#: The most commits the history walk reads (a busier branch falls back on the crash path, with a warning).
MAX_WALK = 50_000


def _run_of(metadata: dict[str, Any], run_id: str) -> dict[str, Any] | None:
    found = metadata.get("writer")
    return found if isinstance(found, dict) and found.get("run") == run_id else None


def find_published(memory: Memory, old: Lease) -> tuple[ChunkId, dict[str, Any]] | None:
    """The commit run ``old`` published on ``memory``'s branch (directly, or as the merged head of its review
    branch) and its ``writer`` metadata; None when it published nothing there (see the module docstring)."""
    repo = memory.repo
    since = old.acquired_at - CLOCK_SLACK_MS
    for walked, commit in enumerate(repo.iter_log(repo.head(memory.branch))):
        if commit.time < since:
            return None
        if walked >= MAX_WALK:
            log.warning("writer recovery: run %s not found in the last %d commits of %s; treating it as crashed",
                        old.run_id, MAX_WALK, memory.branch)  # fmt: skip
            return None
        meta = _run_of(commit.metadata, old.run_id)
        if meta is not None:
            return commit.id, meta
    return None


def recover(
    memory: Memory, settings: WriterSettings, extractor: Extractor | None, metrics: WriterMetrics, store: StateStore,
    old: Lease, lease: Lease,
) -> WriterState:  # fmt: skip
    """Settle the run ``old`` (see the module docstring) under ``lease``, on ``memory`` (a handle on the memories'
    branch) with ``settings``; return the updated state."""
    repo, author, model = memory.repo, settings.author, model_of(extractor)
    branch = branch_name(store.target, old.run_id)
    head = repo.refs.get(HEADS + branch)
    meta = None if head is None else _run_of(repo.commit(head).metadata, old.run_id)
    if meta is None:
        published = find_published(memory, old)
        if published is not None:
            head, meta = published
    record: dict[str, Any] = {
        "id": old.run_id, "target": store.target, "started_at": old.acquired_at, "completed_at": now_ms(),
        "model": model, "policy": settings.policy_name, "recovered_by": lease.run_id, "trace": None,
    }  # fmt: skip
    if meta is not None and head is not None:
        merged = repo.is_ancestor(head, repo.head(memory.branch))
        record.update({"outcome": "recovered", "commit": head.hex(), "conversations": meta.get("conversations", {})})
        if merged:
            record.update({"review": None, "branch": None})
            if repo.refs.get(HEADS + branch) is not None:
                repo.delete_branch(branch, author)
        elif settings.direct:
            try:
                commit = memory.merge(branch, strategy="fail", author=author,
                                      message=f"writer: merge recovered run {old.run_id}")  # fmt: skip
                record.update({"merge": commit.id.hex(), "review": None, "branch": None})
                repo.delete_branch(branch, author)
            except MergeConflictError:
                record.update({"review": "pending", "branch": branch})
        else:
            record.update({"review": "pending", "branch": branch})
    else:
        record.update({"outcome": "crashed", "error": "the run started and never finished (its lease expired)"})
        if head is not None:
            try:
                repo.delete_branch(branch, author)
            except EngramError:
                log.warning("writer: could not delete the branch of crashed run %s", old.run_id)
        try:
            record["trace"] = write_trace(settings.traces, {
                "run": old.run_id, "target": store.target, "model": model, "outcome": "crashed",
                "error": record["error"], "started_at": old.acquired_at, "duration_ms": None, "steps": [],
                "actions": [], "conversations": {}, "owner": old.owner,
            })  # fmt: skip
        except (OSError, EngramError):
            log.warning("writer: could not write the trace of crashed run %s", old.run_id)
    check = ours(lease)

    def change(state: WriterState) -> bool:
        check(state)
        if meta is not None:
            for cid, span in dict(meta.get("conversations") or {}).items():
                mark = state.watermarks.get(cid, Watermark())
                if int(span.get("to", 0)) > mark.seq:
                    state.watermarks[cid] = Watermark(int(span["to"]), span.get("last_message"),
                                                      int(span.get("assistant_turns", 0)))  # fmt: skip
        else:  # a run that dies again and again (a turn that kills its process) must not loop for ever
            state.failures += 1
            if state.failures >= settings.max_failures and state.dead_letter is None:
                state.dead_letter = {"run": old.run_id, "outcome": "crashed", "error": record["error"],
                                     "failures": state.failures, "since": now_ms()}  # fmt: skip
        previous = state.find(old.run_id) or {}
        state.record(previous | record)
        return True

    state = store.update(change, f"run {lease.run_id}: recover run {old.run_id}")
    log.info("writer recovery: run=%s outcome=%s by=%s", old.run_id, record["outcome"], lease.run_id)
    metrics.runs.labels(outcome=record["outcome"]).inc()
    if state.dead_letter is not None and state.dead_letter.get("run") == old.run_id:
        dead_lettered(metrics, store.target, state.dead_letter)
    return state
