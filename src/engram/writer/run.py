"""One run of the memory writer, from planned turns to a commit on a review branch and its merge policy.

The run holds its target's lease (see :mod:`engram.writer.state`) and renews it while it works. Its steps:
read the new turns of each conversation (after the watermark, plus a window of earlier turns for context),
cut them into chunks that fit the token budget (a chunk is a step; nothing is dropped), give each step the
target's relevant memories, let the extractor act on a workspace, commit every action as **one commit** on
``writer/<target>/<run id>`` (metadata: run id, model, conversations and watermark range), then apply the
merge policy. The watermark moves only when the run's result is safely committed.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from engram.clock import now_ms
from engram.errors import EngramError, MergeConflictError, StaleMemoryError, WriterError
from engram.repo import HEADS
from engram.store import Memory
from engram.writer.conversations import Turn
from engram.writer.events import Listeners
from engram.writer.extract import (
    Action,
    Extractor,
    ExtractRequest,
    Step,
    Workspace,
    chunk_turns,
    memory_notes,
    model_of,
    render_prompt,
    tokens,
)
from engram.writer.metrics import FAILURES, WriterMetrics, dead_lettered, observe_run
from engram.writer.redact import redact
from engram.writer.settings import WriterSettings, decide
from engram.writer.state import Lease, StateStore, Watermark, WriterState, slug
from engram.writer.traces import TraceSettings, write_trace

log = logging.getLogger("engram.writer")

#: Outcomes that leave a trace (failures); successes are traced only when asked.
FAILED = FAILURES
OUTCOMES = ("merged", "review", "rejected", "no_new_memories", "recovered", *sorted(FAILED))


class LeaseLostError(EngramError):
    """The run's lease expired and another process took the target over: this run must not publish."""


@dataclass(slots=True)
class Batch:
    """The turns one conversation contributes to a run."""

    conversation_id: str
    new: list[Turn]
    context: list[Turn]
    after: Watermark
    before: Watermark = field(default_factory=Watermark)

    def range(self) -> dict[str, Any]:
        """The watermark range, as recorded in the commit metadata."""
        return {"from": self.new[0].seq if self.new else self.after.seq, "to": self.after.seq,
                "first_message": self.new[0].message_id if self.new else None,
                "last_message": self.after.message_id, "assistant_turns": self.after.assistant_turns}  # fmt: skip


@dataclass(slots=True)
class Plan:
    """What a run will process."""

    run_id: str
    target: tuple[str, ...]
    target_id: str
    batches: list[Batch] = field(default_factory=list)
    #: Turns left pending by a cost cap, and which cap (``max_input_chars`` or ``max_model_calls``).
    left: int = 0
    left_reason: str | None = None
    #: Message ids of turns longer than ``max_input_chars``, of which only the start was read.
    cut: list[str] = field(default_factory=list)
    #: The run still waiting for review that this run builds on (its branch starts at that run's head).
    stack_on: str | None = None

    def keep(self, done: set[tuple[str, int]], reason: str) -> None:
        """Keep only the turns in ``done`` (conversation id, seq), up to the first one not done in each
        conversation: the rest stays pending (the watermark moves only past what was processed)."""
        kept: list[Batch] = []
        for batch in self.batches:
            prefix: list[Turn] = []
            for turn in batch.new:
                if (batch.conversation_id, turn.seq) not in done:
                    break
                prefix.append(turn)
            if len(prefix) < len(batch.new):
                self.left += len(batch.new) - len(prefix)
                self.left_reason = reason
            if prefix:
                counted = batch.before.assistant_turns + sum(1 for t in prefix if t.counts)
                kept.append(Batch(batch.conversation_id, prefix, batch.context,
                                  Watermark(prefix[-1].seq, prefix[-1].message_id, counted), batch.before))  # fmt: skip
        self.batches = kept

    @property
    def turns(self) -> list[Turn]:
        """Every new turn, conversation by conversation."""
        return [t for b in self.batches for t in b.new]

    @property
    def context(self) -> list[Turn]:
        """Every context turn."""
        return [t for b in self.batches for t in b.context]


def cut_turn(turn: Turn, limit: int) -> Turn:
    """``turn`` with its text cut to at most ``limit`` characters at a word boundary, saying how much was left."""
    head = turn.text[:limit]
    if len(turn.text) > limit and not turn.text[limit].isspace() and any(c.isspace() for c in head):
        head = head[: max(i for i, c in enumerate(head) if c.isspace())]
    head = head.rstrip()
    return replace(turn, text=f"{head} [... {len(turn.text) - len(head)} more characters not read]")


def branch_name(target_id: str, run_id: str) -> str:
    """The review branch of a run: ``writer/<target>/<run id>``."""
    return f"writer/{slug(target_id)}/{run_id}"


