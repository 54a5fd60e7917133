"""Backups on a schedule: ``engram serve --backup-every 24h`` runs :func:`create_backup` in a thread.

The first backup runs one interval after the start, or at once when the newest backup on the remote is older
than the interval (or there is none): a server restarted every night still backs up daily. A backup that fails
is tried again after ``retry_after`` seconds (at most the interval). Runs never overlap, and :meth:`stop` waits
for a backup in progress, so a shutdown never leaves one half-done by choice (an interrupted one is harmless
anyway: a backup's manifest is written last).

The time of the last success is :attr:`BackupSchedule.last_success`, and the metric
``engram_last_backup_success_timestamp_seconds`` (set by :func:`create_backup`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from engram import observe
from engram.errors import InvalidInputError
from engram.ops.backup import Backup, create_backup, list_backups, metric_label
from engram.ops.remotes.stores import Remote
from engram.repo import Repository

log = logging.getLogger("engram.backup")

#: Seconds in one unit of a duration.
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")

#: A source of the repository to back up, for the time of one backup (e.g. a lease on a served store).
Lease = Callable[[], AbstractContextManager[Repository]]


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``30m``, ``6h``, ``24h``, ``7d`` (or ``90s``; decimals allowed).

    Examples:
        >>> parse_duration("6h")
        21600.0

    Raises:
        InvalidInputError: not a positive number followed by s, m, h or d.
    """
    found = _DURATION.match(text) if isinstance(text, str) else None
    seconds = float(found[1]) * UNITS[found[2]] if found else 0.0
    if seconds <= 0:
        raise InvalidInputError(f"invalid duration {text!r}: use a positive number and a unit, e.g. 30m, 6h, 24h, 7d")
    return seconds


class BackupSchedule:
    """Back up a repository to a remote every ``interval`` seconds, in a background thread.

    Args:
        repository: gives the repository for the time of one backup (a context manager).
        remote: opens the remote (called for each backup, so a remote that was down is reopened).
        interval: seconds between backups.
        actor: the author recorded on each backup.
        retry_after: seconds before a failed backup is tried again (capped at ``interval``).
        clock: Unix time in seconds (tests may pass another).
    """

    def __init__(
        self,
        repository: Lease,
        remote: Callable[[], Remote],
        interval: float,
        *,
        actor: str = "engram-server",
        retry_after: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not interval > 0 or not retry_after > 0:
            raise InvalidInputError(f"a backup interval must be positive, not {interval!r} (retry {retry_after!r})")
        self.repository = repository
        self.remote = remote
        self.interval = float(interval)
        self.retry_after = min(float(retry_after), self.interval)
        self.actor = actor
        self._clock = clock
        #: Unix time of the last successful backup this schedule made (None: none yet).
        self.last_success: float | None = None
        #: The last backup this schedule made, and the error of the last failed run (None after a success).
        self.last_backup: Backup | None = None
        self.last_error: str | None = None
        self.runs = 0
        self.failures = 0
        self._running = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def first_delay(self) -> float:
        """Seconds until the first backup: none when the newest one on the remote is older than the interval
        (or there is none, or the remote cannot say), else what remains of the interval since it.

        It also exports the newest backup's time as ``engram_last_backup_success_timestamp_seconds`` (0 when the
        remote holds none), so that "backup too old" can fire for a server whose backups never succeed."""
        try:
            remote = self.remote()
            backups = list_backups(remote)
        except Exception as exc:  # a remote down at start: try at once, the run reports it
            log.warning("could not list the backups on the remote (%s); backing up now", exc)
            return 0.0
        observe.backup_succeeded(metric_label(remote.url), backups[-1].time / 1000 if backups else 0.0)
        if not backups:
            return 0.0
        age = self._clock() - backups[-1].time / 1000
        return max(0.0, self.interval - age)

    def run_once(self) -> Backup | None:
        """Make one backup now; None if one is already running (runs never overlap) or it failed (logged)."""
        if not self._running.acquire(blocking=False):
            log.info("scheduled backup skipped: the previous one is still running")
            return None
        started = time.perf_counter()
        try:
            remote = self.remote()
            with self.repository() as repo:
                made, report = create_backup(repo, remote, actor=self.actor)
        except Exception as exc:  # logged and retried: a schedule must survive a bad night
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.error("scheduled backup failed (%s); next try in %g s", self.last_error, self.retry_after)
            return None
        finally:
            self.runs += 1
            self._running.release()
        self.last_success, self.last_backup, self.last_error = self._clock(), made, None
        log.info(
            "scheduled backup %s to %s: %d items, sent %d chunks (%d bytes) in %.1f s",
            made.name, remote.url, sum(made.items.values()), report.chunks, report.bytes, time.perf_counter() - started,
        )  # fmt: skip
        return made

    def start(self) -> None:
        """Start the background thread (once)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="engram-backup-schedule", daemon=True)
        self._thread.start()
        log.info("backups every %g s", self.interval)

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread, waiting (up to ``timeout`` seconds, default: as long as it takes) for a backup in
        progress to finish."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("a scheduled backup is still running at shutdown; it stops with the process")

    @property
    def running(self) -> bool:
        """Whether the background thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        delay = self.first_delay()
        if delay > 0:
            log.info("first scheduled backup in %.0f s", delay)
        while not self._stop.wait(delay):
            made = self.run_once()
            delay = self.interval if made is not None else self.retry_after


__all__ = ["UNITS", "BackupSchedule", "Lease", "parse_duration"]
