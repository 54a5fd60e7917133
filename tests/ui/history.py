"""A long history, fast: one item per commit written through the repository (no search index on the way),
at times a simulated clock sets (for the timeline's tests and ``benchmarks/bench_ui.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engram import clock, codec
from engram.objects import Record, encode_record
from engram.store import Memory

AUTHORS = ("agent:chat", "agent:scheduler", "agent:personalization")
USERS = 50


def grow(mem: Memory, commits: int, *, step: timedelta = timedelta(minutes=1), start: datetime | None = None) -> None:
    """Add ``commits`` commits to ``mem``'s branch, ``step`` apart, ending before now: commit ``i`` changes key
    ``k<i % 200>`` of user ``u<i % USERS>`` (namespace ``users.u<n>``), by ``AUTHORS[i % 3]``."""
    first = start or datetime.now(UTC) - step * (commits + 1)
    repo, branch = mem.repo, mem.branch
    with clock.simulated(first) as sim:
        for i in range(commits):
            sim.set(first + step * i)
            now = clock.now_ms()
            record = Record({"text": f"memory {i}", "n": i}, now, now, author=AUTHORS[i % 3], sources=(f"msg-{i}",))
            raw = codec.encode_key(("users", f"u{i % USERS}"), f"k{i % 200}")
            repo.commit_edits(branch, {raw: encode_record(record)}, author=AUTHORS[i % 3], message=f"write {i}")
