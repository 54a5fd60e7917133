"""The time engram stamps on commits, reflog entries and items, replaceable for replays, examples and tests.

Every timestamp engram writes comes from :func:`now_ms`. Normally that is the system clock. Inside
``with engram.clock.simulated(start)`` it is a clock the caller moves forward, so a story that spans days
(a replayed conversation log, a scenario, a test of ``main@{3 days ago}``) is written with the times it
happened at::

    from datetime import UTC, datetime, timedelta

    import engram
    from engram import clock

    with clock.simulated(datetime.now(UTC) - timedelta(days=3)) as sim:
        mem = engram.open(":memory:", embedder="hashing")
        mem.put(("users", "alice"), "prefs", {"theme": "dark"})
        sim.advance(days=2)
        mem.put(("users", "alice"), "prefs", {"theme": "light"})
    assert mem.at("main@{2 days ago}").get(("users", "alice"), "prefs").value == {"theme": "dark"}

The simulated clock is process-wide (every thread and store sees it) and moves forward 1 ms on every
reading, so events stay strictly ordered. Never move it behind times a store already holds.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

_lock = threading.Lock()
_simulated: SimulatedClock | None = None


def now_ms() -> int:
    """The current time in UTC milliseconds since the epoch: the simulated clock's, if one is active."""
    current = _simulated
    return time.time_ns() // 1_000_000 if current is None else current.read()


class SimulatedClock:
    """A clock that only moves when told to (and by 1 ms per reading, to keep events ordered)."""

    def __init__(self, start_ms: int) -> None:
        self._ms = start_ms

    def read(self) -> int:
        """The time now, in UTC milliseconds; the clock then moves 1 ms forward."""
        with _lock:
            self._ms += 1
            return self._ms - 1

    def now(self) -> datetime:
        """The time now, as an aware UTC datetime (without moving the clock)."""
        return datetime.fromtimestamp(self._ms / 1000, tz=UTC)

    def advance(self, **delta: float) -> datetime:
        """Move forward by ``timedelta(**delta)`` (``days=1``, ``hours=3``, ...); returns the new time."""
        step = timedelta(**delta)
        if step < timedelta(0):
            raise ValueError("a simulated clock never goes back")
        with _lock:
            self._ms += int(step.total_seconds() * 1000)
        return self.now()

    def set(self, moment: datetime) -> None:
        """Jump forward to ``moment`` (an aware datetime, or naive UTC)."""
        target = _ms(moment)
        with _lock:
            if target < self._ms:
                raise ValueError(f"a simulated clock never goes back (it is at {self.now().isoformat()})")
            self._ms = target


def _ms(moment: datetime) -> int:
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() * 1000)


@contextlib.contextmanager
def simulated(start: datetime) -> Iterator[SimulatedClock]:
    """Stamp everything written inside the block with a clock starting at ``start`` (an aware datetime,
    or naive UTC); the system clock is back when the block ends. Blocks do not nest."""
    global _simulated
    clock = SimulatedClock(_ms(start))
    with _lock:
        if _simulated is not None:
            raise RuntimeError("a simulated clock is already active")
        _simulated = clock
    try:
        yield clock
    finally:
        with _lock:
            _simulated = None
