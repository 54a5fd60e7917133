"""Chunks in S3 (or an S3-compatible server): the layout large deployments use, refs staying in PostgreSQL.

:class:`S3ChunkStore` keeps each chunk of one repository as one object, ``<prefix>/<repo>/c/<hex id>``, in an
:class:`~engram.backends.buckets.S3Bucket`: the same S3 stack the remotes use (one shared boto3 client per
endpoint, transient failures retried through the endpoint's circuit breaker, botocore's errors translated in one
place: a server that is down or overloaded is an :class:`~engram.errors.UnavailableError`, a missing bucket or
credentials a :class:`~engram.errors.ConfigError`, anything else a :class:`~engram.errors.StorageError`).
Chunks are immutable and named by their hash, so every put is idempotent (a put of a stored chunk writes the
same bytes again and renews its write time, which garbage collection relies on), nothing is ever updated in
place, and any cache in front (the in-process LRU, Redis) is never stale. Batches run in parallel on the bucket's
bounded thread pool: S3 round trips, not bandwidth, dominate small chunks.

Write times: S3 lists ``LastModified`` to the second, so each object also carries its exact write time (ms)
in metadata; ``iter_ids(written_before=...)`` reads it (one HEAD) only for objects listed in the ambiguous
second. Credentials come from boto3's chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profiles,
instance roles).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from engram.backends.base import ChunkStore
from engram.backends.buckets import LIST_PAGE, WORKERS, S3Bucket, shared_client
from engram.breakers import CircuitBreaker, RetryPolicy
from engram.errors import ConfigError
from engram.hashing import ChunkId

__all__ = ["WORKERS", "S3ChunkStore", "shared_client"]

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
#: ``has_many`` of more ids than this lists their key range first (one request per 1,000 stored keys).
_LIST_FROM = 32


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
        retry: how transient failures are retried (default :data:`~engram.backends.buckets.S3_RETRY`).
        breaker: the circuit breaker (default: the process's ``s3:<endpoint>/<bucket>``).
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
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        if not _BUCKET.match(bucket):
            raise ConfigError(f"invalid S3 bucket name {bucket!r}")
        if not repo or "/" in repo:
            raise ConfigError(f"invalid repository id {repo!r} for S3 chunks")
        folder = prefix.strip("/")
        base = f"{folder}/{repo}/c" if folder else f"{repo}/c"
        self.objects = S3Bucket(bucket, base, endpoint=endpoint, region=region, client=client, retry=retry,
                                breaker=breaker, workers=workers)  # fmt: skip
        self.bucket = bucket
        self.where = self.objects.url
        self.client = self.objects.client
        self.workers = workers
        self._pool = self.objects.pool

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        found = self.objects.get_many([cid.hex() for cid in dict.fromkeys(ids)])
        return {bytes.fromhex(key): data for key, data in found.items()}

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
        there = self.objects.exists_many([cid.hex() for cid in rest])
        return missing | {cid for cid in rest if cid.hex() not in there}

    def _list_range(self, first: ChunkId, last: ChunkId, budget: int) -> tuple[set[ChunkId], ChunkId]:
        """The stored ids from ``first`` on, listed with at most ``budget`` requests (pages of :data:`LIST_PAGE`
        keys), and the id up to which that answer is complete (``last`` when the whole range was listed; ``b""``
        when nothing was)."""
        found: set[ChunkId] = set()
        upto = b""
        keys = self.objects.iter_keys("", start_after=first.hex()[:-1])
        for seen, (key, _) in enumerate(keys, 1):
            try:
                cid = bytes.fromhex(key)
            except ValueError:
                cid = None
            if cid is not None:
                if cid > last:
                    return found, last
                found.add(cid)
                upto = cid
            if seen >= budget * LIST_PAGE:
                return found, upto  # the budget is spent: stop before the next page is asked for
        return found, last

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        self.objects.put_many({cid.hex(): data for cid, data in chunks.items()})

    def iter_ids(
        self, start: ChunkId | None = None, end: ChunkId | None = None, *, written_before: int | None = None
    ) -> Iterator[ChunkId]:
        # Keys are fixed-length hex, so S3's key order is the ids' byte order. StartAfter is exclusive:
        # start after the key one hex digit shorter, and drop the few ids below ``start`` here.
        after = start.hex()[:-1] if start is not None else ""
        precision = self.objects.precision_ms
        for key, listed in self.objects.iter_keys("", start_after=after):
            try:
                cid = bytes.fromhex(key)
            except ValueError:
                continue  # not a chunk (an object someone else put here)
            if start is not None and cid < start:
                continue
            if end is not None and cid >= end:
                return
            if written_before is not None:
                if listed >= written_before + precision:
                    continue  # certainly written at or after the cut
                if listed + precision > written_before and self._written(key, listed) >= written_before:
                    continue  # listed within a second of the cut: the exact time in its metadata decides
            yield cid

    def _written(self, key: str, listed_ms: int) -> int:
        """The exact write time of a chunk: its metadata, else what the listing said."""
        exact = self.objects.written_at(key)
        return listed_ms if exact is None else exact

    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        self.objects.delete_many([cid.hex() for cid in dict.fromkeys(ids)])

    def close(self) -> None:
        self.objects.close()
