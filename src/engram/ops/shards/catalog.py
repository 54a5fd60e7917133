"""The shard catalog: a small PostgreSQL database holding the shard map.

Three tables: ``engram_shards`` (name, URL, weight, status), ``engram_shard_tenants`` (per-tenant overrides:
tenants moved or pinned to a shard, and tenants being moved) and ``engram_shard_map`` (one row: the map's
version, bumped in the same transaction as every change, so routers notice a change with one cheap read).
``engram_shard_keys`` records the routing keys of tenants that use routing rules (:mod:`.routing`), and
``engram_shard_replicas`` the read replicas of each shard (streaming standbys that serve its tenants' reads).

Advisory locks in the catalog keep writes and map changes apart, in every process:

- a write to a tenant's repository holds two *shared* locks for the length of its ref's compare-and-swap: the
  map lock and the tenant's lock (:meth:`ShardCatalog.write_gate`), then checks the map version;
- a change of the map (add a shard, change a status or weight) holds the map lock *exclusively*
  (:meth:`ShardCatalog.change_map`), and a tenant's move holds the tenant's lock exclusively while it copies
  the last writes and switches routing (:meth:`ShardCatalog.freeze`). PostgreSQL queues lock requests in turn,
  so a waiting exclusive lock holds back new writers: they wait (bounded) and then see the new map.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engram.backends.postgres import Migration, PostgresDatabase, ensure_schema, redact
from engram.errors import ConfigError, ConflictError, InvalidInputError, NotFoundError, UnavailableError
from engram.ops.shards._rendezvous import STATUSES, Shard, changes, route
from engram.store.urls import is_postgres

T = TypeVar("T")

#: First key of the catalog's two-key advisory locks ("shrd"); the second is 0 for the map, else a tenant hash.
LOCK_CLASS = 0x73687264
#: Seconds a write waits behind a move's freeze or a map change before it fails as unavailable (503).
WRITE_WAIT = 10.0

CATALOG_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        501,
        "shard catalog: shards, per-tenant overrides, the map version, routing keys",
        f"""
        CREATE TABLE engram_shards (
            name text PRIMARY KEY,
            url text NOT NULL UNIQUE,
            weight double precision NOT NULL CHECK (weight > 0),
            status text NOT NULL CHECK (status IN ({", ".join(f"'{s}'" for s in STATUSES)})),
            added timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE engram_shard_tenants (
            tenant text PRIMARY KEY,
            shard text NOT NULL REFERENCES engram_shards (name),
            state text NOT NULL CHECK (state IN ('placed', 'moving')),
            target text REFERENCES engram_shards (name),
            updated timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE engram_shard_map (
            id int PRIMARY KEY CHECK (id = 1),
            version bigint NOT NULL
        );
        INSERT INTO engram_shard_map (id, version) VALUES (1, 1);
        CREATE TABLE engram_shard_keys (
            tenant text NOT NULL,
            key text NOT NULL,
            PRIMARY KEY (tenant, key)
        );
        """,
    ),
    Migration(
        502,
        "shard catalog: read replicas of each shard",
        """
        CREATE TABLE engram_shard_replicas (
            shard text NOT NULL REFERENCES engram_shards (name),
            url text NOT NULL,
            position int NOT NULL,
            PRIMARY KEY (shard, url)
        );
        """,
    ),
)


class TenantMovedError(UnavailableError):
    """A write reached a tenant's old shard after the tenant moved (or its route changed): retry it, and it
    lands on the new shard. The server retries such a write once by itself."""


@dataclass(frozen=True, slots=True)
class ShardMap:
    """One version of the shard map: shards by name, per-tenant overrides, tenants being moved, and each shard's
    read replicas (database URLs of its streaming standbys, in order; shards without any are left out)."""

    version: int
    shards: dict[str, Shard]
    overrides: dict[str, str] = field(default_factory=dict)
    moving: dict[str, str] = field(default_factory=dict)
    replicas: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def route(self, tenant: str) -> Shard:
        """The shard ``tenant`` lives on.

        Raises:
            ConfigError: no shard is active (and the tenant has no override).
        """
        found = route(tenant, self.shards, self.overrides)
        if found is None:
            raise ConfigError("the shard map has no active shard: add one with `engram shard add URL`")
        return found


def tenant_lock_key(tenant: str) -> int:
    """The second key of a tenant's advisory lock: a stable signed 32-bit hash (never 0, the map's key)."""
    digest = hashlib.blake2b(tenant.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True) or 1


def _wait_sql(timeout: float) -> str:
    return f"{max(1, round(timeout * 1000))}ms"


class ShardCatalog:
    """The shard map in a PostgreSQL database at ``url`` (its tables are created on first use)."""

    def __init__(self, url: str) -> None:
        if not is_postgres(url):
            raise ConfigError(f"the shard catalog is a PostgreSQL database, got {redact(url)!r}")
        ensure_schema(url, CATALOG_MIGRATIONS)
        self.url = url
        self.db = PostgresDatabase(url, "catalog", max_size=8)

    def close(self) -> None:
        """Close the catalog's connections."""
        self.db.close()

    def version(self) -> int:
        """The map's version (one indexed read: what routers poll)."""
        return int(self.db.run("SELECT version FROM engram_shard_map WHERE id = 1")[0][0])

    def load(self) -> ShardMap:
        """The whole map, read in one transaction (a consistent version)."""
        return self.db.transaction(_load)

    def shard(self, name: str) -> Shard:
        """One shard by name.

        Raises:
            NotFoundError: no shard of that name.
        """
        found = self.load().shards.get(name)
        if found is None:
            raise NotFoundError(f"no shard {name!r}; see `engram shard list`")
        return found

    def routing_keys(self, tenant: str) -> list[str]:
        """The routing keys a tenant with routing rules has written to, sorted."""
        rows = self.db.run("SELECT key FROM engram_shard_keys WHERE tenant = %s ORDER BY key", (tenant,))
        return [row[0] for row in rows]

    def add_routing_key(self, tenant: str, key: str) -> None:
        """Record that ``tenant`` has a repository for routing key ``key`` (idempotent)."""
        self.db.run("INSERT INTO engram_shard_keys (tenant, key) VALUES (%s, %s) ON CONFLICT DO NOTHING", (tenant, key))

    def set_replicas(self, name: str, urls: Sequence[str]) -> None:
        """Make ``urls`` (PostgreSQL URLs of streaming standbys of the shard's database) shard ``name``'s read
        replicas, replacing those it had (none: it has none); bumps the map version, so servers pick them up.

        Raises:
            NotFoundError: no shard of that name.
            InvalidInputError: a URL that is not a PostgreSQL database URL, or one given twice.
        """
        for url in urls:
            if not is_postgres(url):
                raise InvalidInputError(f"a read replica is a PostgreSQL database URL, got {redact(url)!r}")
        if len(set(urls)) != len(urls):
            raise InvalidInputError("a read replica is named twice")

        def work(conn: Any) -> None:
            if conn.execute("SELECT 1 FROM engram_shards WHERE name = %s", (name,)).fetchone() is None:
                raise NotFoundError(f"no shard {name!r}; see `engram shard list`")
            conn.execute("DELETE FROM engram_shard_replicas WHERE shard = %s", (name,))
            for position, url in enumerate(urls):
                conn.execute(
                    "INSERT INTO engram_shard_replicas (shard, url, position) VALUES (%s, %s, %s)",
                    (name, url, position),
                )
            conn.execute("UPDATE engram_shard_map SET version = version + 1 WHERE id = 1")

        self.db.transaction(work)

    def change_map(self, change: Callable[[dict[str, Shard]], dict[str, Shard]], tenants: Callable[[], set[str]],
                   *, dry_run: bool = False, timeout: float = WRITE_WAIT) -> dict[str, tuple[str, str]]:  # fmt: skip
        """Apply ``change`` (old shards -> new shards) to the map, holding the map lock exclusively.

        Tenants whose hashed shard the change would alter (``tenants()`` lists every tenant the shards hold) are
        pinned where they are by an override in the same transaction, so no tenant loses its data; they are
        returned as ``{tenant: (their shard, the shard they now hash to)}`` (what a rebalance moves). With
        ``dry_run`` nothing is written.
        """

        def work(conn: Any) -> dict[str, tuple[str, str]]:
            if not dry_run:  # writes of every tenant wait meanwhile (bounded): the map and its pins change at once
                conn.execute(
                    "SELECT pg_advisory_xact_lock(%s, 0) FROM (SELECT set_config('lock_timeout', %s, true)) AS t",
                    (LOCK_CLASS, _wait_sql(timeout)),
                )
            before = _load(conn)
            after = change(dict(before.shards))
            moved = changes(tenants(), before.shards, before.overrides, after)
            if dry_run:
                return moved
            for name in before.shards.keys() - after.keys():
                raise InvalidInputError(f"shards are never removed here ({name}); set its status instead")
            for shard in after.values():
                conn.execute(
                    "INSERT INTO engram_shards (name, url, weight, status) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (name) DO UPDATE SET url = excluded.url, weight = excluded.weight, "
                    "status = excluded.status",
                    (shard.name, shard.url, shard.weight, shard.status),
                )
            for tenant, (old, _) in moved.items():
                conn.execute(
                    "INSERT INTO engram_shard_tenants (tenant, shard, state) VALUES (%s, %s, 'placed')", (tenant, old)
                )
            conn.execute("UPDATE engram_shard_map SET version = version + 1 WHERE id = 1")
            return moved

        return self.db.transaction(work)

    def begin_move(self, tenant: str, source: str, target: str) -> None:
        """Mark ``tenant`` as moving from ``source`` to ``target`` (pinned to ``source`` until the switch).

        Raises:
            ConflictError: the tenant's route changed meanwhile, or another move of it is under way.
        """

        def work(conn: Any) -> None:
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (LOCK_CLASS,))
            current = _load(conn)
            if current.route(tenant).name != source:
                raise ConflictError(f"tenant {tenant!r} is no longer on shard {source!r}; run the move again")
            if tenant in current.moving and current.moving[tenant] != target:
                raise ConflictError(
                    f"tenant {tenant!r} is being moved to {current.moving[tenant]!r} already (a move that stopped "
                    f"half way resumes when run again: engram shard move {tenant} --to {current.moving[tenant]})"
                )
            conn.execute(
                "INSERT INTO engram_shard_tenants (tenant, shard, state, target) VALUES (%s, %s, 'moving', %s) "
                "ON CONFLICT (tenant) DO UPDATE SET shard = excluded.shard, state = 'moving', "
                "target = excluded.target, updated = now()",
                (tenant, source, target),
            )
            conn.execute("UPDATE engram_shard_map SET version = version + 1 WHERE id = 1")

        self.db.transaction(work)

    def abort_move(self, tenant: str) -> None:
        """Forget an unfinished move: the tenant stays pinned where it is."""
        self.db.run(
            "UPDATE engram_shard_tenants SET state = 'placed', target = NULL, updated = now() "
            "WHERE tenant = %s AND state = 'moving'",
            (tenant,),
        )

    @contextmanager
    def write_gate(self, tenant: str, timeout: float = WRITE_WAIT) -> Iterator[Gate]:
        """Hold the shared map and tenant locks for the block (a write's ref move); yields a :class:`Gate`
        with the map version read after the locks were granted.

        Raises:
            UnavailableError: a move's freeze or a map change held the locks longer than ``timeout``.
        """
        with self.db.connection() as conn, conn.transaction():
            try:
                conn.execute(
                    "SELECT pg_advisory_xact_lock_shared(%s, 0), pg_advisory_xact_lock_shared(%s, %s) "
                    "FROM (SELECT set_config('lock_timeout', %s, true)) AS t",
                    (LOCK_CLASS, LOCK_CLASS, tenant_lock_key(tenant), _wait_sql(timeout)),
                )
            except Exception as exc:
                if getattr(exc, "sqlstate", None) != "55P03":
                    raise
                raise UnavailableError(
                    f"tenant {tenant!r} is frozen by a move or a shard map change for over {timeout:g} s", 1.0
                ) from exc
            # a statement of its own: its snapshot is taken after the locks were granted
            yield Gate(conn, int(conn.execute("SELECT version FROM engram_shard_map WHERE id = 1").fetchone()[0]))

    @contextmanager
    def freeze(self, tenant: str, timeout: float = WRITE_WAIT) -> Iterator[Freeze]:
        """Hold ``tenant``'s lock exclusively: writes in flight finish first, new ones wait. The yielded
        :class:`Freeze` switches the tenant's route in the same transaction (atomic with the release).

        Raises:
            UnavailableError: the writes in flight did not finish within ``timeout``.
        """
        with self.db.connection() as conn, conn.transaction():
            try:
                conn.execute(
                    "SELECT pg_advisory_xact_lock(%s, %s) FROM (SELECT set_config('lock_timeout', %s, true)) AS t",
                    (LOCK_CLASS, tenant_lock_key(tenant), _wait_sql(timeout)),
                )
            except Exception as exc:
                if getattr(exc, "sqlstate", None) != "55P03":
                    raise
                raise UnavailableError(f"writes to {tenant!r} did not pause within {timeout:g} s", 1.0) from exc
            conn.execute("SELECT set_config('lock_timeout', '0', true)")
            yield Freeze(conn, tenant)


