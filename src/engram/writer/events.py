"""What a run reports while it works: named events, delivered to the listeners an app registers.

``writer.on_event(fn)`` registers ``fn(event, record)``; ``record`` is a copy of the run record so far. The events,
in order: ``queued`` (a run went to the background worker), ``started`` (the run holds the lease), ``extracting``
(before each step's model call; ``record["step"]`` is the step's index), ``committed`` (the run's commit exists:
on the memories' branch under ``auto``, on its review branch otherwise), ``merged`` (the commit reached the
memories' branch), ``finished`` (the outcome is recorded in the state), and ``dead_lettered`` (the target stopped
retrying, see :meth:`~engram.writer.MemoryWriter.retry`). A listener that raises is logged and ignored: it can
neither fail nor stall a run (keep it quick; it runs on the writer's thread).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("engram.writer")

#: A listener: ``fn(event, record)``.
Listener = Callable[[str, dict[str, Any]], None]
EVENTS = ("queued", "started", "extracting", "committed", "merged", "finished", "dead_lettered")


class Listeners:
    """The listeners of one writer (shared by its views); safe to use from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fns: list[Listener] = []

    def add(self, fn: Listener) -> Callable[[], None]:
        """Register ``fn``; returns a function that unregisters it."""
        with self._lock:
            self._fns.append(fn)

        def remove() -> None:
            with self._lock:
                if fn in self._fns:
                    self._fns.remove(fn)

        return remove

    def emit(self, event: str, record: dict[str, Any]) -> None:
        """Deliver ``event`` with a copy of ``record`` to every listener."""
        with self._lock:
            fns = list(self._fns)
        for fn in fns:
            try:
                fn(event, dict(record))
            except Exception:
                log.warning("writer event listener %r failed on %s", fn, event, exc_info=True)
