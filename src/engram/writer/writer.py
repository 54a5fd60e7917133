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
at DEBUG and counts it in ``engram_writer_skips_total{reason}``; a skip changes no state. Runs log their start
and end at INFO and failures at WARNING (logger ``engram.writer``).

Never silent: a failed run leaves its turns pending (the next run takes them again) and a trace; after
``max_failures`` failed runs in a row the target is **dead-lettered**: its automatic runs stop, its turns stay
pending, ``status()`` reports it and ``engram_writer_dead_lettered{target}`` is 1, until :meth:`MemoryWriter.retry`.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Self, Unpack

from engram.clock import now_ms
from engram.errors import NotFoundError, RunInFlightError
from engram.store import Memory
from engram.writer.conversations import Conversation, ConversationLog, Status, Turn
from engram.writer.events import Listener
from engram.writer.extract import Action, Extractor, MemoryNote, Workspace, memory_notes, model_of
from engram.writer.metrics import FAILURES, WriterMetrics, default_metrics, observe_run
from engram.writer.recovery import recover
from engram.writer.review import decide_review
from engram.writer.run import Batch, Plan, Run, cut_turn
from engram.writer.settings import PolicyFn, PolicyName, WriterOptions, WriterSettings, decide
from engram.writer.state import Lease, StateStore, Watermark, WriterState, new_run_id, process_owner, target_id
from engram.writer.state import target_namespace as _namespace
from engram.writer.traces import TraceSettings
from engram.writer.worker import Drained, Worker

log = logging.getLogger("engram.writer")

