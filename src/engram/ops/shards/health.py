"""Readiness of a sharded deployment: the shard catalog and every shard answer (``/readyz``, ``engram doctor``).

A :class:`ShardProbe` is an ``essential`` check of :func:`engram.ops.health.readiness`: it connects to the
catalog (reading the map there) and to each shard of the map, in parallel, each on a fresh connection with a
short connect and statement timeout, and reports each by name with its status, latency and URL (password
hidden). The deployment is not ready when the catalog or an ``active`` shard does not answer; a ``readonly`` or
``draining`` shard that does not answer makes it ``degraded`` (new tenants never go there). The answer is kept
for ``ttl`` seconds, so a storm of probes from orchestrators and scrapers costs each shard one connection per
``ttl``, not one per probe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from engram.ops.health import Check, CheckFailed
from engram.ops.shards.catalog import ShardMap, _load, redact
from engram.store.urls import conninfo_of

#: Seconds a probe's answer is reused.
TTL = 1.5
#: Seconds each probe waits for a connection (libpq counts whole seconds, at least 2).
CONNECT_TIMEOUT = 2
#: Seconds a probe's query may run.
STATEMENT_TIMEOUT = 1.0
#: Most shards probed at once.
PARALLEL = 16


class ShardProbe:
    """The readiness check of a shard catalog and its shards (see the module docstring).

    Args:
        catalog_url: the catalog's PostgreSQL URL.
        known: the map the caller routes with (a server's router's copy, no I/O): its shards are probed when the
            catalog does not answer within half the ``timeout`` (else those of the map read from the catalog).
        ttl: seconds an answer is reused.
        timeout: seconds the probe waits for the shards' answers; one still connecting then is reported down.
    """

    def __init__(
        self, catalog_url: str, *, known: Callable[[], ShardMap] | None = None, ttl: float = TTL, timeout: float = 1.0
    ) -> None:
        self.catalog_url = catalog_url
        self.known = known
        self.ttl = ttl
        self.timeout = timeout
        self._lock = threading.Lock()
        self._last: tuple[float, Check] | None = None

    def __call__(self) -> Check:
        """The check's fields (``catalog``, ``shards`` by name, ``version``); reused for ``ttl`` seconds.

        Raises:
            CheckFailed: the catalog or an active shard did not answer (the fields are its details).
        """
        with self._lock:
            if self._last is None or time.monotonic() - self._last[0] >= self.ttl:
                self._last = (time.monotonic(), self._probe())
            found = self._last[1]
        failed = found.get("unreachable")
        if failed:
            raise CheckFailed(f"unreachable: {', '.join(failed)}", found)
        return found

    def _probe(self) -> Check:
        pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="engram-shard-probe")
        try:
            deadline = time.monotonic() + self.timeout
            catalog = pool.submit(_probe, self.catalog_url, _load)
            wait([catalog], timeout=self.timeout / 2)  # the latest map, unless the catalog is slow
            listed = catalog.result()[1] if catalog.done() else None
            if listed is None and self.known is not None:
                listed = self.known()
            shards = list(listed.shards.values()) if listed is not None else []
            running = {shard.name: pool.submit(_probe, shard.url, _ping) for shard in shards}
            wait([catalog, *running.values()], timeout=max(deadline - time.monotonic(), 0.0))
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        catalog_check = _result(catalog, self.timeout)[0]
        catalog_check["url"] = redact(self.catalog_url)
        found: Check = {"catalog": catalog_check, "shards": {}}
        if catalog.done() and catalog.result()[1] is not None:
            found["version"] = catalog.result()[1].version
        unreachable = [] if catalog_check["ok"] else ["catalog"]
        down: list[str] = []
        for shard in shards:
            check, _ = _result(running[shard.name], self.timeout)
            found["shards"][shard.name] = {**check, "status": shard.status, "url": redact(shard.url)}
            if not check["ok"]:
                (unreachable if shard.status == "active" else down).append(shard.name)
        if unreachable:
            found["unreachable"] = unreachable
        if down:
            found["down"] = down
            found["degraded"] = True
        return found


def _probe(url: str, query: Callable[[Any], Any]) -> tuple[Check, Any]:
    """Connect to ``url`` (a fresh connection, short timeouts), run ``query`` on it: ``({"ok", "ms"}, its
    answer)``, with ``error`` (no password) when it failed."""
    import psycopg

    started = time.perf_counter()
    answer: Any = None
    try:
        conninfo = conninfo_of(url)
        options = f"-c statement_timeout={round(STATEMENT_TIMEOUT * 1000)}"
        with psycopg.connect(conninfo, connect_timeout=CONNECT_TIMEOUT, options=options, autocommit=True) as conn:
            answer = query(conn)
        check: Check = {"ok": True}
    except Exception as exc:  # a probe reports every failure; it never raises
        lines = str(exc).strip().splitlines()
        check = {"ok": False, "error": redact(lines[0] if lines else type(exc).__name__)}
    check["ms"] = round((time.perf_counter() - started) * 1000, 2)
    return check, answer


def _ping(conn: Any) -> None:
    conn.execute("SELECT 1").fetchone()


def _result(future: Any, timeout: float) -> tuple[Check, Any]:
    if future.done() and not future.cancelled():
        found: tuple[Check, Any] = future.result()
        return found
    return {"ok": False, "ms": round(timeout * 1000, 2), "error": f"timed out after {timeout:g} s"}, None


__all__ = ["CONNECT_TIMEOUT", "TTL", "ShardProbe"]
