"""Run traces: one JSON file per traced run, redacted, capped in size, kept by count and age, in a folder engram owns.

A trace is named by its **trace id** (the run's id): run records carry the id, never a path, and
:func:`read_trace` finds it in the writer's folder. Schema (``"schema": 2``)::

    {
      "kind": "engram.writer.trace",           # the marker: always the first key of the file
      "schema": 2,
      "run": "20260101T120000123-9f2c1a",      # run id (= the trace id)
      "target": "users.alice",
      "model": "offline",
      "system": "You maintain ...",            # the extractor's system prompt (null for the offline one)
      "outcome": "model_error",                # see engram.writer.OUTCOMES
      "error": "ModelError: ...",              # or null
      "started_at": 1767268800123,             # UTC ms
      "duration_ms": 812.4,
      "conversations": {"c1": {"from": 3, "to": 8}},
      "steps": [                               # one per chunk of turns
        {"index": 0, "prompt": "...", "duration_ms": 640.2, "error": null,
         "model_calls": [{"attempt": 1, "status": 502, "duration_ms": 610.3, "response": null,
                          "body": "<html>bad gateway</html>", "error": "HTTP 502"}],
         "tool_calls": [{"name": "write_memory", "arguments": {...}, "result": {...}, "error": null,
                         "duration_ms": 1.2}]}
      ],
      "actions": [{"op": "add", "key": "...", "text": "...", "sources": ["m3"], "previous": null}],
      "truncated": false,                      # true when strings were cut or steps dropped to fit the size cap
      "steps_dropped": 0,                      # steps left out from the middle (the first and last are kept)
      "actions_dropped": 0
    }

Every string is redacted before it is written. A trace larger than ``max_bytes`` has its long strings cut (to 2,048
characters), then steps (and actions) dropped from the middle, so the first and the last step survive, then its
strings cut harder.

**Only engram's files are ever deleted.** The folder is engram's when it holds the marker file
``.engram-traces``: engram creates a missing folder with it, marks an empty one, and refuses a folder that holds
other files (:class:`TraceFolderError`: ``--traces .`` in a project folder is refused, not pruned). Pruning (after
each write: beyond ``max_count`` files, oldest first, or older than ``max_age_days``) considers only files named
``engram-trace-<id>.json`` in a marked folder, and deletes one only when it starts with the marker key above.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram.clock import now_ms
from engram.errors import ConfigError, NotFoundError
from engram.redaction import redact_url
from engram.store.urls import StoreUrl
from engram.writer.redact import redact_value

SCHEMA = 2
KIND = "engram.writer.trace"
#: The file that makes a folder engram's trace folder.
MARKER = ".engram-traces"
PREFIX, SUFFIX = "engram-trace-", ".json"
#: How every trace file starts (the marker key first): checked before a file is deleted or read.
HEADER = b'{\n "kind": "' + KIND.encode() + b'"'
DAY_MS = 86_400_000
_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,127}")
_NAME = re.compile(re.escape(PREFIX) + _ID.pattern + re.escape(SUFFIX))


class TraceFolderError(ConfigError):
    """The trace folder holds files engram did not write (and no ``.engram-traces`` marker): engram will neither
    write nor prune there."""


def state_home() -> Path:
    """The per-user state folder of engram: ``$XDG_STATE_HOME/engram``, by default ``~/.local/state/engram``."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "engram"


def default_dir() -> Path:
    """Where a writer given no folder (a library writer; doors pass the store's own) writes its traces:
    ``<state home>/writer-traces/default``."""
    return state_home() / "writer-traces" / "default"


