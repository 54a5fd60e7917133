"""The writer's persisted state per target, and the lease that keeps one run in flight per target.

The state of a target lives in the store itself: the ref ``writer/state/<target>`` points at a commit object
(an empty tree) whose metadata holds the state as JSON, under a schema version. Every change is one
compare-and-swap of that ref, so it works wherever refs do: one process, many processes on one SQLite
file, many servers on one PostgreSQL. The ref's reflog is the state's history.

The state holds, per conversation feeding the target, a **watermark** (the last turn processed), the
**lease** of the run in flight (run id, owner, expiry; renewed while the run works) and the last runs.
A run that started and never finished leaves its lease behind: once the lease expires (or its owner
process is gone, on the same host), the next turn is due and the new run recovers it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram.clock import now_ms
from engram.errors import ConfigError, InvalidInputError, StorageError
from engram.hashing import ChunkId
from engram.repo import Repository
from engram.tree import empty_tree

#: The state format; a store written by a newer engram is refused, an older one is upgraded on read.
SCHEMA = 1
STATE_REF = "writer/state/"
#: Run records kept in the state (older ones remain in the ref's reflog).
MAX_RUNS = 100
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def target_namespace(target: Sequence[str] | str) -> tuple[str, ...]:
    """A target as a namespace: ``("users", "alice")`` or its dotted form ``"users.alice"``."""
    labels = tuple(target.split(".")) if isinstance(target, str) else tuple(target)
    if not labels or not all(isinstance(label, str) and label and "." not in label for label in labels):
        raise InvalidInputError(
            f"invalid writer target {target!r}: give a namespace such as ('users', 'alice') or 'users.alice'"
        )
    return labels


def target_id(target: Sequence[str] | str) -> str:
    """The dotted name of a target (``users.alice``): labels never contain a period, so it is unambiguous."""
    return ".".join(target_namespace(target))


def slug(target: str) -> str:
    """A target id made safe for ref and branch names: labels joined by '.', other characters as ``_xx``."""
    labels = target.split(".")
    return ".".join("".join(ch if ch in _SAFE and ch != "_" else f"_{ord(ch):02x}" for ch in lab) for lab in labels)


def new_run_id() -> str:
    """A sortable, unique run id: UTC time to the millisecond plus random hex (``20260101T120000123-9f2c1a``)."""
    ms = now_ms()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(ms / 1000)) + f"{ms % 1000:03d}"
    return f"{stamp}-{secrets.token_hex(3)}"


def process_owner() -> str:
    """This process's lease owner name: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to run on a target until ``expires_at`` (UTC ms), held by ``owner`` for run ``run_id``."""

    run_id: str
    owner: str
    acquired_at: int
    expires_at: int

    def expired(self, now: int) -> bool:
        """True once the lease ran out, or its owner process is gone (only knowable on the same host)."""
        return now >= self.expires_at or not _owner_alive(self.owner)

    def dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"run": self.run_id, "owner": self.owner, "acquired_at": self.acquired_at, "expires_at": self.expires_at}


def _owner_alive(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
        return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    return True


@dataclass(frozen=True, slots=True)
class Watermark:
    """How far the writer got in one conversation: the last turn processed (``seq`` 0: none yet), its message
    id, and how many completed assistant turns the conversation had up to there."""

    seq: int = 0
    message_id: str | None = None
    assistant_turns: int = 0

    def dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"seq": self.seq, "message_id": self.message_id, "assistant_turns": self.assistant_turns}


