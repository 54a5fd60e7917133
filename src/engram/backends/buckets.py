"""Where a remote keeps its bytes: a flat map of keys to objects, with compare-and-swap on single objects.

A :class:`Bucket` is the one seam under every remote; :class:`DirBucket` (``dir:///path``, a folder of files)
and :class:`S3Bucket` (``s3://bucket/prefix``, through boto3) implement it. The chunk and ref stores of a
remote (:mod:`engram.ops.remotes.stores`) are written once over it. Keys are ``/``-separated words; listing
yields them in ascending order with the time each object was last written.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from engram.breakers import CircuitBreaker, RetryPolicy, retry_call, s3_transient
from engram.breakers import breaker as shared_breaker
from engram.clock import now_ms
from engram.errors import ConfigError, StorageError, UnavailableError
from engram.redaction import redact_url

#: Parallel requests one bucket makes for a batch (S3 round trips dominate; files are cheap either way).
WORKERS = 16
#: How S3 requests are retried by default: 5 tries, full-jitter backoff up to 4 s (issue #15).
S3_RETRY = RetryPolicy(attempts=5, initial=0.25, maximum=4.0)


class Bucket(ABC):
    """Objects by key; every write of one object is atomic, and :meth:`write_if` is compare-and-swap."""

    url: str
    #: How coarse the write times of :meth:`iter_keys` are (ms): S3 lists them to the second.
    precision_ms: int = 1

    @abstractmethod
    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The objects that exist among ``keys``."""

    @abstractmethod
    def exists_many(self, keys: Iterable[str]) -> set[str]:
        """The keys among ``keys`` that exist."""

    @abstractmethod
    def put_many(self, objects: Mapping[str, bytes]) -> None:
        """Write objects (a write of an existing key replaces it and renews its write time); durable on return."""

    @abstractmethod
    def delete_many(self, keys: Iterable[str]) -> None:
        """Remove objects (absent keys are ignored)."""

    @abstractmethod
    def iter_keys(self, prefix: str) -> Iterator[tuple[str, int]]:
        """Yield ``(key, written at UTC ms)`` of every object under ``prefix``, in ascending key order."""

    def written_at(self, key: str) -> int | None:
        """The exact write time of one object (UTC ms), or None if absent; the default trusts the listing."""
        return next((written for found, written in self.iter_keys(key) if found == key), None)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        """``length`` bytes of one object from offset ``start`` (None: no such object); the default reads it all."""
        found = self.get_many([key]).get(key)
        return None if found is None else found[start : start + length]

    @abstractmethod
    def read(self, key: str) -> tuple[bytes, str] | None:
        """One object and its version token (what :meth:`write_if` compares), or None if absent."""

    @abstractmethod
    def write_if(self, key: str, data: bytes | None, version: str | None) -> bool:
        """Write (``data=None``: delete) ``key`` only if its version is still ``version`` (None: absent)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default does nothing."""


def _check_key(key: str) -> str:
    parts = key.split("/")
    if not key or any(part in ("", ".", "..") for part in parts) or "\0" in key:
        raise StorageError(f"invalid object key {key!r}")
    return key


