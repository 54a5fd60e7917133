"""The background worker: turns that arrive during a slow run are processed after it (a finished run re-checks
what is due), close() drains within a timeout it reports, events report each run; and under review a run builds on
the runs still waiting for review (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from engram.errors import ConflictError
from engram.writer import ExtractRequest, MemoryWriter, OfflineExtractor, Workspace

ALICE = ("users", "alice")


class Slow(OfflineExtractor):
    """The offline extractor behind a slow model: each step waits until released (or ``seconds``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.release = threading.Event()
        self.steps = 0

    def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
        self.steps += 1
        self.release.wait(self.seconds)
        super().extract(request, workspace)


def wait_for(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_turns_that_arrive_during_a_slow_run_are_processed_after_it(wmem, tmp_path, metrics):
    slow = Slow(30)
    writer = MemoryWriter(wmem, extractor=slow, interval=1, metrics=metrics, trace_dir=tmp_path / "traces")
    events: list[tuple[str, str | None]] = []
    writer.on_event(lambda name, record: events.append((name, record.get("outcome"))))
    writer.start_conversation("c1", ALICE)
    writer.append("c1", "user", "I live in Lyon.")
    assert writer.append("c1", "assistant", "ok").decision.action == "queued"
    wait_for(lambda: slow.steps == 1)  # the first run is in flight, waiting on the model
    writer.append("c1", "user", "I work as a nurse.")
    assert writer.append("c1", "assistant", "ok").decision.action == "queued"
    assert writer.status(ALICE)["queued"] is True
    slow.release.set()
    drained = writer.close(timeout=60)
    assert drained.drained is True and drained.running == ()
    assert writer.lag(ALICE) == 0  # nothing left pending after the run and after close()
    texts = sorted(m.text for m in writer.memories_for(ALICE, "Lyon nurse", 500))
    assert texts == ["I live in Lyon.", "I work as a nurse."]
    names = [name for name, _ in events]
    assert names.count("finished") == 2 and names.index("started") < names.index("committed")
    assert ("finished", "merged") in events


def test_close_gives_up_after_its_timeout_and_says_so(wmem, tmp_path, metrics):
    slow = Slow(30)
    writer = MemoryWriter(wmem, extractor=slow, interval=1, metrics=metrics, trace_dir=tmp_path / "traces")
    writer.start_conversation("c1", ALICE)
    writer.append("c1", "user", "I live in Lyon.")
    writer.append("c1", "assistant", "ok")
    wait_for(lambda: slow.steps == 1)
    started = time.monotonic()
    drained = writer.close(timeout=0.3)
    assert drained.drained is False and drained.running == ("users.alice",)
    assert time.monotonic() - started < 10
    slow.release.set()  # the run finishes on its own; nothing is lost
    wait_for(lambda: writer.lag(ALICE) == 0)


def test_a_failing_listener_neither_fails_nor_stalls_a_run(wmem, tmp_path, metrics):
    writer = MemoryWriter(wmem, extractor=OfflineExtractor(), interval=1, background=False, metrics=metrics,
                          trace_dir=tmp_path / "traces")  # fmt: skip

    def broken(name: str, record: dict[str, Any]) -> None:
        raise RuntimeError("listener bug")

    stop = writer.on_event(broken)
    writer.start_conversation("c1", ALICE)
    writer.append("c1", "user", "I live in Lyon.")
    run = writer.append("c1", "assistant", "ok").run
    assert run is not None and run["outcome"] == "merged"
    stop()


def two_reviews(wmem: Any, tmp_path: Any, metrics: Any) -> tuple[MemoryWriter, Any, Any]:
    """A review writer after "I live in Berlin." then "I moved to Munich last week.": two runs waiting."""
    writer = MemoryWriter(wmem, extractor=OfflineExtractor(), interval=1, background=False, policy="review",
                          metrics=metrics, trace_dir=tmp_path / "traces")  # fmt: skip
    writer.start_conversation("c1", ALICE)
    writer.append("c1", "user", "I live in Berlin.")
    first = writer.append("c1", "assistant", "ok").run
    writer.append("c1", "user", "I moved to Munich last week.")
    second = writer.append("c1", "assistant", "ok").run
    return writer, first, second


def test_under_review_a_run_builds_on_the_runs_waiting_for_review(wmem, tmp_path, metrics):
    writer, first, second = two_reviews(wmem, tmp_path, metrics)
    assert first is not None and second is not None and second["stacked_on"] == first["id"]
    assert second["updated"] == 1 and second["added"] == 0  # supersedes the unapproved Berlin memory
    with pytest.raises(ConflictError, match="build on it"):
        writer.reject(ALICE, first["id"])  # a rejected proposal must not come back through the later run
    writer.approve(ALICE, second["id"])
    assert writer.run(ALICE, first["id"])["review"] == "approved"
    assert writer.run(ALICE, first["id"])["approved_with"] == second["id"]
    homes = [m.text for m in writer.memories_for(ALICE, "where does she live", 500)]
    assert len(homes) == 1 and "Munich" in homes[0]
    assert not [b for b in wmem.branches() if b.startswith("writer/")]


def test_rejecting_the_newest_first_unwinds_a_stack(wmem, tmp_path, metrics):
    writer, first, second = two_reviews(wmem, tmp_path, metrics)
    assert first is not None and second is not None
    writer.reject(ALICE, second["id"])
    writer.reject(ALICE, first["id"])
    assert list(wmem.search(ALICE)) == [] and writer.lag(ALICE) == 0