class Gate:
    """The write gate of one write: the map version seen under its locks, and the map read on its connection."""

    def __init__(self, conn: Any, version: int) -> None:
        self._conn = conn
        self.version = version

    def load(self) -> ShardMap:
        """The whole map, read on the gate's connection (no second connection while the locks are held)."""
        return _load(self._conn)


class Freeze:
    """A tenant frozen by :meth:`ShardCatalog.freeze`: :meth:`switch` re-routes it when the block commits."""

    def __init__(self, conn: Any, tenant: str) -> None:
        self._conn = conn
        self.tenant = tenant

    def switch(self, source: str, target: str) -> None:
        """Route the tenant to ``target`` (an override, and a map version bump) if it is still being moved
        from ``source`` to ``target``.

        Raises:
            ConflictError: the move was aborted or changed meanwhile (nothing is switched).
        """
        moved = self._conn.execute(
            "UPDATE engram_shard_tenants SET shard = %s, state = 'placed', target = NULL, updated = now() "
            "WHERE tenant = %s AND shard = %s AND state = 'moving' AND target = %s RETURNING tenant",
            (target, self.tenant, source, target),
        ).fetchall()
        if not moved:
            raise ConflictError(f"the move of {self.tenant!r} was aborted or changed meanwhile; nothing switched")
        self._conn.execute("UPDATE engram_shard_map SET version = version + 1 WHERE id = 1")


