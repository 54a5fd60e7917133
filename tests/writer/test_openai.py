"""The OpenAI-compatible extractor against a real scripted chat-completions server on 127.0.0.1: the tool loop,
compare-and-swap conflicts, timeouts, 5xx, malformed tool calls and garbage (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engram.store import Memory
from engram.writer import MemoryWriter, OpenAIExtractor, read_trace
from engram.writer.scripted import Reply, ScriptedModelServer
from engram.writer.traces import trace_path

BOB = ("users", "bob")


def writer_for(mem: Memory, tmp_path: Path, url: str, metrics: Any, **kw: Any) -> MemoryWriter:
    extractor = OpenAIExtractor(url, "scripted", api_key="sk-test-abcdefghijklmnopqrstu", timeout=kw.pop("timeout", 2),
                                retries=kw.pop("retries", 2), backoff=0.01)  # fmt: skip
    writer = MemoryWriter(mem, extractor=extractor, interval=1, background=False, trace_dir=tmp_path / "traces",
                          metrics=metrics, **kw)  # fmt: skip
    writer.start_conversation("c1", BOB)
    return writer


def turn(writer: MemoryWriter, text: str) -> dict[str, Any]:
    writer.append("c1", "user", text)
    run = writer.append("c1", "assistant", "ok").run
    assert run is not None
    return run


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


def test_openai_tool_loop_with_a_stale_write_rereads_and_continues(wmem: Memory, tmp_path: Path, metrics):
    wmem.put(BOB, "city", {"text": "Bob lives in Rome"})
    script = [
        Reply.tools(("search_memories", {"query": "where bob lives"})),
        Reply.tools(("write_memory", {"key": "city", "text": "Bob lives in Milan", "expected_version": "1"})),
        Reply.tools(("read_memory", {"key": "city"})),
        lambda body: Reply.tools(
            (
                "write_memory",
                {  # the version the model just read
                    "key": "city",
                    "text": "Bob lives in Milan",
                    "expected_version": tool_results(body)[-1]["version"],
                    "source_message_ids": ["c1:1"],
                    "kind": "fact",
                },
            )
        ),
        Reply.tools(("write_memory", {"text": "Bob has a cat named Tom", "source_message_ids": ["c1:1"]})),
        Reply.tools(("no_new_memories", {"reason": "done"})),
    ]
    with ScriptedModelServer(lambda body: _next(script, body)) as server:
        writer = writer_for(wmem, tmp_path, server.url, metrics, trace_successes=True)
        run = turn(writer, "I moved to Milan. My cat Tom came too.")
        requests = server.requests
    assert run["outcome"] == "merged" and run["updated"] == 1 and run["added"] == 1, run
    assert tool_results(requests[2])[-1]["error"] == "conflict"  # the stale write was refused ...
    assert wmem.get(BOB, "city").value["text"] == "Bob lives in Milan"  # ... and the re-read one went through
    assert wmem.get(BOB, "city").sources == ("c1:1",)
    assert requests[0]["model"] == "scripted" and requests[0]["tools"]
    assert "Bob lives in Rome" in requests[0]["messages"][1]["content"]  # the prompt carries current memories
    trace = read_trace(writer.traces, run["trace"])
    assert [c["name"] for c in trace["steps"][0]["tool_calls"]][:3] == [
        "search_memories",
        "write_memory",
        "read_memory",
    ]
    assert "sk-test" not in trace_path(writer.traces.directory, run["trace"]).read_text()


def _next(script: list[Any], body: dict[str, Any]) -> Reply:
    reply = script.pop(0)
    return reply(body) if callable(reply) else reply


def test_openai_timeout_then_retry_succeeds(wmem: Memory, tmp_path: Path, metrics):
    script = [Reply.tools(("no_new_memories", {}), delay=1.5), Reply.tools(("no_new_memories", {}))]
    with ScriptedModelServer(script) as server:
        writer = writer_for(wmem, tmp_path, server.url, metrics, timeout=0.5)
        run = turn(writer, "nothing much")
    assert run["outcome"] == "no_new_memories" and len(server.requests) == 2


def test_openai_server_errors_exhaust_retries_fail_with_trace_and_lose_no_turn(wmem: Memory, tmp_path, metrics):
    with ScriptedModelServer([Reply(status=503)] * 3) as server:
        writer = writer_for(wmem, tmp_path, server.url, metrics)
        run = turn(writer, "I bought a sailboat last week.")
    assert run["outcome"] == "model_error" and "503" in run["error"] and len(server.requests) == 3
    trace = read_trace(writer.traces, run["trace"])
    assert [c["status"] for c in trace["steps"][0]["model_calls"]] == [503, 503, 503]
    assert writer.lag(BOB) == 1 and writer.memories_for(BOB, "sailboat", 500) == []
    with ScriptedModelServer([Reply.tools(("write_memory", {"text": "Bob bought a sailboat"})),
                              Reply(content="done")]) as server:  # fmt: skip
        writer.extractor = OpenAIExtractor(server.url, "scripted", backoff=0.01)
        again = writer.run_now(BOB).run
    assert again["outcome"] == "merged" and writer.lag(BOB) == 0
    assert [m.sources for m in writer.memories_for(BOB, "sailboat", 500)] == [("c1:1", "c1:2")]


def test_openai_all_timeouts_record_a_timeout(wmem: Memory, tmp_path: Path, metrics):
    with ScriptedModelServer([Reply(delay=1.0)] * 2) as server:
        writer = writer_for(wmem, tmp_path, server.url, metrics, timeout=0.3, retries=1)
        run = turn(writer, "hello")
    assert run["outcome"] == "timeout" and read_trace(writer.traces, run["trace"])["outcome"] == "timeout"


def test_openai_malformed_tool_calls_are_answered_then_too_many_fail(wmem: Memory, tmp_path: Path, metrics):
    script = [
        Reply.tools(("write_memory", "{not json")),
        Reply.tools(("write_memory", {"text": "Bob plays the cello", "source_message_ids": ["c1:1"]})),
        Reply.tools(("no_new_memories", {})),
    ]
    with ScriptedModelServer(script) as server:
        writer = writer_for(wmem, tmp_path, server.url, metrics)
        run = turn(writer, "I play the cello.")
        assert "malformed tool call" in tool_results(server.requests[1])[0]["error"]
    assert run["outcome"] == "merged" and run["added"] == 1
    bad = [Reply.tools(("nope", {}), ("write_memory", "[1"), ("write_memory", {"txt": 1}), ("read_memory", "x"))]
    with ScriptedModelServer(bad) as server:
        writer.extractor = OpenAIExtractor(server.url, "scripted", backoff=0.01)
        run = turn(writer, "I also sing.")
    assert run["outcome"] == "policy_violation" and writer.lag(BOB) == 1


def test_openai_garbage_answers_and_an_endless_loop(wmem: Memory, tmp_path: Path, metrics):
    with ScriptedModelServer([Reply(raw=b"<html>oops</html>")] * 3) as server:
        writer = writer_for(wmem, tmp_path, server.url, metrics)
        run = turn(writer, "hi")
    assert run["outcome"] == "model_error" and "unreadable" in run["error"]
    with ScriptedModelServer(lambda body: Reply.tools(("search_memories", {"query": "x"}))) as server:
        writer.extractor = OpenAIExtractor(server.url, "scripted", max_rounds=3)
        run = writer.run_now(BOB).run
    assert run["outcome"] == "policy_violation" and len(server.requests) == 3


def test_openai_server_down(wmem: Memory, tmp_path: Path, metrics):
    server = ScriptedModelServer([]).start()
    url = server.url
    server.stop()
    writer = writer_for(wmem, tmp_path, url, metrics, retries=1)
    run = turn(writer, "hi")
    assert run["outcome"] == "model_error" and "ConnectError" in run["error"] and writer.lag(BOB) == 1
