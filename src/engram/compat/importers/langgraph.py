"""LangGraph's stores (``SqliteStore``, ``PostgresStore``): the ``store`` table's items, with their namespaces,
timestamps and TTL.

LangGraph keeps one version per item (``prefix``, ``key``, ``value``, ``created_at``, ``updated_at``,
``expires_at``, ``ttl_minutes``), so an import is a snapshot: every item keeps its namespace (the prefix split
on periods), key, value and timestamps, and an item with a TTL keeps its expiry and its TTL in minutes (a read
through a TTL-refreshing handle extends it, as LangGraph's stores do). ``store_vectors`` is not read: engram
embeds the items itself. A version's id is ``prefix/key@updated_at``, so an item changed in LangGraph since the
last import comes in again as a new version.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engram.compat.importers.common import ImportSourceError, SourceVersion, open_sqlite, to_ms
from engram.redaction import redact_url

#: The columns LangGraph's ``store`` table has (both backends, after their TTL migration).
COLUMNS = {"prefix", "key", "value", "created_at", "updated_at", "expires_at", "ttl_minutes"}
QUERY = "SELECT prefix, key, value, created_at, updated_at, expires_at, ttl_minutes FROM store"
WHAT_SQLITE = "a LangGraph SqliteStore database"
WHAT_POSTGRES = "a LangGraph PostgresStore database"


def _version(kind: str, row: tuple[Any, ...]) -> SourceVersion:
    prefix, key, value, created, updated, expires, ttl = row
    if isinstance(value, bytes | str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ImportSourceError(f"{kind}: item {prefix}/{key} has a value that is not a JSON object")
    updated_ms = to_ms(updated) or to_ms(created) or 0
    return SourceVersion(
        id=f"{prefix}/{key}@{updated_ms}",
        namespace=tuple(str(prefix).split(".")),
        key=str(key),
        value=value,
        time_ms=updated_ms,
        created_ms=to_ms(created),
        author=kind,
        expires_ms=to_ms(expires),
        ttl_minutes=None if ttl is None else float(ttl),
    )


def _ordered(kind: str, rows: list[tuple[Any, ...]]) -> list[SourceVersion]:
    versions = [_version(kind, row) for row in rows]
    versions.sort(key=lambda v: (v.time_ms, v.namespace, v.key))
    return versions


class LangGraphSqliteSource:
    """The ``store`` table of a LangGraph ``SqliteStore`` database file."""

    kind = "langgraph-sqlite"

    def __init__(self, path: str | Path) -> None:
        self.location = str(path)
        self.connection: sqlite3.Connection = open_sqlite(path, WHAT_SQLITE, {"store": COLUMNS})

    def count(self) -> int:
        return int(self.connection.execute("SELECT count(*) FROM store").fetchone()[0])

    def versions(self) -> Iterator[SourceVersion]:
        yield from _ordered(self.kind, self.connection.execute(QUERY).fetchall())

    def close(self) -> None:
        self.connection.close()


class LangGraphPostgresSource:
    """The ``store`` table of a LangGraph ``PostgresStore`` (the URL's ``options=-csearch_path=...`` picks a schema)."""

    kind = "langgraph-postgres"

    def __init__(self, url: str) -> None:
        # psycopg is an optional dependency (the postgres extra): loaded only for this source, on purpose
        import psycopg

        self.location = redact_url(url)
        try:
            self.connection = psycopg.connect(url, connect_timeout=5, autocommit=True)
        except psycopg.Error as exc:
            raise ImportSourceError(f"cannot connect to {self.location}: {str(exc).strip()}") from None
        try:
            rows = self.connection.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'store' "
                "AND table_schema = ANY(current_schemas(false))"
            ).fetchall()
        except psycopg.Error as exc:
            self.connection.close()
            raise ImportSourceError(f"{self.location}: {str(exc).strip()}") from None
        found = {row[0] for row in rows}
        if not found:
            self.connection.close()
            raise ImportSourceError(f"{self.location} has no 'store' table: it is not {WHAT_POSTGRES}")
        if COLUMNS - found:
            self.connection.close()
            missing = ", ".join(sorted(COLUMNS - found))
            raise ImportSourceError(f"{self.location}: table 'store' lacks column(s) {missing}: not {WHAT_POSTGRES}")

    def count(self) -> int:
        row = self.connection.execute("SELECT count(*) FROM store").fetchone()
        return int(row[0]) if row else 0

    def versions(self) -> Iterator[SourceVersion]:
        yield from _ordered(self.kind, self.connection.execute(QUERY).fetchall())

    def close(self) -> None:
        self.connection.close()
