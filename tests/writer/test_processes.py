"""One run in flight per target across real processes, and recovery from SIGKILL mid-run (SQLite, PostgreSQL)."""

from __future__ import annotations

import itertools
import multiprocessing
import time
from pathlib import Path

import pytest
import workers
from processes import race

import engram
from engram.writer import MemoryWriter, OfflineExtractor, read_trace
from engram.writer.state import StateStore


def _spawn(target, *args) -> multiprocessing.process.BaseProcess:  # type: ignore[no-untyped-def]
    proc = multiprocessing.get_context("spawn").Process(target=target, args=args)
    proc.start()
    return proc


def test_two_processes_never_overlap_runs_of_one_target(wurl: str, tmp_path: Path):
    reports = race(workers.contend, [(wurl, str(tmp_path), f"p{i}", 3) for i in range(2)], timeout=120)
    assert len(reports) == 2
    mem = engram.open(wurl, embedder="hashing", search="local")
    _, state = StateStore(mem.repo, "projects.apollo").load()
    runs = sorted((r for r in state.runs if r.get("completed_at")), key=lambda r: r["started_at"])
    assert runs, reports
    for before, after in itertools.pairwise(runs):
        assert before["completed_at"] <= after["started_at"], (before, after)
    assert state.lease is None
    outcomes = [o for _, seen in reports for o in seen]
    assert "merged" in outcomes
    # no turn skipped for good, none processed twice: every message is cited by exactly one memory
    cited = [s for item in mem.search(workers.TARGET, limit=100) for s in item.sources]
    every = [f"p{i}:{seq}" for i in range(2) for seq in range(1, 7)]
    assert sorted(cited) == sorted(every)
    mem.close()


def test_sigkill_mid_run_makes_the_next_turn_due_and_loses_nothing(wurl: str, tmp_path: Path):
    started = tmp_path / "started"
    proc = _spawn(workers.killed_mid_run, wurl, str(tmp_path), str(started))
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists()
    proc.kill()
    proc.join()
    mem = engram.open(wurl, embedder="hashing", search="local")
    writer = MemoryWriter(mem, extractor=OfflineExtractor(), interval=5, background=False,
                          trace_dir=tmp_path / "traces")  # fmt: skip
    status = writer.status(workers.TARGET)
    assert status["in_flight"]["expired"] is True  # its owner is gone
    crashed = status["in_flight"]["run"]
    decision = writer.append("c1", "user", "And the crew is four people.")  # any turn: a crashed run is due
    assert decision.decision.action == "waiting"
    decision = writer.append("c1", "assistant", "ok")
    assert decision.run is not None and decision.run["outcome"] == "merged"
    old = writer.run(workers.TARGET, crashed)
    assert old["outcome"] == "crashed" and read_trace(writer.traces, old["trace"])["outcome"] == "crashed"
    assert any("lander" in m.text for m in writer.memories_for(workers.TARGET, "lander May", 1000))
    assert writer.lag(workers.TARGET) == 0 and not [b for b in mem.branches() if b.startswith("writer/")]
    mem.close()


def test_sigkill_after_commit_is_adopted_not_redone(wurl: str, tmp_path: Path):
    proc = _spawn(workers.killed_after_commit, wurl, str(tmp_path))
    proc.join(120)
    assert proc.exitcode == -9
    mem = engram.open(wurl, embedder="hashing", search="local")
    writer = MemoryWriter(mem, extractor=OfflineExtractor(), interval=1, background=False,
                          trace_dir=tmp_path / "traces")  # fmt: skip
    crashed = writer.status(workers.TARGET)["in_flight"]["run"]
    writer.append("c1", "user", "Thanks.")
    run = writer.append("c1", "assistant", "ok").run
    assert run is not None
    assert writer.run(workers.TARGET, crashed)["outcome"] == "recovered"
    lander = [m for m in writer.memories_for(workers.TARGET, "lander", 1000) if "lander" in m.text]
    assert len(lander) == 1 and lander[0].sources == ("c1:1",)  # merged once, not extracted twice
    mem.close()


@pytest.mark.parametrize("ttl", [0.3])
def test_an_expired_lease_of_a_live_owner_is_taken_over(wurl: str, tmp_path: Path, ttl: float):
    mem = engram.open(wurl, embedder="hashing", search="local")
    slow = MemoryWriter(mem, extractor=workers.Slow(0), interval=1, background=False, lease_seconds=ttl,
                        trace_dir=tmp_path / "t")  # fmt: skip
    slow.start_conversation("c1", workers.TARGET)
    store = StateStore(mem.repo, "projects.apollo")
    from engram.writer.state import Lease

    def stuck(state):  # type: ignore[no-untyped-def]
        state.lease = Lease("ghost", "elsewhere:1:x", 0, 1)  # another host's run, long expired
        return True

    store.update(stuck, "test: a stuck lease")
    slow.append("c1", "user", "hello there friend")
    run = slow.append("c1", "assistant", "ok").run
    assert run is not None and slow.run(workers.TARGET, "ghost")["outcome"] == "crashed"
    mem.close()
