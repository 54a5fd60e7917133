"""Opening a store from a URL: the embedded default, memory, a SQLite file or PostgreSQL, each by its opener in
:data:`OPENERS` (the URL is parsed once, by :class:`~engram.store.urls.StoreUrl`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from engram import runtime
from engram.backends import ChunkStore, LruChunkStore, MemoryChunkStore, MemoryRefStore, RefStore, open_sqlite
from engram.backends.postgres import MIGRATIONS, PostgresDatabase, open_postgres, schema_version
from engram.backends.postgres import migrate as run_migrations
from engram.backends.s3 import S3ChunkStore
from engram.backends.sqlite import SqliteDatabase
from engram.backends.wrappers import CacheCountingChunkStore, MeteredChunkStore, MeteredRefStore
from engram.embed import Embedder
from engram.errors import ConfigError, RefNotFoundError
from engram.index.cache import MemoryVectorCache, PostgresVectorCache, SqliteVectorCache, VectorCache
from engram.repo import Repository
from engram.store.aio import AsyncMemory
from engram.store.indexing import IndexPool, choose_embedder
from engram.store.memory import Memory
from engram.store.operations import TTLConfig
from engram.store.querycache import QueryCache
from engram.store.urls import Kind, StoreUrl, check_tenant, conninfo_of

if TYPE_CHECKING:
    from engram.backends.redis import RedisHealth


def tenant_url(url: str | None, tenant: str) -> str:
    """The store URL of one tenant's repository, derived from a server's base store URL (see
    :meth:`StoreUrl.tenant <engram.store.urls.StoreUrl.tenant>`).

    Tenants never share a repository: on SQLite each tenant gets its own file under
    ``<store dir>/tenants/<tenant>/``; in memory, its own store (``:memory:`` again, opened afresh);
    on PostgreSQL, its own repository id (``?repo=<tenant>``).

    Examples:
        >>> tenant_url("/srv/engram", "acme")
        '/srv/engram/tenants/acme/engram.db'
    """
    check_tenant(tenant)
    return StoreUrl.parse(url).tenant(tenant)


def local_file(url: str | None) -> Path | None:
    """The SQLite file behind a store URL (None for stores without a local file: memory, PostgreSQL)."""
    return StoreUrl.parse(url).path


def checkout_path(url: str | None) -> Path | None:
    """The file where the CLI remembers a store's checked-out branch (None for stores without a local
    file: memory, PostgreSQL)."""
    path = local_file(url)
    return None if path is None else path.with_name(path.name + ".HEAD")


def checked_out(url: str | None) -> str:
    """The branch ``check_out`` remembered for the store at ``url``, else ``main``."""
    path = checkout_path(url)
    try:
        return (path.read_text(encoding="utf-8").strip() if path is not None else "") or "main"
    except OSError:
        return "main"


def check_out(memory: Memory, url: str | None, branch: str) -> None:
    """Remember ``branch`` as the one later invocations on the store at ``url`` use (a file beside it).

    Raises:
        RefNotFoundError: no such branch.
        ConfigError: the store has no local file to remember it in (memory, PostgreSQL).
    """
    path = checkout_path(url)
    if path is None:
        raise ConfigError("this store keeps no checkout (no local file): name the branch on each call instead")
    if branch not in memory.branches():
        raise RefNotFoundError(f"no branch {branch!r}")
    path.write_text(branch + "\n", encoding="utf-8")


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What :func:`migrate` did: the migrations applied (version, description), and whether the database has
    pgvector (search then runs in PostgreSQL tables; without it, in process)."""

    applied: list[tuple[int, str]]
    search_in_database: bool


def migrate(url: str) -> MigrationReport:
    """Create or upgrade engram's schema in the PostgreSQL database at ``url`` (safe to run again; concurrent
    runs wait for each other): the core tables, and the search tables when the server has pgvector."""
    from engram.store.pgsearch import SEARCH_MIGRATIONS, has_pgvector  # the search engine's modules: PostgreSQL only

    conninfo = conninfo_of(url)
    applied = run_migrations(conninfo)
    db = PostgresDatabase(conninfo)
    try:
        search = has_pgvector(db)
    finally:
        db.close()
    if search:
        applied += run_migrations(conninfo, SEARCH_MIGRATIONS)
    return MigrationReport([(m.version, m.description) for m in applied], search)


def schema_status(url: str) -> dict[str, tuple[int, int]]:
    """``{"core": (database version, this engram's), "search": (...)}`` for the PostgreSQL database at ``url``
    (version 0: not created)."""
    from engram.store.pgsearch import SEARCH_MIGRATIONS  # the search engine's modules: PostgreSQL only

    conninfo = conninfo_of(url)
    return {
        "core": (schema_version(conninfo), MIGRATIONS[-1].version),
        "search": (schema_version(conninfo, SEARCH_MIGRATIONS), SEARCH_MIGRATIONS[-1].version),
    }


def open_repository(url: str | None = None, *, redis: str | None = None) -> Repository:
    """Open (creating if needed) the repository behind a store URL (see :func:`open`)."""
    return _open(StoreUrl.parse(url), redis)[0]


