"""Redis as a shared, second-level cache in front of any chunk store and ref store (DESIGN.md §3, §9).

Two wrappers, both optional and both safe to lose at any moment:

- :class:`RedisChunkCache` caches chunks. Chunks are immutable and named by their hash, so a cached chunk
  is never stale: no TTL, no invalidation; Redis's own eviction (``maxmemory`` + ``allkeys-lru``) bounds it.
  Values are zstd frames (:mod:`engram.backends.compression`), with a dictionary trained from the first
  chunks a cache stores (``engram:<repo>:d:<id>``, named by the frames; ``engram:<repo>:d:current`` says which
  one writers use); values cached uncompressed or without a dictionary by older versions still read.
- :class:`RedisRefCache` caches ref values for a short time (``ttl_ms``) and refreshes them on write.
  Compare-and-swap always runs on the inner store, so correctness never depends on Redis.

Redis is never the source of truth. When it fails (down, timing out, out of memory), :class:`RedisHealth`
marks it down, logs one warning on the ``engram.redis`` logger, and every call goes straight to the inner
store; at most once per ``retry_interval`` one call tries Redis again, and the first success logs
"reconnected". :meth:`RedisHealth.status` reports this for ``/readyz``.

Keys carry a prefix and a repository id (``engram:<repo>:c:<chunk hex>``, ``engram:<repo>:r:<ref name>``),
so two tenants' caches never mix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

try:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("engram's Redis cache needs redis-py: pip install 'engram[redis]'") from exc

from engram.backends.base import ChunkStore, RefStore
from engram.backends.compression import (
    TRAIN_MAX_BYTES,
    Dictionary,
    compress,
    decode,
    decompress,
    frame_dictionary,
    train,
)
from engram.backends.wrappers import ForwardingRefStore
from engram.breakers import CircuitBreaker, CircuitOpenError, register, unregister
from engram.errors import ConfigError, IntegrityError
from engram.hashing import ID_SIZE, ChunkId
from engram.redaction import redact_url

__all__ = ["RedisChunkCache", "RedisHealth", "RedisRefCache", "open_redis", "redis_caches"]

log = logging.getLogger("engram.redis")

T = TypeVar("T")

#: Failures that mean "Redis cannot serve us now": fall through to the inner store.
_FAILURES = (redis.exceptions.RedisError, OSError)

#: Bytes of the first chunks a cache stores that it trains its dictionary from (held until then): with 1 MB typical
#: JSON memories take 23 % of their bytes, with 256 KB 26 %.
SAMPLE_BYTES = 1 << 20

#: Keys per MGET / DEL and commands per pipeline, so no single command blocks Redis for long.
_BATCH = 1000

#: Compare-and-refresh of a cached ref after a successful CAS on the inner store. KEYS[1] = ref key,
#: ARGV = (expected, new, ttl ms), values encoded by ``_encode_ref``. Refresh only when the cache holds
#: the value this CAS replaced; anything else (another writer's newer value, a stale value) is deleted,
#: so an out-of-order refresh can never install an older value.
_REFRESH = """
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
if cur then redis.call('DEL', KEYS[1]) end
return 0
"""


def open_redis(url: str, *, timeout: float = 0.25, connect_timeout: float = 0.25) -> redis.Redis:
    """A Redis client for a cache: short timeouts and no retry loop, so a dead Redis costs milliseconds.

    ``url`` is ``redis://[user:password@]host:port/db``, ``rediss://...`` (TLS) or ``unix:///path.sock``;
    query parameters (``?socket_timeout=1``) override the defaults. Failed calls are not retried with
    backoff: the caches fall through to the inner store instead (see :class:`RedisHealth`).
    """
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"unsupported Redis URL {redact_url(url)!r}: use redis://host:port/db, rediss://... or unix:///path"
        )
    try:
        return redis.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=connect_timeout,
            retry=Retry(NoBackoff(), 1),  # one immediate retry: a pooled connection the server closed
        )
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL: {exc}") from exc


class RedisHealth:
    """Whether one Redis is usable right now; shared by every cache on that Redis.

    Every Redis call of the caches goes through :meth:`run`. A failure marks Redis down and logs one
    warning; while down, calls skip Redis (no timeouts paid) except one probe per ``retry_interval``
    seconds. The first successful call after an outage logs one "reconnected" line.

    Args:
        client: a ``redis.Redis`` (see :func:`open_redis`) or a Redis URL.
        retry_interval: seconds between reconnection attempts while down. Keep it at least the ref
            cache's TTL: a ref cached before an outage has then expired when Redis is used again.
        clock: monotonic seconds (tests may pass a fake one).
    """

    def __init__(
        self,
        client: redis.Redis | str,
        *,
        retry_interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.owns_client = isinstance(client, str)
        self.client = open_redis(client) if isinstance(client, str) else client
        if self.client.get_connection_kwargs().get("decode_responses"):
            raise ConfigError("the Redis cache stores bytes: open the client with decode_responses=False")
        self.retry_interval = retry_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._error: str | None = None
        self._since: datetime | None = None
        #: The circuit breaker of this Redis (``redis:<host>:<port>/<db>`` in :func:`engram.breakers.snapshot`):
        #: open from the first failure, one probe per ``retry_interval``.
        self.breaker = register(
            CircuitBreaker(
                f"redis:{_where(self.client)}", failure_threshold=1, reset_timeout=retry_interval, clock=clock,
                label=f"Redis cache at {_where(self.client)}",
            )
        )  # fmt: skip

    @property
    def degraded(self) -> bool:
        """True while Redis is considered down and calls bypass it."""
        return self.breaker.is_open

    def run(self, op: Callable[[redis.Redis], T]) -> T | None:
        """Run ``op(client)``; return ``None`` instead when Redis is down or the call fails.

        Callers treat ``None`` as "no answer from the cache" and use the inner store. Calls go through
        :attr:`breaker`: while it is open they skip Redis without paying a timeout.
        """
        try:
            probe = self.breaker.acquire()
        except CircuitOpenError:
            return None
        try:
            result = op(self.client)
        except _FAILURES as exc:
            self._failed(exc, probe)
            return None
        except BaseException:
            if probe:
                self.breaker.release_probe()
            raise
        if self.breaker.is_open:
            self._recovered(probe)
        else:
            self.breaker.record_success(probe)
        return result

    def status(self, *, probe: bool = False) -> dict[str, Any]:
        """The cache's health for ``/readyz``: ``{"ok", "degraded", "error", "since"}``.

        ``probe=True`` first pings Redis (only when it is up or a reconnection attempt is due), so a
        readiness check notices an outage, or a recovery, even when no request used the cache.
        ``since`` is when the current outage began (ISO 8601, UTC), ``None`` while ok.
        """
        if probe:
            self.run(lambda r: r.ping())
        down = self.breaker.is_open
        with self._lock:
            return {
                "ok": not down,
                "degraded": down,
                "error": self._error,
                "since": None if self._since is None else self._since.isoformat(),
            }

    def close(self) -> None:
        """Close the client's connections if this object opened it from a URL (and stop showing its breaker)."""
        unregister(self.breaker)
        if self.owns_client:
            self.client.close()

    def _failed(self, exc: BaseException, probe: bool) -> None:
        was_down = self.breaker.is_open
        with self._lock:
            self._error = f"{type(exc).__name__}: {exc}"
            if not was_down:
                self._since = datetime.now(UTC)
        self.breaker.record_failure(self._error, probe=probe)
        if was_down:
            return
        register(self.breaker)  # shown again if a close() hid it and the cache is still in use
        log.warning(
            "Redis cache at %s is unavailable (%s); serving from the store without it, retrying every %g s",
            _where(self.client),
            self._error,
            self.retry_interval,
        )

    def _recovered(self, probe: bool) -> None:
        self.breaker.record_success(probe)
        if self.breaker.is_open:
            return  # another caller is probing: its answer decides
        with self._lock:
            since, self._since, self._error = self._since, None, None
        if since is None:
            return  # another caller saw the same recovery and logged it
        outage = (datetime.now(UTC) - since).total_seconds()
        log.info("Redis cache at %s reconnected after %.1f s", _where(self.client), outage)