def review_target(branch: str) -> str | None:
    """The target slug of a review branch (``writer/<target slug>/<run id>``); None for any other branch."""
    parts = branch.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == "writer" and parts[1] != "state" else None


class Heartbeat:
    """Renews a run's lease every third of its time to live, and notices when it was lost."""

    def __init__(self, store: StateStore, lease: Lease, ttl_ms: int) -> None:
        self.store, self.lease, self.ttl_ms = store, lease, ttl_ms
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engram-writer-lease", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                self.renew()
            except LeaseLostError:
                self.lost = True
                return
            except EngramError:  # the store hiccuped: try again at the next beat; expiry is the backstop
                continue

    def renew(self) -> None:
        """Extend the lease now; raise :class:`LeaseLostError` when it is no longer ours."""

        def extend(state: WriterState) -> bool:
            held = state.lease
            if held is None or held.run_id != self.lease.run_id or held.owner != self.lease.owner:
                raise LeaseLostError(f"run {self.lease.run_id} lost its lease on {self.store.target}")
            state.lease = Lease(held.run_id, held.owner, held.acquired_at, now_ms() + self.ttl_ms)
            return True

        self.store.update(extend, f"renew lease of run {self.lease.run_id}")

    def confirm(self) -> None:
        """Make sure the lease is ours for at least half its time to live (enough to publish a run): a read when
        it is (nobody may take a lease before it expires), a renewal when it is not; raise
        :class:`LeaseLostError` when it is no longer ours."""
        _, state = self.store.load()
        ours(self.lease)(state)
        held = state.lease
        if held is None or held.expires_at - now_ms() < self.ttl_ms / 2:
            self.renew()


def ours(lease: Lease) -> Callable[[WriterState], None]:
    """A check that the state's lease is still ``lease`` (raises :class:`LeaseLostError` otherwise)."""

    def check(state: WriterState) -> None:
        held = state.lease
        if held is None or held.run_id != lease.run_id or held.owner != lease.owner:
            raise LeaseLostError(f"run {lease.run_id} lost its lease")

    return check