def s3_chunk_store(url: StoreUrl) -> ChunkStore | None:
    """The S3 chunk store a PostgreSQL store URL names (``?chunks=s3://bucket/prefix``), or None."""
    if url.chunks is None:
        return None
    where = url.chunks
    return S3ChunkStore(where.bucket, where.prefix, url.repo, endpoint=where.endpoint, region=where.region)


#: One health tracker (and connection pool) per Redis URL, shared by every repository cached there.
_REDIS: dict[str, RedisHealth] = {}
_REDIS_LOCK = threading.Lock()


def _with_redis(chunks: ChunkStore, refs: RefStore, redis_url: str, repo_id: str) -> tuple[ChunkStore, RefStore]:
    from engram.backends.redis import RedisHealth, redis_caches

    with _REDIS_LOCK:
        health = _REDIS.get(redis_url)
        if health is None:
            health = _REDIS[redis_url] = RedisHealth(redis_url)
    chunks, refs = redis_caches(CacheCountingChunkStore(chunks, "redis", above=False), refs, health, repo=repo_id)
    return CacheCountingChunkStore(chunks, "redis", above=True), refs  # hit ratio at the seam


def cache_status(store: Memory | Repository, *, probe: bool = False) -> dict[str, Any] | None:
    """The Redis cache's status (``{"ok", "degraded", "error", "since"}``), or None without one;
    ``probe=True`` retries a connection that is down (if a retry is due) before answering."""
    repo = store.repo if isinstance(store, Memory) else store
    health = getattr(repo.refs, "health", None)
    return None if health is None else cast("dict[str, Any]", health.status(probe=probe))


#: What an opener returns: the repository (not yet initialised), its vector cache, where search indexes are saved,
#: and (PostgreSQL) the ref store whose moves maintain the search tables.
_Opened = tuple[Repository, VectorCache, Path | None, Any]


def _open_postgres(url: StoreUrl, redis: str | None) -> _Opened:
    s3_chunks = s3_chunk_store(url)  # chunks in S3, refs and indexes in PostgreSQL
    pg_chunks, pg_refs = open_postgres(url.conninfo or "", url.repo)
    # metrics at the seam
    chunks: ChunkStore = MeteredChunkStore(s3_chunks or pg_chunks, "s3" if s3_chunks else "postgres")
    refs: RefStore = MeteredRefStore(pg_refs, "postgres")
    if redis or url.redis:
        chunks, refs = _with_redis(chunks, refs, redis or url.redis or "", url.repo)
    return Repository(LruChunkStore(chunks), refs), PostgresVectorCache(pg_chunks.db), None, pg_refs


def _open_memory(url: StoreUrl, redis: str | None) -> _Opened:
    if redis:
        raise ConfigError("a Redis cache sits in front of PostgreSQL, not an in-memory store")
    repo = Repository(MeteredChunkStore(MemoryChunkStore(), "memory"), MeteredRefStore(MemoryRefStore(), "memory"))
    return repo, MemoryVectorCache(), None, None


def _open_sqlite(url: StoreUrl, redis: str | None) -> _Opened:
    if redis:
        raise ConfigError("a Redis cache sits in front of PostgreSQL; a local SQLite store does not need one")
    assert url.path is not None  # a SQLite store URL always names its file
    sq_chunks, sq_refs = open_sqlite(url.path)
    repo = Repository(LruChunkStore(MeteredChunkStore(sq_chunks, "sqlite")), MeteredRefStore(sq_refs, "sqlite"))
    return repo, SqliteVectorCache(sq_refs.db), url.path.with_name(url.path.name + "-index"), None


#: How each kind of store is opened: ``(parsed URL, Redis URL or None) -> _Opened``.
OPENERS: dict[Kind, Callable[[StoreUrl, str | None], _Opened]] = {
    "memory": _open_memory,
    "sqlite": _open_sqlite,
    "postgres": _open_postgres,
}


def _open(url: StoreUrl, redis: str | None = None) -> _Opened:
    """Open (creating if needed) the repository behind a parsed store URL, with what :func:`open` needs besides."""
    opened = OPENERS[url.kind](url, redis)
    opened[0].init()
    return opened


#: One shared vector cache per file, for every store of this process that names it.
_VECTOR_FILES: dict[str, SqliteVectorCache] = {}


def shared_vector_cache(path: str | Path) -> VectorCache:
    """The vector cache kept in the SQLite file at ``path`` (created if needed), shared by every store of this
    process that names the same file, and by other processes through the file: a text embedded by one store
    (or one tenant) is never embedded again by another."""
    key = str(Path(path).expanduser().resolve())
    found = _VECTOR_FILES.get(key)
    if found is None:
        found = _VECTOR_FILES.setdefault(key, SqliteVectorCache(SqliteDatabase(key)))
    return found


def _close_shared() -> None:
    """Close and forget the shared Redis clients and vector cache files (:mod:`engram.runtime`'s hook)."""
    with _REDIS_LOCK:
        closing: list[Any] = [*_REDIS.values(), *(cache.db for cache in _VECTOR_FILES.values())]
        _REDIS.clear()
        _VECTOR_FILES.clear()
    runtime.close_each(closing)


