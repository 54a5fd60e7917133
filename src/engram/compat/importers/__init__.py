"""Importers: bring another memory system's data into engram, with its history where the source keeps one.

``import_from(kind, source, memory)`` reads a source and writes it into ``memory``'s branch; the CLI's
``engram import --from KIND PATH|URL`` is this function with progress bars. Kinds (:data:`IMPORTERS`):

- ``mem0``: mem0's history database (each memory's versions become commits in time order, with their authors,
  and mem0's ids as sources) and, beside it, its local Qdrant store's payloads (user/agent/run scopes, metadata).
- ``langgraph-sqlite`` / ``langgraph-postgres``: LangGraph's ``store`` table (items, namespaces, timestamps, TTL).
- ``claude-slack``: claude-slack's SQLite database (projects, agents, channels, members, messages, notes), into
  :mod:`engram.channels`.

Importing is idempotent and exactly once under a crash: every commit records the source ids it wrote (in the
same commit as the data; claude-slack's in a ledger commit, and a re-run finds the messages written after the last
one), and a re-run skips them (a second import adds nothing; one after a crash completes it). ``dry_run=True``
counts what would be written and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engram.compat.importers.claude_slack import import_claude_slack
from engram.compat.importers.common import ImportReport, ImportSourceError, Progress, Source, SourceVersion
from engram.compat.importers.langgraph import LangGraphPostgresSource, LangGraphSqliteSource
from engram.compat.importers.mem0 import Mem0Source
from engram.compat.importers.writing import write_history, write_snapshot
from engram.errors import InvalidInputError
from engram.store import Memory

#: Opens a kind's source from a path or URL.
Opener = Callable[[str], Source]

#: kind -> (how to open its source, whether its versions are a history: one commit each at their own time).
IMPORTERS: dict[str, tuple[Opener, bool]] = {
    "mem0": (Mem0Source, True),
    "langgraph-sqlite": (LangGraphSqliteSource, False),
    "langgraph-postgres": (LangGraphPostgresSource, False),
}

#: Every kind ``import_from`` takes (claude-slack writes through engram.channels, not as versions).
KINDS = (*IMPORTERS, "claude-slack")


def open_source(kind: str, location: str | Path) -> Source:
    """Open a source of versions (checked: the wrong kind of file raises :class:`ImportSourceError`)."""
    if kind not in IMPORTERS:
        raise InvalidInputError(f"unknown source {kind!r}: use one of {', '.join(IMPORTERS)}")
    return IMPORTERS[kind][0](str(location))


def count_source(kind: str, location: str | Path) -> int:
    """How many versions (claude-slack: rows) the source holds, for a progress bar's total."""
    if kind == "claude-slack":
        return import_claude_slack(str(location), None, dry_run=True).seen
    source = open_source(kind, location)
    try:
        return source.count()
    finally:
        source.close()


def import_from(
    kind: str,
    source: str | Path,
    memory: Memory,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> ImportReport:
    """Import a ``kind`` source (a file path, or a PostgreSQL URL for ``langgraph-postgres``) into ``memory``'s
    branch; with ``dry_run`` write nothing and report what would be written. ``progress`` is called with the
    number of source records handled since its last call."""
    if kind == "claude-slack":
        return import_claude_slack(str(source), memory, dry_run=dry_run, progress=progress)
    opened = open_source(kind, source)
    try:
        report = ImportReport(kind, opened.location, dry_run=dry_run)
        write = write_history if IMPORTERS[kind][1] else write_snapshot
        write(memory, opened, report, dry_run=dry_run, progress=progress)
        return report
    finally:
        opened.close()


__all__ = [
    "IMPORTERS",
    "KINDS",
    "ImportReport",
    "ImportSourceError",
    "Source",
    "SourceVersion",
    "count_source",
    "import_from",
    "open_source",
]
