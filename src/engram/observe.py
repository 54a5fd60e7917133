"""Metric primitives every layer may record into: one Prometheus registry for the whole process.

This is a base-layer module (of engram it imports only :mod:`engram.runtime`), so the storage wrappers, the
repository and the memory API record here without importing :mod:`engram.ops`; :mod:`engram.ops.metrics` adds
what is computed when scraped (index lag, breaker states, readiness, disk) and exposes the registry. Everything is on
prometheus-client's default registry, where the memory writer's metrics (:mod:`engram.writer.metrics`) are
too, so one scrape returns all of them. None is registered at import: the set is made on first use and kept by
:mod:`engram.runtime`.

Recording costs one histogram observation per storage call (a few µs): label values are bound once per store
(see :class:`StorageMeter`), never looked up per operation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.registry import REGISTRY, CollectorRegistry

from engram import runtime

T = TypeVar("T")

#: Buckets of storage operations and searches, in seconds: 50 µs to 10 s.
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0)  # fmt: skip


class Metrics:
    """engram's recorded metrics, made on the first use of one (:func:`metrics`): importing engram registers
    no Prometheus collector."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.storage_errors = Counter(
            "engram_storage_errors",
            "Storage operations that raised, by operation and backend.",
            ["operation", "backend"],
            registry=registry,
        )
        #: Its ``_count`` is the number of operations (no separate counter: one update less per operation).
        self.storage_seconds = Histogram(
            "engram_storage_operation_duration_seconds",
            "Duration of storage operations by operation and backend (_count: how many ran).",
            ["operation", "backend"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.chunks_written = Counter("engram_chunks_written", "Chunks written to a backend (put_many).", ["backend"],
                                      registry=registry)  # fmt: skip
        self.bytes_written = Counter("engram_chunk_bytes_written", "Bytes of chunks written to a backend.",
                                     ["backend"], registry=registry)  # fmt: skip
        self.commits = Counter("engram_commits", "Commits written (every commit object a repository stores).",
                               registry=registry)  # fmt: skip
        self.cache_lookups = Counter("engram_cache_lookups", "Entries asked of a cache (lru, redis, query ...).",
                                     ["cache"], registry=registry)  # fmt: skip
        self.cache_misses = Counter("engram_cache_misses",
                                    "Entries a cache did not hold (hit ratio: 1 - misses/lookups).", ["cache"],
                                    registry=registry)  # fmt: skip
        self.search_seconds = Histogram(
            "engram_search_duration_seconds",
            "Search latency by the mode that ran.",
            ["mode"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.tenants_open = Gauge("engram_tenants_open", "Tenant stores open in this process's tenant pools.",
                                  registry=registry)  # fmt: skip
        self.http_requests = Counter("engram_http_requests", "HTTP requests answered, by method, route template "
                                     "and status.", ["method", "route", "status"], registry=registry)  # fmt: skip
        self.http_seconds = Histogram("engram_http_request_duration_seconds", "HTTP request latency (to the end of "
                                      "the response body) by method and route template.", ["method", "route"],
                                      buckets=LATENCY_BUCKETS, registry=registry)  # fmt: skip
        self.last_backup = Gauge(
            "engram_last_backup_success_timestamp_seconds",
            "When the last backup to each remote succeeded (Unix time); 0: none on the remote a schedule backs up to.",
            ["remote"],
            registry=registry,
        )


def metrics() -> Metrics:
    """The process's metrics, made and registered on first use (kept by :mod:`engram.runtime` for the process's
    life: a scraper counts across them)."""
    return runtime.default.once("engram.observe.metrics", _made)


def _made() -> Metrics:
    return Metrics(registry())


#: The module's old constants (``COMMITS``, ``LAST_BACKUP`` ...) by the :class:`Metrics` attribute they name.
_CONSTANTS = {"STORAGE_ERRORS": "storage_errors", "STORAGE_SECONDS": "storage_seconds", "CHUNKS_WRITTEN":
              "chunks_written", "BYTES_WRITTEN": "bytes_written", "COMMITS": "commits", "CACHE_LOOKUPS":
              "cache_lookups", "CACHE_MISSES": "cache_misses", "SEARCH_SECONDS": "search_seconds", "TENANTS_OPEN":
              "tenants_open", "LAST_BACKUP": "last_backup"}  # fmt: skip


def __getattr__(name: str) -> Any:
    """The old constant names (``observe.COMMITS`` ...): the metric, made (with the others) on first use."""
    attr = _CONSTANTS.get(name)
    if attr is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(metrics(), attr)


def registry() -> CollectorRegistry:
    """The registry every engram metric is on (prometheus-client's default one)."""
    return REGISTRY


class StorageMeter:
    """Records one backend's operations: counts, errors and durations, label values bound once.

    Args:
        backend: the ``backend`` label (``sqlite``, ``postgres``, ``memory``, ``redis`` ...).
        operations: the operations this meter records (the ``operation`` label).
    """

    def __init__(self, backend: str, operations: tuple[str, ...]) -> None:
        self.backend = backend
        found = metrics()
        self._bound = {op: (found.storage_errors.labels(op, backend), found.storage_seconds.labels(op, backend))
                       for op in operations}  # fmt: skip
        self._chunks = found.chunks_written.labels(backend)
        self._bytes = found.bytes_written.labels(backend)

    def run(self, operation: str, call: Callable[[], T]) -> T:
        """Run ``call`` as one ``operation``: timed (and so counted), and counted as an error when it raises."""
        errors, seconds = self._bound[operation]
        started = time.perf_counter()
        try:
            return call()
        except BaseException:
            errors.inc()
            raise
        finally:
            seconds.observe(time.perf_counter() - started)

    def written(self, chunks: int, size: int) -> None:
        """Note ``chunks`` chunks of ``size`` bytes in total written."""
        self._chunks.inc(chunks)
        self._bytes.inc(size)


def cache_lookups(cache: str, lookups: int, misses: int) -> None:
    """Note ``lookups`` entries asked of ``cache``, ``misses`` of which it did not hold."""
    if lookups:
        metrics().cache_lookups.labels(cache).inc(lookups)
    if misses:
        metrics().cache_misses.labels(cache).inc(misses)


def commit_written() -> None:
    """Note one commit written."""
    metrics().commits.inc()


def search_done(mode: str, seconds: float) -> None:
    """Note a search of ``mode`` (the mode that ran) that took ``seconds``."""
    metrics().search_seconds.labels(mode).observe(seconds)


def tenants_opened(change: int) -> None:
    """Note tenant stores opened (positive ``change``) or closed (negative)."""
    metrics().tenants_open.inc(change)


#: HTTP methods kept as a label value; any other is counted as ``other`` (labels stay bounded).
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def request_done(method: str, route: str, status: int, seconds: float) -> None:
    """Note an HTTP request answered with ``status`` after ``seconds``; ``route`` is the route's template
    (``/v1/items/{namespace}``), never the path a client sent (``unmatched`` when no route matched)."""
    found = metrics()
    method = method if method in HTTP_METHODS else "other"
    found.http_requests.labels(method, route, str(status)).inc()
    found.http_seconds.labels(method, route).observe(seconds)


def backup_succeeded(remote: str, when: float | None = None) -> None:
    """Note a successful backup to ``remote`` (its URL; the query part, options such as an endpoint, is left
    out of the label) at Unix time ``when`` (default: now)."""
    metrics().last_backup.labels(remote.split("?", 1)[0]).set(time.time() if when is None else when)


__all__ = [
    "HTTP_METHODS",
    "LATENCY_BUCKETS",
    "Metrics",
    "StorageMeter",
    "backup_succeeded",
    "cache_lookups",
    "commit_written",
    "metrics",
    "registry",
    "request_done",
    "search_done",
    "tenants_opened",
]