runtime.register("engram.store.connect", close=_close_shared, reset=_close_shared)


def open(
    url: str | None = None,
    *,
    branch: str = "main",
    author: str = "engram",
    embedder: Embedder | str | None = "auto",
    index_fields: Sequence[str] = ("$",),
    ttl: TTLConfig | None = None,
    redis: str | None = None,
    search: Literal["auto", "postgres", "local"] = "auto",
    vector_cache: str | Path | VectorCache | None = None,
    reembed: bool = False,
    background_index: bool = True,
) -> Memory:
    """Open a memory store and return a :class:`Memory` handle on ``branch``.

    Args:
        url: ``None`` (``./.engram``), ``":memory:"``, ``sqlite:///relative/file.db``,
            ``sqlite:////absolute/file.db``, a directory, or ``postgresql://user@host/db?repo=<tenant>`` (the
            schema is migrated on first open); see :mod:`engram.store.urls`.
        branch: the branch the handle reads and writes.
        author: recorded on every commit the handle makes (overridable per write).
        embedder: ``"auto"`` (the default: the embedder the store records, else ``"minilm"``, the offline
            model), ``"minilm"``, ``"hashing"``, ``"openai:<model>@<base url>"``, an
            :class:`~engram.embed.Embedder`, or ``None`` for keyword-only search. A store records the embedder
            its vectors were first made with; opening it with another raises
            :class:`~engram.embed.EmbedderMismatchError` (see ``reembed`` and :meth:`Memory.reindex`).
        index_fields: which parts of each value are searchable (LangGraph paths; ``$`` = all text).
        ttl: TTL settings in minutes: ``{"default_ttl": 1440, "refresh_on_read": True, "sweep_interval_minutes": 5}``.
        redis: a Redis URL to cache a PostgreSQL store's chunks and refs (also ``?redis=`` in its URL).
        search: on PostgreSQL, ``auto`` searches in PostgreSQL tables (pgvector + tsvector) when the
            server has pgvector and in process otherwise; ``postgres`` requires pgvector; ``local``
            always searches in process.
        vector_cache: where embeddings are cached by (model, text): None keeps them in the store itself;
            a file path shares one cache between every store that names it (see :func:`shared_vector_cache`);
            or a :class:`~engram.index.cache.VectorCache`.
        reembed: accept an embedder other than the one the store records, and record it instead: every index
            is then built with it, re-embedding every item (``reindex`` does it at once, with progress).
        background_index: index writes in a background thread shortly after they land (the default), so that no
            search pays for a backlog of writes; ``Memory.flush_index()`` waits for it. False indexes on search.

    Examples:
        >>> mem = engram.open(":memory:", embedder="hashing")
        >>> mem.put(("users", "alice"), "prefs", {"theme": "dark"})
    """
    parsed = StoreUrl.parse(url)
    repo, cache, snapshots, pg_refs = _open(parsed, redis)
    if vector_cache is not None:
        cache = shared_vector_cache(vector_cache) if isinstance(vector_cache, str | Path) else vector_cache
    chosen = choose_embedder(repo, embedder, reembed=reembed)
    sql = None
    if pg_refs is not None and search != "local":
        from engram.store.pgsearch import PgSearch, has_pgvector

        if has_pgvector(pg_refs.db):
            sql = PgSearch(pg_refs.db, repo, embedder=chosen, fields=tuple(index_fields), cache=cache)
            pg_refs.hook = sql
        elif search == "postgres":
            raise ConfigError("search='postgres' needs the pgvector extension on the server (CREATE EXTENSION vector)")
    health = getattr(repo.refs, "health", None)
    shared = health is not None and parsed.kind == "postgres"  # a Redis cache: search results are shared through it
    pool = IndexPool(repo, embedder=chosen, fields=index_fields, cache=cache, snapshots=snapshots,
                     background=background_index, sql=sql,
                     query_cache=QueryCache(redis=health, repo=parsed.repo) if shared else None)  # fmt: skip
    if embedder != "auto":  # named explicitly: the store records it now, so a later open(embedder="auto") agrees
        pool.note_embedded()
    return Memory(repo, branch=branch, author=author, pool=pool, ttl=ttl)


async def aopen(
    url: str | None = None,
    *,
    branch: str = "main",
    author: str = "engram",
    embedder: Embedder | str | None = "auto",
    index_fields: Sequence[str] = ("$",),
    ttl: TTLConfig | None = None,
    redis: str | None = None,
    search: Literal["auto", "postgres", "local"] = "auto",
    vector_cache: str | Path | VectorCache | None = None,
    reembed: bool = False,
    background_index: bool = True,
) -> AsyncMemory:
    """Async :func:`open` (same options): an :class:`AsyncMemory` whose concurrent calls coalesce into one
    commit per event-loop tick."""
    memory = await asyncio.to_thread(
        open, url, branch=branch, author=author, embedder=embedder, index_fields=index_fields, ttl=ttl, redis=redis,
        search=search, vector_cache=vector_cache, reembed=reembed, background_index=background_index,
    )  # fmt: skip
    return AsyncMemory(memory)
