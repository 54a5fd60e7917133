"""Changing the shard map and moving tenants between shards.

A map change (:func:`add_shard`, :func:`set_status`, :func:`set_weight`) never moves data by itself: the
tenants whose hashed shard it alters are pinned where they are (:meth:`ShardCatalog.change_map`) and listed;
:func:`move_tenant` (or :func:`rebalance`, for every pinned tenant that hashes elsewhere) then moves each one.

A move copies the tenant's repository (chunks the target lacks, refs, the reflog, cached vectors) while writes
continue, checks the copy (``fsck``), copies again what arrived meanwhile, then freezes the tenant's writes
(:meth:`ShardCatalog.freeze`), copies the last delta, checks that every ref is identical on both sides, and
switches the route in the freeze's own transaction. Writes wait for the freeze (bounded) and then go to the new
shard. Search indexes are derived data: the new shard builds them on the tenant's first search. The old copy
stays until :func:`collect` drops it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from engram.backends.postgres import (
    PostgresChunkStore,
    PostgresDatabase,
    PostgresRefStore,
    ensure_schema,
    open_postgres,
    shared_database,
)
from engram.errors import ConflictError, IntegrityError, InvalidInputError, NotFoundError
from engram.maintenance import fsck
from engram.ops.remotes.sync import copy_chunks
from engram.ops.shards._rendezvous import STATUSES, Shard, rendezvous
from engram.ops.shards.catalog import WRITE_WAIT, ShardCatalog
from engram.redaction import redact_url
from engram.repo import HEADS
from engram.store.urls import conninfo_of, is_postgres
from engram.tree import NodeStore

#: Rows per batch when copying the reflog and cached vectors.
ROWS = 5_000
#: Copies made while writes continue, before the freeze (each one leaves less for the freeze to copy).
WARM_ROUNDS = 2

Progress = Callable[[str], None]


@dataclass
class MoveReport:
    """What :func:`move_tenant` did. ``frozen_seconds`` is the longest any write to the tenant waited."""

    tenant: str
    source: str
    target: str
    chunks: int = 0
    bytes: int = 0
    reflog: int = 0
    refs: int = 0
    rounds: int = 0
    seconds: float = 0.0
    frozen_seconds: float = 0.0
    head: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The report as plain values (for ``--json``)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass
class _Side:
    chunks: PostgresChunkStore
    refs: PostgresRefStore

    @property
    def db(self) -> Any:
        return self.refs.db


@dataclass
class _State:
    seq: int = 0
    copied: set[int] = field(default_factory=set)
    report: MoveReport = field(default_factory=lambda: MoveReport("", "", ""))


@contextmanager
def _database(shard: Shard) -> Iterator[PostgresDatabase]:
    ensure_schema(shard.url)
    db = shared_database(shard.url, "default")
    try:
        yield db
    finally:
        db.close()


def tenants_on(shard: Shard) -> set[str]:
    """The repositories (tenants) a shard's database holds, including copies left by moves."""
    with _database(shard) as db:
        return {row[0] for row in db.run("SELECT repo FROM engram_repos")}


def all_tenants(catalog: ShardCatalog) -> set[str]:
    """Every tenant any shard holds."""
    found: set[str] = set()
    for shard in catalog.load().shards.values():
        found |= tenants_on(shard)
    return found


def _check_url(url: str) -> str:
    if not is_postgres(url):
        raise InvalidInputError(f"a shard is a PostgreSQL database URL (postgresql://...), got {redact_url(url)!r}")
    given = {name for name, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)}
    if given & {"repo", "redis"}:
        raise InvalidInputError("a shard URL names a database, without ?repo= or ?redis=")
    return conninfo_of(url)


def _check_weight(weight: float) -> float:
    if not weight > 0 or weight != weight or weight == float("inf"):
        raise InvalidInputError(f"a shard's weight is a positive number, got {weight!r}")
    return float(weight)