def store_dir(url: str | None, tenant: str | None = None) -> Path:
    """The default trace folder of the store at ``url`` (a tenant's own store URL for a tenant), ``tenant`` naming
    it among the stores of one process that share a URL (``:memory:``).

    - a SQLite store: ``<db name>-traces`` beside its file (``.engram/engram-traces``; with API keys each tenant's
      store has its own folder, so ``<store>/tenants/<tenant>/engram-traces``);
    - PostgreSQL: ``<state home>/writer-traces/postgres-<repo>-<hash>``, the hash of the URL without its password
      and of the repository (each tenant is its own repository);
    - memory: ``<state home>/writer-traces/memory-<tenant>``.
    """
    parsed = StoreUrl.parse(url)
    if parsed.path is not None:
        return parsed.path.parent / f"{parsed.path.stem}-traces"
    root = state_home() / "writer-traces"
    if parsed.kind == "memory":
        return root / f"memory-{_safe(tenant or 'default')}"
    digest = hashlib.sha256(f"{redact_url(parsed.conninfo or '')}|{parsed.repo}".encode()).hexdigest()[:16]
    return root / f"{parsed.kind}-{_safe(parsed.repo)}-{digest}"


def _safe(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_-]", "_", name)[:64] or "_"


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """Where traces go and how many are kept.

    Attributes:
        directory: the trace folder (created, with its marker, on first write).
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


def check_folder(directory: str | Path) -> Path:
    """``directory`` if engram may keep traces there: missing, empty, or marked as engram's (changes nothing).

    Raises:
        TraceFolderError: the folder holds other files and no marker.
    """
    path = Path(directory)
    if (path / MARKER).is_file() or not path.exists():
        return path
    if not path.is_dir():
        raise TraceFolderError(f"the trace folder {path} is not a folder")
    others = sorted(p.name for p in path.iterdir() if p.name != MARKER)
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise TraceFolderError(
            f"the trace folder {path} holds files engram did not write ({shown}): give the writer an empty or new "
            f"folder (engram marks its own with {MARKER} and prunes only the traces it wrote there)"
        )
    return path


def claim(directory: str | Path) -> Path:
    """Make ``directory`` engram's trace folder: create it (readable by its owner only) or mark an empty one.

    Raises:
        TraceFolderError: the folder holds other files and no marker.
        OSError: it cannot be created or marked.
    """
    path = check_folder(directory)
    if (path / MARKER).is_file():
        return path
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    (path / MARKER).write_text("engram's writer traces: engram deletes only the engram-trace-*.json files it wrote\n")
    return path


def _cut(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f"... [{len(value) - limit} chars cut]"
    if isinstance(value, dict):
        return {k: _cut(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, limit) for v in value]
    return value


def _dump(trace: dict[str, Any]) -> bytes:
    ordered = {"kind": KIND, **{k: trace[k] for k in sorted(trace) if k != "kind"}}
    return json.dumps(ordered, indent=1, default=str).encode()


def _thin(trace: dict[str, Any], name: str, max_bytes: int) -> dict[str, Any]:
    """``trace`` with the fewest entries of list ``name`` dropped from its middle (its first and last entries kept)
    for it to fit ``max_bytes``, and how many went in ``<name>_dropped``."""
    entries = trace.get(name)
    if not isinstance(entries, list) or len(entries) <= 2:
        return trace

    def keeping(k: int) -> dict[str, Any]:
        head, tail = (k + 1) // 2, k // 2
        kept = entries[:head] + (entries[len(entries) - tail :] if tail else [])
        return {**trace, name: kept, f"{name}_dropped": len(entries) - k, "truncated": True}

    low, high = 2, len(entries) - 1  # the most kept that fits lies in [low, high]; 2 when none does
    while low < high:
        middle = (low + high + 1) // 2
        if len(_dump(keeping(middle))) <= max_bytes:
            low = middle
        else:
            high = middle - 1
    return keeping(low)


def render(trace: dict[str, Any], max_bytes: int) -> bytes:
    """The trace as redacted JSON of at most ``max_bytes``, starting with the marker key: long strings cut, then
    steps and actions dropped from the middle (the first and last kept, the number dropped recorded), then
    strings cut harder; at worst only the run's summary."""
    clean: dict[str, Any] = redact_value(trace)
    clean.update({"schema": SCHEMA, "truncated": False, "steps_dropped": 0, "actions_dropped": 0})
    data = _dump(clean)
    for limit in (4096, 2048):  # a step's prompt stays readable: fewer whole steps rather than many stumps
        if len(data) <= max_bytes:
            return data
        clean = {**_cut(clean, limit), "truncated": True}
        data = _dump(clean)
    for name in ("steps", "actions"):
        if len(data) > max_bytes:
            clean = _thin(clean, name, max_bytes)
            data = _dump(clean)
    for limit in (1024, 512, 256, 128, 64):
        if len(data) <= max_bytes:
            return data
        clean = {**_cut(clean, limit), "truncated": True}
        data = _dump(clean)
    if len(data) > max_bytes:
        keep = ("schema", "run", "target", "model", "outcome", "error", "started_at", "steps_dropped")
        data = _dump({**_cut({k: clean.get(k) for k in keep}, 256), "truncated": True})
    return data


