"""The memory writer's settings, and its merge policies as functions.

A :class:`WriterSettings` is frozen: a door builds one per tenant from its config and every run reads the same
values. A merge policy is a function ``(run record, actions) -> "merge" | "review" | "reject"`` (or True/False
for merge/reject); ``auto`` and ``review`` name the two built in (:func:`merge_every_run`, :func:`review_every_run`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from engram.errors import InvalidInputError
from engram.writer.extract import Action, Extractor, model_of
from engram.writer.traces import TraceSettings, check_folder, default_dir

PolicyName = Literal["auto", "review"]
#: A callable policy gets the run record (with ``branch`` and ``commit``) and its actions and returns ``"merge"``,
#: ``"review"`` or ``"reject"`` (or True/False for merge/reject).
PolicyFn = Callable[[dict[str, Any], list[Action]], "str | bool"]
Verdict = Literal["merge", "review", "reject"]


def merge_every_run(record: dict[str, Any], actions: list[Action]) -> Verdict:
    """The ``auto`` policy: merge every run at once."""
    return "merge"


def review_every_run(record: dict[str, Any], actions: list[Action]) -> Verdict:
    """The ``review`` policy: leave every run on its branch for a person or an agent to approve or reject."""
    return "review"


#: The valid intervals (completed assistant turns between runs).
INTERVALS = range(1, 51)

POLICIES: dict[str, PolicyFn] = {"auto": merge_every_run, "review": review_every_run}


def decide(policy: PolicyFn, record: dict[str, Any], actions: list[Action]) -> Verdict:
    """What ``policy`` says about a committed run: ``merge``, ``review`` or ``reject``."""
    answer = policy(dict(record), list(actions))
    if answer is True or answer == "merge":
        return "merge"
    if answer is False or answer == "reject":
        return "reject"
    if answer == "review":
        return "review"
    raise InvalidInputError(f"a writer policy returned {answer!r}: 'merge', 'review', 'reject', True or False")


@dataclass(frozen=True, slots=True)
class WriterSettings:
    """How a :class:`~engram.writer.MemoryWriter` schedules, runs and merges (see its docstring for each field).

    ``context_turns`` below 0 counts as 0 and ``merge_attempts`` below 1 as 1. An ``interval`` outside
    :data:`INTERVALS`, or a cap or ``max_failures`` below 1, is refused here (:class:`InvalidInputError`, naming
    the valid range): every door builds its settings through this class, so each refuses the same values. A
    ``trace_dir`` holding files engram did not write is refused here too
    (:class:`~engram.writer.traces.TraceFolderError`): engram prunes only its own folder."""

    interval: int = 2
    policy: PolicyName | PolicyFn = "auto"
    enabled: bool = True
    background: bool = True
    instructions: str | None = None
    memory_budget_tokens: int = 1500
    turn_budget_tokens: int = 3000
    context_turns: int = 4
    lease_seconds: float = 120.0
    trace_dir: str | Path | None = None
    trace_successes: bool = False
    trace_max_bytes: int = 256_000
    trace_max_count: int = 200
    trace_max_age_days: float = 14.0
    exclude: Collection[str] = frozenset()
    conversations_branch: str = "conversations"
    author: str = "writer"
    merge_attempts: int = 3
    max_failures: int = 3
    max_model_calls: int = 40
    max_input_chars: int = 100_000
    redact_turns: bool = False

    def __post_init__(self) -> None:
        if not (self.policy in POLICIES or callable(self.policy)):
            raise InvalidInputError(f"invalid policy {self.policy!r}: 'auto', 'review' or a callable")
        interval = self.interval
        if isinstance(interval, bool) or not isinstance(interval, int) or interval not in INTERVALS:
            raise InvalidInputError(
                f"invalid writer interval {interval!r}: a whole number of completed assistant turns from "
                f"{INTERVALS.start} to {INTERVALS.stop - 1}"
            )
        for name in ("max_failures", "max_model_calls", "max_input_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"invalid writer {name} {value!r}: a whole number of at least 1")
        object.__setattr__(self, "exclude", frozenset(self.exclude))
        object.__setattr__(self, "context_turns", max(0, self.context_turns))
        object.__setattr__(self, "merge_attempts", max(1, self.merge_attempts))
        if self.trace_dir is not None:
            check_folder(self.trace_dir)

    @property
    def merge_policy(self) -> PolicyFn:
        """The policy as a function (the built-in one ``auto`` or ``review`` names, or the callable given)."""
        return self.policy if callable(self.policy) else POLICIES[self.policy]

    @property
    def policy_name(self) -> str:
        """``auto``, ``review`` or ``callable``."""
        return self.policy if isinstance(self.policy, str) else "callable"

    @property
    def direct(self) -> bool:
        """True under ``auto``: a run commits straight onto the memories' branch (see
        :class:`~engram.writer.run.Run`)."""
        return self.policy == "auto"

    def summary(self, extractor: Extractor | None) -> dict[str, Any]:
        """What a run used, as the target's state records it (``status`` shows it): the extractor's model (and a
        model client's timeout and retries) and the settings that shape a run (not the trace folder: a server
        path is not shown to callers)."""
        client = {name: getattr(extractor, name) for name in ("timeout", "retries") if hasattr(extractor, name)}
        return client | {
            "model": model_of(extractor), "interval": self.interval, "policy": self.policy_name,
            "enabled": self.enabled, "background": self.background, "instructions": self.instructions,
            "context_turns": self.context_turns,
            "memory_budget_tokens": self.memory_budget_tokens, "turn_budget_tokens": self.turn_budget_tokens,
            "max_failures": self.max_failures, "max_model_calls": self.max_model_calls,
            "max_input_chars": self.max_input_chars, "merge_attempts": self.merge_attempts,
            "redact_turns": self.redact_turns,
        }  # fmt: skip

    @property
    def lease_ms(self) -> int:
        """How long a run's lease lasts without renewal, in milliseconds (at least 1)."""
        return max(1, int(self.lease_seconds * 1000))

    @property
    def traces(self) -> TraceSettings:
        """Where and which traces are written (``trace_dir`` defaults to :func:`~engram.writer.traces.default_dir`;
        the doors pass the store's own folder, :func:`~engram.writer.traces.store_dir`)."""
        directory = Path(self.trace_dir) if self.trace_dir is not None else default_dir()
        return TraceSettings(directory, self.trace_successes, self.trace_max_bytes, self.trace_max_count,
                             self.trace_max_age_days)  # fmt: skip


class WriterOptions(TypedDict, total=False):
    """:class:`WriterSettings`' fields as keyword arguments (``MemoryWriter(mem, interval=1, ...)``)."""

    interval: int
    policy: PolicyName | PolicyFn
    enabled: bool
    background: bool
    instructions: str | None
    memory_budget_tokens: int
    turn_budget_tokens: int
    context_turns: int
    lease_seconds: float
    trace_dir: str | Path | None
    trace_successes: bool
    trace_max_bytes: int
    trace_max_count: int
    trace_max_age_days: float
    exclude: Sequence[str]
    conversations_branch: str
    author: str
    merge_attempts: int
    max_failures: int
    max_model_calls: int
    max_input_chars: int
    redact_turns: bool