class Run:
    """Executes one planned run of the memory writer (see the module docstring): on ``memory`` (a handle on the
    memories' branch), with ``settings``, ``extractor`` and ``metrics``, holding ``lease`` in ``store``."""

    def __init__(
        self, memory: Memory, settings: WriterSettings, extractor: Extractor, metrics: WriterMetrics, plan: Plan,
        store: StateStore, lease: Lease, started_at: int, events: Listeners | None = None,
    ) -> None:  # fmt: skip
        self.mem = memory
        self.events = events if events is not None else Listeners()
        self.settings = settings
        self.extractor = extractor
        self.metrics = metrics
        self.plan = plan
        self.store = store
        self.lease = lease
        self.started_at = started_at
        self.clock = time.perf_counter()
        self.steps: list[Step] = []
        self.actions: list[Action] = []
        self.model_ms = 0.0
        self.record: dict[str, Any] = {
            "id": plan.run_id, "target": plan.target_id, "started_at": started_at, "model": model_of(extractor),
            "conversations": {b.conversation_id: b.range() for b in plan.batches}, "policy": settings.policy_name,
        }  # fmt: skip

    def _extract(self, workspace: Workspace) -> None:
        settings, plan = self.settings, self.plan
        chunks = chunk_turns([t.redacted() for t in plan.turns], settings.turn_budget_tokens)  # what a model sees
        context = [t.redacted() for t in plan.context]
        for index, chunk in enumerate(chunks):
            if sum(len(s.model_calls) for s in self.steps) >= settings.max_model_calls:
                waiting = {(t.conversation_id, t.seq) for later in chunks[index:] for t in later}
                plan.keep({(t.conversation_id, t.seq) for t in plan.turns} - waiting, "max_model_calls")
                log.warning("writer run %s: stopped after %d model calls (max_model_calls); %d turns stay pending",
                            plan.run_id, settings.max_model_calls, plan.left)  # fmt: skip
                break
            query = " ".join(t.text for t in chunk)[:2000]
            memories = memory_notes(self.mem, plan.target, query, settings.memory_budget_tokens, workspace)
            prompt = render_prompt(plan.target, memories, context, chunk, settings.instructions, index, len(chunks))
            request = ExtractRequest(plan.target, tuple(chunk), tuple(context), tuple(memories),
                                     settings.instructions, prompt, index, len(chunks))  # fmt: skip
            step = Step(index, prompt)
            self.steps.append(step)
            self.events.emit("extracting", self.record | {"step": index})
            workspace.step = step
            workspace.allowed_sources = request.message_ids
            started = time.perf_counter()
            try:
                self.extractor.extract(request, workspace)
            except Exception as exc:
                step.error = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                step.duration_ms = (time.perf_counter() - started) * 1000
                self.model_ms += sum(float(c.get("duration_ms", 0.0)) for c in step.model_calls)
            context = (context + chunk)[-settings.context_turns :] if settings.context_turns else []

    def _attempt(self, heartbeat: Heartbeat) -> tuple[str, str | None, str | None]:
        """One attempt: extract, commit on the review branch, apply the policy; returns (outcome, commit, merge).

        Under the ``auto`` policy the review branch would be merged the moment it is made, so the run's commit
        goes straight onto the writer's branch instead (a strict transaction: a memory changed there meanwhile
        is a conflict, retried on the new head, exactly as a failed merge is): one ref change instead of four
        (create, commit, merge, delete), and the commit is both the run's and its merge."""
        settings, plan = self.settings, self.plan
        mem, repo, author = self.mem, self.mem.repo, settings.author
        branch = branch_name(plan.target_id, plan.run_id)
        direct = settings.direct
        if direct:
            handle = mem.handle(mem.branch, author=author)
        else:
            if repo.refs.get(HEADS + branch) is not None:
                repo.delete_branch(branch, author)
            base = None if plan.stack_on is None else repo.refs.get(HEADS + branch_name(plan.target_id, plan.stack_on))
            if base is None:
                mem.create_branch(branch)
            else:
                mem.check_writable()
                repo.create_branch(branch, base, author)
            handle = mem.handle(branch, author=author)
            self.record["stacked_on"] = plan.stack_on if base is not None else None
        reader = handle if self.record.get("stacked_on") else mem  # a stacked run sees the reviews it builds on
        self.steps, self.model_ms = [], 0.0
        counter = iter(range(1, 1_000_000))

        def new_key() -> str:
            return f"m-{plan.run_id}-{next(counter)}-{secrets.token_hex(2)}"

        def search(query: str, limit: int) -> list[Any]:
            # a lookup by content: a date in the model's query must not filter out the memory it should update
            return list(reader.search(plan.target, query or None, limit=limit, refresh_ttl=False,
                                      when="off" if query else None))  # fmt: skip

        with handle.transaction("writer run", author=author) as tx:
            workspace = Workspace(tx, plan.target, search, run_id=plan.run_id, new_key=new_key)
            self._extract(workspace)
            self.actions = workspace.actions
            counts = {op: sum(1 for a in self.actions if a.op == op) for op in ("add", "update", "delete")}
            tx.message = (
                f"writer: {counts['add']} added, {counts['update']} updated, {counts['delete']} deleted "
                f"for {plan.target_id} (run {plan.run_id})"
            )
            tx.metadata = {"writer": {
                "run": plan.run_id, "target": plan.target_id, "model": model_of(self.extractor),
                "conversations": {b.conversation_id: b.range() for b in plan.batches},
                "messages": list(dict.fromkeys(s for a in self.actions for s in a.sources)),
            }}  # fmt: skip
            if direct and tx.edits:
                heartbeat.confirm()  # publish only while the target is still ours
        if tx.commit is None:
            if not direct:
                repo.delete_branch(branch, author)
            return "no_new_memories", None, None
        commit = tx.commit.id.hex()
        self.events.emit("committed", self.record | {"commit": commit})
        if direct:
            self.events.emit("merged", self.record | {"commit": commit, "merge": commit})
            return "merged", commit, commit
        decision = decide(settings.merge_policy, self.record | {"branch": branch, "commit": commit}, self.actions)
        if decision == "review":
            return "review", commit, None
        if decision == "reject":
            repo.delete_branch(branch, author)
            return "rejected", commit, None
        heartbeat.confirm()  # publish only while the target is still ours
        merged = mem.merge(branch, strategy="fail", author=author,
                           message=f"writer: merge run {plan.run_id} into {mem.branch}")  # fmt: skip
        self.events.emit("merged", self.record | {"commit": commit, "merge": merged.id.hex()})
        repo.delete_branch(branch, author)
        return "merged", commit, merged.id.hex()

    def execute(self) -> dict[str, Any]:
        """Run to an outcome, record it in the state (moving the watermark on success), trace a failure."""
        settings, plan = self.settings, self.plan
        outcome, error = "error", None
        commit = merge = None
        with Heartbeat(self.store, self.lease, settings.lease_ms) as heartbeat:
            for attempt in range(1, settings.merge_attempts + 1):
                try:
                    outcome, commit, merge = self._attempt(heartbeat)
                    error = None
                    break
                except MergeConflictError as exc:  # main changed the same memories: retry on the new head
                    outcome, error = "conflict", f"{type(exc).__name__}: {exc}"
                    log.info("writer run %s: merge conflict on attempt %d, retrying on the new head",
                             plan.run_id, attempt)  # fmt: skip
                    self._drop_branch()
                except LeaseLostError as exc:
                    outcome, error = "lease_lost", str(exc)
                    break
                except WriterError as exc:
                    outcome, error = exc.outcome, f"{type(exc).__name__}: {exc}"
                    self._drop_branch()
                    break
                except StaleMemoryError as exc:
                    outcome, error = "policy_violation", f"{type(exc).__name__}: {exc}"
                    self._drop_branch()
                    break
                except Exception as exc:
                    outcome, error = "error", f"{type(exc).__name__}: {exc}"
                    self._drop_branch()
                    log.exception("writer run %s failed", plan.run_id)
                    break
            if heartbeat.lost and outcome not in FAILED:
                outcome, error = "lease_lost", "the lease expired during the run"
        duration_ms = (time.perf_counter() - self.clock) * 1000
        # what the run's commit holds: a run that committed nothing (a failure before its commit) published nothing,
        # whatever its extractor attempted
        done = self.actions if commit is not None else []
        counts = {op: sum(1 for a in done if a.op == op) for op in ("add", "update", "delete")}
        error = error and redact(error)  # status, runs and logs show it
        self.record.update({
            "conversations": {b.conversation_id: b.range() for b in plan.batches},
            "left": {"turns": plan.left, "reason": plan.left_reason, "cut": plan.cut}
            if plan.left or plan.cut else None,
            "completed_at": now_ms(), "duration_ms": round(duration_ms, 3), "model_ms": round(self.model_ms, 3),
            "outcome": outcome, "error": error, "steps": len(self.steps), "actions": sum(counts.values()),
            "attempted": len(self.actions),
            "added": counts["add"], "updated": counts["update"], "deleted": counts["delete"],
            "branch": branch_name(plan.target_id, plan.run_id) if outcome == "review" else None,
            "commit": commit, "merge": merge, "review": "pending" if outcome == "review" else None, "trace": None,
        })  # fmt: skip
        traces = settings.traces
        if outcome in FAILED or traces.successes:
            self.record["trace"] = self._trace(traces, outcome, error, duration_ms)
        if outcome != "lease_lost":
            self._finish(outcome)
        observe_run(self.metrics, self.record)
        self.events.emit("finished", self.record)
        return self.record

    def _drop_branch(self) -> None:
        repo, name = self.mem.repo, branch_name(self.plan.target_id, self.plan.run_id)
        try:
            if repo.refs.get(HEADS + name) is not None:
                repo.delete_branch(name, self.settings.author)
        except EngramError:
            log.warning("writer run %s: could not delete its branch", self.plan.run_id)

    def _finish(self, outcome: str) -> None:
        check, plan, record = ours(self.lease), self.plan, self.record
        advance = outcome not in FAILED

        settings = self.settings
        letter: list[dict[str, Any]] = []

        def change(state: WriterState) -> bool:
            check(state)
            letter.clear()
            if advance:
                for batch in plan.batches:
                    state.watermarks[batch.conversation_id] = batch.after
                state.failures = 0
            else:
                state.failures += 1
                if state.failures >= settings.max_failures and state.dead_letter is None:
                    state.dead_letter = {"run": plan.run_id, "outcome": outcome, "error": record.get("error"),
                                         "failures": state.failures, "since": now_ms()}  # fmt: skip
                    letter.append(state.dead_letter)
            state.settings = settings.summary(self.extractor)
            state.lease = None
            state.record(record)
            return True

        try:
            self.store.update(change, f"run {plan.run_id}: {outcome}")
        except LeaseLostError as exc:
            record["outcome"], record["error"] = "lease_lost", str(exc)
            return
        if letter:
            dead_lettered(self.metrics, plan.target_id, letter[0])
            self.events.emit("dead_lettered", record | {"dead_letter": letter[0]})

    def _trace(self, traces: TraceSettings, outcome: str, error: str | None, duration_ms: float) -> str | None:
        trace = {
            "run": self.plan.run_id, "target": self.plan.target_id, "model": model_of(self.extractor),
            "system": getattr(self.extractor, "system", None),
            "outcome": outcome, "error": error, "started_at": self.started_at, "duration_ms": round(duration_ms, 3),
            "conversations": self.record["conversations"], "steps": [s.dict() for s in self.steps],
            "actions": [a.dict() for a in self.actions], "prompt_tokens": sum(tokens(s.prompt) for s in self.steps),
        }  # fmt: skip
        try:
            return write_trace(traces, trace)
        except (OSError, EngramError) as exc:
            log.warning("writer run %s: could not write its trace (%s)", self.plan.run_id, type(exc).__name__)
            return None
