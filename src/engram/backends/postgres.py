"""PostgreSQL backend: chunks, refs and the reflog in tables keyed by repository id.

Every row carries the repository (tenant) it belongs to and every query names it, so tenants
sharing a database never see each other's data. Refs move by compare-and-swap in one statement
that also appends the reflog entry, so a ref change and its log entry commit together or not at
all. Many processes writing one branch take turns on an advisory lock per ref (fairness: its waiters
are served in order), while the compare-and-swap keeps every move correct.

The schema is created and upgraded by :func:`migrate` (``engram db migrate``, and on first open):
an ordered list of migrations recorded in ``engram_schema``, applied under an advisory lock so
concurrent openers do not race.

Driver errors are translated in one place, :func:`translate_error` (used through :func:`translated`
and :meth:`PostgresDatabase.connection` by every path that talks to PostgreSQL): input PostgreSQL
refuses is an :class:`~engram.errors.InvalidInputError`, a database that is down, restarting or
overloaded an :class:`~engram.errors.UnavailableError`, anything else a
:class:`~engram.errors.StorageError`. After a lost connection, requests fail fast for a short window
instead of each waiting for a connection (a small circuit breaker), and one request then probes again.
"""

from __future__ import annotations

import builtins
import copy
import hashlib
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, Protocol, TypeVar

from engram import runtime
from engram.backends._pgerrors import (
    ROLLED_BACK,
    Breaker,
    connection_lost,
    dependency_name,
    is_driver_error,
    psycopg_modules,
    said,
    sqlstate,
    translate_error,
    translated,
)
from engram.backends._pgpools import pool_stats, track
from engram.backends._pgschema import (
    CONNECT_TIMEOUT,
    MIGRATIONS,
    Migration,
    connect_options,
    ensure_schema,
    migrate,
    redact,
    schema_version,
)
from engram.backends.base import ChunkStore, RefLogEntry, RefStore, now_ms
from engram.breakers import unregister
from engram.errors import ConfigError, EngramError, UnavailableError
from engram.hashing import ChunkId

T = TypeVar("T")

_log = logging.getLogger(__name__)

#: Advisory lock key held while migrating (any constant unique to engram).
#: First key of the two-key advisory locks that queue the writers of one ref (the second is a hash of
#: repository and ref name); two-key locks never collide with the one-key migration lock.
_REF_LOCK_CLASS = 0x656E67  # "eng"
_PAGE = 1000
#: Seconds libpq waits for a new connection, unless the URL sets ``connect_timeout`` (libpq's minimum is 2).
#: Seconds a request waits for a pooled connection before PostgreSQL counts as unavailable.
ACQUIRE_TIMEOUT = 1.0
#: Seconds requests fail fast after a lost connection before one of them probes the database again (the
#: default of the ``postgresql`` breakers, ``engram.breakers.DEFAULTS``; kept for compatibility).
RETRY_WINDOW = 2.0
#: Seconds the probe (the one request let through after a lost connection) waits for a fresh connection:
#: shorter than a readiness check, so that one reports what the database said, not a timeout of its own.
PROBE_TIMEOUT = 0.5
#: Times a statement or transaction that PostgreSQL rolled back (serialization failure, deadlock) is run.
ROLLBACK_ATTEMPTS = 3
#: Joined into a single autocommit statement (``FROM ..., ASYNC_COMMIT``): its commit does not wait for
#: the write-ahead log to reach the disk (``synchronous_commit = off`` for that transaction only).
#:
#: Only for statements that write what no ref reaches yet (chunks before their ref moves, vector-cache rows,
#: derived index rows): PostgreSQL writes and flushes its log in order, so the synchronous commit of the ref
#: move that follows flushes every earlier commit with it, including those of other sessions (a commit that a
#: transaction could see is in the log before that transaction's own commit). A put that returned is as
#: durable as before, with one fsync instead of one per statement; a crash loses at most rows nothing points
#: to yet (``gc`` removes leftover chunks), as on SQLite (:mod:`engram.backends.sqlite`). Never inside a
#: transaction that moves a ref: the setting holds until its commit.
ASYNC_COMMIT = "(SELECT set_config('synchronous_commit', 'off', true)) AS async_commit"