def trace_path(directory: str | Path, trace_id: str) -> Path:
    """The file of trace ``trace_id`` in ``directory`` (``engram-trace-<id>.json``).

    Raises:
        NotFoundError: ``trace_id`` is no trace id (not a run id's letters, digits, ``-`` and ``_``).
    """
    if not isinstance(trace_id, str) or not _ID.fullmatch(trace_id):
        raise NotFoundError(f"no trace {trace_id!r}: a trace id is a run id")
    return Path(directory) / f"{PREFIX}{trace_id}{SUFFIX}"


def write_trace(settings: TraceSettings, trace: dict[str, Any]) -> str:
    """Write one trace (atomically: a temporary file renamed) in engram's folder, prune old ones, and return its id
    (the run id).

    Raises:
        TraceFolderError: the folder holds files engram did not write.
        OSError: the folder or the file cannot be written.
    """
    directory = claim(settings.directory)
    trace_id = str(trace["run"])
    path = trace_path(directory, trace_id)
    data = render(trace, settings.max_bytes)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".engram-trace-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    prune(settings)
    return trace_id


def _ours(path: Path) -> bool:
    """Whether ``path`` is a trace engram wrote: its name and its first bytes."""
    if not _NAME.fullmatch(path.name):
        return False
    try:
        with path.open("rb") as fh:
            return fh.read(len(HEADER)) == HEADER
    except OSError:
        return False


def prune(settings: TraceSettings) -> int:
    """Delete engram's traces beyond the count or past the age limit; return how many were deleted. Nothing is
    deleted in a folder without the marker, nor any file but ``engram-trace-<id>.json`` starting with the marker
    key."""
    directory = settings.directory
    if not (directory / MARKER).is_file():
        return 0
    try:
        named = [p for p in directory.iterdir() if _NAME.fullmatch(p.name)]
        stamped = sorted(((p.stat().st_mtime, p) for p in named), reverse=True)
    except OSError:
        return 0
    oldest = now_ms() / 1000 - settings.max_age_days * 86_400
    removed = 0
    for i, (mtime, path) in enumerate(stamped):
        if (i >= settings.max_count or mtime < oldest) and _ours(path):
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
    return removed


def read_trace(where: TraceSettings | str | Path, trace_id: str) -> dict[str, Any]:
    """Load trace ``trace_id`` (a run record's ``trace``) from a writer's trace settings or folder.

    Raises:
        NotFoundError: no such trace (never written, pruned, or not a trace engram wrote).
    """
    directory = where.directory if isinstance(where, TraceSettings) else Path(where)
    path = trace_path(directory, trace_id)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise NotFoundError(f"no trace {trace_id!r}: it was pruned, or never written") from None
    if not data.startswith(HEADER):
        raise NotFoundError(f"no trace {trace_id!r}: the file is not a trace engram wrote")
    found: dict[str, Any] = json.loads(data)
    return found


def run_trace(where: TraceSettings | str | Path, record: dict[str, Any]) -> dict[str, Any]:
    """The trace of a run record (its ``trace`` id, read as :func:`read_trace`), checked to be this run's.

    Raises:
        NotFoundError: the run left no trace (successes leave none unless asked), or it is gone.
    """
    trace_id = record.get("trace")
    if not trace_id:
        raise NotFoundError(f"run {record.get('id')!r} left no trace (failed runs do; successes with trace_successes)")
    trace = read_trace(where, str(trace_id))
    if trace.get("run") != record.get("id") or trace.get("target") != record.get("target"):
        raise NotFoundError(f"no trace of run {record.get('id')!r}")
    return trace
