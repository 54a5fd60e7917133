"""The memory writer: conversations in, reviewed memories out, every N completed assistant turns.

    >>> import engram
    >>> from engram.writer import MemoryWriter, OfflineExtractor
    >>> mem = engram.open(":memory:", embedder="hashing")
    >>> writer = MemoryWriter(mem, extractor=OfflineExtractor(), interval=1, background=False)
    >>> _ = writer.start_conversation("c1", target=("users", "alice"))
    >>> _ = writer.append("c1", "user", "I live in Lyon and I work as a nurse.")
    >>> writer.append("c1", "assistant", "Noted.").run["outcome"]
    'merged'
    >>> [m.text for m in writer.memories_for(("users", "alice"), "where does she live", 200)]
    ['I live in Lyon and I work as a nurse.']

Scheduling: only completed assistant turns count; a run is due when ``interval`` of them completed since the
watermark, or when a run started and never finished (its lease expired). Each gate that skips logs its reason
at INFO and counts it in ``engram_writer_skips_total{reason}``; a skip changes no state.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Self, Unpack

from engram.clock import now_ms
from engram.errors import InvalidInputError, NotFoundError, RunInFlightError
from engram.repo import HEADS
from engram.store import Memory
from engram.writer.conversations import Conversation, ConversationLog, Status, Turn
from engram.writer.extract import Action, Extractor, MemoryNote, Workspace, memory_notes, model_of
from engram.writer.metrics import WriterMetrics, default_metrics, observe_run
from engram.writer.recovery import recover
from engram.writer.run import Batch, Plan, Run, branch_name
from engram.writer.settings import PolicyFn, PolicyName, WriterOptions, WriterSettings, decide
from engram.writer.state import Lease, StateStore, Watermark, WriterState, new_run_id, process_owner, target_id
from engram.writer.state import target_namespace as _namespace
from engram.writer.traces import TraceSettings

log = logging.getLogger("engram.writer")

SKIP_REASONS = (
    "disabled", "child_conversation", "excluded_conversation", "invalid_interval", "no_model", "in_flight",
    "nothing_new",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Decision:
    """What the scheduler did after a turn: ``ran`` (with the run record), ``skipped`` (with its reason),
    ``waiting`` (not due yet: ``pending`` of ``interval`` turns), ``queued`` (the run went to the background)."""

    action: str
    reason: str | None = None
    pending: int = 0
    run: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Appended:
    """The result of :meth:`MemoryWriter.append`: the stored turn and what the scheduler decided."""

    turn: Turn
    decision: Decision

    @property
    def run(self) -> dict[str, Any] | None:
        """The run record when the turn triggered a run in the foreground."""
        return self.decision.run


class _Worker:
    """The background worker every view of one writer shares (see :meth:`MemoryWriter.for_caller`): its thread,
    the runs queued per target, and the lock over both."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.executor: ThreadPoolExecutor | None = None
        self.queued: dict[str, Future[Decision]] = {}