def _load(conn: Any) -> ShardMap:
    version = int(conn.execute("SELECT version FROM engram_shard_map WHERE id = 1").fetchone()[0])
    shards = {
        name: Shard(name, url, float(weight), status)
        for name, url, weight, status in conn.execute(
            "SELECT name, url, weight, status FROM engram_shards ORDER BY name"
        ).fetchall()
    }
    overrides: dict[str, str] = {}
    moving: dict[str, str] = {}
    for tenant, shard, state, target in conn.execute(
        "SELECT tenant, shard, state, target FROM engram_shard_tenants"
    ).fetchall():
        overrides[tenant] = shard
        if state == "moving":
            moving[tenant] = target
    replicas: dict[str, tuple[str, ...]] = {}
    for shard, url in conn.execute("SELECT shard, url FROM engram_shard_replicas ORDER BY shard, position").fetchall():
        replicas[shard] = (*replicas.get(shard, ()), url)
    return ShardMap(version, shards, overrides, moving, replicas)


__all__ = [
    "CATALOG_MIGRATIONS",
    "LOCK_CLASS",
    "WRITE_WAIT",
    "Freeze",
    "Gate",
    "ShardCatalog",
    "ShardMap",
    "TenantMovedError",
    "redact",
    "tenant_lock_key",
]