SKIP_REASONS = (
    "disabled", "child_conversation", "excluded_conversation", "no_model", "model_unavailable", "in_flight",
    "nothing_new", "dead_lettered",
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


def release(state: WriterState, lease: Lease) -> bool:
    """Drop ``lease`` from ``state`` when it is still the one held (a run that ends without running)."""
    held = state.lease
    if held is None or held.run_id != lease.run_id or held.owner != lease.owner:
        return False
    state.lease = None
    state.runs = [r for r in state.runs if r.get("id") != lease.run_id]  # it never ran: no record
    return True


class MemoryWriter:
    """Extracts memories from conversations every ``interval`` completed assistant turns (see the module docstring).

    ``MemoryWriter(mem, extractor=..., settings=WriterSettings(...))``, or the settings' fields as keyword arguments
    (``MemoryWriter(mem, interval=1, policy="review")``; given both, the keywords override ``settings``).

    Args:
        mem: the store (a handle on the branch memories are merged into, usually ``main``).
        extractor: an :class:`Extractor` (``OfflineExtractor()``, ``OpenAIExtractor(...)``); None gates every run.
        metrics: where the Prometheus metrics go (default: prometheus-client's default registry).
        settings: a :class:`WriterSettings`; its fields, also accepted as keyword arguments, are:
        interval: completed assistant turns between runs (1..50; another value is refused).
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
        max_failures: failed runs in a row after which the target is dead-lettered (see :meth:`retry`).
        max_model_calls / max_input_chars: a run's cost cap: model calls, and characters of new turns read; what a
            run could not take stays pending for the next run (and a longer turn is read up to the cap).
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
        self._worker: Worker[Decision] = Worker()

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

    def on_event(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event, run record)`` as runs progress (see :mod:`engram.writer.events`); returns a
        function that stops it. Every view of this writer (:meth:`for_caller`) shares the listeners."""
        return self._worker.listeners.add(listener)

    def _skip(self, reason: str, target: str, conversation: str | None = None, pending: int | None = None) -> Decision:
        if pending is None:
            pending = self._pending_of(target)
        log.debug("writer skip: reason=%s target=%s conversation=%s pending=%d", reason, target, conversation, pending)
        self.metrics.skips.labels(reason=reason).inc()
        return Decision("skipped", reason, pending)

    def _pending_of(self, tid: str) -> int:
        _, state = StateStore(self.mem.repo, tid, actor=self.author).load()
        return self._pending(state)[0]

    def _gates(self, target: str, conversation: Conversation | None) -> Decision | None:
        cid = None if conversation is None else conversation.id
        if not self.enabled:
            return self._skip("disabled", target, cid)
        if conversation is not None and conversation.parent is not None:
            return self._skip("child_conversation", target, conversation.id)
        if conversation is not None and (conversation.excluded or conversation.id in self.settings.exclude):
            return self._skip("excluded_conversation", target, conversation.id)
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
        tid = conversation.target
        if not self.background:
            return self._maybe_run(tid, conversation.id, force=False)
        _, state = StateStore(self.mem.repo, tid, actor=self.author).load()
        pending = self._pending(state)[0]
        self.metrics.lag.labels(target=tid).set(pending)
        crashed = state.lease is not None and state.lease.expired(now_ms())  # a run to recover is due at once
        if pending < self.interval and not crashed and not self._worker.busy(tid):
            return Decision("waiting", pending=pending)

        def job() -> tuple[Decision, bool]:
            decision = self._maybe_run(tid, conversation.id, force=False)
            ran = decision.run is not None and decision.run.get("outcome") not in FAILURES
            return decision, ran  # a successful run re-checks what became due meanwhile

        self._worker.submit(
            tid, job, lambda: self._worker.listeners.emit("queued", {"target": tid, "pending": pending})
        )
        return Decision("queued", pending=pending)

    def busy(self, target: Sequence[str] | str) -> bool:
        """True while ``target`` has a run queued or running in this writer's background worker."""
        return self._worker.busy(target_id(target))

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the runs queued in the background to finish (at most ``timeout`` seconds); True when they did."""
        return self._worker.wait(timeout)

    def close(self, timeout: float | None = 60.0) -> Drained:
        """Drain the background worker: wait for queued runs (at most ``timeout`` seconds), then stop its thread.
        Returns what happened (:class:`~engram.writer.worker.Drained`); a run still in flight after the timeout
        keeps its lease until it expires, and the next writer recovers it."""
        return self._worker.close(timeout)

    def retry(self, target: Sequence[str] | str) -> Decision:
        """Lift a dead letter (see the module docstring): reset the failure count and run on ``target`` now."""
        tid = target_id(target)
        self.mem.check_writable()

        def lift(state: WriterState) -> bool:
            if state.dead_letter is None and not state.failures:
                return False
            state.dead_letter, state.failures = None, 0
            return True

        StateStore(self.mem.repo, tid, actor=self.author).update(lift, "retry after dead letter")
        self.metrics.dead_lettered.labels(target=tid).set(0)
        log.info("writer retry: target=%s", tid)
        return self.run_now(tid)

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
        if state.dead_letter is not None and not stale:
            self.metrics.dead_lettered.labels(target=tid).set(1)
            return self._skip("dead_lettered", tid, conversation, pending)
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
        log.info("writer run start: run=%s target=%s pending_turns=%d pending_messages=%d", run_id, tid, pending,
                 new_turns)  # fmt: skip
        events = self._worker.listeners
        events.emit("started", {"id": run_id, "target": tid, "started_at": now, "pending": pending})
        if previous:
            state = recover(self.mem, self.settings, extractor, self.metrics, store, previous[0], lease)
            if state.dead_letter is not None:  # the crashed run was one too many: stop, keep the turns
                store.update(lambda s: release(s, lease), f"run {run_id}: dead-lettered, nothing run")
                return self._skip("dead_lettered", tid, conversation, pending)
        plan = self._plan(run_id, tid, state)
        record = Run(self.mem, self.settings, extractor, self.metrics, plan, store, lease, now, events).execute()
        self.lag(tid)  # the gauge follows status()["pending_turns"] after the run too
        return Decision("ran", pending=pending, run=record)

    def _plan(self, run_id: str, tid: str, state: WriterState) -> Plan:
        """The new turns after each watermark, oldest conversation first, within ``max_input_chars`` (the first
        turn is always taken, read up to the cap; the rest waits for the next run)."""
        plan = Plan(run_id, _namespace(tid), tid, stack_on=self._stack_on(tid, state))
        budget = self.settings.max_input_chars
        for cid, mark in sorted(state.watermarks.items()):
            header = self.conversations.get(cid)
            if header is None or not self._eligible(header) or header.turns <= mark.seq:
                continue
            new: list[Turn] = []
            for turn in self.conversations.turns(cid, mark.seq + 1, header.turns):
                if budget <= 0:
                    plan.left += 1
                    plan.left_reason = "max_input_chars"
                    continue
                if len(turn.text) > budget:
                    turn = cut_turn(turn, budget)
                    plan.cut.append(turn.message_id)
                budget -= len(turn.text)
                new.append(turn)
            if not new:
                continue
            context_turns = self.settings.context_turns
            context = self.conversations.turns(cid, mark.seq - context_turns + 1, mark.seq)
            last = new[-1]
            counted = mark.assistant_turns + sum(1 for t in new if t.counts)
            plan.batches.append(Batch(cid, new, context if context_turns else [],
                                      Watermark(last.seq, last.message_id, counted), mark))  # fmt: skip
        return plan

    def _stack_on(self, tid: str, state: WriterState) -> str | None:
        """The newest run of ``tid`` still waiting for review, when runs are reviewed: a new run builds on it."""
        if self.settings.direct:
            return None
        pending = [r for r in state.runs if r.get("review") == "pending" and r.get("branch")]
        return str(pending[-1]["id"]) if pending else None

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
        self.metrics.lag.labels(target=tid).set(pending)
        return {
            "target": tid, "enabled": self.enabled, "interval": self.interval, "policy": self.policy_name,
            "model": self.extractor_model, "pending_turns": pending, "pending_messages": turns,
            "in_flight": None if state.lease is None else state.lease.dict() | {
                "expired": state.lease.expired(now_ms())},
            "queued": self.busy(tid),
            "failures": state.failures, "dead_letter": state.dead_letter,
            "settings": self.settings.summary(self.extractor), "last_run_settings": state.settings,
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

    def approve(self, target: Sequence[str] | str, run_id: str, *, strategy: Any = "fail") -> dict[str, Any]:
        """Merge a run's review branch (merge ``strategy`` as :meth:`Memory.merge`) and delete the branch; runs it
        was stacked on (see :mod:`engram.writer.review`) are approved with it."""
        return decide_review(self.mem, self.author, target_id(target), run_id, "approved", strategy)

    def reject(self, target: Sequence[str] | str, run_id: str) -> dict[str, Any]:
        """Drop a run's review branch (its turns stay processed: nothing is extracted from them again); a run that
        later runs are stacked on is refused until they are decided."""
        return decide_review(self.mem, self.author, target_id(target), run_id, "rejected")


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

    async def aretry(self, target: Sequence[str] | str) -> Decision:
        """See :meth:`MemoryWriter.retry`."""
        return await asyncio.to_thread(self.writer.retry, target)

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