class MemoryWriter:
    """Extracts memories from conversations every ``interval`` completed assistant turns (see the module docstring).

    ``MemoryWriter(mem, extractor=..., settings=WriterSettings(...))``, or the settings' fields as keyword arguments
    (``MemoryWriter(mem, interval=1, policy="review")``; given both, the keywords override ``settings``).

    Args:
        mem: the store (a handle on the branch memories are merged into, usually ``main``).
        extractor: an :class:`Extractor` (``OfflineExtractor()``, ``OpenAIExtractor(...)``); None gates every run.
        metrics: where the Prometheus metrics go (default: prometheus-client's default registry).
        settings: a :class:`WriterSettings`; its fields, also accepted as keyword arguments, are:
        interval: completed assistant turns between runs (1..50; another value gates every run).
        policy: ``auto`` (merge at once; on a conflict retry on the new head), ``review`` (leave the branch for a
            person or agent: :meth:`approve` / :meth:`reject`), or a callable (see :data:`PolicyFn`).
        enabled: False gates every run (turns are still stored; nothing is reset).
        background: run in a worker thread (the default) instead of inside :meth:`append`.
        instructions: extra instructions for the model.
        memory_budget_tokens / turn_budget_tokens: token budgets of a step's memories and new turns.
        context_turns: earlier turns shown before the new ones.
        lease_seconds: how long a run's lease lasts without renewal (it is renewed while the run works).
        trace_dir / trace_successes / trace_max_bytes / trace_max_count / trace_max_age_days: trace settings.
        exclude: conversation ids never extracted from.
        conversations_branch: the branch conversations are kept on.
        author: the author of the writer's commits.
        merge_attempts: how often a run that conflicted is retried on the new head.
        redact_turns: store turns with secrets redacted (default: as sent; prompts, traces and memories are
            redacted either way).
    """

    def __init__(
        self,
        mem: Memory,
        *,
        extractor: Extractor | None = None,
        metrics: WriterMetrics | None = None,
        settings: WriterSettings | None = None,
        **options: Unpack[WriterOptions],
    ) -> None:
        chosen = settings if settings is not None else WriterSettings()
        self.settings = replace(chosen, **options) if options else chosen
        self.mem = mem.handle(author=self.settings.author)
        self.extractor = extractor
        self.metrics = metrics if metrics is not None else default_metrics()
        self.conversations = ConversationLog(
            mem, branch=self.settings.conversations_branch, author=self.author, redact_turns=self.settings.redact_turns
        )
        self.owner = process_owner()
        self._worker = _Worker()

    def for_caller(self, mem: Memory) -> Self:
        """This writer acting through a caller's handle ``mem``: memories are read and merged on its branch, and a
        read-only handle (a key without the ``write`` scope) writes none; commits keep the writer's author. It
        shares this writer's settings, extractor, metrics, conversation log and background worker: a door builds
        one writer per tenant and one of these per request."""
        view = copy.copy(self)
        view.mem = mem.handle(author=self.author)
        return view

    @property
    def author(self) -> str:
        """The author of the writer's commits."""
        return self.settings.author

    @property
    def interval(self) -> int:
        """Completed assistant turns between runs."""
        return self.settings.interval

    @property
    def policy(self) -> PolicyName | PolicyFn:
        """The merge policy as given: ``auto``, ``review`` or a callable."""
        return self.settings.policy

    @property
    def enabled(self) -> bool:
        """False when every run is gated."""
        return self.settings.enabled

    @property
    def background(self) -> bool:
        """True when runs go to a worker thread."""
        return self.settings.background

    @property
    def traces(self) -> TraceSettings:
        """Where and which traces are written."""
        return self.settings.traces

    @property
    def extractor_model(self) -> str:
        """The extractor's model name (``none`` without one)."""
        return model_of(self.extractor)

    @property
    def policy_name(self) -> str:
        """``auto``, ``review`` or ``callable``."""
        return self.settings.policy_name

    def decide(self, record: dict[str, Any], actions: list[Action]) -> str:
        """What the policy says about a committed run: ``merge``, ``review`` or ``reject``."""
        return decide(self.settings.merge_policy, record, actions)

    def start_conversation(
        self,
        conversation_id: str,
        target: Sequence[str] | str,
        *,
        parent: str | None = None,
        excluded: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> Conversation:
        """Start (or get) a conversation feeding ``target``; ``parent`` marks a child/sub-agent conversation."""
        conversation = self.conversations.create(
            conversation_id, target, parent=parent, excluded=excluded, metadata=metadata
        )
        store = StateStore(self.mem.repo, conversation.target, actor=self.author)

        def register(state: WriterState) -> bool:
            if conversation_id in state.watermarks:
                return False
            state.watermarks[conversation_id] = Watermark()
            return True

        store.update(register, f"conversation {conversation_id} feeds the target")
        return conversation

    def append(
        self,
        conversation_id: str,
        role: str,
        text: str,
        *,
        message_id: str | None = None,
        status: Status = "completed",
        tool_calls: Sequence[Mapping[str, Any]] = (),
        name: str | None = None,
    ) -> Appended:
        """Append a turn; a completed assistant turn may make a run due (run in the background by default)."""
        header, turn = self.conversations.append(
            conversation_id, role, text, message_id=message_id, status=status, tool_calls=tool_calls, name=name
        )
        if not turn.counts:
            return Appended(turn, Decision("waiting", pending=self.lag(header.target)))
        return Appended(turn, self._schedule(header))

    def _skip(self, reason: str, target: str, conversation: str | None = None, pending: int = 0) -> Decision:
        log.info("writer skip: reason=%s target=%s conversation=%s pending=%d", reason, target, conversation, pending)
        self.metrics.skips.labels(reason=reason).inc()
        return Decision("skipped", reason, pending)

    def _gates(self, target: str, conversation: Conversation | None) -> Decision | None:
        cid = None if conversation is None else conversation.id
        if not self.enabled:
            return self._skip("disabled", target, cid)
        if conversation is not None and conversation.parent is not None:
            return self._skip("child_conversation", target, conversation.id)
        if conversation is not None and (conversation.excluded or conversation.id in self.settings.exclude):
            return self._skip("excluded_conversation", target, conversation.id)
        if not isinstance(self.interval, int) or isinstance(self.interval, bool) or not 1 <= self.interval <= 50:
            return self._skip("invalid_interval", target, cid)
        if self.extractor is None:
            return self._skip("no_model", target, cid)
        breaker = getattr(self.extractor, "breaker", None)  # a model endpoint known to be down
        if breaker is not None and breaker.state == "open":
            return self._skip("model_unavailable", target, cid)
        return None

    def _schedule(self, conversation: Conversation) -> Decision:
        gated = self._gates(conversation.target, conversation)
        if gated is not None:
            return gated
        if not self.background:
            return self._maybe_run(conversation.target, conversation.id, force=False)
        worker = self._worker
        with worker.lock:
            queued = worker.queued.get(conversation.target)
            if queued is not None and not queued.done():
                return Decision("queued", pending=self.lag(conversation.target))
            if worker.executor is None:
                worker.executor = ThreadPoolExecutor(1, thread_name_prefix="engram-writer")
            worker.queued[conversation.target] = worker.executor.submit(
                self._maybe_run, conversation.target, conversation.id, False
            )
        return Decision("queued")

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the runs queued in the background to finish."""
        with self._worker.lock:
            futures = list(self._worker.queued.values())
        for future in futures:
            future.result(timeout)

    def close(self) -> None:
        """Finish queued background runs and stop the worker thread."""
        self.wait()
        with self._worker.lock:
            executor, self._worker.executor = self._worker.executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    def run_now(self, target: Sequence[str] | str) -> Decision:
        """Run on ``target`` now whatever the interval (gates still apply; ``nothing_new`` without new turns)."""
        tid = target_id(target)
        gated = self._gates(tid, None)
        return gated if gated is not None else self._maybe_run(tid, None, force=True)

    def _eligible(self, conversation: Conversation | None) -> bool:
        return (
            conversation is not None
            and conversation.parent is None
            and not conversation.excluded
            and (conversation.id not in self.settings.exclude)
        )

    def _pending(self, state: WriterState) -> tuple[int, int, dict[str, Conversation]]:
        """(completed assistant turns, all turns) after the watermarks, and the eligible conversations."""
        assistant = turns = 0
        eligible: dict[str, Conversation] = {}
        for cid, mark in state.watermarks.items():
            header = self.conversations.get(cid)
            if header is None or not self._eligible(header):
                continue
            eligible[cid] = header
            assistant += max(0, header.assistant_turns - mark.assistant_turns)
            turns += max(0, header.turns - mark.seq)
        return assistant, turns, eligible

    def lag(self, target: Sequence[str] | str) -> int:
        """Completed assistant turns of ``target`` not processed yet."""
        tid = target_id(target)
        _, state = StateStore(self.mem.repo, tid, actor=self.author).load()
        pending = self._pending(state)[0]
        self.metrics.lag.labels(target=tid).set(pending)
        return pending

    def _maybe_run(self, tid: str, conversation: str | None, force: bool) -> Decision:
        store = StateStore(self.mem.repo, tid, actor=self.author)
        _, state = store.load()
        now = now_ms()
        pending, new_turns, _ = self._pending(state)
        self.metrics.lag.labels(target=tid).set(pending)
        stale = state.lease is not None and state.lease.expired(now)
        if state.lease is not None and not stale:
            return self._skip("in_flight", tid, conversation, pending)
        if not stale and not force and pending < self.interval:
            log.debug("writer: target=%s not due (%d of %d turns)", tid, pending, self.interval)
            return Decision("waiting", pending=pending)
        if not stale and new_turns == 0:
            return self._skip("nothing_new", tid, conversation, pending)
        extractor = self.extractor
        if extractor is None:  # taken away since the gates ran
            return self._skip("no_model", tid, conversation, pending)
        run_id = new_run_id()
        lease = Lease(run_id, self.owner, now, now + self.settings.lease_ms)
        previous: list[Lease] = []

        def acquire(state: WriterState) -> bool:
            held = state.lease
            if held is not None and not held.expired(now_ms()):
                raise RunInFlightError(f"run {held.run_id} holds the lease on {tid}")
            previous[:] = [] if held is None else [held]
            state.lease = lease
            state.record({"id": run_id, "target": tid, "started_at": now, "outcome": "running"})
            return True

        try:
            state = store.update(acquire, f"run {run_id}: start")
        except RunInFlightError:
            return self._skip("in_flight", tid, conversation, pending)
        log.info("writer run start: run=%s target=%s pending=%d", run_id, tid, pending)
        if previous:
            state = recover(self.mem, self.settings, extractor, self.metrics, store, previous[0], lease)
        plan = self._plan(run_id, tid, state)
        record = Run(self.mem, self.settings, extractor, self.metrics, plan, store, lease, now).execute()
        return Decision("ran", pending=pending, run=record)

    def _plan(self, run_id: str, tid: str, state: WriterState) -> Plan:
        plan = Plan(run_id, _namespace(tid), tid)
        for cid, mark in sorted(state.watermarks.items()):
            header = self.conversations.get(cid)
            if header is None or not self._eligible(header) or header.turns <= mark.seq:
                continue
            new = self.conversations.turns(cid, mark.seq + 1, header.turns)
            context_turns = self.settings.context_turns
            context = self.conversations.turns(cid, mark.seq - context_turns + 1, mark.seq)
            last = new[-1]
            counted = mark.assistant_turns + sum(1 for t in new if t.counts)
            plan.batches.append(Batch(cid, new, context if context_turns else [],
                                      Watermark(last.seq, last.message_id, counted)))  # fmt: skip
        return plan

    def observe(self, record: dict[str, Any]) -> None:
        """Count a finished run in the metrics and log it (metadata only)."""
        observe_run(self.metrics, record)

    def memory_notes(
        self, target: tuple[str, ...], query: str, budget_tokens: int, workspace: Workspace | None = None
    ) -> list[MemoryNote]:
        """The target's memories most relevant to ``query`` within ``budget_tokens``, in a stable order."""
        return memory_notes(self.mem, target, query, budget_tokens, workspace)

    def memories_for(self, target: Sequence[str] | str, query: str, budget_tokens: int = 1000) -> list[MemoryNote]:
        """The memories of ``target`` most relevant to ``query`` that fit ``budget_tokens``, ordered by key (stable,
        so a prompt built from them keeps its cache): what an app puts in its prompt."""
        return self.memory_notes(_namespace(target), query, budget_tokens)

    def status(self, target: Sequence[str] | str) -> dict[str, Any]:
        """The target's scheduling state: settings, lag, lease, watermarks and the last run."""
        tid = target_id(target)
        _, state = StateStore(self.mem.repo, tid, actor=self.author).load()
        pending, turns, _ = self._pending(state)
        return {
            "target": tid, "enabled": self.enabled, "interval": self.interval, "policy": self.policy_name,
            "model": self.extractor_model, "pending_turns": pending, "pending_messages": turns,
            "in_flight": None if state.lease is None else state.lease.dict() | {
                "expired": state.lease.expired(now_ms())},
            "watermarks": {cid: w.dict() for cid, w in sorted(state.watermarks.items())},
            "last_run": state.last_run,
        }  # fmt: skip

    def runs(self, target: Sequence[str] | str, limit: int = 20) -> list[dict[str, Any]]:
        """The target's last runs, newest first."""
        _, state = StateStore(self.mem.repo, target_id(target), actor=self.author).load()
        return list(reversed(state.runs))[: max(0, limit)]

    def run(self, target: Sequence[str] | str, run_id: str) -> dict[str, Any]:
        """One run's record (:class:`NotFoundError` when unknown)."""
        _, state = StateStore(self.mem.repo, target_id(target), actor=self.author).load()
        found = state.find(run_id)
        if found is None:
            raise NotFoundError(f"no run {run_id!r} on {target_id(target)!r}")
        return found

    def _review(self, target: Sequence[str] | str, run_id: str, verdict: str, strategy: Any = "fail") -> dict[str, Any]:
        tid = target_id(target)
        record = dict(self.run(tid, run_id))
        branch = branch_name(tid, run_id)
        if record.get("review") != "pending" or self.mem.repo.refs.get(HEADS + branch) is None:
            raise InvalidInputError(f"run {run_id} has no review pending (review: {record.get('review')})")
        if verdict == "approved":
            merged = self.mem.merge(branch, strategy=strategy, author=self.author,
                                    message=f"writer: approve run {run_id} into {self.mem.branch}")  # fmt: skip
            record["merge"] = merged.id.hex()
        self.mem.repo.delete_branch(branch, self.author)
        record["review"], record["reviewed_at"] = verdict, now_ms()

        def change(state: WriterState) -> bool:
            state.record(record | {"review": verdict})
            return True

        StateStore(self.mem.repo, tid, actor=self.author).update(change, f"run {run_id}: {verdict}")
        log.info("writer review: run=%s target=%s verdict=%s", run_id, tid, verdict)
        return record

    def approve(self, target: Sequence[str] | str, run_id: str, *, strategy: Any = "fail") -> dict[str, Any]:
        """Merge a run's review branch (merge ``strategy`` as :meth:`Memory.merge`) and delete the branch."""
        return self._review(target, run_id, "approved", strategy)

    def reject(self, target: Sequence[str] | str, run_id: str) -> dict[str, Any]:
        """Drop a run's review branch (its turns stay processed: nothing is extracted from them again)."""
        return self._review(target, run_id, "rejected")


class AsyncMemoryWriter:
    """The async facade of :class:`MemoryWriter`: the same calls, ``a``-prefixed, run on worker threads."""

    def __init__(self, writer: MemoryWriter) -> None:
        self.writer = writer

    async def astart_conversation(self, conversation_id: str, target: Sequence[str] | str, **kw: Any) -> Conversation:
        """See :meth:`MemoryWriter.start_conversation`."""
        return await asyncio.to_thread(self.writer.start_conversation, conversation_id, target, **kw)

    async def aappend(self, conversation_id: str, role: str, text: str, **kw: Any) -> Appended:
        """See :meth:`MemoryWriter.append`."""
        return await asyncio.to_thread(self.writer.append, conversation_id, role, text, **kw)

    async def arun_now(self, target: Sequence[str] | str) -> Decision:
        """See :meth:`MemoryWriter.run_now`."""
        return await asyncio.to_thread(self.writer.run_now, target)

    async def astatus(self, target: Sequence[str] | str) -> dict[str, Any]:
        """See :meth:`MemoryWriter.status`."""
        return await asyncio.to_thread(self.writer.status, target)

    async def aruns(self, target: Sequence[str] | str, limit: int = 20) -> list[dict[str, Any]]:
        """See :meth:`MemoryWriter.runs`."""
        return await asyncio.to_thread(self.writer.runs, target, limit)

    async def aapprove(self, target: Sequence[str] | str, run_id: str) -> dict[str, Any]:
        """See :meth:`MemoryWriter.approve`."""
        return await asyncio.to_thread(self.writer.approve, target, run_id)

    async def areject(self, target: Sequence[str] | str, run_id: str) -> dict[str, Any]:
        """See :meth:`MemoryWriter.reject`."""
        return await asyncio.to_thread(self.writer.reject, target, run_id)

    async def amemories_for(
        self, target: Sequence[str] | str, query: str, budget_tokens: int = 1000
    ) -> list[MemoryNote]:
        """See :meth:`MemoryWriter.memories_for`."""
        return await asyncio.to_thread(self.writer.memories_for, target, query, budget_tokens)
