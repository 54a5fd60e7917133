"""Readiness: does each dependency of a repository answer, and how fast (``/readyz`` and any other door).

:func:`readiness` checks the store (read a ref and a chunk, rewrite that chunk: an idempotent write)
and, when there is one, the Redis cache, and answers within its deadline whatever they do: each
check runs on a worker thread, and a check still running at the deadline is reported down with
"timed out". A check that hangs is not started again while it runs: later calls wait for the same
one, so a stuck database never piles up threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from engram.repo import Repository
from engram.store.connect import cache_status

#: Seconds a readiness check takes at most, by default.
TIMEOUT = 1.0

Check = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Readiness:
    """What :func:`readiness` found.

    Attributes:
        ready: the store answered a read and a write in time.
        status: ``ok``; ``degraded`` (ready, but a component such as the Redis cache is down); ``down``.
        checks: each component's status, by name (``store``, ``cache``): ``ok``, ``ms`` (latency),
            ``error`` when it failed, and the cache's own fields (``degraded``, ``since``).
    """

    ready: bool
    status: str
    checks: dict[str, Check]


def probe_store(repo: Repository) -> None:
    """Read a ref and a chunk, and rewrite that chunk (an idempotent write), or raise."""
    heads = list(repo.branches().values())[:1]
    repo.chunks.put_many(repo.chunks.get_many(heads))


def readiness(repo: Repository | Callable[[], Repository], *, timeout: float = TIMEOUT) -> Readiness:
    """Check the store and its cache, answering within ``timeout`` seconds whatever they do.

    ``repo`` is the repository, or a function that opens it (the time it takes counts too).
    A store that fails or does not answer in time makes the repository not ready; a cache that
    does makes it ``degraded`` (reads and writes still work, through the store).
    """
    deadline = time.monotonic() + timeout
    owner = repo if isinstance(repo, Repository) else getattr(repo, "__self__", repo)

    def opened() -> Repository:
        return repo if isinstance(repo, Repository) else repo()

    def store() -> Check | None:
        probe_store(opened())
        return {}

    def cache() -> Check | None:
        return cache_status(opened(), probe=True)

    running = {name: _start(owner, name, work) for name, work in (("store", store), ("cache", cache))}
    checks: dict[str, Check] = {}
    for name, future in running.items():
        try:
            found = future.result(timeout=max(deadline - time.monotonic(), 0.0))
        except FutureTimeout:
            found = {"ok": False, "ms": round(timeout * 1000, 2), "error": f"timed out after {timeout:g} s"}
            if name == "cache":
                found["degraded"] = True
        if found is not None:
            checks[name] = found
    ready = bool(checks["store"]["ok"])
    degraded = any(check.get("degraded") or not check.get("ok") for name, check in checks.items() if name != "store")
    return Readiness(ready, "down" if not ready else "degraded" if degraded else "ok", checks)


_lock = threading.Lock()
#: Checks running now: (id of what they check, component) -> (that object, kept alive meanwhile; its future).
_running: dict[tuple[int, str], tuple[object, Future[Check | None]]] = {}


def _start(owner: object, name: str, work: Callable[[], Check | None]) -> Future[Check | None]:
    """The running check of ``name`` on ``owner``, or a new one on a worker thread."""
    key = (id(owner), name)
    with _lock:
        found = _running.get(key)
        if found is not None and found[0] is owner and not found[1].done():
            return found[1]
        future: Future[Check | None] = Future()
        _running[key] = (owner, future)
    threading.Thread(target=_run, args=(key, future, work), name=f"engram-readiness-{name}", daemon=True).start()
    return future


def _run(key: tuple[int, str], future: Future[Check | None], work: Callable[[], Check | None]) -> None:
    started = time.perf_counter()
    result: Check | None
    try:
        found = work()
        result = None if found is None else {"ok": True, **found}
    except Exception as exc:  # a check reports every failure; it never raises
        result = {"ok": False, "error": str(exc) or type(exc).__name__}
    if result is not None:
        result["ms"] = round((time.perf_counter() - started) * 1000, 2)
    with _lock:
        if _running.get(key, (None, None))[1] is future:
            del _running[key]
    future.set_result(result)


__all__ = ["TIMEOUT", "Readiness", "probe_store", "readiness"]
