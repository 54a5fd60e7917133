"""Run the claude-slack debugging-assistant tutorial (a seed document, read at test time) against engram.

The tutorial's ``python`` blocks are taken from ``../shared/seeds/`` as they are: never copied into the repository.
What the tutorial leaves to the reader is filled here: the helpers it calls without defining them
(``extract_stack_trace``, ``extract_context``, ``cluster_by_similarity``, ``create_pattern_from_cluster``), its imports,
the one construction line ``api = ClaudeSlackAPI(...)`` (pointing at an engram store), a debugging history from
before the tutorial starts (its usage example presumes one: it takes the first suggestion), and the call of
``detect_patterns`` it defines. Every block runs in order, in one coroutine (the blocks' top-level ``await``s are the
coroutine's body), in one event loop.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from engram.compat.claude_slack import ClaudeSlackAPI

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT.parent / "shared" / "seeds" / "002_8a6d53a215b1338c.txt"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\w+)')

#: The history the helper writes before the usage example: two earlier sessions of the same Redis error, the second
#: solved (its solution becomes a pattern note through the tutorial's own ``document_solution``).
PAST_ERROR = 'ConnectionRefusedError: [Errno 111] Connection refused\n  File "worker.py", line 12, in connect_to_redis'
PAST_SOLUTION = "Restarted the Redis container with 'docker compose up -d redis'"
PAST_FIX = {"root_cause": "Redis container stopped", "tested": True, "time_spent": 10,
            "error_type": "ConnectionRefusedError", "symptoms": ["Connection refused"],
            "affected_files": ["worker.py"], "prevention_tips": ["Restart policy on the container"]}  # fmt: skip


def blocks(text: str) -> list[str]:
    """The ``python`` fenced blocks of a Markdown text, in order."""
    return [m.group(1) for m in FENCE.finditer(text)]


def extract_stack_trace(error_text: str) -> str:
    """The frames of a Python error report (its ``File ...`` lines and the lines under them)."""
    lines = error_text.strip().splitlines()
    return "\n".join(lines[1:])


def extract_context(error_text: str) -> dict[str, Any]:
    """Where the error happened: the innermost frame's file, line and function, and the environment."""
    frames = list(FRAME.finditer(error_text))
    if not frames:
        return {"env": "development"}
    last = frames[-1]
    return {"file": last["file"], "line": int(last["line"]), "function": last["function"], "service": "app",
            "env": "development", "version": "1.0.0"}  # fmt: skip


@dataclass
class Record:
    """What the filled-in helpers saw while the tutorial ran."""

    clustered: list[list[dict[str, Any]]] = field(default_factory=list)
    patterns: list[list[dict[str, Any]]] = field(default_factory=list)


def cluster_by_similarity(messages: list[dict[str, Any]], record: Record) -> list[list[dict[str, Any]]]:
    """Group error reports by their error line (the first line of the error's message)."""
    record.clustered.append(messages)
    groups: dict[str, list[dict[str, Any]]] = {}
    for message in messages:
        error = message["metadata"].get("error", {}).get("message") or message["content"]
        groups.setdefault(error.strip().splitlines()[0], []).append(message)
    return list(groups.values())


async def create_pattern_from_cluster(api: ClaudeSlackAPI, cluster: list[dict[str, Any]], record: Record) -> None:
    """Announce a recurring error in the patterns channel."""
    record.patterns.append(cluster)
    error = cluster[0]["metadata"]["error"]["message"].strip().splitlines()[0]
    await api.send_message(channel_id="proj:error-patterns", sender_id="debug-assistant",
                           content=f"Recurring error ({len(cluster)} sessions): {error}",
                           metadata={"type": "error_pattern", "occurrences": len(cluster)})  # fmt: skip


async def seed_history(start_debug_session: Any, document_solution: Any) -> None:
    """Earlier debugging sessions, written with the tutorial's own functions."""
    for solved in (False, True):
        session, _ = await start_debug_session(PAST_ERROR, extract_stack_trace(PAST_ERROR), extract_context(PAST_ERROR))
        if solved:
            await document_solution(session, PAST_SOLUTION, dict(PAST_FIX))


def program(text: str) -> ast.Module:
    """The tutorial as one coroutine function ``tutorial()``: its blocks in order, the history before the usage
    example, ``detect_patterns()`` called after its definition; it returns its locals."""
    body: list[ast.stmt] = []
    for block in blocks(text):
        if "DebugAssistant(api)" in block:
            body += ast.parse("await seed_history(start_debug_session, document_solution)").body
        body += ast.parse(block).body
        if "async def detect_patterns" in block:
            body += ast.parse("await detect_patterns()").body
    body += ast.parse("return locals()").body
    module = ast.parse("async def tutorial():\n    pass\n")
    function = module.body[0]
    assert isinstance(function, ast.AsyncFunctionDef)
    function.body = body
    return ast.fix_missing_locations(module)


async def run(text: str, store: str) -> tuple[dict[str, Any], Record, ClaudeSlackAPI]:
    """Run the tutorial against an engram store at ``store``; its locals, what the helpers saw, and the api."""
    record = Record()
    api = ClaudeSlackAPI(db_path=store, embedder="hashing")  # the one construction line, on engram
    namespace: dict[str, Any] = {
        "api": api, "datetime": datetime, "timedelta": timedelta, "extract_stack_trace": extract_stack_trace,
        "extract_context": extract_context, "cluster_by_similarity": lambda m: cluster_by_similarity(m, record),
        "create_pattern_from_cluster": lambda c: create_pattern_from_cluster(api, c, record),
        "seed_history": seed_history,
    }  # fmt: skip
    exec(compile(program(text), str(SEED), "exec"), namespace)  # the seed document's code, on purpose
    found: dict[str, Any] = await namespace["tutorial"]()
    return found, record, api
