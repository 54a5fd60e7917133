"""Prometheus metrics of engram, for the server's ``/metrics`` and for library users.

Every metric is on one registry, prometheus-client's default (:func:`registry`): what the storage layer, the
repository, search, tenants and backups record as they run (:mod:`engram.observe`), the memory writer's own
(:mod:`engram.writer.metrics`), and what this module computes when scraped: index lag of tracked stores, the
state of tracked circuit breakers, free disk space of tracked paths, and the last readiness report. A library
user exposes them with :func:`start_http_server`, or renders them with :func:`exposition`::

    import engram
    from engram.ops import metrics

    mem = engram.open(":memory:", embedder="hashing")
    metrics.track_memory(mem)  # index lag of this store's branches
    mem.put(("docs",), "a", {"text": "hello"})
    text = metrics.exposition().decode()  # the text exposition format

The metric names are listed in ``docs/operations.md`` (section Metrics).
"""

from __future__ import annotations

import shutil
import threading
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import prometheus_client
from prometheus_client import generate_latest, write_to_textfile
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from engram import breakers, observe, runtime
from engram.backends.postgres import pool_stats
from engram.errors import InvalidInputError
from engram.observe import backup_succeeded
from engram.ops.health import last_readiness
from engram.redaction import scrub, scrub_value
from engram.store import Memory
from engram.store.indexing import IndexLag

if TYPE_CHECKING:
    from engram.ops.tenants import TenantPool

#: The content type of :func:`exposition`: Prometheus text format 0.0.4, which every Prometheus reads (engram's
#: metric names are plain ASCII, so the text is the same in the newer formats).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Breaker states, in the order of ``engram_breaker_state``'s ``state`` label.
BREAKER_STATES = breakers.STATES

_lock = threading.Lock()
_memories: dict[int, tuple[str, weakref.ref[Memory]]] = {}
_pools: dict[int, weakref.ref[TenantPool]] = {}
_disks: dict[str, Path] = {}  # label -> path


def _forget_tracked() -> None:
    with _lock:
        _memories.clear()
        _pools.clear()
        _disks.clear()


runtime.register("engram.ops.metrics.tracked", reset=_forget_tracked)


def registry() -> CollectorRegistry:
    """The registry every engram metric is on (prometheus-client's default one), with what is computed when
    scraped (index lag, breakers, disk, readiness) registered on first use."""
    runtime.default.once("engram.ops.metrics.scrape", _register_scrape)
    return observe.registry()


def exposition() -> bytes:
    """Every engram metric in the Prometheus text exposition format (what ``/metrics`` serves)."""
    return generate_latest(registry())


def start_http_server(port: int, addr: str = "127.0.0.1") -> tuple[Any, threading.Thread]:
    """Serve :func:`exposition` at ``http://addr:port/metrics`` from a daemon thread (prometheus-client's
    server; port 0 picks a free one, ``server.server_address[1]``); returns the server (``shutdown()`` then
    ``server_close()`` stop it) and its thread. Loopback only unless ``addr`` says otherwise: the metrics name
    tenants and remotes."""
    found: tuple[Any, threading.Thread] = prometheus_client.start_http_server(port, addr, registry=registry())
    return found


def write_textfile(path: str | Path, names: Iterable[str] = ("engram_last_backup_success_timestamp_seconds",)) -> None:
    """Write the metric families ``names`` (default: the backup timestamp) to ``path`` in the text format,
    atomically, for node_exporter's textfile collector: how a short process such as a cron-run
    ``engram backup create --metrics-file`` reports to Prometheus."""
    wanted = tuple(names)
    if not wanted:
        raise InvalidInputError("name at least one metric to write")
    write_to_textfile(str(path), registry().restricted_registry(wanted))


#: Breakers are reported by :mod:`engram.breakers`, where they are kept: these names stay for callers of this module.
track_breaker = breakers.track
untrack_breaker = breakers.untrack
breaker_states = breakers.states


def track_memory(memory: Memory, tenant: str = "default") -> None:
    """Export the index lag of ``memory``'s branches as tenant ``tenant`` (held weakly: a closed and
    forgotten store disappears from the metrics)."""
    registry()  # what is tracked shows on the default registry from now on
    with _lock:
        _memories[id(memory)] = (tenant, weakref.ref(memory))


def track_pool(pool: TenantPool) -> None:
    """Export the index lag of every store open in a tenant pool (the server's; held weakly)."""
    registry()
    with _lock:
        _pools[id(pool)] = weakref.ref(pool)


def index_lag(memory: Memory) -> dict[str, IndexLag]:
    """Branch -> how far its search index is behind the head, for the branches whose index is loaded
    (:meth:`engram.store.Memory.index_lags`)."""
    return memory.index_lags()


def _tracked_memories() -> Iterator[tuple[str, Memory]]:
    with _lock:
        memories = list(_memories.items())
        pools = list(_pools.items())
    for key, (tenant, ref) in memories:
        memory = ref()
        if memory is None:
            with _lock:
                _memories.pop(key, None)
        else:
            yield tenant, memory
    for key, pool_ref in pools:
        pool = pool_ref()
        if pool is None:
            with _lock:
                _pools.pop(key, None)
            continue
        for tenant in pool.tenants():
            leased = pool.try_acquire(tenant)
            if leased is None:
                continue
            try:
                yield tenant, leased
            finally:
                pool.release(tenant)


