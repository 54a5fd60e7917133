"""The S3 chunk store (SeaweedFS): the storage contract, parallel batches, error translation, and the full stack
of PostgreSQL refs + S3 chunks + the Redis chunk cache behind ``engram.open``."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from s3server import S3Server
from services import require_redis

import engram
from engram.backends import ChunkStore, ValidatingChunkStore
from engram.backends.buckets import s3_error
from engram.backends.s3 import S3ChunkStore, shared_client
from engram.breakers import CircuitBreaker, RetryPolicy
from engram.errors import CircuitOpenError, ConfigError, StorageError, UnavailableError
from engram.hashing import chunk_id
from engram.store import open_repository, tenant_url
from engram.testing import ChunkStoreContract

pytest.importorskip("boto3")


def _store(s3: S3Server, **options: Any) -> S3ChunkStore:
    return S3ChunkStore(s3.bucket, "contract", "r" + uuid.uuid4().hex[:12], endpoint=s3.endpoint, **options)


class TestS3ChunkStore(ChunkStoreContract):
    @pytest.fixture
    def chunks(self, s3: S3Server) -> Iterator[ChunkStore]:
        store = _store(s3)
        yield ValidatingChunkStore(store)
        store.close()


def _layers(store: ChunkStore) -> list[ChunkStore]:
    """A chunk store and the stores it wraps, outermost first."""
    found = [store]
    while hasattr(found[-1], "inner"):
        found.append(found[-1].inner)  # type: ignore[attr-defined]
    return found


def _s3_url(postgres_url: str, s3: S3Server, repo: str) -> str:
    joint = "&" if "?" in postgres_url else "?"
    return f"{postgres_url}{joint}repo={repo}&chunks=s3://{s3.bucket}/stack&chunks_endpoint={s3.endpoint}"


def test_s3_chunks_are_kept_per_repository(s3: S3Server) -> None:
    a, b = _store(s3), _store(s3)
    cid = a.put(b"only in a")
    assert b.has_many([cid]) == {cid} and a.has(cid)
    assert list(b.iter_ids()) == []
    a.close()
    b.close()


def test_s3_batches_run_in_parallel_on_a_bounded_pool(s3: S3Server) -> None:
    store = _store(s3, workers=4)
    data = {chunk_id(b"p%d" % i): b"p%d" % i for i in range(40)}
    store.put_many(data)
    assert store.get_many(list(data)) == data
    assert store._pool._max_workers == 4
    assert len({t.name for t in store._pool._threads}) == 4  # the batch used every worker, and no more
    store.close()


class _Counting:
    """A boto3 client that counts the requests made through it (the store's ``client`` seam)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def call(**kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(**kwargs)

        return call


def test_s3_has_many_lists_a_range_instead_of_a_head_per_id(s3: S3Server) -> None:
    client = _Counting(shared_client(s3.endpoint))
    store = _store(s3, client=client)
    stored = {chunk_id(b"h%d" % i): b"h%d" % i for i in range(100)}
    store.put_many(stored)
    absent = [chunk_id(b"absent%d" % i) for i in range(100)]
    client.calls.clear()
    assert store.has_many([*stored, *absent]) == set(absent)
    assert client.calls == Counter({"list_objects_v2": 1})  # 200 ids, one request
    store.close()


def test_s3_has_many_heads_what_its_listing_budget_did_not_reach(s3: S3Server) -> None:
    client = _Counting(shared_client(s3.endpoint))
    store = _store(s3, client=client, workers=64)  # 50 ids / 64 workers: a budget of one listing page
    stored = sorted(chunk_id(b"b%d" % i) for i in range(1050))
    store.put_many({chunk_id(b"b%d" % i): b"b%d" % i for i in range(1050)})
    asked = stored[::26] + [chunk_id(b"gone%d" % i) for i in range(10)]
    client.calls.clear()
    assert store.has_many(asked) == set(asked[-10:])
    assert client.calls["list_objects_v2"] == 1 and client.calls["head_object"] > 0  # the last ids: one HEAD each
    store.close()


def test_s3_rejects_a_bad_bucket_name_and_a_missing_bucket(s3: S3Server) -> None:
    with pytest.raises(ConfigError, match="invalid S3 bucket"):
        S3ChunkStore("Bad_Bucket", endpoint=s3.endpoint)
    store = S3ChunkStore("no-such-bucket-" + uuid.uuid4().hex[:8], endpoint=s3.endpoint)
    with pytest.raises(ConfigError, match="does not exist"):
        store.get_many([chunk_id(b"x"), chunk_id(b"y")])
    with pytest.raises(ConfigError, match="does not exist"):
        list(store.iter_ids())
    store.close()


def test_s3_unreachable_server_is_unavailable() -> None:
    store = S3ChunkStore("engram-tests", endpoint="http://127.0.0.1:9", workers=2)
    store.client.meta.config.retries = {"max_attempts": 1}
    with pytest.raises(UnavailableError, match="unreachable"):
        store.get_many([chunk_id(b"x")])
    store.close()


class _Flaky(_Counting):
    """A boto3 client whose first ``failures`` requests of each named method find the server unreachable."""

    def __init__(self, inner: Any, **failures: int) -> None:
        super().__init__(inner)
        self.failures = Counter(failures)

    def __getattr__(self, name: str) -> Any:
        from botocore.exceptions import EndpointConnectionError

        counted = super().__getattr__(name)

        def call(**kwargs: Any) -> Any:
            if self.failures[name] > 0:
                self.failures[name] -= 1
                self.calls[name] += 1
                raise EndpointConnectionError(endpoint_url="http://flaky")
            return counted(**kwargs)

        return call


def test_s3_chunk_store_retries_transient_failures_through_its_breaker(s3: S3Server) -> None:
    client = _Flaky(shared_client(s3.endpoint), put_object=2, get_object=1)
    breaker = CircuitBreaker("s3:flaky", failure_threshold=10)
    store = _store(s3, client=client, retry=RetryPolicy(attempts=3, initial=0.0), breaker=breaker)
    cid = store.put(b"retried")
    assert store.get_many([cid]) == {cid: b"retried"}
    assert client.calls["put_object"] == 3 and client.calls["get_object"] == 2
    assert breaker.state == "closed" and breaker.snapshot()["failures"] == 0  # each success reset the count
    store.close()


def test_s3_chunk_store_fails_fast_once_its_breaker_opens() -> None:
    endpoint = "http://127.0.0.1:9"
    client = _Counting(shared_client(endpoint))
    breaker = CircuitBreaker("s3:down", failure_threshold=2, reset_timeout=60.0)
    store = S3ChunkStore("engram-tests", endpoint=endpoint, client=client, breaker=breaker,
                         retry=RetryPolicy(attempts=2, initial=0.0))  # fmt: skip
    with pytest.raises(UnavailableError, match="unreachable"):
        store.get_many([chunk_id(b"x")])
    assert client.calls["get_object"] == 2 and breaker.state == "open"
    with pytest.raises(CircuitOpenError):
        store.has_many([chunk_id(b"x")])
    assert client.calls == Counter({"get_object": 2})  # no request while the breaker is open
    store.close()


def test_s3_errors_are_classified_in_one_place() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    def answer(code: str, status: int) -> ClientError:
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")

    def classify(exc: BaseException) -> type | None:
        found = s3_error(exc, "get", "s3://b/p/", "b")
        return None if found is None else type(found)

    assert classify(answer("NoSuchKey", 404)) is None and classify(answer("PreconditionFailed", 412)) is None
    assert classify(answer("SlowDown", 503)) is UnavailableError
    assert classify(answer("ThrottlingException", 400)) is UnavailableError
    assert classify(answer("NoSuchBucket", 404)) is ConfigError
    assert classify(answer("AccessDenied", 403)) is StorageError
    assert classify(NoCredentialsError()) is ConfigError
    assert classify(EndpointConnectionError(endpoint_url="http://127.0.0.1:1")) is UnavailableError
    assert classify(ValueError("not botocore's")) is None


def test_s3_store_url_needs_postgres_and_an_s3_url(postgres_url: str) -> None:
    with pytest.raises(ConfigError, match="s3://"):
        open_repository(f"{postgres_url}?chunks=http://elsewhere/x")
    with pytest.raises(ConfigError, match="chunks_endpoint"):
        open_repository(f"{postgres_url}?chunks_endpoint=http://127.0.0.1:1")


def test_s3_tenant_urls_keep_the_chunk_options(postgres_url: str, s3: S3Server) -> None:
    url = _s3_url(postgres_url, s3, "base")
    derived = tenant_url(url, "acme")
    assert "repo=acme" in derived and f"chunks_endpoint={s3.endpoint}" in derived and "chunks=s3://" in derived


def test_s3_full_stack_postgres_refs_s3_chunks_redis_cache(pgvector_url: str, pg_repo_id: str, s3: S3Server) -> None:
    """Puts, search and history through ``engram.open`` on PostgreSQL refs and search tables (pgvector) + S3 chunks
    + the Redis chunk cache in front."""
    from engram.backends.redis import RedisChunkCache
    from engram.embed import HashingEmbedder

    redis_url = require_redis()
    postgres_url = pgvector_url
    url = _s3_url(postgres_url, s3, pg_repo_id) + f"&redis={redis_url}"
    mem = engram.open(url, embedder=HashingEmbedder(), author="tester", search="postgres")
    assert mem.pool.sql is not None  # the search indexes are PostgreSQL tables
    try:
        layers = _layers(mem.repo.chunks)
        assert any(isinstance(layer, RedisChunkCache) for layer in layers)
        s3_store = layers[-1]
        assert isinstance(s3_store, S3ChunkStore)
        assert layers.index(s3_store) > next(i for i, layer in enumerate(layers) if isinstance(layer, RedisChunkCache))
        mem.put(("notes",), "a", {"text": "the deploy failed because the disk was full"})
        mem.put(("notes",), "b", {"text": "lunch is at noon"})
        mem.put(("notes",), "a", {"text": "the deploy failed because the disk was full; fixed by cleanup"})
        hits = mem.search(("notes",), "disk full deploy")
        assert hits[0].key == "a"
        versions = mem.history(("notes",), "a")
        assert len(versions) == 2 and "cleanup" in versions[0].item.value["text"]  # type: ignore[union-attr]
        # The chunks are in S3 (not PostgreSQL), and a second store with a cold cache reads them there.
        s3_chunks = set(s3_store.iter_ids())
        assert mem.repo.head("main") in s3_chunks
        fresh = engram.open(_s3_url(postgres_url, s3, pg_repo_id), embedder=HashingEmbedder())
        assert fresh.get(("notes",), "b").value == {"text": "lunch is at noon"}  # type: ignore[union-attr]
        assert fresh.fsck().ok
        fresh.close()
    finally:
        mem.close()
