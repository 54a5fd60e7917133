"""Before publishing a run the writer confirms its lease (issue #14, performance): a read while the lease has
at least half its time left, a renewal otherwise, and no merge at all once the lease is someone else's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engram.store import Memory
from engram.writer import MemoryWriter, OfflineExtractor, WriterMetrics
from engram.writer.state import STATE_REF, Lease, StateStore, WriterState, slug

ALICE = ("users", "alice")


def state_reasons(mem: Memory) -> list[str]:
    """Why the state ref of ``users.alice`` changed, oldest first."""
    return [e.reason for e in reversed(mem.repo.refs.reflog(STATE_REF + slug("users.alice")))]


def run_once(mem: Memory, tmp_path: Path, metrics: WriterMetrics, **kw: Any) -> dict[str, Any]:
    kw.setdefault("extractor", OfflineExtractor())
    writer = MemoryWriter(mem, interval=1, background=False,
                          trace_dir=tmp_path / "traces", metrics=metrics, **kw)  # fmt: skip
    writer.start_conversation("c1", ALICE)
    writer.append("c1", "user", "I have a dog named Rex.")
    run = writer.append("c1", "assistant", "Nice.").run
    assert run is not None
    return run


def test_lease_confirm_reads_while_the_lease_is_long(wmem: Memory, tmp_path: Path, metrics: WriterMetrics) -> None:
    run = run_once(wmem, tmp_path, metrics)
    assert run["outcome"] == "merged"
    reasons = state_reasons(wmem)
    assert reasons[0] == "conversation c1 feeds the target"
    assert [r.split(": ")[-1] for r in reasons[1:]] == ["start", "merged"]  # two state writes per run, no renewal


def test_lease_confirm_renews_a_lease_past_half_its_time(wmem: Memory, tmp_path: Path, metrics: WriterMetrics):
    def slow(record: dict[str, Any], actions: list[Any]) -> str:
        import time

        time.sleep(0.7)  # the lease (1 s) is past half its time when the run publishes
        return "merge"

    run = run_once(wmem, tmp_path, metrics, lease_seconds=1.0, policy=slow)
    assert run["outcome"] == "merged"
    assert any(r.startswith("renew lease of run") for r in state_reasons(wmem))


def test_lease_confirm_never_publishes_once_the_lease_is_lost(wmem: Memory, tmp_path: Path, metrics: WriterMetrics):
    def thief(record: dict[str, Any], actions: list[Any]) -> str:
        def steal(state: WriterState) -> bool:
            state.lease = Lease("other-run", "elsewhere:1:x", 0, 2**62)
            return True

        StateStore(wmem.repo, "users.alice").update(steal, "test: another process took the lease")
        return "merge"

    run = run_once(wmem, tmp_path, metrics, policy=thief)
    assert run["outcome"] == "lease_lost" and run["merge"] is None
    assert not any(c.message.startswith("writer: merge run") for c in wmem.log(limit=50))  # nothing merged
    assert wmem.search(ALICE, "dog") == []


def test_lease_confirm_an_auto_run_is_one_commit_on_the_branch(wmem: Memory, tmp_path: Path, metrics: WriterMetrics):
    run = run_once(wmem, tmp_path, metrics)
    assert run["outcome"] == "merged" and run["merge"] == run["commit"]
    assert wmem.head.id.hex() == run["commit"]  # straight onto main: no review branch, no merge commit
    assert not [e for e in wmem.repo.refs.reflog() if e.name.startswith("heads/writer/")]
    assert [i.value["text"] for i in wmem.search(ALICE, "dog")] == ["I have a dog named Rex."]


def test_lease_confirm_an_auto_run_never_publishes_once_the_lease_is_lost(wmem: Memory, tmp_path: Path, metrics):
    class Thief(OfflineExtractor):
        def extract(self, request: Any, workspace: Any) -> None:
            super().extract(request, workspace)

            def steal(state: WriterState) -> bool:
                state.lease = Lease("other-run", "elsewhere:1:x", 0, 2**62)
                return True

            StateStore(wmem.repo, "users.alice").update(steal, "test: another process took the lease")

    run = run_once(wmem, tmp_path, metrics, extractor=Thief())
    assert run["outcome"] == "lease_lost" and run["merge"] is None and run["commit"] is None
    assert wmem.search(ALICE, "dog") == []
