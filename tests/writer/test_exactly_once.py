"""Each memory is extracted once: a real SIGKILL at every step of a run, under every policy, on SQLite and
PostgreSQL; the next process finds what the killed run published (by the run id in its commit) and never
extracts the same turns twice."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
import workers

import engram
from engram.writer import MemoryWriter, OfflineExtractor

#: (policy, step the process is killed at, the killed run's outcome as the next process records it)
MATRIX = [
    ("auto", "extracting", "crashed"),
    ("auto", "committed", "recovered"),
    ("auto", "finished", "merged"),
    ("review", "extracting", "crashed"),
    ("review", "committed", "recovered"),
    ("review", "finished", "review"),
    ("callable", "extracting", "crashed"),
    ("callable", "committed", "recovered"),
    ("callable", "merged", "recovered"),
    ("callable", "finished", "merged"),
]


def lander(writer: MemoryWriter) -> list[str]:
    return [m.text for m in writer.memories_for(workers.TARGET, "lander May", 4000) if "lander" in m.text]


@pytest.mark.parametrize(("policy", "step", "outcome"), MATRIX, ids=[f"{p}-{s}" for p, s, _ in MATRIX])
def test_a_run_killed_at_any_step_is_published_exactly_once(wurl: str, tmp_path: Path, policy, step, outcome):
    proc = multiprocessing.get_context("spawn").Process(
        target=workers.killed_at, args=(wurl, str(tmp_path), policy, step)
    )
    proc.start()
    proc.join(120)
    assert proc.exitcode == -9, "the run never reached the step it was to be killed at"
    mem = engram.open(wurl, embedder="hashing", search="local")
    writer = MemoryWriter(mem, extractor=OfflineExtractor(), interval=1, background=False,
                          policy=workers.POLICIES[policy], trace_dir=tmp_path / "traces")  # fmt: skip
    first = writer.runs(workers.TARGET)[-1]["id"]
    writer.append("c1", "user", "Thanks, that is all.")
    assert writer.append("c1", "assistant", "ok").run is not None  # the next run settles the killed one first
    assert writer.run(workers.TARGET, first)["outcome"] == outcome
    for record in reversed(writer.runs(workers.TARGET)):  # a reviewer approves what waits, oldest first
        if writer.run(workers.TARGET, record["id"]).get("review") == "pending":
            writer.approve(workers.TARGET, record["id"])
    assert lander(writer) == ["I decided to ship the lander in May."]  # once: never extracted twice, never lost
    assert writer.lag(workers.TARGET) == 0 and writer.status(workers.TARGET)["in_flight"] is None
    assert not [b for b in mem.branches() if b.startswith("writer/")]
    mem.close()


def test_a_run_that_dies_every_time_dead_letters_the_target_instead_of_looping(wurl: str, tmp_path: Path):
    for turn in ("I decided to ship the lander in May.", "The crew is four people."):
        proc = multiprocessing.get_context("spawn").Process(target=workers.killed_every_run,
                                                            args=(wurl, str(tmp_path), turn))  # fmt: skip
        proc.start()
        proc.join(120)
        assert proc.exitcode == -9
    mem = engram.open(wurl, embedder="hashing", search="local")
    writer = MemoryWriter(mem, extractor=OfflineExtractor(), interval=1, background=False, max_failures=2,
                          trace_dir=tmp_path / "traces")  # fmt: skip
    writer.append("c1", "user", "Thanks.")
    decision = writer.append("c1", "assistant", "ok").decision
    assert decision.action == "skipped" and decision.reason == "dead_lettered"
    status = writer.status(workers.TARGET)
    assert status["dead_letter"]["outcome"] == "crashed" and status["failures"] == 2
    assert status["in_flight"] is None and status["pending_turns"] == 3  # stopped, every turn kept
    assert [r["outcome"] for r in writer.runs(workers.TARGET)] == ["crashed", "crashed"]
    assert writer.retry(workers.TARGET).run["outcome"] == "merged"
    assert len(lander(writer)) == 1 and writer.lag(workers.TARGET) == 0
    mem.close()
