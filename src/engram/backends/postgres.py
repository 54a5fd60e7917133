"""PostgreSQL backend: chunks, refs and the reflog in tables keyed by repository id.

Every row carries the repository (tenant) it belongs to and every query names it, so tenants
sharing a database never see each other's data. Refs move by compare-and-swap in one statement
that also appends the reflog entry, so a ref change and its log entry commit together or not at
all, and many processes writing one branch serialise on the row, not on a lock of ours.

The schema is created and upgraded by :func:`migrate` (``engram db migrate``, and on first open):
an ordered list of migrations recorded in ``engram_schema``, applied under an advisory lock so
concurrent openers do not race.
"""

from __future__ import annotations

import builtins
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from engram.backends.base import ChunkStore, RefLogEntry, RefStore, now_ms
from engram.errors import ConfigError, StorageError
from engram.hashing import ChunkId

_log = logging.getLogger(__name__)

#: Advisory lock key held while migrating (any constant unique to engram).
_MIGRATION_LOCK = 0x656E6772616D  # "engram"
_PAGE = 1000


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

_REPO = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool
    except ImportError:  # pragma: no cover - depends on the install
        raise ConfigError("PostgreSQL stores need the postgres extra: pip install 'engram[postgres]'") from None
    return psycopg, psycopg_pool