@dataclass(slots=True)
class WriterState:
    """The persisted state of one target (see the module docstring).

    Attributes:
        target: the target's dotted id.
        watermarks: conversation id -> :class:`Watermark`; also the list of conversations feeding the target.
        lease: the run in flight, or None.
        runs: the last run records (dicts, newest last, at most :data:`MAX_RUNS`).
        failures: failed runs in a row (a success resets it).
        dead_letter: set once ``failures`` reached the writer's ``max_failures``: the target's automatic runs
            stop (its turns stay pending, nothing is skipped) until :meth:`~engram.writer.MemoryWriter.retry`.
            A dict: ``run`` (the last failed run), ``outcome``, ``error``, ``failures``, ``since`` (UTC ms).
        settings: the writer settings the last run used (see :meth:`~engram.writer.WriterSettings.summary`).
    """

    target: str
    watermarks: dict[str, Watermark] = field(default_factory=dict)
    lease: Lease | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    failures: int = 0
    dead_letter: dict[str, Any] | None = None
    settings: dict[str, Any] | None = None

    @property
    def last_run(self) -> dict[str, Any] | None:
        """The newest run record, or None."""
        return self.runs[-1] if self.runs else None

    def record(self, run: dict[str, Any]) -> None:
        """Add or replace (same ``id``) a run record, keeping the newest :data:`MAX_RUNS`."""
        self.runs = [r for r in self.runs if r.get("id") != run["id"]] + [run]
        del self.runs[:-MAX_RUNS]

    def find(self, run_id: str) -> dict[str, Any] | None:
        """The record of a run, or None."""
        return next((r for r in reversed(self.runs) if r.get("id") == run_id), None)

    def to_json(self) -> dict[str, Any]:
        """The JSON form, with its schema version."""
        return {
            "schema": SCHEMA,
            "target": self.target,
            "watermarks": {cid: w.dict() for cid, w in sorted(self.watermarks.items())},
            "lease": None if self.lease is None else self.lease.dict(),
            "runs": self.runs,
            "failures": self.failures,
            "dead_letter": self.dead_letter,
            "settings": self.settings,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WriterState:
        """Read a stored state; refuses a schema newer than this engram knows."""
        schema = data.get("schema")
        if not isinstance(schema, int) or schema > SCHEMA:
            raise ConfigError(f"writer state schema {schema!r} is newer than this engram reads ({SCHEMA}): upgrade")
        lease = data.get("lease")
        return cls(
            target=str(data["target"]),
            watermarks={
                cid: Watermark(int(w["seq"]), w.get("message_id"), int(w.get("assistant_turns", 0)))
                for cid, w in dict(data.get("watermarks") or {}).items()
            },
            lease=None
            if not lease
            else Lease(str(lease["run"]), str(lease["owner"]), int(lease["acquired_at"]), int(lease["expires_at"])),
            runs=list(data.get("runs") or []),
            failures=int(data.get("failures") or 0),
            dead_letter=data.get("dead_letter") or None,
            settings=data.get("settings") or None,
        )


class StateStore:
    """Reads and changes one target's state by compare-and-swap on its ref (retrying lost races)."""

    def __init__(self, repo: Repository, target: str, *, actor: str = "writer") -> None:
        self.repo = repo
        self.target = target
        self.name = STATE_REF + slug(target)
        self.actor = actor
        self._empty: ChunkId | None = None
        self._lock = threading.Lock()

    def load(self) -> tuple[ChunkId | None, WriterState]:
        """The ref's value and the state it holds (a fresh state when the target never ran)."""
        cid = self.repo.refs.get(self.name)
        if cid is None:
            return None, WriterState(self.target)
        commit = self.repo.commit(cid)
        data = commit.metadata.get("writer_state")
        if not isinstance(data, dict):
            raise StorageError(f"ref {self.name} does not hold a writer state (commit {cid.hex()[:10]})")
        return cid, WriterState.from_json(data)

    def update(self, change: Callable[[WriterState], bool], reason: str, attempts: int = 100) -> WriterState:
        """Apply ``change`` (it edits the state in place and returns True to write, False to leave it) to the
        current state and store the result by compare-and-swap; on a lost race, reload and apply again."""
        for _ in range(attempts):
            old, state = self.load()
            if not change(state):
                return state
            if self._empty is None:
                self._empty = empty_tree(self.repo.nodes)
            commit = self.repo.write_commit(
                self._empty, (), self.actor, f"writer state: {reason}", {"writer_state": state.to_json()}
            )
            if self.repo.refs.set(self.name, commit.id, old, actor=self.actor, reason=reason):
                return state
        raise StorageError(f"writer state of {self.target!r}: lost {attempts} compare-and-swap races in a row")
