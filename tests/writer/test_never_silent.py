"""The writer never fails silently: a reply without a tool call is a failure (turns stay pending, a trace), repeated
failures dead-letter the target (status, metrics) until retried, the lag gauge follows the status, a run that lost
its lease publishes nothing, and a cost cap leaves what it could not take pending (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import sample

from engram.errors import InvalidInputError
from engram.store import Memory
from engram.writer import ExtractRequest, MemoryWriter, OfflineExtractor, OpenAIExtractor, Workspace, WriterMetrics
from engram.writer.scripted import Reply, ScriptedModelServer
from engram.writer.state import Lease, StateStore, WriterState

ALICE = ("users", "alice")


def model_writer(mem: Memory, tmp_path: Path, url: str, metrics: WriterMetrics, **kw: Any) -> MemoryWriter:
    extractor = OpenAIExtractor(url, "scripted", timeout=5, retries=0, backoff=0.0)
    kw.setdefault("interval", 1)
    writer = MemoryWriter(mem, extractor=extractor, background=False, trace_dir=tmp_path / "traces",
                          metrics=metrics, **kw)  # fmt: skip
    writer.start_conversation("c1", ALICE)
    return writer


def exchange(writer: MemoryWriter, text: str) -> dict[str, Any] | None:
    writer.append("c1", "user", text)
    return writer.append("c1", "assistant", "ok").run


def test_a_prose_reply_is_a_failure_and_repeated_failures_dead_letter_the_target(wmem, tmp_path, metrics):
    prose = Reply(content="Sure! The user lives in Lyon and loves cats.")
    fixed = Reply.tools(("write_memory", {"text": "Alice lives in Lyon", "source_message_ids": ["c1:1"]}),
                        ("no_new_memories", {"reason": "done"}))  # fmt: skip
    script = [prose, prose, prose, fixed]
    with ScriptedModelServer(script) as server:
        writer = model_writer(wmem, tmp_path, server.url, metrics, max_failures=3)
        first = exchange(writer, "I live in Lyon.")
        assert first is not None and first["outcome"] == "no_tool_call" and "without a tool call" in first["error"]
        assert first["trace"] is not None and writer.lag(ALICE) == 1  # nothing skipped: the turns stay pending
        second = exchange(writer, "I love cats.")
        assert second is not None and second["outcome"] == "no_tool_call"
        assert writer.status(ALICE)["pending_turns"] == 2 and writer.status(ALICE)["dead_letter"] is None
        third = exchange(writer, "I have a bike.")
        assert third is not None and third["outcome"] == "no_tool_call"
        status = writer.status(ALICE)
        assert status["failures"] == 3 and status["dead_letter"]["run"] == third["id"]
        assert sample(metrics, "engram_writer_dead_letters_total") == 1
        assert sample(metrics, "engram_writer_dead_lettered", target="users.alice") == 1
        fourth = writer.append("c1", "user", "I play chess.")
        decision = writer.append("c1", "assistant", "ok").decision
        assert decision.action == "skipped" and decision.reason == "dead_lettered" and decision.pending == 4
        assert fourth.turn.seq == 7 and writer.lag(ALICE) == 4  # stopped, reported, nothing skipped
        retried = writer.retry(ALICE)
        assert retried.run is not None and retried.run["outcome"] == "merged"
        assert writer.lag(ALICE) == 0 and writer.status(ALICE)["dead_letter"] is None
        assert sample(metrics, "engram_writer_dead_lettered", target="users.alice") == 0
        assert retried.run["conversations"]["c1"]["from"] == 1  # every turn the failed runs left was taken


def test_a_closing_remark_after_tool_calls_is_not_a_failure(wmem, tmp_path, metrics):
    script = [Reply.tools(("write_memory", {"text": "Alice lives in Lyon", "source_message_ids": ["c1:1"]})),
              Reply(content="Done: one memory saved.")]  # fmt: skip
    with ScriptedModelServer(script) as server:
        run = exchange(model_writer(wmem, tmp_path, server.url, metrics), "I live in Lyon.")
    assert run is not None and run["outcome"] == "merged" and run["added"] == 1


def test_the_lag_gauge_equals_the_pending_turns_after_every_run(wmem, tmp_path, metrics):
    writer = MemoryWriter(wmem, extractor=OfflineExtractor(), interval=2, background=False, metrics=metrics,
                          trace_dir=tmp_path / "traces")  # fmt: skip
    writer.start_conversation("c1", ALICE)
    for i, text in enumerate(["I live in Lyon.", "I work as a nurse.", "I love cats.", "My dog is Rex."]):
        writer.append("c1", "user", text)
        writer.append("c1", "assistant", "ok")
        gauge = sample(metrics, "engram_writer_lag_turns", target="users.alice")
        assert gauge == writer.status(ALICE)["pending_turns"] == (i + 1) % 2


class Usurped:
    """Loses the lease while it works: another owner takes the target before the run publishes."""

    model = "usurped"

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
        workspace.write("Alice lives in Lyon")

        def steal(state: WriterState) -> bool:
            state.lease = Lease("thief", "elsewhere:1:x", 0, 2**62)
            return True

        self.store.update(steal, "another owner")


def test_a_run_that_lost_its_lease_reports_nothing_published(wmem, tmp_path, metrics):
    writer = MemoryWriter(wmem, extractor=Usurped(StateStore(wmem.repo, "users.alice")), interval=1,
                          background=False, metrics=metrics, trace_dir=tmp_path / "traces")  # fmt: skip
    writer.start_conversation("c1", ALICE)
    run = exchange(writer, "I live in Lyon.")
    assert run is not None and run["outcome"] == "lease_lost"
    assert run["actions"] == 0 and run["added"] == 0 and run["attempted"] == 1 and run["commit"] is None
    assert list(wmem.search(ALICE)) == []


def test_a_model_call_cap_stops_the_run_and_leaves_the_rest_pending(wmem, tmp_path, metrics):
    calls: list[int] = []

    def answer(body: dict[str, Any]) -> Reply:
        calls.append(1)
        return Reply.tools(("no_new_memories", {"reason": "nothing"}))

    with ScriptedModelServer(answer) as server:
        writer = model_writer(wmem, tmp_path, server.url, metrics, interval=5, max_model_calls=2,
                              turn_budget_tokens=16)  # fmt: skip
        for i in range(4):
            writer.append("c1", "user", f"message number {i} " + "word " * 20)
            writer.append("c1", "assistant", "ok")
        run = exchange(writer, "the fifth exchange " + "word " * 20)
        assert run is not None and run["outcome"] == "no_new_memories"
        assert len(calls) == 2 and run["left"]["reason"] == "max_model_calls" and run["left"]["turns"] > 0
        assert writer.status(ALICE)["pending_messages"] == run["left"]["turns"]  # what was left stays pending


def test_a_huge_paste_is_read_up_to_the_input_cap_and_the_rest_waits(wmem, tmp_path, metrics):
    seen: list[int] = []

    class Counting(OfflineExtractor):
        def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
            seen.append(sum(len(t.text) for t in request.turns))
            super().extract(request, workspace)

    writer = MemoryWriter(wmem, extractor=Counting(), interval=2, background=False, metrics=metrics,
                          trace_dir=tmp_path / "traces", max_input_chars=20_000)  # fmt: skip
    writer.start_conversation("c1", ALICE)
    writer.append("c1", "user", "ERROR disk full at sector 0x1f " * 350_000)  # a 10 MB log paste
    writer.append("c1", "assistant", "ok")
    writer.append("c1", "user", "I live in Lyon.")
    run = writer.append("c1", "assistant", "ok").run
    assert run is not None and run["outcome"] in ("merged", "no_new_memories")
    assert sum(seen) < 25_000 and run["steps"] <= 10  # bounded model work while the lease is held
    assert run["left"]["cut"] == ["c1:1"] and run["left"]["reason"] == "max_input_chars"
    assert writer.status(ALICE)["pending_messages"] == run["left"]["turns"] == 3
    again = writer.run_now(ALICE)
    assert again.run is not None and writer.status(ALICE)["pending_messages"] == 0


@pytest.mark.parametrize("name", ["max_failures", "max_model_calls", "max_input_chars"])
def test_caps_below_one_are_refused(wmem, tmp_path, metrics, name):

    with pytest.raises(InvalidInputError, match=name):
        MemoryWriter(wmem, extractor=OfflineExtractor(), metrics=metrics, **{name: 0})
