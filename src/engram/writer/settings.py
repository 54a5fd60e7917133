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
from engram.writer.extract import Action
from engram.writer.traces import TraceSettings, default_dir

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

    ``context_turns`` below 0 counts as 0 and ``merge_attempts`` below 1 as 1; an ``interval`` outside 1..50 is
    kept as given (every run is then gated with ``invalid_interval``)."""

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
    redact_turns: bool = False

    def __post_init__(self) -> None:
        if not (self.policy in POLICIES or callable(self.policy)):
            raise InvalidInputError(f"invalid policy {self.policy!r}: 'auto', 'review' or a callable")
        object.__setattr__(self, "exclude", frozenset(self.exclude))
        object.__setattr__(self, "context_turns", max(0, self.context_turns))
        object.__setattr__(self, "merge_attempts", max(1, self.merge_attempts))

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

    @property
    def lease_ms(self) -> int:
        """How long a run's lease lasts without renewal, in milliseconds (at least 1)."""
        return max(1, int(self.lease_seconds * 1000))

    @property
    def traces(self) -> TraceSettings:
        """Where and which traces are written (``trace_dir`` defaults to :func:`~engram.writer.traces.default_dir`)."""
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
    redact_turns: bool