def add_shard(
    catalog: ShardCatalog, url: str, *, name: str | None = None, weight: float = 1.0, status: str = "active",
    replicas: Sequence[str] = (), dry_run: bool = False,
) -> dict[str, tuple[str, str]]:  # fmt: skip
    """Add the PostgreSQL database at ``url`` as a shard (its schema is created); returns the tenants that now
    hash to it, ``{tenant: (their shard, new shard)}``: pinned where they are until moved (see :func:`rebalance`).
    ``name`` defaults to the database's name; ``replicas`` are its read replicas (see :func:`set_replicas`).
    ``dry_run``: change nothing, only say what would move.

    Raises:
        InvalidInputError: a bad URL, weight or status, or a name or URL the map has already.
    """
    conninfo = _check_url(url)
    standbys = [_check_url(replica) for replica in replicas]
    _check_weight(weight)
    if status not in STATUSES:
        raise InvalidInputError(f"unknown shard status {status!r}: use {', '.join(STATUSES)}")
    chosen = name or _database_name(conninfo)
    if not chosen or not all(ch.isalnum() or ch in "-_" for ch in chosen):
        raise InvalidInputError(f"invalid shard name {chosen!r}: use letters, digits, '-' and '_'")
    shards = catalog.load().shards
    if chosen in shards:
        raise InvalidInputError(f"the shard map has a shard named {chosen!r} already (pass --name)")
    if any(s.url == conninfo for s in shards.values()):
        raise InvalidInputError("that database is a shard already")
    if not dry_run:
        ensure_schema(conninfo)

    def change(current: dict[str, Shard]) -> dict[str, Shard]:
        return {**current, chosen: Shard(chosen, conninfo, weight, status)}

    moved = catalog.change_map(change, lambda: _tenants_of(shards.values()), dry_run=dry_run)
    if standbys and not dry_run:
        catalog.set_replicas(chosen, standbys)
    return moved


def set_replicas(catalog: ShardCatalog, name: str, replicas: Sequence[str]) -> None:
    """Make ``replicas`` (URLs of streaming standbys of shard ``name``'s database, ``pg_basebackup -R`` or a
    provider's read replicas) the shard's read replicas, replacing its old ones; none removes them. Servers with
    the catalog route each tenant's reads to its shard's replicas under the read-your-writes rule
    (:mod:`engram.server.consistency`) from their next map check on.

    Raises:
        NotFoundError: no shard of that name.
        InvalidInputError: a URL that is not a PostgreSQL database URL (or carries ``?repo=``/``?redis=``).
    """
    catalog.set_replicas(name, [_check_url(replica) for replica in replicas])


def set_status(catalog: ShardCatalog, name: str, status: str, *, dry_run: bool = False) -> dict[str, tuple[str, str]]:
    """Set a shard's status (``active``, ``readonly``, ``draining``); returns the tenants the change pins (see
    :func:`add_shard`)."""
    if status not in STATUSES:
        raise InvalidInputError(f"unknown shard status {status!r}: use {', '.join(STATUSES)}")
    return _update(catalog, name, lambda s: Shard(s.name, s.url, s.weight, status), dry_run)


def set_weight(catalog: ShardCatalog, name: str, weight: float, *, dry_run: bool = False) -> dict[str, tuple[str, str]]:
    """Set a shard's weight; returns the tenants the change pins (see :func:`add_shard`)."""
    _check_weight(weight)
    return _update(catalog, name, lambda s: Shard(s.name, s.url, weight, s.status), dry_run)


def _update(
    catalog: ShardCatalog, name: str, edit: Callable[[Shard], Shard], dry_run: bool
) -> dict[str, tuple[str, str]]:
    shards = catalog.load().shards
    if name not in shards:
        raise NotFoundError(f"no shard {name!r}; see `engram shard list`")

    def change(current: dict[str, Shard]) -> dict[str, Shard]:
        return {**current, name: edit(current[name])}

    return catalog.change_map(change, lambda: _tenants_of(shards.values()), dry_run=dry_run)