def track_disk(path: str | Path, name: str = "store") -> None:
    """Export the free and total bytes of the file system holding ``path`` (a store's directory), labelled
    ``disk=name``: the label never shows the path. Tracking a name again replaces it."""
    if not name:
        raise InvalidInputError("a disk needs a name")
    registry()
    with _lock:
        _disks[scrub(name)] = Path(path)


class _ScrapeCollector(Collector):
    """What is computed when scraped: index lag, breaker states, disk space."""

    def collect(self) -> Iterable[Metric]:
        labels = ["tenant", "branch"]
        commits = GaugeMetricFamily("engram_index_lag_commits", "Commits a branch's head is ahead of its search "
                                    "index (counted up to 1000).", labels=labels)  # fmt: skip
        vectors = GaugeMetricFamily("engram_index_pending_vectors", "Items of a branch's search index still "
                                    "waiting for their vectors.", labels=labels)  # fmt: skip
        graph = GaugeMetricFamily("engram_index_graph_backlog", "Vectors waiting to join a branch's ANN graph.",
                                  labels=labels)  # fmt: skip
        for tenant, memory in _tracked_memories():
            try:
                lags = index_lag(memory)
            except Exception:  # a store closed or failing meanwhile: its lag is unknown, the scrape goes on
                continue
            for branch, lag in lags.items():
                commits.add_metric([tenant, branch], lag.commits)
                vectors.add_metric([tenant, branch], lag.vectors)
                graph.add_metric([tenant, branch], lag.graph)
        yield commits
        yield vectors
        yield graph
        breakers = GaugeMetricFamily(
            "engram_breaker_state", "1 for the state each circuit breaker is in (closed, half_open, open), else 0.",
            labels=["breaker", "state"],
        )  # fmt: skip
        for name, current in scrub_value(breaker_states()).items():  # a breaker named by a socket shows no path
            for state in BREAKER_STATES:
                breakers.add_metric([name, state], 1 if current == state else 0)
        yield breakers
        free = GaugeMetricFamily("engram_disk_free_bytes", "Free bytes on the file system of a store.", labels=["disk"])
        size = GaugeMetricFamily("engram_disk_size_bytes", "Size of the file system of a store.", labels=["disk"])
        with _lock:
            disks = dict(_disks)
        for name, path in disks.items():
            try:
                usage = shutil.disk_usage(path if path.exists() else path.parent)
            except OSError:
                continue
            free.add_metric([name], usage.free)
            size.add_metric([name], usage.total)
        yield free
        yield size
        yield from _pool_metrics()
        yield from _readiness_metrics()


def _pool_metrics() -> Iterator[Metric]:
    """The PostgreSQL connection pools of the process, per database (nothing without one)."""
    pools = pool_stats()
    connections = GaugeMetricFamily("engram_db_pool_connections", "Connections of the PostgreSQL pools of a "
                                    "database, by state (in_use, idle).", labels=["database", "state"])  # fmt: skip
    waiting = GaugeMetricFamily("engram_db_pool_requests_waiting", "Requests queued for a connection of a "
                                "database's pools.", labels=["database"])  # fmt: skip
    limit = GaugeMetricFamily("engram_db_pool_max_connections", "Connections a database's pools may open at most.",
                              labels=["database"])  # fmt: skip
    for database, stats in sorted(pools.items()):
        connections.add_metric([database, "in_use"], stats["in_use"])
        connections.add_metric([database, "idle"], stats["idle"])
        waiting.add_metric([database], stats["waiting"])
        limit.add_metric([database], stats["max"])
    yield connections
    yield waiting
    yield limit


def _readiness_metrics() -> Iterator[Metric]:
    """The last readiness check (:func:`engram.ops.health.last_readiness`) as ``engram_ready`` and each component's
    ``engram_component_up`` / ``engram_component_check_seconds``; nothing before the first check."""
    report = last_readiness()
    if report is None:
        return
    yield GaugeMetricFamily("engram_ready", "1 when the last readiness check found the store ready, else 0.",
                            value=1 if report.ready else 0)  # fmt: skip
    up = GaugeMetricFamily("engram_component_up", "1 when a component passed its last readiness check, else 0.",
                           labels=["component"])  # fmt: skip
    seconds = GaugeMetricFamily("engram_component_check_seconds", "How long a component's last readiness check took.",
                                labels=["component"])  # fmt: skip
    for name, check in report.checks.items():
        up.add_metric([name], 1 if check.get("ok") else 0)
        if "ms" in check:
            seconds.add_metric([name], float(check["ms"]) / 1000)
    yield up
    yield seconds


def _register_scrape() -> _ScrapeCollector:
    found = _ScrapeCollector()
    observe.registry().register(found)
    return found


__all__ = [
    "BREAKER_STATES",
    "CONTENT_TYPE",
    "backup_succeeded",
    "breaker_states",
    "exposition",
    "index_lag",
    "registry",
    "start_http_server",
    "track_breaker",
    "track_disk",
    "track_memory",
    "track_pool",
    "untrack_breaker",
    "write_textfile",
]
