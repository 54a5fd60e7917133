"""Run traces: one JSON file per traced run, redacted, capped in size, kept by count and age.

Schema (``"schema": 1``)::

    {
      "schema": 1,
      "run": "20260101T120000123-9f2c1a",      # run id
      "target": "users.alice",
      "model": "offline",
      "outcome": "model_error",                # see engram.writer.OUTCOMES
      "error": "ModelError: ...",              # or null
      "started_at": 1767268800123,             # UTC ms
      "duration_ms": 812.4,
      "conversations": {"c1": {"from": 3, "to": 8}},
      "steps": [                               # one per chunk of turns
        {"index": 0, "prompt": "...", "duration_ms": 640.2, "error": null,
         "model_calls": [{"attempt": 1, "status": 200, "duration_ms": 610.3, "response": {...}, "error": null}],
         "tool_calls": [{"name": "write_memory", "arguments": {...}, "result": {...}, "error": null,
                         "duration_ms": 1.2}]}
      ],
      "actions": [{"op": "add", "key": "...", "text": "...", "sources": ["m3"], "previous": null}],
      "truncated": false                       # true when strings were cut to fit the size cap
    }

Every string is redacted before it is written. A trace larger than ``max_bytes`` has its longest strings cut
until it fits. After each write, traces beyond ``max_count`` (oldest first) or older than ``max_age_days`` go.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram.clock import now_ms
from engram.writer.redact import redact_value

SCHEMA = 1
DAY_MS = 86_400_000


def default_dir() -> Path:
    """Where traces go when the writer is given no directory: ``<temp dir>/engram-writer-traces``."""
    return Path(tempfile.gettempdir()) / "engram-writer-traces"


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """Where traces go and how many are kept.

    Attributes:
        directory: the trace directory (created on first write).
        successes: also trace successful runs (failures, timeouts and policy violations always are).
        max_bytes: the size cap of one trace file.
        max_count: traces kept (newest first).
        max_age_days: traces older than this are deleted.
    """

    directory: Path
    successes: bool = False
    max_bytes: int = 256_000
    max_count: int = 200
    max_age_days: float = 14.0


def _cut(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f"... [{len(value) - limit} chars cut]"
    if isinstance(value, dict):
        return {k: _cut(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, limit) for v in value]
    return value


def render(trace: dict[str, Any], max_bytes: int) -> bytes:
    """The trace as redacted JSON of at most ``max_bytes`` (long strings cut, then steps dropped from the middle)."""
    clean = redact_value({"schema": SCHEMA, **trace, "truncated": False})
    data = json.dumps(clean, indent=1, sort_keys=True, default=str).encode()
    limit = 4096
    while len(data) > max_bytes and limit >= 64:
        clean = _cut(clean, limit)
        clean["truncated"] = True
        data = json.dumps(clean, indent=1, sort_keys=True, default=str).encode()
        limit //= 2
    while len(data) > max_bytes and len(clean.get("steps", [])) > 2:
        steps = clean["steps"]
        del steps[len(steps) // 2]
        clean["truncated"] = True
        data = json.dumps(clean, indent=1, sort_keys=True, default=str).encode()
    if len(data) > max_bytes:
        keep = {k: clean.get(k) for k in ("schema", "run", "target", "model", "outcome", "error", "started_at")}
        data = json.dumps({**_cut(keep, 256), "truncated": True}, sort_keys=True).encode()
    return data


def write_trace(settings: TraceSettings, trace: dict[str, Any]) -> Path:
    """Write one trace (atomically: a temporary file renamed), prune old ones, and return its path."""
    directory = settings.directory
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{trace['run']}.json"
    data = render(trace, settings.max_bytes)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".trace-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    prune(settings)
    return path


def prune(settings: TraceSettings) -> int:
    """Delete traces beyond the count or past the age limit; return how many were deleted."""
    try:
        files = sorted(settings.directory.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return 0
    oldest = now_ms() / 1000 - settings.max_age_days * 86_400
    removed = 0
    for i, path in enumerate(files):
        with contextlib.suppress(OSError):
            if i >= settings.max_count or path.stat().st_mtime < oldest:
                path.unlink()
                removed += 1
    return removed


def read_trace(path: str | Path) -> dict[str, Any]:
    """Load a trace file."""
    data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    return data