class PostgresDatabase:
    """A connection pool on one PostgreSQL database, shared by the stores of one repository."""

    def __init__(self, url: str, repo: str = "default", *, min_size: int = 1, max_size: int = 16) -> None:
        if not _REPO.match(repo):
            raise ConfigError(f"invalid repository id {repo!r}: use 1-128 letters, digits, '-' or '_'")
        psycopg, psycopg_pool = _psycopg()
        self.url = url
        self.repo = repo
        self._errors: tuple[type[BaseException], ...] = (psycopg.Error, psycopg_pool.PoolTimeout)
        try:
            self.pool = psycopg_pool.ConnectionPool(
                url,
                min_size=min_size,
                max_size=max_size,
                kwargs={"autocommit": True},
                open=False,
                name=f"engram-{repo}",
            )
            self.pool.open(wait=True, timeout=15)
        except self._errors as exc:
            raise StorageError(f"cannot connect to PostgreSQL at {_redact(url)}: {exc}") from exc

    def run(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows (an empty list for statements without rows)."""
        try:
            with self.pool.connection() as conn:
                cur = conn.execute(sql, params)
                return cur.fetchall() if cur.description is not None else []
        except self._errors as exc:
            raise StorageError(f"PostgreSQL: {exc}") from exc

    def rowcount(self, sql: str, params: Any = None) -> int:
        """Run one statement and return how many rows it changed."""
        try:
            with self.pool.connection() as conn:
                return int(conn.execute(sql, params).rowcount)
        except self._errors as exc:
            raise StorageError(f"PostgreSQL: {exc}") from exc

    def close(self) -> None:
        self.pool.close()


def _redact(url: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


def migrate(url: str, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[Migration]:
    """Bring the database's engram schema up to date; returns the migrations applied (in order).

    ``migrations`` defaults to the core schema; features that need an extension (search needs
    pgvector) bring their own list, with version numbers of their own range."""
    psycopg, _ = _psycopg()
    try:
        with psycopg.connect(url) as conn, conn.transaction():
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
    except psycopg.Error as exc:
        raise StorageError(f"migrating {_redact(url)} failed: {exc}") from exc


def schema_version(url: str, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """The newest of ``migrations`` applied to the database (0 when none is)."""
    psycopg, _ = _psycopg()
    try:
        with psycopg.connect(url) as conn:
            exists = conn.execute("SELECT to_regclass('engram_schema') IS NOT NULL").fetchone()
            if not exists or not exists[0]:
                return 0
            row = conn.execute(
                "SELECT coalesce(max(version), 0) FROM engram_schema WHERE version = ANY(%s)",
                ([m.version for m in migrations],),
            ).fetchone()
            return int(row[0]) if row else 0
    except psycopg.Error as exc:
        raise StorageError(f"PostgreSQL: {exc}") from exc


class PostgresChunkStore(ChunkStore):
    """Chunks of one repository in ``engram_chunks`` (PostgreSQL compresses large values itself)."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self.repo = db.repo

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        rows = self.db.run("SELECT id, data FROM engram_chunks WHERE repo = %s AND id = ANY(%s)", (self.repo, wanted))
        return {bytes(cid): bytes(data) for cid, data in rows}

    def has_many(self, ids: Iterable[ChunkId]) -> set[ChunkId]:
        wanted = set(ids)
        if not wanted:
            return set()
        rows = self.db.run("SELECT id FROM engram_chunks WHERE repo = %s AND id = ANY(%s)", (self.repo, list(wanted)))
        return wanted - {bytes(row[0]) for row in rows}

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        if not chunks:
            return
        ids, blobs = list(chunks), list(chunks.values())
        self.db.run(
            "INSERT INTO engram_chunks (repo, id, data, written) "
            "SELECT %s, i, d, %s FROM unnest(%s::bytea[], %s::bytea[]) AS t(i, d) "
            "ON CONFLICT (repo, id) DO UPDATE SET written = excluded.written",
            (self.repo, now_ms(), ids, blobs),
        )

    def iter_ids(
        self, start: ChunkId | None = None, end: ChunkId | None = None, *, written_before: int | None = None
    ) -> Iterator[ChunkId]:
        last: bytes | None = None
        while True:
            conditions, params = ["repo = %s"], [self.repo]
            for clause, value in (("id >= %s", start), ("id < %s", end), ("id > %s", last)):
                if value is not None:
                    conditions.append(clause)
                    params.append(value)  # type: ignore[arg-type]
            if written_before is not None:
                conditions.append("written < %s")
                params.append(written_before)  # type: ignore[arg-type]
            rows = self.db.run(
                f"SELECT id FROM engram_chunks WHERE {' AND '.join(conditions)} ORDER BY id LIMIT {_PAGE}", params
            )
            for (cid,) in rows:
                yield bytes(cid)
            if len(rows) < _PAGE:
                return
            last = bytes(rows[-1][0])

    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        wanted = list(ids)
        if wanted:
            self.db.run("DELETE FROM engram_chunks WHERE repo = %s AND id = ANY(%s)", (self.repo, wanted))

    def close(self) -> None:
        self.db.close()


class RefMoveHook(Protocol):
    """Work done in the same transaction as a branch ref's move (the search index's maintenance).

    ``prepare`` runs before the transaction (no lock held: read and compute there); ``apply`` runs
    inside it, after the compare-and-swap succeeded, on the transaction's connection. If ``apply``
    raises, the ref does not move.
    """

    def prepare(self, name: str, old: ChunkId | None, new: ChunkId | None) -> Any: ...

    def apply(self, conn: Any, name: str, old: ChunkId | None, new: ChunkId | None, prepared: Any) -> None: ...


class PostgresRefStore(RefStore):
    """Refs of one repository in ``engram_refs``, changed by one compare-and-swap statement each."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self.repo = db.repo
        #: Called in the transaction of every branch move (``heads/...``) when set.
        self.hook: RefMoveHook | None = None

    def get(self, name: str) -> ChunkId | None:
        rows = self.db.run("SELECT value FROM engram_refs WHERE repo = %s AND name = %s", (self.repo, name))
        return bytes(rows[0][0]) if rows else None

    def set(
        self, name: str, new: ChunkId | None, expected: ChunkId | None, *, actor: str = "", reason: str = ""
    ) -> bool:
        # One statement: the guarded change and its reflog entry commit together or not at all.
        if expected is None and new is None:
            return self.get(name) is None
        if expected is None:
            change = (
                "INSERT INTO engram_refs (repo, name, value) VALUES (%(repo)s, %(name)s, %(new)s) "
                "ON CONFLICT DO NOTHING RETURNING name"
            )
        elif new is None:
            change = (
                "DELETE FROM engram_refs WHERE repo = %(repo)s AND name = %(name)s AND value = %(old)s RETURNING name"
            )
        else:
            change = (
                "UPDATE engram_refs SET value = %(new)s WHERE repo = %(repo)s AND name = %(name)s "
                "AND value = %(old)s RETURNING name"
            )
        params = {"repo": self.repo, "name": name, "old": expected, "new": new, "time": now_ms()}
        sql = (
            f"WITH moved AS ({change}) "
            "INSERT INTO engram_reflog (repo, name, old, new, time, actor, reason) "
            "SELECT %(repo)s, name, %(old)s::bytea, %(new)s::bytea, %(time)s, %(actor)s, %(reason)s "
            "FROM moved RETURNING seq"
        )
        values = {**params, "actor": actor, "reason": reason}
        hook = self.hook
        if hook is None or not name.startswith("heads/"):
            return bool(self.db.run(sql, values))
        prepared = hook.prepare(name, expected, new)
        try:
            with self.db.pool.connection() as conn, conn.transaction():
                moved = bool(conn.execute(sql, values).fetchall())
                if moved:
                    hook.apply(conn, name, expected, new, prepared)
                return moved
        except self.db._errors as exc:
            raise StorageError(f"PostgreSQL: {exc}") from exc

    def list(self, prefix: str = "") -> dict[str, ChunkId]:
        rows = self.db.run(
            "SELECT name, value FROM engram_refs WHERE repo = %s AND left(name, %s) = %s ORDER BY name",
            (self.repo, len(prefix), prefix),
        )
        return {name: bytes(value) for name, value in rows}

    def reflog(self, name: str | None = None, limit: int | None = None) -> builtins.list[RefLogEntry]:
        rows = self.db.run(
            "SELECT name, old, new, time, actor, reason FROM engram_reflog "
            "WHERE repo = %s AND (%s::text IS NULL OR name = %s) ORDER BY seq DESC LIMIT %s",
            (self.repo, name, name, limit),
        )
        return [
            RefLogEntry(n, None if o is None else bytes(o), None if w is None else bytes(w), t, a, r)
            for n, o, w, t, a, r in rows
        ]

    def value_at(self, name: str, time_ms: int) -> ChunkId | None:
        rows = self.db.run(
            "SELECT new FROM engram_reflog WHERE repo = %s AND name = %s AND time <= %s "
            "ORDER BY time DESC, seq DESC LIMIT 1",
            (self.repo, name, time_ms),
        )
        return bytes(rows[0][0]) if rows and rows[0][0] is not None else None

    def prune_reflog(self, before_ms: int) -> int:
        return self.db.rowcount(
            "DELETE FROM engram_reflog WHERE repo = %s AND time < %s AND seq NOT IN "
            "(SELECT max(seq) FROM engram_reflog WHERE repo = %s GROUP BY name)",
            (self.repo, before_ms, self.repo),
        )

    def close(self) -> None:
        self.db.close()


def open_postgres(url: str, repo: str = "default") -> tuple[PostgresChunkStore, PostgresRefStore]:
    """Stores of repository ``repo`` in the database at ``url``, migrating the schema first if needed."""
    if schema_version(url) < MIGRATIONS[-1].version:
        for migration in migrate(url):
            _log.info("applied engram migration %d: %s", migration.version, migration.description)
    db = PostgresDatabase(url, repo)
    db.run("INSERT INTO engram_repos (repo) VALUES (%s) ON CONFLICT DO NOTHING", (repo,))
    return PostgresChunkStore(db), PostgresRefStore(db)


__all__ = [
    "MIGRATIONS",
    "Migration",
    "PostgresChunkStore",
    "PostgresDatabase",
    "PostgresRefStore",
    "RefMoveHook",
    "migrate",
    "open_postgres",
    "schema_version",
]