def _where(client: redis.Redis) -> str:
    """host:port/db of a client, for logs (never the password)."""
    kwargs = client.get_connection_kwargs()
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


def _health(source: redis.Redis | str | RedisHealth, retry_interval: float) -> RedisHealth:
    return source if isinstance(source, RedisHealth) else RedisHealth(source, retry_interval=retry_interval)


def _key_base(prefix: str, repo: str) -> str:
    if not repo or ":" in repo:
        raise ConfigError(f"invalid repository id {repo!r} for the Redis cache: non-empty, without ':'")
    return f"{prefix}{repo}:"


class RedisChunkCache(ChunkStore):
    """A chunk store that keeps a copy of chunks in Redis, shared by every process of a deployment.

    Reads try Redis first (one MGET per batch), load the misses from ``inner`` and write them back.
    Writes and deletes go to ``inner`` first (it is the durable store), then to Redis, best effort.
    ``has_many`` and ``iter_ids`` always ask ``inner``: a chunk that garbage collection removed from the
    store while Redis was down may linger in Redis, and must not be reported as stored. Serving such a
    chunk's bytes is harmless: it is immutable, and nothing reachable refers to it.

    Args:
        inner: the durable chunk store.
        client: a Redis URL, a client (see :func:`open_redis`) or a shared :class:`RedisHealth`.
        repo: the repository (tenant) id; part of every key.
        prefix: the start of every key, to share one Redis with other applications.
        max_value_bytes: chunks larger than this are not cached (they would crowd out many small ones).
        verify: re-hash chunks read from Redis and ignore any whose bytes do not match their id
            (a poisoned or corrupt cache can then never corrupt a read).
        retry_interval: seconds between reconnection attempts (when ``redis`` is not a RedisHealth).
    """

    def __init__(
        self,
        inner: ChunkStore,
        client: redis.Redis | str | RedisHealth,
        *,
        repo: str = "default",
        prefix: str = "engram:",
        max_value_bytes: int = 512 << 10,
        verify: bool = True,
        retry_interval: float = 5.0,
    ) -> None:
        self.inner = inner
        self.health = _health(client, retry_interval)
        self.max_value_bytes = max_value_bytes
        self.verify = verify
        self._base = _key_base(prefix, repo) + "c:"
        self._dict_base = _key_base(prefix, repo) + "d:"
        self._dicts: dict[int, Dictionary] = {}  # read or trained, by id (good ones only; replaced, never changed)
        self._writing: Dictionary | None = None  # the dictionary writes use
        self._looked = False  # whether Redis was asked which dictionary writers use
        self._samples: list[bytes] = []  # chunks stored before there is a dictionary, to train one from
        self._sampled = 0
        self._train_bytes = SAMPLE_BYTES  # samples to train from: doubles after each try that gave nothing
        self._dict_lock = threading.Lock()

    def _key(self, cid: ChunkId) -> str:
        return self._base + cid.hex()

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        found: dict[ChunkId, bytes] = {}
        cached = self.health.run(lambda r: self._mget(r, wanted))
        if cached is not None:
            unknown = {frame_dictionary(stored) for stored in cached if stored is not None} - {0, *self._dicts}
            if unknown:
                self.health.run(lambda r: self._read_dicts(r, unknown))
            for cid, stored in zip(wanted, cached, strict=True):
                data = None if stored is None else _cached_chunk(cid, stored, self.verify, self._dicts)
                if data is not None:
                    found[cid] = data
        missing = [cid for cid in wanted if cid not in found]
        if missing:
            loaded = self.inner.get_many(missing)
            found.update(loaded)
            self._store(loaded)  # plain SET also overwrites a corrupt cached copy
        return found

    def _mget(self, client: redis.Redis, ids: Sequence[ChunkId]) -> list[bytes | None]:
        pipe = client.pipeline(transaction=False)
        for i in range(0, len(ids), _BATCH):
            pipe.mget([self._key(cid) for cid in ids[i : i + _BATCH]])
        return [value for batch in pipe.execute() for value in batch]

    def _store(self, chunks: Mapping[ChunkId, bytes]) -> None:
        small = [(cid, data) for cid, data in chunks.items() if len(data) <= self.max_value_bytes]
        if small:
            self.health.run(lambda r: self._set(r, small))

    def _read_dicts(self, client: redis.Redis, ids: set[int]) -> None:
        """Read the dictionaries ``ids`` (the frames of a read name them); a missing or damaged one is left out:
        its values are misses, overwritten from the store."""
        names = sorted(ids)
        values = client.mget([f"{self._dict_base}{did:08x}" for did in names])
        for did, data in zip(names, values, strict=True):
            try:
                if isinstance(data, bytes):
                    self._dicts = {**self._dicts, did: Dictionary.load(data, did)}  # readers iterate it
            except IntegrityError as exc:
                log.warning("the Redis cache's dictionary %08x: %s", did, exc)

    def _dictionary_for(self, client: redis.Redis, chunks: Sequence[tuple[ChunkId, bytes]]) -> Dictionary | None:
        """The dictionary to cache ``chunks`` with: the one writers use (as Redis says, asked once), else, once
        the chunks stored so far reach SAMPLE_BYTES, one trained from them (the first trained wins: a cache
        that trained later adopts it); None until then. A try that gives no dictionary (chunks that do not
        compress) is repeated with twice the samples, up to TRAIN_MAX_BYTES, then never again."""
        with self._dict_lock:
            if self._writing is not None:
                return self._writing
            current = self._dict_base + "current"
            if not self._looked:
                self._looked = True
                self._writing = self._adopt(client, _bytes(client.get(current)))
                if self._writing is not None:
                    return self._writing
            for _, data in chunks:
                if self._sampled >= self._train_bytes:
                    break
                self._samples.append(data)
                self._sampled += len(data)
            if self._sampled < self._train_bytes:
                return None
            trained = train(self._samples)
            self._samples, self._sampled = [], 0
            if trained is None:
                self._train_bytes = self._train_bytes * 2 if self._train_bytes < TRAIN_MAX_BYTES else 1 << 62
                return None
            self._dicts = {**self._dicts, trained.id: trained}
            client.set(self._dict_base + trained.name, trained.data)
            if client.set(current, trained.name.encode(), nx=True):
                self._writing = trained
            else:  # another cache trained one first
                self._writing = self._adopt(client, _bytes(client.get(current))) or trained
            return self._writing

    def _adopt(self, client: redis.Redis, name: bytes | None) -> Dictionary | None:
        try:
            did = int(name or b"", 16)
        except ValueError:
            return None
        if did not in self._dicts:
            self._read_dicts(client, {did})
        return self._dicts.get(did)

    def _set(self, client: redis.Redis, chunks: Sequence[tuple[ChunkId, bytes]]) -> None:
        dictionary = self._dictionary_for(client, chunks)
        for i in range(0, len(chunks), _BATCH):
            pipe = client.pipeline(transaction=False)
            if dictionary is not None:  # keeps it recently used (LRU), and says whether it was evicted
                pipe.touch(self._dict_base + dictionary.name)
            for cid, data in chunks[i : i + _BATCH]:
                pipe.set(self._key(cid), compress(data, dictionary))  # no TTL: chunks never change; LRU evicts
            if dictionary is not None and not pipe.execute()[0]:
                client.set(self._dict_base + dictionary.name, dictionary.data)
            elif dictionary is None:
                pipe.execute()

    def has_many(self, ids: Iterable[ChunkId]) -> set[ChunkId]:
        return self.inner.has_many(ids)

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        self.inner.put_many(chunks)
        self._store(chunks)

    def iter_ids(
        self, start: ChunkId | None = None, end: ChunkId | None = None, *, written_before: int | None = None
    ) -> Iterator[ChunkId]:
        return self.inner.iter_ids(start, end, written_before=written_before)

    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        doomed = list(ids)
        self.inner.delete_many(doomed)  # store first: a concurrent miss can no longer re-fill the cache
        if doomed:
            self.health.run(lambda r: self._delete(r, doomed))

    def _delete(self, client: redis.Redis, ids: Sequence[ChunkId]) -> None:
        pipe = client.pipeline(transaction=False)
        for i in range(0, len(ids), _BATCH):
            pipe.delete(*(self._key(cid) for cid in ids[i : i + _BATCH]))
        pipe.execute()

    def close(self) -> None:
        self.inner.close()
        self.health.close()


