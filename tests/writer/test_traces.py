"""Run traces: engram prunes only what it wrote, in a folder it owns; a trace is named by an id, per store; the
system prompt, error and unreadable reply bodies, and the first and last steps of a huge run are kept (#28)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from engram.cli import cli
from engram.errors import NotFoundError, WriterError
from engram.store import Memory, tenant_url
from engram.writer import ExtractRequest, MemoryWriter, OpenAIExtractor, Workspace, WriterSettings, read_trace
from engram.writer.extract import SYSTEM
from engram.writer.openai import BODY_CHARS
from engram.writer.scripted import Reply, ScriptedModelServer
from engram.writer.traces import (
    MARKER,
    TraceFolderError,
    TraceSettings,
    check_folder,
    prune,
    render,
    run_trace,
    store_dir,
    trace_path,
    write_trace,
)

ALICE = ("users", "alice")
SECRET = "sk-proj-abcdefghijklmnop1234567890"
MONTH_AGO = time.time() - 30 * 86_400


def _trace(run: str, **extra: Any) -> dict[str, Any]:
    return {"run": run, "target": "users.alice", "model": "m", "outcome": "model_error", "error": "boom",
            "started_at": 0, "duration_ms": 1.0, "steps": [], "actions": [], "conversations": {}, **extra}  # fmt: skip


def _user_files(folder: Path) -> dict[str, str]:
    files = {"package.json": '{"name": "my-app"}', "x.json": "[1, 2]", "engram-trace-forged.json": '{"mine": 1}'}
    for name, text in files.items():
        (folder / name).write_text(text)
        os.utime(folder / name, (MONTH_AGO, MONTH_AGO))  # old enough for any age limit
    return files


def test_a_folder_with_other_files_is_refused_and_nothing_in_it_is_deleted(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    files = _user_files(folder)
    with pytest.raises(TraceFolderError, match=r"package\.json"):
        WriterSettings(trace_dir=folder)
    settings = TraceSettings(folder, max_count=0, max_age_days=0)
    with pytest.raises(TraceFolderError):
        write_trace(settings, _trace("r1"))
    assert prune(settings) == 0  # not engram's folder: pruning does nothing
    assert {p.name: p.read_text() for p in folder.iterdir()} == files


def test_pruning_deletes_only_engram_traces_in_its_own_folder(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    settings = TraceSettings(folder, max_count=2, max_age_days=14)
    first = write_trace(settings, _trace("20260101T000000000-aaaaaa"))
    assert first == "20260101T000000000-aaaaaa" and (folder / MARKER).is_file()
    files = _user_files(folder)  # the user drops files into engram's folder later
    old = trace_path(folder, first)
    os.utime(old, (MONTH_AGO, MONTH_AGO))
    ids = [write_trace(settings, _trace(f"20260101T00000000{i}-bbbbbb")) for i in range(1, 5)]
    kept = sorted(p.name for p in folder.glob("engram-trace-2026*.json"))
    assert kept == sorted(trace_path(folder, i).name for i in ids[-2:])  # the newest two of engram's
    assert {name: (folder / name).read_text() for name in files} == files  # every other file survives
    assert check_folder(folder) == folder  # still engram's folder, whatever else the user put there


def test_engram_writer_traces_dot_refuses_a_project_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    files = _user_files(project)
    monkeypatch.chdir(project)
    server = ScriptedModelServer([]).start()  # a model server that is gone: every run fails and leaves a trace
    url = server.url
    server.stop()
    base = ["--store", str(tmp_path / "store"), "--embedder", "hashing", "--vector-cache", "none", "writer",
            "--interval", "1", "--extractor", f"openai:m@{url}", "--traces", "."]  # fmt: skip
    runner = CliRunner()
    first = runner.invoke(cli, [*base, "append", "c1", "user", "I live in Lyon.", "--target", "users/alice"], obj={})
    second = runner.invoke(cli, [*base, "append", "c1", "assistant", "Noted."], obj={})
    assert first.exit_code == 1 and second.exit_code == 1, second.output
    assert "holds files engram did not write" in second.output
    assert {p.name: p.read_text() for p in project.iterdir()} == files


def test_the_cli_keeps_traces_inside_the_store_and_shows_them_by_id(tmp_path: Path) -> None:
    server = ScriptedModelServer([]).start()
    url = server.url
    server.stop()
    store = tmp_path / "store"
    base = ["--store", str(store), "--embedder", "hashing", "--vector-cache", "none", "writer", "--interval", "1",
            "--extractor", f"openai:m@{url}"]  # fmt: skip
    runner = CliRunner()
    runner.invoke(cli, [*base, "append", "c1", "user", "I live in Lyon.", "--target", "users/alice"], obj={})
    runner.invoke(cli, [*base, "append", "c1", "assistant", "Noted."], obj={})
    [record] = json.loads(runner.invoke(cli, [*base, "runs", "users/alice", "--json"], obj={}).output)
    assert record["outcome"] == "model_error" and record["trace"] == record["id"]
    assert trace_path(store / "engram-traces", record["id"]).is_file()
    shown = runner.invoke(cli, [*base, "trace", "users/alice", record["id"]], obj={})
    assert shown.exit_code == 0 and json.loads(shown.output)["run"] == record["id"]


def test_default_trace_folders_are_per_store_and_per_tenant(tmp_path: Path) -> None:
    assert store_dir(str(tmp_path / "s")) == tmp_path / "s" / "engram-traces"
    assert store_dir(f"sqlite:///{tmp_path}/notes.db") == tmp_path / "notes-traces"
    acme, globex = (store_dir(tenant_url(str(tmp_path / "s"), t)) for t in ("acme", "globex"))
    assert acme == tmp_path / "s" / "tenants" / "acme" / "engram-traces" and acme != globex
    base = "postgresql://engram:hunter2@db.internal/agents"
    pg = {store_dir(tenant_url(base, t)) for t in ("acme", "globex")}
    assert len(pg) == 2 and not any("hunter2" in str(p) for p in pg)
    assert store_dir(":memory:", "acme") != store_dir(":memory:", "globex")


def test_records_carry_a_trace_id_read_from_the_writers_folder(wmem: Memory, tmp_path: Path, metrics) -> None:
    class Failing:
        model = "failing"

        def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
            raise WriterError("boom", "model_error")

    writer = MemoryWriter(wmem, extractor=Failing(), interval=1, background=False, metrics=metrics,
                          trace_dir=tmp_path / "traces")  # fmt: skip
    writer.start_conversation("c1", ALICE)
    writer.append("c1", "user", "I live in Lyon.")
    run = writer.append("c1", "assistant", "Noted.").run
    assert run is not None and run["trace"] == run["id"] and "/" not in run["trace"]
    assert run_trace(writer.traces, run)["outcome"] == "model_error"
    trace_path(tmp_path / "traces", run["id"]).unlink()
    with pytest.raises(NotFoundError):
        run_trace(writer.traces, run)
    with pytest.raises(NotFoundError):
        read_trace(writer.traces, "../../etc/passwd")


def test_a_huge_trace_keeps_its_first_and_last_steps_and_counts_the_dropped() -> None:
    steps = [{"index": i, "prompt": f"step {i} " + "w" * 3000, "model_calls": [], "tool_calls": []} for i in range(400)]
    data = render(_trace("r1", steps=steps), 64_000)
    trace = json.loads(data)
    assert len(data) <= 64_000 and trace["truncated"] is True
    kept = [s["index"] for s in trace["steps"]]
    assert kept[0] == 0 and kept[-1] == 399 and 2 < len(kept) < 400
    assert trace["steps_dropped"] == 400 - len(kept)
    assert trace["steps"][0]["prompt"].startswith("step 0 ") and trace["steps"][-1]["prompt"].startswith("step 399 ")


def test_a_huge_run_keeps_its_first_and_last_steps(wmem: Memory, tmp_path: Path, metrics) -> None:
    class FailsLast:
        model = "fails-last"

        def extract(self, request: ExtractRequest, workspace: Workspace) -> None:
            if request.step == request.steps - 1:
                raise WriterError(f"the last step failed: step {request.step}", "model_error")

    writer = MemoryWriter(wmem, extractor=FailsLast(), interval=1, background=False, metrics=metrics,
                          trace_dir=tmp_path / "traces", turn_budget_tokens=40, trace_max_bytes=20_000)  # fmt: skip
    writer.start_conversation("c1", ALICE)
    writer.append("c1", "user", " ".join(f"I visited city number {i} last year." for i in range(200)))
    run = writer.append("c1", "assistant", "ok").run
    assert run is not None and run["outcome"] == "model_error" and run["steps"] > 20
    trace = read_trace(writer.traces, run["trace"])
    indexes = [s["index"] for s in trace["steps"]]
    assert indexes[0] == 0 and indexes[-1] == run["steps"] - 1 and trace["steps"][-1]["error"]
    assert trace["steps_dropped"] == run["steps"] - len(indexes) > 0
    assert trace_path(tmp_path / "traces", run["trace"]).stat().st_size <= 20_000


def _openai_run(wmem: Memory, tmp_path: Path, metrics: Any, script: list[Reply]) -> tuple[dict[str, Any], Any]:
    with ScriptedModelServer(script) as server:
        extractor = OpenAIExtractor(server.url, "scripted", retries=len(script) - 1, backoff=0.01)
        writer = MemoryWriter(wmem, extractor=extractor, interval=1, background=False, metrics=metrics,
                              trace_dir=tmp_path / "traces")  # fmt: skip
        writer.start_conversation("c1", ALICE)
        writer.append("c1", "user", "I live in Lyon.")
        run = writer.append("c1", "assistant", "Noted.").run
    assert run is not None
    return run, read_trace(writer.traces, run["trace"])


def test_a_trace_keeps_the_system_prompt(wmem: Memory, tmp_path: Path, metrics) -> None:
    run, trace = _openai_run(wmem, tmp_path, metrics, [Reply(status=503)])
    assert run["outcome"] == "model_error" and trace["system"] == SYSTEM


def test_a_trace_keeps_the_body_of_a_5xx_reply_capped_and_redacted(wmem: Memory, tmp_path: Path, metrics) -> None:
    page = f"<html><h1>502 Bad Gateway</h1> upstream said token={SECRET} " + "z" * 5000 + "</html>"
    run, trace = _openai_run(wmem, tmp_path, metrics, [Reply(status=502, raw=page.encode())] * 2)
    assert run["outcome"] == "model_error"
    calls = trace["steps"][0]["model_calls"]
    assert [c["status"] for c in calls] == [502, 502]
    body = calls[0]["body"]
    assert body.startswith("<html><h1>502 Bad Gateway</h1>") and SECRET not in body and "[REDACTED" in body
    assert f"[{len(page) - BODY_CHARS} chars cut]" in body and len(body) < BODY_CHARS + 100


def test_a_trace_keeps_the_body_of_an_unreadable_200_reply(wmem: Memory, tmp_path: Path, metrics) -> None:
    run, trace = _openai_run(wmem, tmp_path, metrics, [Reply(raw=b"<html>maintenance until 5pm</html>")])
    assert run["outcome"] == "model_error" and "unreadable" in run["error"]
    [call] = trace["steps"][0]["model_calls"]
    assert call["status"] == 200 and call["body"] == "<html>maintenance until 5pm</html>"
