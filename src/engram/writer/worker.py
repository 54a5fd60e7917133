"""The writer's background worker: one thread that runs what is due, target by target, and re-checks.

A turn that makes a run due while the target's run is in flight does not start a second one: it marks the target
again, and the worker checks it once more when the run ends (a run that finished also re-checks what became due
meanwhile). So a turn that arrived during a slow run is processed after it, not left pending until the next
turn. :meth:`Worker.close` drains: it waits for the queued work, up to a timeout, and reports what it left.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from engram.writer.events import Listeners

log = logging.getLogger("engram.writer")

T = TypeVar("T")
#: A job: runs the target once and returns (its result, True when it should run again at once).
Job = Callable[[], "tuple[T, bool]"]
#: The most runs one queued job makes in a row (each re-check that finds work due is one).
MAX_ROUNDS = 100


@dataclass(frozen=True, slots=True)
class Drained:
    """What :meth:`Worker.close` (and :meth:`~engram.writer.MemoryWriter.close`) did.

    Attributes:
        drained: True when every queued run finished within the timeout.
        waited_seconds: how long it waited.
        running: the targets whose runs were still in flight when it gave up (their leases expire and the next
            process recovers them: nothing is lost).
    """

    drained: bool
    waited_seconds: float
    running: tuple[str, ...] = ()


class Worker(Generic[T]):
    """The background worker every view of one writer shares: its thread, the work queued per target, and the
    writer's event listeners."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # a listener that ``announce`` calls may ask whether a target is busy
        self.listeners = Listeners()
        self._executor: ThreadPoolExecutor | None = None
        self._futures: dict[str, Future[T]] = {}
        self._again: set[str] = set()

    def submit(self, target: str, job: Job[T], announce: Callable[[], None] | None = None) -> bool:
        """Queue ``job`` for ``target`` (calling ``announce`` first, so it comes before anything the job reports);
        when the target's work is already queued or running, mark it to run once more instead. Returns True when
        a new job was queued."""
        with self.lock:
            future = self._futures.get(target)
            if future is not None and not future.done():
                self._again.add(target)
                return False
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="engram-writer")
            if announce is not None:
                announce()
            self._futures[target] = self._executor.submit(self._loop, target, job)
            return True

    def _loop(self, target: str, job: Job[T]) -> T:
        for _ in range(MAX_ROUNDS):
            with self.lock:
                self._again.discard(target)
            result, again = job()
            with self.lock:
                if not again and target not in self._again:
                    return result
        log.warning("writer: target %s still had work due after %d runs in a row; the next turn resumes it",
                    target, MAX_ROUNDS)  # fmt: skip
        return result

    def busy(self, target: str) -> bool:
        """True while ``target`` has work queued or running."""
        with self.lock:
            future = self._futures.get(target)
            return future is not None and not future.done()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the queued work to finish (at most ``timeout`` seconds); True when it did. A job that raised
        is logged, not raised here."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self.lock:
                futures = [f for f in self._futures.values() if not f.done()]
            if not futures:
                return True
            for future in futures:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    future.result(left)
                except TimeoutError:
                    return False
                except Exception:
                    log.exception("writer: a background run failed")

    def close(self, timeout: float | None = 60.0) -> Drained:
        """Drain the queued work (at most ``timeout`` seconds) and stop the thread; see :class:`Drained`."""
        started = time.monotonic()
        drained = self.wait(timeout)
        with self.lock:
            executor, self._executor = self._executor, None
            running = tuple(sorted(t for t, f in self._futures.items() if not f.done()))
        if executor is not None:
            executor.shutdown(wait=drained, cancel_futures=not drained)
        waited = round(time.monotonic() - started, 3)
        if not drained:
            log.warning("writer close: gave up after %.1f s with runs in flight on %s (their leases expire and the "
                        "next writer recovers them)", waited, ", ".join(running))  # fmt: skip
        return Drained(drained, waited, running)