def _tenants_of(shards: Any) -> set[str]:
    found: set[str] = set()
    for shard in shards:
        found |= tenants_on(shard)
    return found


def _database_name(conninfo: str) -> str:
    named = dict(parse_qsl(urlsplit(conninfo).query)).get("dbname")
    return named or urlsplit(conninfo).path.lstrip("/")


def misplaced(catalog: ShardCatalog) -> dict[str, tuple[str, str]]:
    """Pinned tenants that hash to another active shard, or live on a draining one: ``{tenant: (shard, where it
    belongs)}`` (what :func:`rebalance` moves)."""
    current = catalog.load()
    out: dict[str, tuple[str, str]] = {}
    for tenant, shard in sorted(current.overrides.items()):
        if tenant in current.moving:
            continue
        home = rendezvous(tenant, current.shards.values())
        if home is not None and home.name != shard:
            out[tenant] = (shard, home.name)
    return out


def rebalance(
    catalog: ShardCatalog, *, write_wait: float = WRITE_WAIT, progress: Progress | None = None
) -> list[MoveReport]:
    """Move every tenant :func:`misplaced` lists to the shard it hashes to; returns the moves."""
    reports = []
    for tenant, (_, home) in misplaced(catalog).items():
        reports.append(move_tenant(catalog, tenant, home, write_wait=write_wait, progress=progress))
    return reports


@contextmanager
def _opened(shard: Shard, tenant: str) -> Iterator[_Side]:
    chunks, refs = open_postgres(shard.url, tenant)
    try:
        yield _Side(chunks, refs)
    finally:
        chunks.close()
        refs.close()


def move_tenant(
    catalog: ShardCatalog, tenant: str, to: str, *, write_wait: float = WRITE_WAIT, progress: Progress | None = None,
) -> MoveReport:  # fmt: skip
    """Move ``tenant``'s repository to shard ``to`` (see the module docstring); writes continue meanwhile,
    pausing at most for the final copy.

    Raises:
        NotFoundError: no shard ``to``, or no tenant ``tenant`` (no refs on the shard it routes to).
        InvalidInputError: the tenant is on ``to`` already, or ``to`` is not active.
        IntegrityError: the copy failed its check (the route is left as it was).
        UnavailableError: writes in flight did not pause within ``write_wait`` (the route is left as it was).
    """
    started = time.monotonic()
    current = catalog.load()
    source = current.route(tenant)
    target = current.shards.get(to)
    if target is None:
        raise NotFoundError(f"no shard {to!r}; see `engram shard list`")
    if target.name == source.name:
        raise InvalidInputError(f"tenant {tenant!r} is on shard {to!r} already")
    if target.status != "active":
        raise InvalidInputError(f"shard {to!r} is {target.status}: move tenants to an active shard")
    with _opened(source, tenant) as src:
        if not src.refs.list():
            raise NotFoundError(f"no tenant {tenant!r} on shard {source.name!r} (it has no refs); see `engram tenants`")
    say = progress or (lambda _message: None)
    state = _State(report=MoveReport(tenant, source.name, target.name))
    catalog.begin_move(tenant, source.name, target.name)
    try:
        with _opened(source, tenant) as src, _opened(target, tenant) as dst:
            _wipe_refs(dst, tenant)
            for round_no in range(1, WARM_ROUNDS + 1):
                _sync(src, dst, tenant, state)
                say(f"copy {round_no}: {state.report.chunks} chunk(s), {state.report.reflog} reflog entries so far")
                if round_no == 1:
                    _copy_vectors(src, dst, tenant)
                    report = fsck(dst.chunks, dst.refs, NodeStore(dst.chunks))
                    if not report.ok:
                        raise IntegrityError(f"the copy on {to!r} fails fsck: {len(report.missing)} missing, "
                                             f"{len(report.corrupt)} corrupt chunk(s); nothing switched")  # fmt: skip
            with catalog.freeze(tenant, write_wait) as frozen:
                paused = time.monotonic()
                _sync(src, dst, tenant, state, complete=True)
                _verify(src, dst)
                frozen.switch(source.name, target.name)
                state.report.frozen_seconds = time.monotonic() - paused
            main = dst.refs.get(HEADS + "main")
            state.report.head = None if main is None else main.hex()
            say(f"switched {tenant} to {to} (writes paused {state.report.frozen_seconds * 1000:.0f} ms)")
    except BaseException:
        catalog.abort_move(tenant)
        raise
    state.report.seconds = time.monotonic() - started
    return state.report


