"""Indexing in the background for library handles: a branch's search index follows its head as writes land.

A handle's writes only note the branch (:meth:`BackgroundIndexer.wrote`); one worker thread per index pool brings
the noted branches' indexes up to date once their writes pause (``DELAY``; at most ``MAX_WAIT`` after the first
write not indexed, under a steady stream), a batch of embeddings at a time without holding the index
while it embeds, so a search never pays for a backlog of writes: it applies the last moments' changes (cheap: no
embedding beyond a small time budget) and reports what still waits for vectors as ``lag``. The queue is one entry
per branch (bounded by the branches written), the worker ends when idle and starts again on the next write, and
:meth:`BackgroundIndexer.close` stops it with the handle. :meth:`BackgroundIndexer.flush` waits until every noted
branch is indexed (``Memory.flush_index``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

_log = logging.getLogger(__name__)

#: Seconds without a write to a branch before the worker indexes it (writes landing meanwhile are indexed together,
#: and a burst of writes is not slowed by embedding beside it)...
DELAY = 0.3
#: ... but never longer than this after its first write not indexed yet (a steady stream of writes).
MAX_WAIT = 5.0
#: Seconds a worker with nothing to do waits for more before its thread ends.
IDLE = 2.0


class BackgroundIndexer:
    """One worker thread bringing branch indexes up to date after writes.

    ``work(branch)`` indexes some of what the branch's head holds and returns True while more remains (vectors
    still to embed): the branch is then taken up again, after the other branches waiting.
    """

    def __init__(self, work: Callable[[str], bool], *, name: str = "engram-index-worker", delay: float = DELAY) -> None:
        self._work = work
        self._name = name
        self._delay = delay
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}  # branch -> when to index it (monotonic seconds)
        self._first: dict[str, float] = {}  # branch -> when its oldest write not indexed yet landed
        self._last: dict[str, float] = {}  # branch -> when its latest write landed
        self._busy: str | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._hurry = 0  # callers waiting in flush(): no delay then

    def wrote(self, branch: str) -> None:
        """A commit landed on ``branch`` (in this process): index it shortly."""
        with self._cond:
            if self._closed:
                return
            now = time.monotonic()
            first = self._first.setdefault(branch, now)
            self._last[branch] = now
            noted = branch in self._due
            self._due[branch] = min(now + self._delay, first + max(self._delay, MAX_WAIT))
            if self._thread is None or not self._thread.is_alive():  # (a forked child has the thread, not alive)
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            if not noted:  # a later due time needs no wake-up: the worker looks again when the earlier one comes
                self._cond.notify_all()

    @property
    def pending(self) -> int:
        """Branches waiting to be indexed, or being indexed now."""
        with self._cond:
            return len(self._due) + (self._busy is not None)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every branch noted so far is indexed (its vectors made); False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._hurry += 1
            try:
                while (self._due or self._busy is not None) and not self._closed:
                    for branch in self._due:  # no need to wait for the writes to pause
                        self._due[branch] = 0.0
                    self._cond.notify_all()
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(left)
                return True
            finally:
                self._hurry -= 1

    def close(self, timeout: float = 30.0) -> None:
        """Stop the worker (it finishes the step it is in); branches not indexed yet are indexed by their next
        search."""
        with self._cond:
            self._closed = True
            self._due.clear()
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                branch = self._next()
                if branch is None:
                    self._thread = None
                    self._cond.notify_all()
                    return
                self._busy = branch
                self._first.pop(branch, None)
            more = False
            try:
                more = self._work(branch)
            except Exception as exc:  # a background thread never dies noisily: the next search indexes the branch
                _log.warning("indexing branch %s in the background failed: %s", branch, exc)
            with self._cond:
                self._busy = None
                if more and not self._closed:  # more to embed: after the writes landing now pause (or MAX_WAIT)
                    now = time.monotonic()
                    first = self._first.setdefault(branch, now)
                    quiet = self._last.get(branch, 0.0) + self._delay
                    due = min(max(now, quiet), first + max(self._delay, MAX_WAIT))
                    self._due.setdefault(branch, now if self._hurry else due)
                self._cond.notify_all()

    def _next(self) -> str | None:
        """The next branch due (waiting for it), or None when closed or idle for ``IDLE`` seconds."""
        idle_until = time.monotonic() + IDLE
        while not self._closed:
            now = time.monotonic()
            if self._due:
                branch, at = min(self._due.items(), key=lambda item: item[1])
                if at <= now:
                    del self._due[branch]
                    return branch
                self._cond.wait(at - now)
                continue
            if now >= idle_until:
                return None
            self._cond.wait(idle_until - now)
        return None


__all__ = ["DELAY", "IDLE", "MAX_WAIT", "BackgroundIndexer"]