_REPO = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class PostgresDatabase:
    """A connection pool on one PostgreSQL database, shared by the stores of one repository.

    Args:
        url: the connection URL (libpq parameters such as ``connect_timeout`` may be given in it).
        repo: the repository id every row is keyed by.
        min_size: connections kept open.
        max_size: connections at most.
        timeout: seconds a request waits for a pooled connection before failing as unavailable.
        connect_timeout: seconds libpq waits for a new connection (unless the URL sets it).
        retry_window: seconds requests fail fast after a lost connection before one probes again (None: the
            ``postgresql`` setting of :mod:`engram.breakers`, 2 s unless configured).
    """

    def __init__(
        self,
        url: str,
        repo: str = "default",
        *,
        min_size: int = 1,
        max_size: int = 16,
        timeout: float = ACQUIRE_TIMEOUT,
        connect_timeout: int = CONNECT_TIMEOUT,
        retry_window: float | None = None,
    ) -> None:
        if not _REPO.match(repo):
            raise ConfigError(f"invalid repository id {repo!r}: use 1-128 letters, digits, '-' or '_'")
        _, psycopg_pool = psycopg_modules()
        self.url = url
        self.repo = repo
        self.timeout = timeout
        self.max_size = max_size
        self._breaker = Breaker(retry_window, dependency_name(url), url)
        self._busy = [0]  # connections held by callers right now (shared by every view of this pool)
        self._busy_lock = threading.Lock()
        self._shared: tuple[str, ...] | None = None  # the registry key of a pool shared by several repositories
        self._closed = False
        track(self)
        kwargs: dict[str, Any] = {"autocommit": True, **connect_options(url, connect_timeout)}
        self.pool = psycopg_pool.ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs=kwargs,
            open=False,
            name=f"engram-{repo}",
            timeout=timeout,
            # Give up reconnecting in the background soon: the next request then asks for a connection
            # at once, instead of waiting out a backoff that grows through a long outage.
            reconnect_timeout=max(5.0, 2.0 * kwargs.get("connect_timeout", connect_timeout)),
        )
        try:
            with translated(f"cannot connect: PostgreSQL at {redact(url)}"):
                self.pool.open(wait=True, timeout=float(kwargs.get("connect_timeout", connect_timeout)) + timeout)
        except EngramError:
            self.pool.close()  # its workers would keep reconnecting in the background
            raise

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A pooled connection (autocommit): every path that talks to PostgreSQL takes one here.

        Driver errors raised inside are translated (:func:`translate_error`). While the database is
        known to be down this raises :class:`UnavailableError` at once, without waiting for a connection.
        """
        probe = self._breaker.admit()
        answered: bool | None = None  # did the database answer? (None: we cannot tell)
        try:
            with self.pool.connection(timeout=min(self.timeout, PROBE_TIMEOUT) if probe else self.timeout) as conn:
                with self._busy_lock:
                    self._busy[0] += 1
                try:
                    yield conn
                finally:
                    with self._busy_lock:
                        self._busy[0] -= 1
            answered = True
        except EngramError:
            answered = True  # translated by a connection of its own, which judged the database then
            raise
        except Exception as exc:
            if not is_driver_error(exc):
                answered = True
                raise
            error = translate_error(exc)
            lost, unreachable = connection_lost(exc), self._nobody_connected(exc)
            answered = not (lost or unreachable)
            if lost:
                drain = getattr(self.pool, "drain", None)  # psycopg_pool >= 3.3
                if drain is not None:
                    drain()  # its idle siblings are likely dead too: replace them, do not hand them out
            if not answered:
                self._breaker.opened(said(exc), suspect=lost and not probe)
            raise error from exc
        finally:
            if answered:
                self._breaker.closed(probe)
            elif answered is None and probe:
                self._breaker.released()

    def _nobody_connected(self, exc: BaseException) -> bool:
        """A pool timeout while no caller holds a connection: the database is unreachable, not busy."""
        _, psycopg_pool = psycopg_modules()
        return isinstance(exc, psycopg_pool.PoolTimeout) and self._busy[0] == 0

    def transaction(self, work: Callable[[Any], T], *, pipelined: bool = False) -> T:
        """Run ``work(conn)`` in one transaction, run again when PostgreSQL rolls it back
        (serialization failure, deadlock): the whole transaction is undone then, so it is safe.

        ``pipelined`` runs it in pipeline mode: ``BEGIN`` goes with the first statements and ``COMMIT`` with
        the last, and statements wait for the server only when ``work`` reads a result.
        """
        return self._attempts(work, transaction=True, pipelined=pipelined)

    def run(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows (an empty list for statements without rows)."""

        def work(conn: Any) -> list[tuple[Any, ...]]:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description is not None else []

        return self._attempts(work, transaction=False)

    def rowcount(self, sql: str, params: Any = None) -> int:
        """Run one statement and return how many rows it changed."""
        return self._attempts(lambda conn: int(conn.execute(sql, params).rowcount), transaction=False)

    def _attempts(self, work: Callable[[Any], T], *, transaction: bool, pipelined: bool = False) -> T:
        for attempt in range(1, ROLLBACK_ATTEMPTS + 1):
            try:
                with self.connection() as conn:
                    if not transaction:
                        return work(conn)
                    with conn.pipeline() if pipelined else nullcontext(), conn.transaction():
                        return work(conn)
            except UnavailableError as exc:
                if attempt == ROLLBACK_ATTEMPTS or not sqlstate(exc.__cause__ or exc).startswith(ROLLED_BACK):
                    raise
                time.sleep(random.uniform(0, 0.01 * attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    @property
    def available(self) -> bool:
        """False while requests fail fast after a lost connection."""
        return not self._breaker.open

    def view(self, repo: str) -> PostgresDatabase:
        """This database for another repository's rows: the same pool, connections and breaker."""
        if not _REPO.match(repo):
            raise ConfigError(f"invalid repository id {repo!r}: use 1-128 letters, digits, '-' or '_'")
        other = copy.copy(self)
        other.repo = repo
        other._closed = False
        return other

    def close(self) -> None:
        """Close the pool (a shared pool: once the last repository using it closes). Idempotent: the chunk and
        ref stores of a repository share this object and both close it."""
        if self._closed:
            return
        self._closed = True
        if self._shared is None or _release_shared(self._shared):
            self.pool.close()
            unregister(self._breaker)


#: One pool per database (URL and pool options) for every repository of this process that uses it: a server
#: with many tenants holds one set of connections per database, not one per tenant.
_SHARED: dict[tuple[str, ...], tuple[PostgresDatabase, int]] = {}

_SHARED_LOCK = threading.Lock()


def shared_database(url: str, repo: str, **options: Any) -> PostgresDatabase:
    """The database at ``url`` for repository ``repo``, on the pool this process shares for that database."""
    key = (url, *sorted(f"{name}={value}" for name, value in options.items()))
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is not None and not found[0].pool.closed:
            db, users = found
            _SHARED[key] = (db, users + 1)
            return db.view(repo)
    db = PostgresDatabase(url, "default", **options)
    db._shared = key
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is not None and not found[0].pool.closed:  # another thread opened it meanwhile: use that one
            db.pool.close()
            db, users = found
            _SHARED[key] = (db, users + 1)
        else:
            _SHARED[key] = (db, 1)
    return db.view(repo)


def _close_shared() -> None:
    """Close every shared pool and forget them (:mod:`engram.runtime`'s hook): repositories still open on one fail
    their next call; the next open makes a new pool."""
    with _SHARED_LOCK:
        found = [db for db, _ in _SHARED.values()]
        _SHARED.clear()
    for db in found:
        unregister(db._breaker)
    runtime.close_each(db.pool for db in found)


runtime.register("engram.backends.postgres.shared", close=_close_shared, reset=_close_shared)


def _release_shared(key: tuple[str, ...]) -> bool:
    """One user fewer of a shared pool; True when it was the last (the caller closes the pool)."""
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None:
            return False
        db, users = found
        if users > 1:
            _SHARED[key] = (db, users - 1)
            return False
        del _SHARED[key]
        return True


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
        """Store chunks in one statement whose commit does not wait for a log flush (:data:`ASYNC_COMMIT`):
        chunks become reachable only through a ref move, whose synchronous commit makes them durable too."""
        if not chunks:
            return
        ids = sorted(chunks)  # in the primary key's order: each index page is visited once, not per chunk
        blobs = [chunks[cid] for cid in ids]
        self.db.run(
            "INSERT INTO engram_chunks (repo, id, data, written) "
            f"SELECT %s, i, d, %s FROM unnest(%s::bytea[], %s::bytea[]) AS t(i, d), {ASYNC_COMMIT} "
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

    ``prepare`` runs before the transaction (no lock held: read and compute there). ``start`` queues the
    transaction's first statements (say, reading and locking a row) behind the compare-and-swap and returns
    what ``apply`` needs to read their results; ``apply`` runs after the compare-and-swap succeeded, on the
    transaction's connection. If ``apply`` raises, the ref does not move. When ``pipelined`` says so of
    what ``prepare`` returned, the transaction runs in pipeline mode (no ``COPY`` then): ``BEGIN``, the
    swap and ``start``'s statements go in one round trip, and ``COMMIT`` with ``apply``'s last statements.
    """

    def prepare(self, name: str, old: ChunkId | None, new: ChunkId | None) -> Any: ...

    def pipelined(self, prepared: Any) -> bool: ...

    def start(self, conn: Any, name: str) -> Any: ...

    def apply(
        self, conn: Any, name: str, old: ChunkId | None, new: ChunkId | None, prepared: Any, started: Any
    ) -> None: ...


class PostgresRefStore(RefStore):
    """Refs of one repository in ``engram_refs``, changed by one compare-and-swap statement each."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self.repo = db.repo
        #: Called in the transaction of every branch move (``heads/...``) when set.
        self.hook: RefMoveHook | None = None
        # A held lock keeps a connection: leave at least half of the pool to the work done under locks.
        self._lock_slots = threading.BoundedSemaphore(max(1, db.max_size // 2))
        self._held = threading.local()

    @contextmanager
    def lock(self, name: str, timeout: float | None = None) -> Iterator[None]:
        """Queue with the writers of ``name`` in every process: a transaction-scoped advisory lock keyed by
        (repository, ref), held on a connection of its own until the block ends.

        PostgreSQL grants a lock's waiters in turn, so no writer starves; the lock ends with its
        transaction (the pooled connection is never returned holding it) or with the session of a
        process that died. When half of the pool already holds locks, the block runs unqueued (its
        compare-and-swap still keeps it correct). A thread that holds the lock may take it again.
        """
        held: set[str] = self._held.__dict__.setdefault("names", set())
        if name in held or not self._lock_slots.acquire(blocking=False):
            yield
            return
        try:
            with self.db.connection() as conn, conn.pipeline(), conn.transaction():
                wait = "0" if timeout is None else f"{max(1, round(timeout * 1000))}ms"  # 0: no limit
                try:  # BEGIN, the timeout, the lock and the ref's value once it is granted: one round trip
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(%s, %s) FROM (SELECT set_config('lock_timeout', %s, true)) AS t",
                        (_REF_LOCK_CLASS, _ref_key(self.repo, name), wait),
                    )
                    # a statement of its own: its snapshot is taken once the lock is granted
                    rows = conn.execute(_REF_VALUE, (self.repo, name)).fetchall()
                except Exception as exc:
                    if sqlstate(exc) != "55P03":
                        raise
                    raise UnavailableError(
                        f"gave up after waiting {timeout:.1f} s behind the other writers of {name!r}", 1.0
                    ) from exc
                held.add(name)
                # the holder's first get() of this ref answers from here (its compare-and-swap checks it anyway)
                self._held.__dict__["seen"] = (name, bytes(rows[0][0]) if rows else None)
                try:
                    yield
                finally:
                    held.discard(name)
                    self._held.__dict__.pop("seen", None)
        finally:
            self._lock_slots.release()

    def get(self, name: str) -> ChunkId | None:
        seen: tuple[str, ChunkId | None] | None = self._held.__dict__.pop("seen", None)
        if seen is not None and seen[0] == name:
            return seen[1]  # read as the lock was granted, moments ago
        rows = self.db.run(_REF_VALUE, (self.repo, name))
        return bytes(rows[0][0]) if rows else None

    def set(
        self, name: str, new: ChunkId | None, expected: ChunkId | None, *, actor: str = "", reason: str = ""
    ) -> bool:
        self._held.__dict__.pop("seen", None)  # a move makes the value read with the lock old
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

        def move(conn: Any) -> bool:
            cursor = conn.execute(sql, values)
            started = hook.start(conn, name)  # queued behind the swap (pipelined: one round trip with BEGIN)
            moved = bool(cursor.fetchall())
            if moved:
                hook.apply(conn, name, expected, new, prepared, started)
            return moved

        return self.db.transaction(move, pipelined=hook.pipelined(prepared))

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


_REF_VALUE = "SELECT value FROM engram_refs WHERE repo = %s AND name = %s"


def _ref_key(repo: str, name: str) -> int:
    """The second key of a ref's advisory lock: a stable signed 32-bit hash of (repository, ref name)."""
    digest = hashlib.blake2b(f"{repo}\x00{name}".encode(errors="surrogatepass"), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


def open_postgres(url: str, repo: str = "default", **options: Any) -> tuple[PostgresChunkStore, PostgresRefStore]:
    """Stores of repository ``repo`` in the database at ``url``, migrating the schema first if needed.

    ``options`` go to :class:`PostgresDatabase` (pool sizes, ``timeout``, ``connect_timeout``, ``retry_window``).
    Every repository of the same database in this process shares one pool (:func:`shared_database`).
    """
    ensure_schema(url)
    db = shared_database(url, repo, **options)
    db.run("INSERT INTO engram_repos (repo) VALUES (%s) ON CONFLICT DO NOTHING", (repo,))
    return PostgresChunkStore(db), PostgresRefStore(db)


__all__ = [
    "ASYNC_COMMIT",
    "MIGRATIONS",
    "Migration",
    "PostgresChunkStore",
    "PostgresDatabase",
    "PostgresRefStore",
    "RefMoveHook",
    "ensure_schema",
    "migrate",
    "open_postgres",
    "pool_stats",
    "redact",
    "schema_version",
    "shared_database",
    "translate_error",
    "translated",
]