#: Tables of a repository a move keeps on the target when it starts: content, by hash, reused by the copy.
_KEPT = ("engram_chunks", "engram_vectors", "engram_repos")


def _repo_tables(db: PostgresDatabase) -> list[str]:
    """The engram tables of a database that hold rows per repository (core, search, and any later ones)."""
    rows = db.run(
        "SELECT table_name FROM information_schema.columns WHERE column_name = 'repo' "
        "AND table_schema = current_schema() AND table_name LIKE 'engram%%' ORDER BY table_name"
    )
    return [row[0] for row in rows]


def _wipe_refs(dst: _Side, tenant: str) -> None:
    """Forget what a target holds for the tenant (a copy left by an earlier move away) except its chunks and
    vectors, which the copy reuses: refs, reflog, and derived search rows (rebuilt on the first search)."""
    tables = [table for table in _repo_tables(dst.db) if table not in _KEPT]

    def work(conn: Any) -> None:
        for table in tables:
            conn.execute(f'DELETE FROM "{table}" WHERE repo = %s', (tenant,))  # names from the database itself

    dst.db.transaction(work)


_ENTRY = "SELECT seq, name, old, new, time, actor, reason FROM engram_reflog WHERE repo = %s"


def _new_entries(src: _Side, tenant: str, state: _State, complete: bool) -> list[tuple[Any, ...]]:
    """Reflog entries not copied yet: those after the last one copied, or with ``complete`` every one not copied
    (a writer's entry can become visible after a later-numbered one: the final copy, made while no one writes,
    catches those)."""
    entries: list[tuple[Any, ...]] = []
    if complete:
        seqs = {int(row[0]) for row in src.db.run("SELECT seq FROM engram_reflog WHERE repo = %s", (tenant,))}
        wanted = sorted(seqs - state.copied)
        for i in range(0, len(wanted), ROWS):
            entries.extend(src.db.run(_ENTRY + " AND seq = ANY(%s) ORDER BY seq", (tenant, wanted[i : i + ROWS])))
        return entries
    while True:
        rows = src.db.run(_ENTRY + " AND seq > %s ORDER BY seq LIMIT %s",
                          (tenant, entries[-1][0] if entries else state.seq, ROWS))  # fmt: skip
        entries.extend(rows)
        if len(rows) < ROWS:
            return entries


def _sync(src: _Side, dst: _Side, tenant: str, state: _State, *, complete: bool = False) -> None:
    """One copy: new reflog entries, then every ref as the source has it (read after the reflog, so at least as
    new), the chunks both reach that the target lacks, then the reflog entries (in order) and the refs."""
    entries = _new_entries(src, tenant, state, complete)
    refs = src.refs.list("")
    starts = set(refs.values()) | {bytes(row[3]) for row in entries if row[3] is not None}
    known = set(dst.refs.list("").values())  # the target's refs were set after their chunks: complete there
    copied = copy_chunks(src.chunks, dst.chunks, starts, known=known)
    state.report.chunks += copied.chunks
    state.report.bytes += copied.bytes
    for i in range(0, len(entries), ROWS):
        rows = entries[i : i + ROWS]
        dst.db.run(
            "INSERT INTO engram_reflog (repo, name, old, new, time, actor, reason) "
            "SELECT %s, n, o, w, t, a, r FROM unnest(%s::text[], %s::bytea[], %s::bytea[], %s::bigint[], %s::text[], "
            "%s::text[]) WITH ORDINALITY AS x(n, o, w, t, a, r, i) ORDER BY i",
            (tenant, *([row[k] for row in rows] for k in range(1, 7))),
        )
    if entries:
        state.seq = max(state.seq, max(int(row[0]) for row in entries))
        state.copied.update(int(row[0]) for row in entries)
        state.report.reflog += len(entries)

    def put_refs(conn: Any) -> None:
        conn.execute("DELETE FROM engram_refs WHERE repo = %s", (tenant,))
        if refs:
            conn.execute(
                "INSERT INTO engram_refs (repo, name, value) SELECT %s, n, v FROM unnest(%s::text[], %s::bytea[]) "
                "AS x(n, v)",
                (tenant, list(refs), list(refs.values())),
            )

    dst.db.transaction(put_refs)
    state.report.refs = len(refs)
    state.report.rounds += 1