def _bytes(value: object) -> bytes | None:
    return value if isinstance(value, bytes) else None


def _cached_chunk(cid: ChunkId, stored: bytes, verify: bool, dicts: Mapping[int, Dictionary]) -> bytes | None:
    """A chunk from its cached value (a zstd frame, or the chunk itself as cached before compression), or None
    when the value is not good (or its dictionary is not at hand): it then counts as a miss, and the read from
    the store overwrites it."""
    dictionary = dicts.get(frame_dictionary(stored))
    if verify:
        return decode(cid, stored, dictionary)
    try:
        return decompress(stored, dictionary)  # a frame's checksum still catches a damaged value
    except IntegrityError:
        return None


def _encode_ref(value: ChunkId | None) -> bytes:
    return b"" if value is None else value  # the absence of a ref is cached too


class RedisRefCache(ForwardingRefStore):
    """A ref store that serves ``get`` from Redis for up to ``ttl_ms``, and refreshes Redis on write.

    Why a stale read is bounded: every cached value expires ``ttl_ms`` after it was written, whatever
    happens to the processes that wrote it. Writes through any cache on the same Redis refresh (or drop)
    the cached value at once, so only a change made *around* the caches (directly in the store, or while
    Redis was unreachable) can be seen late, by at most ``ttl_ms``.

    Why correctness never depends on Redis: ``set`` is always the inner store's compare-and-swap, which is
    authoritative. A stale ``get`` only makes a writer's CAS fail; the failure drops the cached value, and
    the writer's retry reads the truth. ``list``, the reflog and ``value_at`` always read the inner store.

    Args:
        inner: the durable ref store.
        client: a Redis URL, a client (see :func:`open_redis`) or a shared :class:`RedisHealth`.
        repo: the repository (tenant) id; part of every key.
        ttl_ms: how long a ref value may be served from Redis.
        prefix: the start of every key.
        retry_interval: seconds between reconnection attempts (when ``redis`` is not a RedisHealth).
    """

    def __init__(
        self,
        inner: RefStore,
        client: redis.Redis | str | RedisHealth,
        *,
        repo: str = "default",
        ttl_ms: int = 1000,
        prefix: str = "engram:",
        retry_interval: float = 5.0,
    ) -> None:
        if ttl_ms <= 0:
            raise ConfigError(f"ttl_ms must be positive, not {ttl_ms}")
        super().__init__(inner)
        self.health = _health(client, retry_interval)
        self.ttl_ms = ttl_ms
        self._base = _key_base(prefix, repo) + "r:"
        self._refresh = self.health.client.register_script(_REFRESH)

    def _key(self, name: str) -> str:
        return self._base + name

    def get(self, name: str) -> ChunkId | None:
        key = self._key(name)
        cached = self.health.run(lambda r: r.get(key))
        if isinstance(cached, bytes) and len(cached) in (0, ID_SIZE):
            return cached or None
        value = self.inner.get(name)
        # NX: a writer's refresh made after our read of the store is newer than what we read; keep it.
        # (A malformed entry, not written by engram, is simply overwritten.)
        nx = cached is None
        self.health.run(lambda r: r.set(key, _encode_ref(value), px=self.ttl_ms, nx=nx))
        return value

    def set(
        self,
        name: str,
        new: ChunkId | None,
        expected: ChunkId | None,
        *,
        actor: str = "",
        reason: str = "",
    ) -> bool:
        key = self._key(name)
        if not self.inner.set(name, new, expected, actor=actor, reason=reason):
            self.health.run(lambda r: r.delete(key))  # our view was stale: let the next read see the truth
            return False
        args: list[bytes | int] = [_encode_ref(expected), _encode_ref(new), self.ttl_ms]
        self.health.run(lambda r: self._refresh(keys=[key], args=args, client=r))
        return True

    def close(self) -> None:
        self.inner.close()
        self.health.close()


def redis_caches(
    chunks: ChunkStore,
    refs: RefStore,
    client: redis.Redis | str | RedisHealth,
    *,
    repo: str = "default",
    prefix: str = "engram:",
    ttl_ms: int = 1000,
    retry_interval: float = 5.0,
) -> tuple[RedisChunkCache, RedisRefCache]:
    """Wrap a repository's stores in Redis caches that share one client and one :class:`RedisHealth`.

    Examples:
        >>> chunks, refs = redis_caches(MemoryChunkStore(), MemoryRefStore(), "redis://127.0.0.1:6379/0")
        >>> chunks.health.status()["ok"]
        True
    """
    health = _health(client, retry_interval)
    return (
        RedisChunkCache(chunks, health, repo=repo, prefix=prefix),
        RedisRefCache(refs, health, repo=repo, prefix=prefix, ttl_ms=ttl_ms),
    )
