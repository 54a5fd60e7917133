"""Opening a store from a URL: the embedded default, memory, or a SQLite file."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from engram import runtime
from engram.backends import ChunkStore, LruChunkStore, MemoryChunkStore, MemoryRefStore, RefStore, open_sqlite
from engram.backends.sqlite import SqliteDatabase
from engram.backends.wrappers import CacheCountingChunkStore, MeteredChunkStore, MeteredRefStore
from engram.embed import Embedder
from engram.errors import ConfigError, RefNotFoundError
from engram.index.cache import MemoryVectorCache, PostgresVectorCache, SqliteVectorCache, VectorCache
from engram.redaction import redact_url
from engram.repo import Repository
from engram.store.aio import AsyncMemory
from engram.store.indexing import IndexPool, choose_embedder
from engram.store.memory import Memory
from engram.store.ops import TTLConfig
from engram.store.querycache import QueryCache

if TYPE_CHECKING:
    from engram.backends.redis import RedisHealth

#: Where ``engram.open()`` keeps the embedded store.
DEFAULT_DIR = ".engram"
DB_NAME = "engram.db"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def tenant_url(url: str | None, tenant: str) -> str:
    """The store URL of one tenant's repository, derived from a server's base store URL.

    Tenants never share a repository: on SQLite each tenant gets its own file under
    ``<store dir>/tenants/<tenant>/``; in memory, its own store (``:memory:`` again, opened afresh);
    on PostgreSQL, its own repository id (``?repo=<tenant>``).

    Examples:
        >>> tenant_url("/srv/engram", "acme")
        '/srv/engram/tenants/acme/engram.db'
    """
    if not tenant or not all(ch.isalnum() or ch in "-_" for ch in tenant):
        raise ConfigError(f"invalid tenant name {tenant!r}: use letters, digits, '-' and '_'")
    if url == ":memory:":
        return url
    if url is not None and url.startswith(POSTGRES_SCHEMES):
        conninfo, _, in_url = split_postgres_url(url)
        conninfo += f"{'&' if '?' in conninfo else '?'}redis={in_url}" if in_url else ""
        kept = [(name, tenant_url(value, tenant) if name == "replica" else value) for name, value in store_options(url)]
        return conninfo + ("&" if "?" in conninfo else "?") + urlencode([("repo", tenant), *kept], safe=":/@")
    return str(_sqlite_path(url).parent / "tenants" / tenant / DB_NAME)


def local_file(url: str | None) -> Path | None:
    """The SQLite file behind a store URL (None for stores without a local file: memory, PostgreSQL)."""
    if url == ":memory:" or (url is not None and url.startswith(POSTGRES_SCHEMES)):
        return None
    return _sqlite_path(url)


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
    from engram.backends.postgres import PostgresDatabase
    from engram.backends.postgres import migrate as run_migrations
    from engram.store.pgsearch import SEARCH_MIGRATIONS, has_pgvector

    conninfo = split_postgres_url(url)[0]
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
    from engram.backends.postgres import MIGRATIONS, schema_version
    from engram.store.pgsearch import SEARCH_MIGRATIONS

    conninfo = split_postgres_url(url)[0]
    return {
        "core": (schema_version(conninfo), MIGRATIONS[-1].version),
        "search": (schema_version(conninfo, SEARCH_MIGRATIONS), SEARCH_MIGRATIONS[-1].version),
    }


def open_repository(url: str | None = None, *, redis: str | None = None) -> Repository:
    """Open (creating if needed) the repository behind a store URL (see :func:`open`)."""
    return _open(url, redis)[0]


def split_postgres_url(url: str) -> tuple[str, str, str | None]:
    """Split ``postgresql://...?repo=<id>&redis=<url>`` into the connection URL (other parameters kept),
    the repository id (default ``default``) and the Redis URL of its cache, if any."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours: dict[str, str] = {}
    for name, value in query:
        if name in ("repo", "redis"):
            if name in ours:
                raise ConfigError(f"give ?{name}= once in a PostgreSQL store URL")
            ours[name] = value
    rest = urlencode([(name, value) for name, value in query if name not in ours and name not in STORE_OPTIONS])
    return urlunsplit(parts._replace(query=rest)), ours.get("repo", "default"), ours.get("redis")


#: Options of a PostgreSQL store URL besides ``repo`` and ``redis`` that engram reads and libpq never sees: where
#: chunks live (``chunks=s3://bucket/prefix``, ``chunks_endpoint=``, ``chunks_region=``; see
#: :mod:`engram.backends.s3`) and read replicas (``replica=<URL>``, repeatable; see :mod:`engram.store.replicas`).
STORE_OPTIONS = ("chunks", "chunks_endpoint", "chunks_region", "replica")


def store_options(url: str) -> list[tuple[str, str]]:
    """The :data:`STORE_OPTIONS` of a PostgreSQL store URL, in order."""
    return [(name, value) for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=True)
            if name in STORE_OPTIONS]  # fmt: skip