def _copy_vectors(src: _Side, dst: _Side, tenant: str) -> None:
    """Copy the tenant's cached embeddings, so nothing is embedded again on the new shard."""
    last: tuple[str, bytes] = ("", b"")
    while True:
        rows = src.db.run(
            "SELECT model, text_hash, vector FROM engram_vectors WHERE repo = %s AND (model, text_hash) > (%s, %s) "
            "ORDER BY model, text_hash LIMIT %s",
            (tenant, last[0], last[1], ROWS),
        )
        if not rows:
            return
        dst.db.run(
            "INSERT INTO engram_vectors (repo, model, text_hash, vector) SELECT %s, m, h, v FROM "
            "unnest(%s::text[], %s::bytea[], %s::bytea[]) AS x(m, h, v) ON CONFLICT DO NOTHING",
            (tenant, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
        )
        last = (rows[-1][0], bytes(rows[-1][1]))


def _verify(src: _Side, dst: _Side) -> None:
    """Every ref is the same on both sides and the target has every chunk they name. (Everything under them is
    there too: the copies write children before parents, and the first copy passed ``fsck``.)"""
    theirs, ours = src.refs.list(""), dst.refs.list("")
    if theirs != ours:
        differ = sorted(name for name in theirs.keys() | ours.keys() if theirs.get(name) != ours.get(name))
        raise ConflictError(f"refs differ after the final copy ({', '.join(differ[:5])}); nothing switched")
    missing = dst.chunks.has_many(set(theirs.values()))
    if missing:
        raise IntegrityError(f"{len(missing)} chunk(s) still missing on the target after the copy; nothing switched")


def leftovers(catalog: ShardCatalog) -> dict[str, list[str]]:
    """Copies a shard holds of tenants that live elsewhere (left by moves): ``{shard: [tenant, ...]}``."""
    current = catalog.load()
    out: dict[str, list[str]] = {}
    for shard in current.shards.values():
        stale = sorted(t for t in tenants_on(shard) if t not in current.moving and current.route(t).name != shard.name)
        if stale:
            out[shard.name] = stale
    return out


def collect(catalog: ShardCatalog, *, dry_run: bool = True) -> dict[str, list[str]]:
    """Drop the copies :func:`leftovers` lists (every row of those repositories on those shards); returns them.
    ``dry_run`` (the default) only lists them."""
    found = leftovers(catalog)
    if dry_run:
        return found
    shards = catalog.load().shards
    for name, tenants in found.items():
        with _database(shards[name]) as db:
            tables = _repo_tables(db)
            current = catalog.load()
            still = [t for t in tenants if current.route(t).name != name and t not in current.moving]

            def work(conn: Any, tables: list[str] = tables, still: list[str] = still) -> None:
                for table in tables:
                    conn.execute(f'DELETE FROM "{table}" WHERE repo = ANY(%s)', (still,))  # names from the database

            db.transaction(work)
    return found


__all__ = [
    "MoveReport",
    "add_shard",
    "all_tenants",
    "collect",
    "leftovers",
    "misplaced",
    "move_tenant",
    "rebalance",
    "set_replicas",
    "set_status",
    "set_weight",
    "tenants_on",
]
