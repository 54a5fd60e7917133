"""What every importer shares: the versions a source yields, the report, and the idempotence rule.

A source yields :class:`SourceVersion` records in time order (oldest first). Each carries an id that is
unique and stable in its source (mem0's history row id, LangGraph's ``prefix/key@updated_at``), and every
commit an import makes records the ids it wrote in its metadata (``{"import": {"from": kind, "ids": [...]}}``).
The idempotence rule: a version whose id a commit of the branch already records is skipped, so running the
same import twice adds nothing, and a source that changed since adds only its new versions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from engram.errors import InvalidInputError
from engram.store import Memory

#: Called with how many source versions were handled since its last call.
Progress = Callable[[int], None]

#: The commit metadata key an import records its source ids under.
METADATA_KEY = "import"


class ImportSourceError(InvalidInputError):
    """The source is not what the importer reads: not a SQLite file, without the expected tables, unreachable."""


@dataclass(frozen=True, slots=True)
class SourceVersion:
    """One version of one item in a source (``value`` None: the item was deleted at ``time_ms``)."""

    id: str
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any] | None
    time_ms: int
    created_ms: int | None = None
    author: str | None = None
    expires_ms: int | None = None
    ttl_minutes: float | None = None
    message: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    #: The value fields search reads (None: the store's).
    index: tuple[str, ...] | None = None
    #: Further items written in the same commit, unsearchable (an id index): (namespace, key, value or None).
    also: tuple[tuple[tuple[str, ...], str, dict[str, Any] | None], ...] = ()


class Source(Protocol):
    """A source of versions: how many there are, and the versions oldest first."""

    kind: str
    location: str

    def count(self) -> int:
        """How many versions :meth:`versions` yields."""
        ...

    def versions(self) -> Iterator[SourceVersion]:
        """Every version, in time order (oldest first)."""
        ...

    def close(self) -> None:
        """Release the source's connection."""
        ...


@dataclass(slots=True)
class ImportReport:
    """What an import did (or, with ``dry_run``, would do)."""

    kind: str
    source: str
    dry_run: bool = False
    #: Versions the source holds.
    seen: int = 0
    #: Items (distinct namespace/key) that got at least one new version.
    items: int = 0
    #: Versions written (deletes included).
    versions: int = 0
    #: Commits made.
    commits: int = 0
    #: Versions skipped because an earlier import wrote them.
    skipped: int = 0
    #: The ids of the commits made, oldest first.
    commit_ids: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: what was (or would be) added and what was skipped."""
        verb = "would add" if self.dry_run else "added"
        return (
            f"{self.kind}: {verb} {self.items:,} item(s), {self.versions:,} version(s) in {self.commits:,} "
            f"commit(s); skipped {self.skipped:,} already imported"
        )


def imported_ids(memory: Memory, kind: str) -> set[str]:
    """The source ids earlier imports of ``kind`` wrote on this branch (read from its commits' metadata)."""
    found: set[str] = set()
    for commit in memory.log():
        recorded = commit.metadata.get(METADATA_KEY)
        if isinstance(recorded, dict) and recorded.get("from") == kind:
            found.update(str(i) for i in recorded.get("ids", ()))
    return found


def import_metadata(kind: str, location: str, ids: Iterable[str]) -> dict[str, Any]:
    """The commit metadata recording that ``ids`` of a ``kind`` source were imported."""
    return {METADATA_KEY: {"from": kind, "source": location, "ids": list(ids)}}


def to_ms(value: Any) -> int | None:
    """UTC milliseconds from a datetime, an ISO-8601 / SQLite timestamp text, or epoch seconds (None stays None).

    A timestamp without a zone is UTC (SQLite's ``CURRENT_TIMESTAMP`` is)."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return int(value * 1000)
    if isinstance(value, str):
        try:  # SQLite's strftime('%s') stores epoch seconds as text
            return int(float(value) * 1000)
        except ValueError:
            pass
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ImportSourceError(f"not a timestamp: {value!r}") from None
    if not isinstance(value, datetime):
        raise ImportSourceError(f"not a timestamp: {value!r}")
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def open_sqlite(path: str | Path, what: str, tables: dict[str, set[str]]) -> sqlite3.Connection:
    """Open ``path`` read-only as SQLite and check it has ``tables`` with (at least) their columns; a file
    that is missing, not SQLite or without them raises :class:`ImportSourceError` naming ``what`` it should be."""
    file = Path(path)
    if not file.is_file():
        raise ImportSourceError(f"{file}: no such file (expected {what})")
    with file.open("rb") as fp:
        if fp.read(16) != b"SQLite format 3\x00":
            raise ImportSourceError(f"{file} is not a SQLite database (expected {what})")
    connection = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)
    try:
        for table, columns in tables.items():
            found = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
            if not found:
                raise ImportSourceError(f"{file} has no {table!r} table: it is not {what}")
            missing = columns - found
            if missing:
                raise ImportSourceError(
                    f"{file}: table {table!r} lacks column(s) {', '.join(sorted(missing))}: it is not {what}"
                )
    except sqlite3.DatabaseError as exc:
        connection.close()
        raise ImportSourceError(f"{file} is not a readable SQLite database ({exc}): expected {what}") from None
    except ImportSourceError:
        connection.close()
        raise
    return connection
