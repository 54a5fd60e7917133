"""The memory writer end to end on SQLite and PostgreSQL: scheduling and gates, watermark, runs as reviewable
commits, merge policies, read-back, redaction, traces and metrics (issue #14)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from conftest import sample

from engram.errors import InvalidInputError, WriterError
from engram.store import Memory
from engram.writer import ExtractRequest, MemoryWriter, OfflineExtractor, Workspace, WriterMetrics, read_trace
from engram.writer.extract import chunk_turns
from engram.writer.state import StateStore
from engram.writer.traces import trace_path

ALICE = ("users", "alice")


def make(mem: Memory, tmp_path: Path, metrics: WriterMetrics, **kw: Any) -> MemoryWriter:
    kw.setdefault("extractor", OfflineExtractor())
    kw.setdefault("background", False)
    return MemoryWriter(mem, trace_dir=tmp_path / "traces", metrics=metrics, **kw)


def exchange(writer: MemoryWriter, cid: str, user: str, reply: str = "Noted.") -> Any:
    writer.append(cid, "user", user)
    return writer.append(cid, "assistant", reply)


def test_writer_runs_every_interval_completed_assistant_turns(wmem: Memory, tmp_path: Path, metrics: WriterMetrics):
    writer = make(wmem, tmp_path, metrics, interval=2)
    writer.start_conversation("c1", ALICE)
    first = exchange(writer, "c1", "I live in Lyon with my two cats.")
    assert first.decision.action == "waiting" and first.decision.pending == 1
    aborted = writer.append("c1", "assistant", "half an answer", status="aborted")
    assert aborted.decision.action == "waiting" and writer.lag(ALICE) == 1  # aborted turns do not count
    second = exchange(writer, "c1", "My favourite colour is green.")
    assert second.run is not None and second.run["outcome"] == "merged"
    assert second.run["added"] == 2 and second.run["conversations"]["c1"] == {
        "from": 1, "to": 5, "first_message": "c1:1", "last_message": "c1:5", "assistant_turns": 2}  # fmt: skip
    texts = sorted(m.text for m in writer.memories_for(ALICE, "cats colour", 500))
    assert texts == ["I live in Lyon with my two cats.", "My favourite colour is green."]
    assert writer.lag(ALICE) == 0 and sample(metrics, "engram_writer_runs_total", outcome="merged") == 1


def test_writer_run_is_one_commit_with_metadata_traceable_and_revertable(wmem: Memory, tmp_path: Path, metrics):
    writer = make(wmem, tmp_path, metrics, interval=1)
    writer.start_conversation("c1", ALICE)
    writer.append("c1", "user", "I work as a nurse at the city hospital.", message_id="m-1")
    run = writer.append("c1", "assistant", "Great.", message_id="m-2").run
    assert run is not None
    commit = wmem.show(run["commit"])
    assert len(commit.changes) == 1 and commit.commit.author == "writer"
    meta = commit.commit.metadata["writer"]
    assert meta["run"] == run["id"] and meta["model"] == "offline" and meta["messages"] == ["m-1"]
    assert meta["conversations"]["c1"]["last_message"] == "m-2"
    key = commit.changes[0].key
    item = wmem.get(ALICE, key)
    assert item is not None and item.sources == ("m-1",)
    assert [v.commit.id.hex() for v in wmem.history(ALICE, key)] == [run["commit"]]
    wmem.revert(run["commit"], message="undo a bad writer run")
    assert wmem.get(ALICE, key) is None


def test_writer_sees_only_new_turns_plus_context(wmem: Memory, tmp_path: Path, metrics):
    seen: list[ExtractRequest] = []

    class Recording:
        model = "recording"

        def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
            seen.append(request)
            workspace.no_new_memories()

    writer = make(wmem, tmp_path, metrics, extractor=Recording(), interval=1, context_turns=1)
    writer.start_conversation("c1", ALICE)
    exchange(writer, "c1", "first message")
    exchange(writer, "c1", "second message")
    assert [t.text for t in seen[0].turns] == ["first message", "Noted."] and seen[0].context == ()
    assert [t.text for t in seen[1].turns] == ["second message", "Noted."]
    assert [t.seq for t in seen[1].context] == [2]
    assert writer.runs(ALICE)[0]["outcome"] == "no_new_memories"
    assert writer.run_now(ALICE).reason == "nothing_new"


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ({"enabled": False}, "disabled"),
        ({"extractor": None}, "no_model"),
    ],
)
def test_writer_gates_skip_with_reason_and_change_nothing(wmem, tmp_path, metrics, setup, reason, caplog):
    writer = make(wmem, tmp_path, metrics, **({"interval": 1} | setup))
    writer.start_conversation("c1", ALICE)
    store = StateStore(wmem.repo, "users.alice")
    before = store.load()[0]
    with caplog.at_level(logging.DEBUG, logger="engram.writer"):
        out = exchange(writer, "c1", "I live in Lyon with my two cats.")
    assert out.decision.action == "skipped" and out.decision.reason == reason
    assert store.load()[0] == before  # no counter, no watermark moved
    assert sample(metrics, "engram_writer_skips_total", reason=reason) == 1
    skips = [r for r in caplog.records if "writer skip" in r.getMessage()]
    assert skips and all(r.levelno == logging.DEBUG for r in skips)
    assert f"reason={reason}" in skips[-1].getMessage()
    assert "pending=1" in skips[-1].getMessage()  # the turn it skipped is counted, not reported as 0


@pytest.mark.parametrize("interval", [0, 51, -1, True, 2.5])
def test_an_interval_outside_its_range_is_refused_when_the_writer_is_built(wmem, tmp_path, metrics, interval):
    with pytest.raises(InvalidInputError, match="from 1 to 50"):
        make(wmem, tmp_path, metrics, interval=interval)


def test_writer_skips_child_and_excluded_conversations(wmem: Memory, tmp_path: Path, metrics):
    writer = make(wmem, tmp_path, metrics, interval=1, exclude=["c3"])
    writer.start_conversation("c1", ALICE)
    writer.start_conversation("c2", ALICE, parent="c1")
    writer.start_conversation("c3", ALICE)
    assert exchange(writer, "c2", "I live in Lyon with my cats.").decision.reason == "child_conversation"
    assert exchange(writer, "c3", "I live in Lyon with my cats.").decision.reason == "excluded_conversation"
    assert writer.lag(ALICE) == 0 and writer.memories_for(ALICE, "Lyon", 500) == []


def test_writer_review_policy_approve_and_reject(wmem: Memory, tmp_path: Path, metrics):
    writer = make(wmem, tmp_path, metrics, interval=1, policy="review")
    writer.start_conversation("c1", ALICE)
    run = exchange(writer, "c1", "I decided to learn the violin in 2026.").run
    assert run["outcome"] == "review" and run["review"] == "pending"
    assert run["branch"] in wmem.branches() and writer.memories_for(ALICE, "violin", 500) == []
    assert len(wmem.diff("main", run["branch"], namespace=ALICE)) == 1
    writer.approve(ALICE, run["id"])
    assert [m.text for m in writer.memories_for(ALICE, "violin", 500)] == ["I decided to learn the violin in 2026."]
    assert run["branch"] not in wmem.branches() and writer.run(ALICE, run["id"])["review"] == "approved"
    with pytest.raises(InvalidInputError):
        writer.approve(ALICE, run["id"])
    second = exchange(writer, "c1", "I prefer tea over coffee in the morning.").run
    writer.reject(ALICE, second["id"])
    assert [m.text for m in writer.memories_for(ALICE, "tea", 500) if "tea" in m.text] == []
    assert writer.lag(ALICE) == 0 and second["branch"] not in wmem.branches()


def test_writer_callable_policy(wmem: Memory, tmp_path: Path, metrics):
    calls: list[int] = []

    def only_small(record: dict[str, Any], actions: list[Any]) -> str:
        calls.append(len(actions))
        return "merge" if len(actions) <= 1 else "reject"

    writer = make(wmem, tmp_path, metrics, interval=1, policy=only_small)
    writer.start_conversation("c1", ALICE)
    assert exchange(writer, "c1", "I have a dog named Rex.").run["outcome"] == "merged"
    many = exchange(writer, "c1", "I live in Oslo now. My brother is a pilot. I love skiing in winter.").run
    assert many["outcome"] == "rejected" and calls == [1, 3]


def test_writer_auto_policy_retries_on_the_new_head_after_a_conflict(wmem: Memory, tmp_path: Path, metrics):
    class Racing:
        model = "racing"
        attempts = 0

        def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
            Racing.attempts += 1
            workspace.write("the project uses PostgreSQL", key="db", sources=[request.message_ids[0]])
            if Racing.attempts == 1:  # someone else writes the same memory on main meanwhile
                wmem.put(ALICE, "db", {"text": "the project uses MySQL"})

    writer = make(wmem, tmp_path, metrics, extractor=Racing(), interval=1)
    writer.start_conversation("c1", ALICE)
    run = exchange(writer, "c1", "we use postgres").run
    # the second attempt sees the key exists: an add without its version is refused, so the run reports it
    assert Racing.attempts == 2 and run["outcome"] == "policy_violation"
    assert wmem.get(ALICE, "db").value["text"] == "the project uses MySQL"
    assert writer.lag(ALICE) == 1 and read_trace(writer.traces, run["trace"])["run"] == run["id"]


def test_writer_chunks_large_input_never_drops(wmem: Memory, tmp_path: Path, metrics):
    writer = make(wmem, tmp_path, metrics, interval=1, turn_budget_tokens=40)
    writer.start_conversation("c1", ALICE)
    long = " ".join(f"I visited city number {i} in 2019." for i in range(30))
    run = exchange(writer, "c1", long).run
    assert run["steps"] > 3 and run["outcome"] == "merged"
    texts = {m.text for m in writer.memories_for(ALICE, "visited city", 10_000)}
    assert "I visited city number 0 in 2019." in texts and "I visited city number 29 in 2019." in texts
    turns = writer.conversations.turns("c1", 1, 2)
    parts = [p for chunk in chunk_turns(turns, 40) for p in chunk]
    assert "".join(p.text for p in parts if p.seq == 1) == long


def test_writer_memories_for_budget_and_stable_order(wmem: Memory, tmp_path: Path, metrics):
    writer = make(wmem, tmp_path, metrics, interval=1)
    writer.start_conversation("c1", ALICE)
    exchange(writer, "c1", "I play chess on Sundays. I own a red bicycle. I grew up in a small village by the sea.")
    every = writer.memories_for(ALICE, "chess bicycle village", 10_000)
    assert len(every) == 3 and [m.key for m in every] == sorted(m.key for m in every)
    assert every == writer.memories_for(ALICE, "chess bicycle village", 10_000)
    small = writer.memories_for(ALICE, "chess", 15)
    assert 1 <= len(small) < 3


def test_writer_redacts_secrets_from_memories_logs_and_traces(wmem, tmp_path, metrics, caplog):
    secret = "sk-proj-abcdefghijklmnop1234567890"

    class Leaky:
        model = "leaky"

        def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
            workspace.write(f"the api key is {secret}")
            raise WriterError(f"model crashed while holding {secret}", "model_error")

    writer = make(wmem, tmp_path, metrics, interval=1, extractor=Leaky())
    writer.start_conversation("c1", ALICE)
    with caplog.at_level(logging.DEBUG, logger="engram"):
        run = exchange(writer, "c1", f"my key is {secret} and password: hunter22").run
    assert run["outcome"] == "model_error" and writer.lag(ALICE) == 1
    stored = writer.conversations.turns("c1", 1, 1)[0].text
    assert stored == f"my key is {secret} and password: hunter22"  # the turn as sent; what leaves it is redacted
    trace = trace_path(writer.traces.directory, run["trace"]).read_text()
    assert secret not in trace and "[REDACTED" in trace
    assert read_trace(writer.traces, run["trace"])["outcome"] == "model_error"
    assert not any(secret in r.getMessage() for r in caplog.records)
    writer.extractor = OfflineExtractor()
    assert writer.run_now(ALICE).run["outcome"] in ("merged", "no_new_memories")
    assert all(secret not in m.text for m in writer.memories_for(ALICE, "key", 10_000))


def test_writer_traces_size_cap_and_retention(wmem: Memory, tmp_path: Path, metrics):
    class Failing:
        model = "failing"

        def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
            workspace.search("x" * 50_000, 3)
            raise WriterError("boom", "model_error")

    writer = make(wmem, tmp_path, metrics, interval=1, extractor=Failing(), trace_max_bytes=4_000,
                  trace_max_count=2)  # fmt: skip
    writer.start_conversation("c1", ALICE)
    runs = [exchange(writer, "c1", f"attempt {i} " + "y" * 20_000).run for i in range(3)]
    files = sorted((tmp_path / "traces").glob("*.json"))
    assert len(files) == 2 and all(f.stat().st_size <= 4_000 for f in files)
    assert json.loads(files[-1].read_text())["truncated"] is True
    assert {trace_path(tmp_path / "traces", r["trace"]).name for r in runs[1:]} == {f.name for f in files}


def test_writer_success_traces_are_opt_in(wmem: Memory, tmp_path: Path, metrics):
    quiet = make(wmem, tmp_path, metrics, interval=1)
    quiet.start_conversation("c1", ALICE)
    assert exchange(quiet, "c1", "I like long walks by the river.").run["trace"] is None
    loud = make(wmem, tmp_path, metrics, interval=1, trace_successes=True)
    trace = read_trace(loud.traces, exchange(loud, "c1", "I like green tea a lot.").run["trace"])
    assert trace["outcome"] == "merged" and trace["steps"][0]["tool_calls"]


def test_writer_background_and_async(wmem: Memory, tmp_path: Path, metrics):
    import asyncio

    from engram.writer import AsyncMemoryWriter

    writer = make(wmem, tmp_path, metrics, interval=1, background=True)
    writer.start_conversation("c1", ALICE)
    assert exchange(writer, "c1", "I speak three languages fluently.").decision.action == "queued"
    writer.wait(30)
    assert writer.runs(ALICE)[0]["outcome"] == "merged"

    async def main() -> list[Any]:
        facade = AsyncMemoryWriter(writer)
        await facade.aappend("c1", "user", "I run a marathon every spring.")
        await facade.aappend("c1", "assistant", "Impressive.")
        await asyncio.to_thread(writer.wait, 30)
        return await facade.amemories_for(ALICE, "marathon", 500)

    assert any("marathon" in m.text for m in asyncio.run(main()))
    writer.close()
