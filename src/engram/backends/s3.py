"""Chunks in S3 (or an S3-compatible server): the layout large deployments use, refs staying in PostgreSQL.

:class:`S3ChunkStore` keeps each chunk of one repository as one object, ``<prefix>/<repo>/c/<hex id>``.
Chunks are immutable and named by their hash, so every put is idempotent (a put of a stored chunk writes the
same bytes again and renews its write time, which garbage collection relies on), nothing is ever updated in
place, and any cache in front (the in-process LRU, Redis) is never stale. Batches run in parallel on a bounded
thread pool: S3 round trips, not bandwidth, dominate small chunks.

Write times: S3 lists ``LastModified`` to the second, so each object also carries its exact write time (ms)
in metadata; ``iter_ids(written_before=...)`` reads it (one HEAD) only for objects listed in the ambiguous
second. Credentials come from boto3's chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profiles,
instance roles). botocore errors are translated here: a server that is down or overloaded is an
:class:`~engram.errors.UnavailableError`, anything else a :class:`~engram.errors.StorageError`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from engram import runtime
from engram.backends.base import ChunkStore, now_ms
from engram.errors import ConfigError, StorageError, UnavailableError
from engram.hashing import ChunkId

__all__ = ["WORKERS", "S3ChunkStore", "shared_client"]

#: Parallel requests of one store (GET/PUT/HEAD per chunk): bounded, so a large batch cannot open a storm.
WORKERS = 16
#: Objects per DeleteObjects request (the S3 limit).
_DELETE_BATCH = 1000
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_MISSING = ("NoSuchKey", "404", "NotFound")
#: ``has_many`` of more ids than this lists their key range first (one request per 1,000 stored keys).
_LIST_FROM = 32

T = TypeVar("T")


_CLIENTS: dict[tuple[str | None, str | None], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def shared_client(endpoint: str | None = None, region: str | None = None) -> Any:
    """One boto3 S3 client per (endpoint, region) for the whole process: clients are thread-safe, and a server
    with many tenants would otherwise hold one connection pool per tenant."""
    with _CLIENTS_LOCK:
        found = _CLIENTS.get((endpoint, region))
        if found is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                raise ConfigError("chunks in S3 need boto3: pip install 'engram[s3]'") from None
            config = Config(retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=4 * WORKERS,
                            connect_timeout=5, read_timeout=30)  # fmt: skip
            found = _CLIENTS[(endpoint, region)] = boto3.client(
                "s3", endpoint_url=endpoint, region_name=region or "us-east-1", config=config
            )
        return found


def _close_clients() -> None:
    with _CLIENTS_LOCK:
        found = list(_CLIENTS.values())
        _CLIENTS.clear()
    runtime.close_each(client for client in found if hasattr(client, "close"))


runtime.register("engram.backends.s3.clients", close=_close_clients, reset=_close_clients)


class S3ChunkStore(ChunkStore):
    """The chunks of repository ``repo`` under ``s3://bucket/prefix/<repo>/c/``.

    Args:
        bucket: the bucket (it must exist).
        prefix: a folder inside the bucket shared by every repository ("" for the bucket's root).
        repo: the repository id (one folder per repository: tenants never share chunks).
        endpoint: an S3-compatible server (``http://127.0.0.1:8333``); None for AWS.
        region: the region (default ``us-east-1``).
        workers: parallel requests at most.
        client: a boto3 S3 client (default: the process's :func:`shared_client` for ``endpoint`` and ``region``).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        repo: str = "default",
        *,
        endpoint: str | None = None,
        region: str | None = None,
        workers: int = WORKERS,
        client: Any = None,
    ) -> None:
        if not _BUCKET.match(bucket):
            raise ConfigError(f"invalid S3 bucket name {bucket!r}")
        if not repo or "/" in repo:
            raise ConfigError(f"invalid repository id {repo!r} for S3 chunks")
        self.bucket = bucket
        folder = prefix.strip("/")
        self.base = f"{folder}/{repo}/c/" if folder else f"{repo}/c/"
        self.where = f"s3://{bucket}/{self.base}" + (f" at {endpoint}" if endpoint else "")
        self.client = client if client is not None else shared_client(endpoint, region)
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="engram-s3")

    # ------------------------------------------------------------------ requests

    def _call(self, what: str, fn: Callable[..., T], **kwargs: Any) -> T:
        """One S3 request with botocore's errors translated (a missing object's error is re-raised as is)."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            return fn(Bucket=self.bucket, **kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                raise
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if status >= 500 or code in ("SlowDown", "RequestTimeout", "ServiceUnavailable"):
                raise UnavailableError(f"S3 {what} on {self.where} failed: {code or status}", 5.0) from None
            if code == "NoSuchBucket":
                raise ConfigError(f"S3 bucket {self.bucket!r} does not exist ({self.where})") from None
            raise StorageError(f"S3 {what} on {self.where} failed: {code or status} {exc}") from None
        except NoCredentialsError:
            raise ConfigError(
                f"no S3 credentials for {self.where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile)"
            ) from None
        except BotoCoreError as exc:
            raise UnavailableError(f"S3 at {self.where} is unreachable ({what}): {exc}", 5.0) from None

    def _key(self, cid: ChunkId) -> str:
        return self.base + cid.hex()

    def _get(self, cid: ChunkId) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            answer = self._call("get", self.client.get_object, Key=self._key(cid))
            return bytes(answer["Body"].read())
        except ClientError:
            return None  # _call re-raises only "no such key"

    def _head(self, cid: ChunkId) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            answer: dict[str, Any] = self._call("head", self.client.head_object, Key=self._key(cid))
        except ClientError:
            return None
        return answer

    def _put(self, item: tuple[ChunkId, bytes]) -> None:
        self._call("put", self.client.put_object, Key=self._key(item[0]), Body=item[1],
                   Metadata={"written": str(now_ms())})  # fmt: skip

    def _parallel(self, fn: Callable[[ChunkId], T], ids: list[ChunkId]) -> list[T]:
        if len(ids) <= 1:
            return [fn(cid) for cid in ids]
        return list(self._pool.map(fn, ids))

    # ------------------------------------------------------------------ the seam

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        wanted = list(dict.fromkeys(ids))
        found = self._parallel(self._get, wanted)
        return {cid: data for cid, data in zip(wanted, found, strict=True) if data is not None}

    def has_many(self, ids: Iterable[ChunkId]) -> set[ChunkId]:
        """Batched: a listing of the ids' key range answers many ids per request (1,000 keys a page), for as many
        pages as parallel HEADs of the same ids would take round trips; ids beyond where it stopped get a HEAD."""
        wanted = sorted(set(ids))
        if not wanted:
            return set()
        missing: set[ChunkId] = set()
        rest = wanted
        if len(wanted) > _LIST_FROM:
            listed, upto = self._list_range(wanted[0], wanted[-1], budget=-(-len(wanted) // self.workers))
            done = [cid for cid in wanted if cid <= upto]
            missing = {cid for cid in done if cid not in listed}
            rest = wanted[len(done) :]
        heads = self._parallel(self._head, rest)
        return missing | {cid for cid, head in zip(rest, heads, strict=True) if head is None}

    def _list_range(self, first: ChunkId, last: ChunkId, budget: int) -> tuple[set[ChunkId], ChunkId]:
        """The stored ids from ``first`` on, listed with at most ``budget`` requests, and the id up to which
        that answer is complete (``last`` when the whole range was listed; ``b""`` when nothing was)."""
        found: set[ChunkId] = set()
        upto = b""
        extra: dict[str, Any] = {"StartAfter": self.base + first.hex()[:-1]}
        for _ in range(budget):
            page = self._call("list", self.client.list_objects_v2, Prefix=self.base, **extra)
            for entry in page.get("Contents", []):
                try:
                    cid = bytes.fromhex(entry["Key"][len(self.base) :])
                except ValueError:
                    continue
                if cid > last:
                    return found, last
                found.add(cid)
                upto = cid
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return found, last
            extra = {"ContinuationToken": token}
        return found, upto

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        items = list(chunks.items())
        if len(items) <= 1:
            for item in items:
                self._put(item)
            return
        list(self._pool.map(self._put, items))

    def _written(self, cid: ChunkId, listed_ms: int) -> int:
        """The exact write time of a chunk: its metadata, else what the listing said."""
        head = self._head(cid)
        exact = (head or {}).get("Metadata", {}).get("written", "")
        return int(exact) if exact.isdigit() else listed_ms

    def iter_ids(
        self, start: ChunkId | None = None, end: ChunkId | None = None, *, written_before: int | None = None
    ) -> Iterator[ChunkId]:
        # Keys are fixed-length hex, so S3's key order is the ids' byte order. StartAfter is exclusive:
        # start after the key one hex digit shorter, and drop the few ids below ``start`` here.
        after = self.base + start.hex()[:-1] if start is not None else ""
        token: str | None = None
        while True:
            extra: dict[str, Any] = {"ContinuationToken": token} if token else ({"StartAfter": after} if after else {})
            page = self._call("list", self.client.list_objects_v2, Prefix=self.base, **extra)
            for entry in page.get("Contents", []):
                try:
                    cid = bytes.fromhex(entry["Key"][len(self.base) :])
                except ValueError:
                    continue  # not a chunk (an object someone else put here)
                if start is not None and cid < start:
                    continue
                if end is not None and cid >= end:
                    return
                if written_before is not None:
                    listed = int(entry["LastModified"].timestamp() * 1000)  # to the second (±1 s)
                    if listed >= written_before + 1000:
                        continue  # certainly written at or after the cut
                    if listed + 1000 > written_before and self._written(cid, listed) >= written_before:
                        continue  # listed within a second of the cut: the exact time in its metadata decides
                yield cid
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        keys = [self._key(cid) for cid in dict.fromkeys(ids)]
        for i in range(0, len(keys), _DELETE_BATCH):
            batch = [{"Key": key} for key in keys[i : i + _DELETE_BATCH]]
            answer = self._call("delete", self.client.delete_objects, Delete={"Objects": batch, "Quiet": True})
            if answer.get("Errors"):
                raise StorageError(f"S3 delete on {self.where} failed for {len(answer['Errors'])} object(s)")

    def close(self) -> None:
        self._pool.shutdown(wait=True)
