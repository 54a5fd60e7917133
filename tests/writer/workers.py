"""Code the multi-process writer tests run in spawned processes (importable by name in the child)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

import engram
from engram.writer import ExtractRequest, MemoryWriter, OfflineExtractor, Workspace, WriterMetrics

TARGET = ("projects", "apollo")


class Slow:
    """Writes one memory per step after sleeping, and drops a file when it starts (so a test can kill it)."""

    model = "slow"

    def __init__(self, seconds: float, started: str | None = None) -> None:
        self.seconds, self.started = seconds, started

    def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
        if self.started:
            Path(self.started).write_text(str(os.getpid()))
        time.sleep(self.seconds)
        workspace.write(f"summary of {', '.join(request.message_ids)}")


def open_writer(url: str, tmp: str, extractor: Any, **kw: Any) -> MemoryWriter:
    mem = engram.open(url, embedder="hashing", search="local")
    return MemoryWriter(mem, extractor=extractor, background=False, trace_dir=Path(tmp) / "traces",
                        metrics=WriterMetrics(CollectorRegistry()), **kw)  # fmt: skip


def contend(url: str, tmp: str, name: str, rounds: int, start: Any, results: Any) -> None:
    """Append turns to this process's conversation and run the writer on the shared target, ``rounds`` times."""
    writer = open_writer(url, tmp, Slow(0.15), interval=1)
    writer.start_conversation(name, TARGET)
    start.wait()
    outcomes: list[str] = []
    for i in range(rounds):
        writer.append(name, "user", f"{name} message {i}")
        decision = writer.append(name, "assistant", "ok").decision
        outcomes.append(decision.run["outcome"] if decision.run else str(decision.reason or decision.action))
    while writer.lag(TARGET) and len(outcomes) < rounds * 10:  # finish what the other process left
        decision = writer.run_now(TARGET)
        outcomes.append(decision.run["outcome"] if decision.run else str(decision.reason))
        time.sleep(0.05)
    results.put((name, outcomes))


def killed_mid_run(url: str, tmp: str, started: str) -> None:
    """Run the writer with an extractor that hangs; the test SIGKILLs this process while it hangs."""
    writer = open_writer(url, tmp, Slow(60, started), interval=1, lease_seconds=600)
    writer.start_conversation("c1", TARGET)
    writer.append("c1", "user", "I decided to ship the lander in May.")
    writer.append("c1", "assistant", "ok")


def killed_after_commit(url: str, tmp: str) -> None:
    """Run the writer with a policy that SIGKILLs the process after the run's commit, before its merge."""

    def die(record: dict[str, Any], actions: list[Any]) -> str:
        os.kill(os.getpid(), signal.SIGKILL)
        return "merge"

    writer = open_writer(url, tmp, OfflineExtractor(), interval=1, policy=die, lease_seconds=600)
    writer.start_conversation("c1", TARGET)
    writer.append("c1", "user", "I decided to ship the lander in May.")
    writer.append("c1", "assistant", "ok")


def merge_every_run(record: dict[str, Any], actions: list[Any]) -> str:
    """A callable policy (the path through a review branch and its merge)."""
    return "merge"


POLICIES: dict[str, Any] = {"auto": "auto", "review": "review", "callable": merge_every_run}


def killed_at(url: str, tmp: str, policy: str, event: str) -> None:
    """Run the writer once and SIGKILL this process when the run reports ``event`` (see engram.writer.events)."""
    writer = open_writer(url, tmp, OfflineExtractor(), interval=1, policy=POLICIES[policy], lease_seconds=600)

    def die(name: str, record: dict[str, Any]) -> None:
        if name == event:
            os.kill(os.getpid(), signal.SIGKILL)

    writer.on_event(die)
    writer.start_conversation("c1", TARGET)
    writer.append("c1", "user", "I decided to ship the lander in May.")
    writer.append("c1", "assistant", "ok")


def killed_every_run(url: str, tmp: str, turn: str) -> None:
    """Append an exchange and SIGKILL this process as soon as a run starts extracting (a turn that kills its run)."""
    writer = open_writer(url, tmp, OfflineExtractor(), interval=1, lease_seconds=600, max_failures=2)

    def die(name: str, record: dict[str, Any]) -> None:
        if name == "extracting":
            os.kill(os.getpid(), signal.SIGKILL)

    writer.on_event(die)
    writer.start_conversation("c1", TARGET)
    writer.append("c1", "user", turn)
    writer.append("c1", "assistant", "ok")
