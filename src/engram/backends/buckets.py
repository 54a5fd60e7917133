"""Where object storage keeps its bytes: a flat map of keys to objects, with compare-and-swap on single objects.

A :class:`Bucket` is the one seam under everything engram keeps in object storage: the live S3 chunk store
(:mod:`engram.backends.s3`) and the remotes (:mod:`engram.ops.remotes`) are both written over it.
:class:`DirBucket` (a folder of files) and :class:`S3Bucket` (a prefix of an S3 bucket, through boto3) implement
it. Keys are ``/``-separated words; listing yields them in ascending order with the time each object was last
written.

S3 is reached through one stack: one boto3 client per (endpoint, region) for the process (:func:`shared_client`),
every request retried while transient (:data:`S3_RETRY`) through the endpoint's circuit breaker
(:mod:`engram.breakers`), and botocore's errors translated into engram's in one place (:func:`s3_error`).
boto3 (the ``s3`` extra) is imported only when an S3 bucket is opened.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from engram import runtime
from engram.breakers import CircuitBreaker, RetryPolicy, retry_call, s3_transient
from engram.breakers import breaker as shared_breaker
from engram.clock import now_ms
from engram.errors import ConfigError, EngramError, StorageError, UnavailableError
from engram.redaction import redact_url

__all__ = [
    "LIST_PAGE",
    "S3_RETRY",
    "WORKERS",
    "Bucket",
    "DirBucket",
    "S3Bucket",
    "s3_error",
    "shared_client",
]

#: Parallel requests one bucket makes for a batch (S3 round trips dominate; files are cheap either way).
WORKERS = 16
#: How S3 requests are retried by default: 5 tries, full-jitter backoff up to 4 s.
S3_RETRY = RetryPolicy(attempts=5, initial=0.25, maximum=4.0)
#: Keys one S3 listing request returns (the S3 default and maximum): a listing of ``n`` keys costs ``n / 1000``
#: round trips.
LIST_PAGE = 1000
#: S3 error codes of an object that is not there (GET/HEAD): not an error for a bucket, an absent object.
MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
#: S3 error codes of a conditional write that lost (someone else moved the object first).
CONFLICT = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})

T = TypeVar("T")


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
    def iter_keys(self, prefix: str, start_after: str = "") -> Iterator[tuple[str, int]]:
        """Yield ``(key, written at UTC ms)`` of every object under ``prefix`` (and after ``start_after``, when
        given), in ascending key order; pages are listed as the caller goes, so stopping early saves requests."""

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

    def iter_keys(self, prefix: str, start_after: str = "") -> Iterator[tuple[str, int]]:
        folder = prefix.rpartition("/")[0]
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return
        found = sorted((path.relative_to(self.root).as_posix(), path) for path in _walk(base))
        for key, path in found:
            if not key.startswith(prefix) or path.name.startswith(".") or key <= start_after:
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


_CLIENTS: dict[tuple[str | None, str | None], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _close_clients() -> None:
    with _CLIENTS_LOCK:
        found = list(_CLIENTS.values())
        _CLIENTS.clear()
    runtime.close_each(client for client in found if hasattr(client, "close"))


runtime.register("engram.backends.s3.clients", close=_close_clients, reset=_close_clients)


def shared_client(endpoint: str | None = None, region: str | None = None) -> Any:
    """One boto3 S3 client per (endpoint, region) for the whole process: clients are thread-safe, and a server
    with many tenants would otherwise hold one connection pool per tenant. botocore itself does not retry:
    :func:`~engram.breakers.retry_call` does, so that the breaker sees every attempt."""
    with _CLIENTS_LOCK:
        found = _CLIENTS.get((endpoint, region))
        if found is None:
            try:  # boto3 is the s3 extra: imported only when an S3 bucket is opened
                import boto3
                from botocore.config import Config
            except ImportError:
                raise ConfigError("S3 needs boto3: pip install 'engram[s3]'") from None
            config = Config(retries={"max_attempts": 1, "mode": "standard"}, max_pool_connections=4 * WORKERS,
                            connect_timeout=5, read_timeout=30)  # fmt: skip
            # a session of its own: credentials are resolved now, not cached by boto3's default session
            found = _CLIENTS[(endpoint, region)] = boto3.session.Session().client(
                "s3", endpoint_url=endpoint, region_name=region or "us-east-1", config=config
            )
        return found


def s3_error(exc: BaseException, what: str, where: str, bucket: str) -> EngramError | None:
    """The engram error for a botocore failure of the S3 request ``what`` on ``where`` (a URL shown in messages).

    None when ``exc`` is to be re-raised as it is: an answer rather than a failure (an absent object,
    :data:`MISSING`, or a conditional write that lost, :data:`CONFLICT`), or not botocore's. The one place
    botocore's errors are classified: a transient one (as :func:`~engram.breakers.s3_transient` says, the test the
    retries use) means the service is unavailable for now."""
    names = {cls.__name__ for cls in type(exc).__mro__}  # botocore's errors, recognised without importing it
    response = getattr(exc, "response", None)
    if "ClientError" in names and isinstance(response, dict):  # the server answered
        code = str(response.get("Error", {}).get("Code", ""))
        if code in MISSING or code in CONFLICT:
            return None
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if s3_transient(exc):
            return UnavailableError(f"S3 {what} on {where} failed: {code or status}", 5.0)
        if code == "NoSuchBucket":
            return ConfigError(f"S3 bucket {bucket!r} does not exist ({where})")
        return StorageError(f"S3 {what} on {where} failed: {code or status} {exc}")
    if "NoCredentialsError" in names:
        return ConfigError(
            f"no S3 credentials for {where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile)"
        )
    if "BotoCoreError" in names:  # no answer: refused, reset, timed out
        return UnavailableError(f"S3 at {where} is unreachable ({what}): {exc}", 5.0)
    return None


class S3Bucket(Bucket):
    """A prefix of an S3 (or S3-compatible) bucket through boto3.

    Credentials come from boto3's usual chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profiles, instance
    roles); ``endpoint`` names an S3-compatible server (``http://127.0.0.1:8333``; None for AWS). Compare-and-swap
    uses conditional writes (``If-Match`` / ``If-None-Match: *``). Every put stores its exact write time (ms) in the
    object's metadata, which :meth:`written_at` reads: S3 lists write times to the second.

    Transient failures (5xx, throttling, connections refused, reset or timing out) are retried by ``retry``
    (default :data:`S3_RETRY`) through the circuit breaker ``s3:<endpoint>/<bucket>`` (:mod:`engram.breakers`):
    after repeated failures requests fail at once with an :class:`~engram.errors.UnavailableError`. Batches run on
    a bounded pool of ``workers`` threads (:attr:`pool`).
    """

    def __init__(self, bucket: str, prefix: str = "", *, endpoint: str | None = None, region: str | None = None,
                 client: Any = None, retry: RetryPolicy | None = None, breaker: CircuitBreaker | None = None,
                 workers: int = WORKERS) -> None:  # fmt: skip
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        query = "" if endpoint is None else f"?endpoint={endpoint}"
        self.url = redact_url(f"s3://{bucket}/{self.prefix}{query}")  # shown in messages
        self.client = client if client is not None else shared_client(endpoint, region)
        self.workers = workers
        #: The bounded thread pool batches run on.
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="engram-s3")
        self.precision_ms = 1000
        self.retry = retry or S3_RETRY
        self.breaker = breaker or shared_breaker(redact_url(f"s3:{endpoint or 'aws'}/{bucket}"))

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def _call(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """One S3 request, retried through the breaker; an absent object or a lost condition is re-raised as
        botocore's ``ClientError``, every other failure as engram's error (:func:`s3_error`)."""
        try:
            return retry_call(lambda: fn(Bucket=self.bucket, **kwargs), transient=s3_transient, policy=self.retry,
                              breaker=self.breaker, what=f"S3 {what} on {self.url}")  # fmt: skip
        except EngramError:
            raise  # the breaker is open
        except Exception as exc:
            translated = s3_error(exc, what, self.url, self.bucket)
            if translated is None:
                raise
            raise translated from None

    def _each(self, fn: Callable[[T], Any], items: list[T]) -> list[Any]:
        """``fn`` of every item: in parallel on the pool, or right here for one item."""
        if len(items) <= 1:
            return [fn(item) for item in items]
        return list(self.pool.map(fn, items))

    def _get(self, key: str) -> tuple[bytes, str] | None:
        try:
            answer = self._call("get", self.client.get_object, Key=self.prefix + key)
        except Exception as exc:
            if _code(exc) in MISSING:
                return None
            raise  # pragma: no cover - _call re-raises only absent objects and lost conditions
        return bytes(answer["Body"].read()), str(answer["ETag"])

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            answer: dict[str, Any] = self._call("head", self.client.head_object, Key=self.prefix + key)
        except Exception as exc:
            if _code(exc) in MISSING:
                return None
            raise  # pragma: no cover - _call re-raises only absent objects and lost conditions
        return answer

    def written_at(self, key: str) -> int | None:
        answer = self._head(key)
        if answer is None:
            return None
        exact = answer.get("Metadata", {}).get("written")
        return int(exact) if exact and exact.isdigit() else int(answer["LastModified"].timestamp() * 1000)

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        wanted = list(keys)
        return {key: got[0] for key, got in zip(wanted, self._each(self._get, wanted), strict=True) if got}

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        if length <= 0:
            return b"" if self._head(key) is not None else None
        try:
            answer = self._call("get", self.client.get_object, Key=self.prefix + key,
                                Range=f"bytes={start}-{start + length - 1}")  # fmt: skip
        except Exception as exc:
            if _code(exc) in MISSING:
                return None
            raise  # pragma: no cover - _call re-raises only absent objects and lost conditions
        data: bytes = answer["Body"].read()
        return data

    def exists_many(self, keys: Iterable[str]) -> set[str]:
        wanted = list(keys)
        heads = self._each(self._head, wanted)
        return {key for key, there in zip(wanted, heads, strict=True) if there is not None}

    def _put(self, item: tuple[str, bytes]) -> None:
        self._call("put", self.client.put_object, Key=self.prefix + item[0], Body=item[1],
                   Metadata={"written": str(now_ms())})  # fmt: skip

    def put_many(self, objects: Mapping[str, bytes]) -> None:
        self._each(self._put, list(objects.items()))

    def delete_many(self, keys: Iterable[str]) -> None:
        listed = list(keys)
        for i in range(0, len(listed), 1000):
            batch = [{"Key": self.prefix + key} for key in listed[i : i + 1000]]
            answer = self._call("delete", self.client.delete_objects, Delete={"Objects": batch, "Quiet": True})
            if answer.get("Errors"):
                raise StorageError(f"S3 delete on {self.url} failed for {len(answer['Errors'])} object(s)")

    def iter_keys(self, prefix: str, start_after: str = "") -> Iterator[tuple[str, int]]:
        extra: dict[str, Any] = {"StartAfter": self.prefix + start_after} if start_after else {}
        while True:
            page = self._call("list", self.client.list_objects_v2, Prefix=self.prefix + prefix, **extra)
            for entry in page.get("Contents", []):
                yield entry["Key"][len(self.prefix) :], int(entry["LastModified"].timestamp() * 1000)
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            extra = {"ContinuationToken": token}

    def read(self, key: str) -> tuple[bytes, str] | None:
        return self._get(key)

    def write_if(self, key: str, data: bytes | None, version: str | None) -> bool:
        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        try:
            if data is None:
                if version is None:
                    return self._head(key) is None
                self._call("delete", self.client.delete_object, Key=self.prefix + key, **condition)
            else:
                self._call("put", self.client.put_object, Key=self.prefix + key, Body=data, **condition)
        except Exception as exc:
            if _code(exc) in MISSING or _code(exc) in CONFLICT:
                return False  # someone else moved it
            raise  # pragma: no cover - _call re-raises only absent objects and lost conditions
        return True


def _code(exc: BaseException) -> str:
    """The error code of a botocore ``ClientError`` ("" for any other exception)."""
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""
