"""The Redis caches pass the storage contracts, serve repeat reads from Redis, and survive Redis outages."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis
from typical_chunks import CountingStore

from engram.backends import (
    ChunkStore,
    MemoryChunkStore,
    MemoryRefStore,
    RefStore,
    ValidatingChunkStore,
)
from engram.backends.redis import RedisChunkCache, RedisHealth, RedisRefCache, open_redis, redis_caches
from engram.backends.wrappers import ForwardingRefStore
from engram.errors import ConfigError
from engram.hashing import ChunkId, chunk_id
from engram.repo import Repository
from engram.testing import ChunkStoreContract, RefStoreContract
from engram.tree import get

_A, _B, _C = (chunk_id(bytes([i])) for i in range(3))


# ---------------------------------------------------------------------------------- fixtures


@pytest.fixture
def closed_url() -> str:
    """A Redis URL on a local port where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


class SpyRefStore(ForwardingRefStore):
    """A ref store that counts ``get`` calls and delegates everything to another ref store."""

    def __init__(self, inner: RefStore | None = None) -> None:
        super().__init__(inner or MemoryRefStore())
        self.gets = 0

    def get(self, name: str) -> ChunkId | None:
        self.gets += 1
        return self.inner.get(name)


class Proxy:
    """A TCP forwarder to Redis that a test stops (connections refused, open ones cut) and restarts."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self.port = 0
        self._stop = threading.Event()
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        listener.settimeout(0.02)
        self.port = listener.getsockname()[1]
        self._stop.clear()
        self._spawn(self._accept, listener)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            socks, self._socks = self._socks, []
            threads, self._threads = self._threads, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join()
        for sock in socks:
            sock.close()

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        with listener:
            while not self._stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                conn.setblocking(True)
                upstream = socket.create_connection(self.upstream)
                with self._lock:
                    self._socks += [conn, upstream]
                self._spawn(self._pump, conn, upstream)
                self._spawn(self._pump, upstream, conn)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def proxy(redis_url: str) -> Iterator[Proxy]:
    """A running :class:`Proxy` to the test Redis."""
    forwarder = Proxy(redis_url)
    forwarder.start()
    yield forwarder
    forwarder.stop()


# ------------------------------------------------------------------------------- contracts


class TestRedisChunkCache(ChunkStoreContract):
    @pytest.fixture
    def chunks(self, client: redis.Redis, prefix: str) -> ChunkStore:
        return ValidatingChunkStore(RedisChunkCache(MemoryChunkStore(), client, prefix=prefix))


class TestRedisChunkCacheWithRedisDown(ChunkStoreContract):
    @pytest.fixture
    def chunks(self, closed_url: str) -> Iterator[ChunkStore]:
        store = RedisChunkCache(MemoryChunkStore(), closed_url)
        yield ValidatingChunkStore(store)
        store.close()


class TestRedisRefCache(RefStoreContract):
    @pytest.fixture
    def refs(self, client: redis.Redis, prefix: str) -> RefStore:
        return RedisRefCache(MemoryRefStore(), client, prefix=prefix)


class TestRedisRefCacheWithRedisDown(RefStoreContract):
    @pytest.fixture
    def refs(self, closed_url: str) -> Iterator[RefStore]:
        store = RedisRefCache(MemoryRefStore(), closed_url)
        yield store
        store.close()


# ------------------------------------------------------------------------------ chunk cache


def test_chunk_cache_serves_second_read_from_redis(client: redis.Redis, prefix: str) -> None:
    inner = CountingStore()
    cid = inner.put(b"remember me")  # stored behind the cache: Redis does not have it yet
    cache = RedisChunkCache(inner, client, prefix=prefix)
    assert cache.get(cid) == b"remember me"
    assert inner.reads == [cid]
    assert cache.get(cid) == b"remember me"
    assert cache.get_many([cid, cid]) == {cid: b"remember me"}
    assert inner.reads == [cid]


def test_chunk_cache_is_shared_between_processes(client: redis.Redis, prefix: str) -> None:
    writer = RedisChunkCache(MemoryChunkStore(), client, prefix=prefix)
    cid = writer.put(b"shared")
    reader_inner = CountingStore()  # another server's view of the same database
    reader_inner.put_many({cid: b"shared"})
    reader = RedisChunkCache(reader_inner, client, prefix=prefix)
    assert reader.get(cid) == b"shared"
    assert reader_inner.reads == []


def test_chunk_cache_keeps_repositories_apart(client: redis.Redis, prefix: str) -> None:
    acme = RedisChunkCache(MemoryChunkStore(), client, prefix=prefix, repo="acme")
    cid = acme.put(b"acme secret")
    other = RedisChunkCache(MemoryChunkStore(), client, prefix=prefix, repo="globex")
    assert other.get_many([cid]) == {}
    assert client.exists(f"{prefix}acme:c:{cid.hex()}") == 1


def test_chunk_cache_skips_large_chunks(client: redis.Redis, prefix: str) -> None:
    inner = CountingStore()
    cache = RedisChunkCache(inner, client, prefix=prefix, max_value_bytes=100)
    small, big = cache.put(b"s" * 100), cache.put(b"b" * 101)
    assert cache.get_many([small, big]) == {small: b"s" * 100, big: b"b" * 101}
    assert inner.reads == [big]


def test_chunk_cache_ignores_and_repairs_corrupt_entries(client: redis.Redis, prefix: str) -> None:
    inner = CountingStore()
    cache = RedisChunkCache(inner, client, prefix=prefix)
    cid = cache.put(b"true bytes")
    client.set(f"{prefix}default:c:{cid.hex()}", b"poison")
    assert cache.get(cid) == b"true bytes"
    assert client.get(f"{prefix}default:c:{cid.hex()}") == b"true bytes"


def test_chunk_cache_has_many_trusts_only_the_store(client: redis.Redis, prefix: str) -> None:
    inner = MemoryChunkStore()
    cache = RedisChunkCache(inner, client, prefix=prefix)
    cid = cache.put(b"collected")
    inner.delete_many([cid])  # e.g. gc ran while Redis was unreachable: the cached copy lingers
    assert cache.has_many([cid]) == {cid}


def test_chunk_cache_delete_many_removes_from_redis(client: redis.Redis, prefix: str) -> None:
    cache = RedisChunkCache(MemoryChunkStore(), client, prefix=prefix)
    a, b = cache.put(b"a"), cache.put(b"b")
    cache.delete_many([a])
    assert client.exists(f"{prefix}default:c:{a.hex()}") == 0
    assert cache.get_many([a, b]) == {b: b"b"}


def test_chunk_keys_have_no_ttl(client: redis.Redis, prefix: str) -> None:
    cid = RedisChunkCache(MemoryChunkStore(), client, prefix=prefix).put(b"forever")
    assert client.ttl(f"{prefix}default:c:{cid.hex()}") == -1


def test_bad_configuration_is_a_config_error(redis_url: str) -> None:
    with pytest.raises(ConfigError, match="repository id"):
        RedisChunkCache(MemoryChunkStore(), redis_url, repo="a:b")
    with pytest.raises(ConfigError, match="unsupported Redis URL"):
        open_redis("http://localhost:6379")
    with pytest.raises(ConfigError, match="ttl_ms"):
        RedisRefCache(MemoryRefStore(), redis_url, ttl_ms=0)
    text = redis.Redis.from_url(redis_url, decode_responses=True)
    with pytest.raises(ConfigError, match="decode_responses"):
        RedisHealth(text)
    text.close()


# -------------------------------------------------------------------------------- ref cache


def test_ref_cache_serves_reads_from_redis(client: redis.Redis, prefix: str) -> None:
    inner = SpyRefStore()
    inner.set("heads/main", _A, None)
    refs = RedisRefCache(inner, client, prefix=prefix, ttl_ms=60_000)
    assert refs.get("heads/main") == _A
    assert refs.get("heads/main") == _A
    assert refs.get("heads/none") is None
    assert refs.get("heads/none") is None  # absence is cached too
    assert inner.gets == 2
    assert 0 < client.pttl(f"{prefix}default:r:heads/main") <= 60_000


def test_ref_set_through_one_cache_is_seen_by_another_at_once(client: redis.Redis, prefix: str) -> None:
    store = MemoryRefStore()  # the shared database behind two servers
    one = RedisRefCache(store, client, prefix=prefix, ttl_ms=60_000)
    spy = SpyRefStore(store)
    two = RedisRefCache(spy, client, prefix=prefix, ttl_ms=60_000)
    assert two.get("heads/main") is None  # cached: absent
    assert one.set("heads/main", _A, None)
    assert two.get("heads/main") == _A
    assert one.set("heads/main", _B, _A)
    assert two.get("heads/main") == _B
    assert one.delete("heads/main", _B)
    assert two.get("heads/main") is None
    assert spy.gets == 1  # only the first read went to the store; the rest came from Redis


def test_ref_changed_behind_the_cache_is_seen_after_the_ttl(client: redis.Redis, prefix: str) -> None:
    inner = MemoryRefStore()
    inner.set("heads/main", _A, None)
    refs = RedisRefCache(inner, client, prefix=prefix, ttl_ms=150)
    assert refs.get("heads/main") == _A
    inner.set("heads/main", _B, _A)  # e.g. a process writing without the cache
    assert refs.get("heads/main") == _A  # stale, within the bound
    time.sleep(0.2)
    assert refs.get("heads/main") == _B


def test_ref_cas_failure_drops_the_stale_value(client: redis.Redis, prefix: str) -> None:
    inner = MemoryRefStore()
    inner.set("heads/main", _A, None)
    refs = RedisRefCache(inner, client, prefix=prefix, ttl_ms=60_000)
    assert refs.get("heads/main") == _A
    inner.set("heads/main", _B, _A)
    assert not refs.set("heads/main", _C, _A)  # the store's CAS decides, whatever Redis said
    assert refs.get("heads/main") == _B  # long before the TTL


def test_ref_refresh_never_installs_an_older_value(client: redis.Redis, prefix: str) -> None:
    inner = MemoryRefStore()
    inner.set("heads/main", _A, None)
    refs = RedisRefCache(inner, client, prefix=prefix, ttl_ms=60_000)
    assert refs.get("heads/main") == _A
    key = f"{prefix}default:r:heads/main"
    client.set(key, _C, px=60_000)  # another writer's newer value got to Redis first
    assert refs.set("heads/main", _B, _A)
    assert client.exists(key) == 0  # neither _B nor _C can be trusted: dropped
    assert refs.get("heads/main") == _B


# ---------------------------------------------------------------------------- degraded mode


def test_outage_falls_through_logs_once_and_reconnects(
    proxy: Proxy, client: redis.Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="engram.redis")
    health = RedisHealth(proxy.url, retry_interval=0.2)
    chunk_inner, ref_inner = CountingStore(), SpyRefStore()
    chunks, refs = redis_caches(chunk_inner, ref_inner, health, prefix=prefix, ttl_ms=100)
    cid = chunks.put(b"survives")
    assert refs.set("heads/main", cid, None)
    assert chunks.get(cid) == b"survives" and chunk_inner.reads == []
    assert health.status() == {"ok": True, "degraded": False, "error": None, "since": None}

    started = time.perf_counter()
    for _ in range(20):
        assert chunks.get(cid) == b"survives" and refs.get("heads/main") == cid
    healthy = time.perf_counter() - started
    proxy.stop()
    started = time.perf_counter()
    for _ in range(20):
        assert chunks.get(cid) == b"survives"
        assert refs.get("heads/main") == cid
    # callers do not wait on a dead Redis: about the cost of the healthy reads, not a timeout per call
    assert time.perf_counter() - started < max(10 * healthy, 3.0), healthy
    other = chunks.put(b"written during the outage")
    assert refs.set("heads/main", other, cid)
    time.sleep(0.25)  # a reconnection attempt is due: it fails quietly
    assert chunks.get(other) == b"written during the outage"
    status = health.status(probe=True)
    assert status["degraded"] and not status["ok"]
    assert "Error" in status["error"] and status["since"] is not None
    warnings = [r for r in caplog.records if r.name == "engram.redis" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unavailable" in warnings[0].getMessage()
    assert len(chunk_inner.reads) >= 21

    proxy.start()
    time.sleep(0.25)
    assert chunks.get(cid) == b"survives"  # this read reconnects
    assert health.status() == {"ok": True, "degraded": False, "error": None, "since": None}
    infos = [r for r in caplog.records if r.name == "engram.redis" and r.levelno == logging.INFO]
    assert len(infos) == 1 and "reconnected" in infos[0].getMessage()
    reads = len(chunk_inner.reads)
    assert chunks.get(cid) == b"survives" and len(chunk_inner.reads) == reads  # served by Redis again
    assert refs.get("heads/main") == other
    chunks.close()


def test_status_probe_reports_redis_down(closed_url: str) -> None:
    health = RedisHealth(closed_url, retry_interval=60)
    assert health.status(probe=True)["degraded"]
    assert health.run(lambda r: r.ping()) is None  # bypassed until the retry interval passes
    health.close()


# ------------------------------------------------------------------------------- repository


def test_repository_over_redis_caches(client: redis.Redis, prefix: str) -> None:
    chunk_store, ref_store = MemoryChunkStore(), MemoryRefStore()  # one database, two servers

    def server() -> Repository:
        chunks, refs = redis_caches(chunk_store, ref_store, client, prefix=prefix, repo="acme")
        return Repository(ValidatingChunkStore(chunks), refs)

    one, two = server(), server()
    one.init()
    two.init()
    for i in range(5):
        one.commit_edits("main", {b"k%d" % i: b"v%d" % i}, author="one", message=f"edit {i}")

    def write(repo: Repository, name: bytes) -> None:
        for i in range(10):
            repo.commit_edits("main", {name + b"%d" % i: b"x"}, author=name.decode(), message="race")

    threads = [threading.Thread(target=write, args=(r, n)) for r, n in ((one, b"a"), (two, b"b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    head = two.head("main")
    tree = two.commit(head).tree
    assert [get(two.nodes, tree, b"k%d" % i) for i in range(5)] == [b"v%d" % i for i in range(5)]
    assert all(get(two.nodes, tree, n + b"%d" % i) == b"x" for n in (b"a", b"b") for i in range(10))
    assert len(list(two.iter_log(head))) == 1 + 5 + 20
    assert client.get(f"{prefix}acme:r:heads/main") in (head, None)  # None: expired or dropped by a race
    assert client.get(f"{prefix}acme:c:{head.hex()}") is not None
    assert Repository(chunk_store, ref_store).fsck().ok  # the durable stores alone are complete