def s3_chunk_store(url: str, repo_id: str) -> ChunkStore | None:
    """The S3 chunk store a PostgreSQL store URL names (``?chunks=s3://bucket/prefix``), or None."""
    options: dict[str, str] = {}
    for name, value in store_options(url):
        if name != "replica":
            if name in options:
                raise ConfigError(f"give ?{name}= once in a PostgreSQL store URL")
            options[name] = value
    if "chunks" not in options:
        if options:
            raise ConfigError(f"?{', ?'.join(sorted(options))} need ?chunks=s3://bucket/prefix in the store URL")
        return None
    where = urlsplit(options["chunks"])
    if where.scheme != "s3" or not where.netloc or where.query:
        raise ConfigError(f"?chunks= takes s3://bucket/prefix, not {options['chunks']!r}")
    from engram.backends.s3 import S3ChunkStore

    return S3ChunkStore(where.netloc, where.path, repo_id, endpoint=options.get("chunks_endpoint") or None,
                        region=options.get("chunks_region") or None)  # fmt: skip


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
    return CacheCountingChunkStore(chunks, "redis", above=True), refs  # hit ratio at the seam (issue #15)


def cache_status(store: Memory | Repository, *, probe: bool = False) -> dict[str, Any] | None:
    """The Redis cache's status (``{"ok", "degraded", "error", "since"}``), or None without one;
    ``probe=True`` retries a connection that is down (if a retry is due) before answering."""
    repo = store.repo if isinstance(store, Memory) else store
    health = getattr(repo.refs, "health", None)
    return None if health is None else cast("dict[str, Any]", health.status(probe=probe))


def _open(url: str | None, redis: str | None = None) -> tuple[Repository, VectorCache, Path | None, Any]:
    """Open the repository behind a store URL, its vector cache, where search indexes are saved, and
    (PostgreSQL) the ref store whose moves maintain the search tables."""
    cache: VectorCache
    pg_refs: Any = None
    if url is not None and url.startswith(POSTGRES_SCHEMES):
        from engram.backends.postgres import open_postgres  # psycopg is an optional dependency

        conninfo, repo_id, in_url = split_postgres_url(url)
        s3_chunks = s3_chunk_store(url, repo_id)  # chunks in S3, refs and indexes in PostgreSQL (issue #17)
        pg_chunks, pg_refs = open_postgres(conninfo, repo_id)
        # metrics at the seam (issue #15)
        chunks: ChunkStore = MeteredChunkStore(s3_chunks or pg_chunks, "s3" if s3_chunks else "postgres")
        refs: RefStore = MeteredRefStore(pg_refs, "postgres")
        if redis or in_url:
            chunks, refs = _with_redis(chunks, refs, redis or in_url or "", repo_id)
        repo = Repository(LruChunkStore(chunks), refs)
        cache, snapshots = PostgresVectorCache(pg_chunks.db), None
    elif url == ":memory:":
        if redis:
            raise ConfigError("a Redis cache sits in front of PostgreSQL, not an in-memory store")
        repo = Repository(MeteredChunkStore(MemoryChunkStore(), "memory"), MeteredRefStore(MemoryRefStore(), "memory"))
        cache, snapshots = MemoryVectorCache(), None
    else:
        if redis:
            raise ConfigError("a Redis cache sits in front of PostgreSQL; a local SQLite store does not need one")
        path = _sqlite_path(url)
        sq_chunks, sq_refs = open_sqlite(path)
        repo = Repository(LruChunkStore(MeteredChunkStore(sq_chunks, "sqlite")), MeteredRefStore(sq_refs, "sqlite"))
        cache, snapshots = SqliteVectorCache(sq_refs.db), path.with_name(path.name + "-index")
    repo.init()
    return repo, cache, snapshots, pg_refs


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


def _sqlite_path(url: str | None) -> Path:
    if url is None:
        return Path(DEFAULT_DIR) / DB_NAME
    if "://" in url and not url.startswith("sqlite://"):
        raise ConfigError(
            f"unsupported store URL {redact_url(url)!r}: use ':memory:', sqlite:///path/to/file.db or a path"
        )
    raw = url.removeprefix("sqlite://")
    if url.startswith("sqlite://"):
        raw = raw.removeprefix("/") if raw.startswith("//") else raw  # sqlite:////abs -> //abs is not a path
    if not raw:
        raise ConfigError("empty store path: use sqlite:///path/to/file.db or a directory")
    path = Path(raw)
    if path.is_dir() or path.suffix not in (".db", ".sqlite", ".sqlite3"):
        return path / DB_NAME
    return path


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
        url: ``None`` (``./.engram``), ``":memory:"``, ``sqlite:///path/file.db``, a directory, or
            ``postgresql://user@host/db?repo=<tenant>`` (the schema is migrated on first open).
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
    repo, cache, snapshots, pg_refs = _open(url, redis)
    if vector_cache is not None:
        cache = shared_vector_cache(vector_cache) if isinstance(vector_cache, str | Path) else vector_cache
    chosen = choose_embedder(repo, embedder, reembed=reembed)
    pool = IndexPool(
        repo, embedder=chosen, fields=index_fields, cache=cache, snapshots=snapshots, background=background_index
    )
    if embedder != "auto":  # named explicitly: the store records it now, so a later open(embedder="auto") agrees
        pool.note_embedded()
    health = getattr(repo.refs, "health", None)
    if health is not None and url is not None:  # a Redis cache: search results are shared through it too
        pool.query_cache = QueryCache(redis=health, repo=split_postgres_url(url)[1])
    if pg_refs is not None and search != "local":
        from engram.store.pgsearch import PgSearch, has_pgvector

        if has_pgvector(pg_refs.db):
            pool.sql = PgSearch(pg_refs.db, repo, embedder=chosen, fields=tuple(index_fields), cache=cache)
            pg_refs.hook = pool.sql
        elif search == "postgres":
            raise ConfigError("search='postgres' needs the pgvector extension on the server (CREATE EXTENSION vector)")
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
