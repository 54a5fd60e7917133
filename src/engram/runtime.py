"""One owner for engram's process-wide state: pools, clients, thread pools, caches, registries.

A module that keeps something for the whole process (the shared PostgreSQL pools, the Redis clients, the
embedders made for ``"auto"``, the query cache, the breaker registry, worker threads ...) registers it here once,
with a ``close`` hook (release what it holds: close pools and clients, stop threads) and a ``reset`` hook (forget
it: clear caches and registries, for tests). The owner then runs them all:

- :func:`close_all` at the end of a process (or of a server's lifespan): every ``close`` hook, newest first, so
  what was built on top goes before what it stands on. A hook that raises is logged; the others still run.
- :func:`reset` between tests: every ``reset`` hook, newest first, same rule for errors.

Both leave the process usable: each registry builds what it needs again on next use.

Objects that must keep their identity for the whole process (Prometheus metrics, which a scraper counts across)
are made on first use through :meth:`Runtime.once` and survive both.

This is a base-layer module: it imports nothing of engram, so every layer may register with it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, cast

T = TypeVar("T")
Hook = Callable[[], object]

log = logging.getLogger("engram.runtime")


@dataclass(frozen=True)
class _Entry:
    name: str
    close: Hook | None
    reset: Hook | None


class Runtime:
    """The owner of process-wide state: named ``close``/``reset`` hooks, run newest first."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._entries: dict[str, _Entry] = {}
        self._once: dict[str, Any] = {}

    def register(self, name: str, *, close: Hook | None = None, reset: Hook | None = None) -> None:
        """Own the state called ``name``: :meth:`close_all` calls ``close``, :meth:`reset` calls ``reset``.
        Registering a name again replaces its hooks and keeps its place in the order."""
        if not name or (close is None and reset is None):
            raise ValueError("a runtime registration needs a name and a close or reset hook")
        with self._lock:
            self._entries[name] = _Entry(name, close, reset)

    def unregister(self, name: str) -> None:
        """Stop owning ``name`` (nothing happens if it is not registered)."""
        with self._lock:
            self._entries.pop(name, None)

    def names(self) -> list[str]:
        """The registered names, in order of registration."""
        with self._lock:
            return list(self._entries)

    def close_all(self) -> list[tuple[str, Exception]]:
        """Run every ``close`` hook, newest first; returns the hooks that raised (each is logged, none stops the
        others)."""
        return self._run("close")

    def reset(self) -> list[tuple[str, Exception]]:
        """Run every ``reset`` hook, newest first; returns the hooks that raised (each is logged, none stops the
        others)."""
        return self._run("reset")

    def once(self, name: str, factory: Callable[[], T]) -> T:
        """The process's object ``name``, made by ``factory`` on first use and kept for the process's life
        (neither :meth:`close_all` nor :meth:`reset` drops it)."""
        found = self._once.get(name)
        if found is None:
            with self._lock:
                found = self._once.get(name)
                if found is None:
                    found = self._once[name] = factory()
        return cast("T", found)

    def _run(self, kind: str) -> list[tuple[str, Exception]]:
        with self._lock:
            entries = list(self._entries.values())
        failed: list[tuple[str, Exception]] = []
        for entry in reversed(entries):
            hook = entry.close if kind == "close" else entry.reset
            if hook is None:
                continue
            try:
                hook()
            except Exception as exc:  # one failing hook must not keep the others from running
                log.exception("runtime %s hook of %s failed", kind, entry.name)
                failed.append((entry.name, exc))
        return failed


def close_each(objects: Iterable[Any]) -> None:
    """Call ``close()`` on each object; one that raises is logged and the others are still closed."""
    for each in objects:
        try:
            each.close()
        except Exception:  # closing the rest matters more than one error
            log.exception("runtime: closing %r failed", type(each).__name__)


class Threads:
    """A thread pool started on first use and owned by a runtime: :func:`close_all` stops it, and the next use
    starts a new one.

    Args:
        name: the registration name and the threads' name prefix.
        max_workers: threads at most.
        runtime: the owner (default: the process's, :data:`default`).
    """

    def __init__(self, name: str, max_workers: int, *, runtime: Runtime | None = None) -> None:
        self.name = name
        self.max_workers = max_workers
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        (runtime or default).register(name, close=self.shutdown, reset=self.shutdown)

    def get(self) -> ThreadPoolExecutor:
        """The pool, started if need be."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix=self.name)
            return self._pool

    @property
    def running(self) -> bool:
        """Whether a pool is started now."""
        return self._pool is not None

    def shutdown(self, wait: bool = True) -> None:
        """Stop the pool's threads (after the work queued); the next :meth:`get` starts a new pool."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait)


#: The process's runtime: every engram registry registers here.
default = Runtime()


def register(name: str, *, close: Hook | None = None, reset: Hook | None = None) -> None:
    """Register ``name``'s hooks with the process's runtime (see :meth:`Runtime.register`)."""
    default.register(name, close=close, reset=reset)


def close_all() -> list[tuple[str, Exception]]:
    """Close every pool, client and thread pool engram holds for this process, newest first (each error is
    logged, not raised). Call it when the process (or a server's lifespan) ends; engram stays usable after it."""
    return default.close_all()


def reset() -> list[tuple[str, Exception]]:
    """Forget engram's process-wide caches and registries (shared embedders, query cache, breakers, tracked
    metrics ...), closing what they hold: for tests, so one test's state never reaches the next."""
    return default.reset()


__all__ = ["Hook", "Runtime", "Threads", "close_all", "close_each", "default", "register", "reset"]
