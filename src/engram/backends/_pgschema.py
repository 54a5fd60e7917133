"""engram's PostgreSQL schema: the ordered migrations, applying them once, and reading the version.

Migrations are an ordered list recorded in ``engram_schema`` and applied under an advisory lock, so
concurrent openers do not race; features that need an extension (search needs pgvector) bring their own
list, with version numbers of their own range.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from engram import runtime
from engram.backends._pgerrors import psycopg_modules, said, translated
from engram.errors import ConfigError
from engram.redaction import redact_url

_log = logging.getLogger("engram.backends.postgres")

#: Advisory lock key held while migrating (any constant unique to engram).
_MIGRATION_LOCK = 0x656E6772616D  # "engram"
#: Seconds libpq waits for a new connection unless the URL says otherwise.
CONNECT_TIMEOUT = 3


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema change, applied once, in order."""

    version: int
    description: str
    sql: str


#: The schema, as it grew. Never edit an applied migration: append a new one.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "chunks, refs and the reflog, keyed by repository",
        """
        CREATE TABLE engram_repos (
            repo text PRIMARY KEY,
            created_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE engram_chunks (
            repo text NOT NULL,
            id bytea NOT NULL,
            data bytea NOT NULL,
            written bigint NOT NULL,
            PRIMARY KEY (repo, id)
        );
        CREATE TABLE engram_refs (
            repo text NOT NULL,
            name text NOT NULL,
            value bytea NOT NULL,
            PRIMARY KEY (repo, name)
        );
        CREATE TABLE engram_reflog (
            repo text NOT NULL,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            name text NOT NULL,
            old bytea,
            new bytea,
            time bigint NOT NULL,
            actor text NOT NULL,
            reason text NOT NULL,
            PRIMARY KEY (repo, seq)
        );
        CREATE INDEX engram_reflog_name_time ON engram_reflog (repo, name, time, seq);
        """,
    ),
    Migration(
        2,
        "vector cache: embeddings once per (repository, model, text)",
        """
        CREATE TABLE engram_vectors (
            repo text NOT NULL,
            model text NOT NULL,
            text_hash bytea NOT NULL,
            vector bytea NOT NULL,
            PRIMARY KEY (repo, model, text_hash)
        );
        """,
    ),
)

#: Databases whose schema this process has seen up to date, by URL and the newest migration version checked.
_MIGRATED: set[tuple[str, int]] = set()
runtime.register("engram.backends.postgres.migrated", reset=_MIGRATED.clear)


def ensure_schema(url: str, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[Migration]:
    """Apply ``migrations`` the database lacks (see :func:`migrate`), checking each database once per process."""
    key = (url, migrations[-1].version)
    if key in _MIGRATED:
        return []
    applied = migrate(url, migrations) if schema_version(url, migrations) < migrations[-1].version else []
    for migration in applied:
        _log.info("applied engram migration %d: %s", migration.version, migration.description)
    _MIGRATED.add(key)
    return applied


def connect_options(url: str, connect_timeout: int) -> dict[str, Any]:
    """Connection keywords: our ``connect_timeout`` unless the URL sets its own."""
    psycopg, _ = psycopg_modules()
    try:
        given = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise ConfigError(f"invalid PostgreSQL URL {redact(url)}: {said(exc)}") from None
    return {} if "connect_timeout" in given else {"connect_timeout": connect_timeout}


def redact(url: str) -> str:
    """A connection URL with its password hidden (in the user part or a ``password=`` parameter), for messages."""
    return redact_url(url)


def migrate(url: str, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[Migration]:
    """Bring the database's engram schema up to date; returns the migrations applied (in order).

    ``migrations`` defaults to the core schema; features that need an extension (search needs
    pgvector) bring their own list, with version numbers of their own range."""
    psycopg, _ = psycopg_modules()
    with (
        translated(f"migrating {redact(url)}: PostgreSQL"),
        psycopg.connect(url, **connect_options(url, CONNECT_TIMEOUT)) as conn,
        conn.transaction(),
    ):
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS engram_schema (version int PRIMARY KEY, description text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {row[0] for row in conn.execute("SELECT version FROM engram_schema")}
        applied = []
        for migration in migrations:
            if migration.version in done:
                continue
            conn.execute(migration.sql)
            conn.execute(
                "INSERT INTO engram_schema (version, description) VALUES (%s, %s)",
                (migration.version, migration.description),
            )
            applied.append(migration)
        return applied


def schema_version(url: str, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """The newest of ``migrations`` applied to the database (0 when none is)."""
    psycopg, _ = psycopg_modules()
    with (
        translated(f"PostgreSQL at {redact(url)}"),
        psycopg.connect(url, **connect_options(url, CONNECT_TIMEOUT)) as conn,
    ):
        exists = conn.execute("SELECT to_regclass('engram_schema') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return 0
        row = conn.execute(
            "SELECT coalesce(max(version), 0) FROM engram_schema WHERE version = ANY(%s)",
            ([m.version for m in migrations],),
        ).fetchone()
        return int(row[0]) if row else 0


__all__ = [
    "CONNECT_TIMEOUT",
    "MIGRATIONS",
    "Migration",
    "connect_options",
    "ensure_schema",
    "migrate",
    "redact",
    "schema_version",
]