class DirBucket(Bucket):
    """A folder: one file per object, written to a temporary name, synced, then renamed into place.

    Compare-and-swap holds across processes through an advisory lock on ``<folder>/.lock``.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.url = f"dir://{self.root.resolve()}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create remote folder {self.root}: {exc}") from exc
        self._lock = threading.Lock()

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                found[key] = self._path(key).read_bytes()
        return found

    def exists_many(self, keys: Iterable[str]) -> set[str]:
        return {key for key in keys if self._path(key).is_file()}

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        try:
            with open(self._path(key), "rb") as fp:
                fp.seek(start)
                return fp.read(length)
        except FileNotFoundError:
            return None

    def put_many(self, objects: Mapping[str, bytes]) -> None:
        items = list(objects.items())
        if len(items) <= 4:
            for key, data in items:
                self._write(key, data)
            return
        with ThreadPoolExecutor(min(WORKERS, len(items))) as pool:
            list(pool.map(lambda item: self._write(*item), items))

    def _write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(temp, "wb") as fp:
            fp.write(data)
            fp.flush()
            os.fsync(fp.fileno())
        os.replace(temp, path)

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                self._path(key).unlink()

    def iter_keys(self, prefix: str) -> Iterator[tuple[str, int]]:
        folder = prefix.rpartition("/")[0]
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return
        found = sorted((path.relative_to(self.root).as_posix(), path) for path in _walk(base))
        for key, path in found:
            if not key.startswith(prefix) or path.name.startswith("."):
                continue
            with contextlib.suppress(FileNotFoundError):
                yield key, path.stat().st_mtime_ns // 1_000_000

    def read(self, key: str) -> tuple[bytes, str] | None:
        try:
            data = self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        return data, hashlib.blake2b(data, digest_size=16).hexdigest()

    def write_if(self, key: str, data: bytes | None, version: str | None) -> bool:
        with self._lock, open(self.root / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                current = self.read(key)
                if (None if current is None else current[1]) != version:
                    return False
                if data is None:
                    self._path(key).unlink(missing_ok=True)
                else:
                    self._write(key, data)
                return True
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _walk(base: Path) -> Iterator[Path]:
    for folder, _, files in os.walk(base):
        for name in files:
            yield Path(folder) / name


class S3Bucket(Bucket):
    """A prefix of an S3 (or S3-compatible) bucket through boto3.

    Credentials come from boto3's usual chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profiles, instance
    roles); ``?endpoint=http://host:port`` in the URL names an S3-compatible server, ``?region=`` a region.
    Compare-and-swap uses conditional writes (``If-Match`` / ``If-None-Match: *``).

    Transient failures (5xx, throttling, connections refused, reset or timing out) are retried by ``retry``
    (default :data:`S3_RETRY`) through the circuit breaker ``s3:<endpoint>/<bucket>`` (:mod:`engram.breakers`):
    after repeated failures requests fail at once with an :class:`~engram.errors.UnavailableError`.
    """

    def __init__(self, bucket: str, prefix: str = "", *, endpoint: str | None = None, region: str | None = None,
                 client: Any = None, retry: RetryPolicy | None = None,
                 breaker: CircuitBreaker | None = None) -> None:  # fmt: skip
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ConfigError("s3:// remotes need boto3: pip install 'engram[s3]'") from None
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        query = "" if endpoint is None else f"?endpoint={endpoint}"
        self.url = redact_url(f"s3://{bucket}/{self.prefix}{query}")  # shown in messages
        # botocore does not retry: retry_call does, so that the breaker sees every attempt
        config = Config(retries={"max_attempts": 1, "mode": "standard"}, max_pool_connections=WORKERS + 4,
                        connect_timeout=5, read_timeout=30)  # fmt: skip
        self.client = client or boto3.client("s3", endpoint_url=endpoint, region_name=region or "us-east-1",
                                             config=config)  # fmt: skip
        self._pool = ThreadPoolExecutor(WORKERS)
        self.precision_ms = 1000
        self.retry = retry or S3_RETRY
        self.breaker = breaker or shared_breaker(redact_url(f"s3:{endpoint or 'aws'}/{bucket}"))

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            return retry_call(lambda: fn(Bucket=self.bucket, **kwargs), transient=s3_transient, policy=self.retry,
                              breaker=self.breaker, what=f"S3 {what} on {self.url}")  # fmt: skip
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound", "PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if status >= 500 or code in ("SlowDown", "RequestTimeout"):
                raise UnavailableError(f"S3 {what} on {self.url} failed: {code or status}", 5.0) from None
            raise StorageError(f"S3 {what} on {self.url} failed: {code} {exc}") from None
        except NoCredentialsError:
            raise ConfigError(
                f"no S3 credentials for {self.url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile)"
            ) from None
        except BotoCoreError as exc:
            raise UnavailableError(f"S3 at {self.url} is unreachable ({what}): {exc}", 5.0) from None

    def _get(self, key: str) -> tuple[bytes, str] | None:
        from botocore.exceptions import ClientError

        try:
            answer = self._call("get", self.client.get_object, Key=self.prefix + key)
            return answer["Body"].read(), str(answer["ETag"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise  # pragma: no cover - _call re-raises only these codes

    def _head(self, key: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            answer: dict[str, Any] = self._call("head", self.client.head_object, Key=self.prefix + key)
        except ClientError:
            return None
        return answer

    def written_at(self, key: str) -> int | None:
        answer = self._head(key)
        if answer is None:
            return None
        exact = answer.get("Metadata", {}).get("written")
        return int(exact) if exact and exact.isdigit() else int(answer["LastModified"].timestamp() * 1000)

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        wanted = list(keys)
        return {key: got[0] for key, got in zip(wanted, self._pool.map(self._get, wanted), strict=True) if got}

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        from botocore.exceptions import ClientError

        if length <= 0:
            return b"" if self._head(key) is not None else None
        try:
            answer = self._call("get", self.client.get_object, Key=self.prefix + key,
                                Range=f"bytes={start}-{start + length - 1}")  # fmt: skip
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise  # pragma: no cover - _call re-raises only these codes
        data: bytes = answer["Body"].read()
        return data

    def exists_many(self, keys: Iterable[str]) -> set[str]:
        wanted = list(keys)
        return {key for key, there in zip(wanted, self._pool.map(self._head, wanted), strict=True) if there is not None}

    def put_many(self, objects: Mapping[str, bytes]) -> None:
        def put(item: tuple[str, bytes]) -> None:
            self._call("put", self.client.put_object, Key=self.prefix + item[0], Body=item[1],
                       Metadata={"written": str(now_ms())})  # fmt: skip

        list(self._pool.map(put, objects.items()))

    def delete_many(self, keys: Iterable[str]) -> None:
        listed = list(keys)
        for i in range(0, len(listed), 1000):
            batch = [{"Key": self.prefix + key} for key in listed[i : i + 1000]]
            answer = self._call("delete", self.client.delete_objects, Delete={"Objects": batch, "Quiet": True})
            if answer.get("Errors"):
                raise StorageError(f"S3 delete on {self.url} failed for {len(answer['Errors'])} object(s)")

    def iter_keys(self, prefix: str) -> Iterator[tuple[str, int]]:
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            page = self._call("list", self.client.list_objects_v2, Prefix=self.prefix + prefix, **extra)
            for entry in page.get("Contents", []):
                yield entry["Key"][len(self.prefix) :], int(entry["LastModified"].timestamp() * 1000)
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def read(self, key: str) -> tuple[bytes, str] | None:
        return self._get(key)

    def write_if(self, key: str, data: bytes | None, version: str | None) -> bool:
        from botocore.exceptions import ClientError

        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        try:
            if data is None:
                if version is None:
                    return self._head(key) is None
                self._call("delete", self.client.delete_object, Key=self.prefix + key, **condition)
            else:
                self._call("put", self.client.put_object, Key=self.prefix + key, Body=data, **condition)
        except ClientError:
            return False  # PreconditionFailed, ConditionalRequestConflict, NoSuchKey: someone else moved it
        return True


def open_bucket(url: str) -> Bucket:
    """The bucket of a remote URL: ``dir:///path`` (or a plain path) or ``s3://bucket/prefix?endpoint=...``.

    A URL that carries a credential (a password, a secret query parameter) is refused: S3 credentials come from
    boto3's chain, and a URL is shown in messages, ``/readyz`` and the names of circuit breakers."""
    shown = redact_url(url)
    if shown != url:
        raise ConfigError(
            f"remote URL {shown!r} carries a credential: engram takes S3 credentials from AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, a profile or a role; rename the remote with a URL without one"
        )
    parts = urlsplit(url)
    if parts.scheme == "dir":
        path = parts.netloc + parts.path if parts.netloc else parts.path
        if not path:
            raise ConfigError(f"remote URL {url!r} names no folder: use dir:///absolute/path")
        return DirBucket(path)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ConfigError(f"remote URL {url!r} names no bucket: use s3://bucket/prefix")
        if "@" in parts.netloc:
            raise ConfigError(f"remote URL {url!r} has a user name: engram takes S3 credentials from boto3's chain")
        options = dict(parse_qsl(parts.query))
        unknown = set(options) - {"endpoint", "region"}
        if unknown:
            raise ConfigError(f"unknown option(s) {', '.join(sorted(unknown))} in {url!r}: endpoint, region")
        return S3Bucket(parts.netloc, parts.path, endpoint=options.get("endpoint"), region=options.get("region"))
    if parts.scheme == "" and url:
        return DirBucket(url)
    raise ConfigError(f"unsupported remote URL {url!r}: use dir:///path or s3://bucket/prefix")
