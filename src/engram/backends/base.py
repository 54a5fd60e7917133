"""The storage seam: immutable chunks addressed by hash, and mutable refs changed by compare-and-swap.

Every backend implements :class:`ChunkStore` and :class:`RefStore`; behaviour is pinned by the
contract suites in :mod:`engram.testing`. Single-item helpers are written once here.
"""

from __future__ import annotations

import builtins
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass

from engram import clock
from engram.errors import ChunkNotFoundError
from engram.hashing import ChunkId, chunk_id


def now_ms() -> int:
    """Current UTC time in milliseconds since the epoch (:mod:`engram.clock`'s: simulated inside a replay)."""
    return clock.now_ms()


class ChunkStore(ABC):
    """Immutable chunks, each named by the hash of its bytes. ``put_many`` is idempotent."""

    #: True when ``get_many`` returns only chunks whose bytes hash to their id and raises
    #: :class:`~engram.errors.IntegrityError` for a corrupt one: a reader need not hash what it returns again.
    checks_reads: bool = False

    @abstractmethod
    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        """Return the chunks that exist among ``ids``; missing ids are absent from the result."""

    @abstractmethod
    def has_many(self, ids: Iterable[ChunkId]) -> set[ChunkId]:
        """Return the ids among ``ids`` that are *missing* from the store."""

    @abstractmethod
    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        """Store chunks (id -> bytes). Storing a chunk that exists keeps its bytes and renews its write time."""

    @abstractmethod
    def iter_ids(
        self, start: ChunkId | None = None, end: ChunkId | None = None, *, written_before: int | None = None
    ) -> Iterator[ChunkId]:
        """Yield stored ids in ascending byte order, within ``[start, end)`` when given.

        ``written_before`` (UTC ms) keeps only chunks last written before then; garbage collection
        uses it so that chunks a writer has just stored, and not yet referenced, are never deleted.
        """

    @abstractmethod
    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        """Remove chunks (used by garbage collection only)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; the default does nothing."""

    def get(self, cid: ChunkId) -> bytes:
        """Return one chunk or raise :class:`ChunkNotFoundError`."""
        found = self.get_many([cid])
        if cid not in found:
            raise ChunkNotFoundError(f"chunk {cid.hex()} is missing from the store; run fsck")
        return found[cid]

    def has(self, cid: ChunkId) -> bool:
        """True when the chunk is stored."""
        return not self.has_many([cid])

    def put(self, data: bytes) -> ChunkId:
        """Store one chunk and return its id."""
        cid = chunk_id(data)
        self.put_many({cid: data})
        return cid


@dataclass(frozen=True, slots=True)
class RefLogEntry:
    """One change of a ref: ``old`` -> ``new`` (``None`` = absent) at ``time`` (UTC ms)."""

    name: str
    old: ChunkId | None
    new: ChunkId | None
    time: int
    actor: str
    reason: str


class RefStore(ABC):
    """Named, mutable pointers to chunks. Every change is compare-and-swap and is logged."""

    @abstractmethod
    def get(self, name: str) -> ChunkId | None:
        """Current value of a ref, or ``None`` if it does not exist."""

    @abstractmethod
    def set(
        self,
        name: str,
        new: ChunkId | None,
        expected: ChunkId | None,
        *,
        actor: str = "",
        reason: str = "",
    ) -> bool:
        """Move ``name`` to ``new`` only if it is now ``expected`` (``None`` = must not exist).

        ``new=None`` deletes the ref. Returns False, changing nothing, when the current value differs.
        A successful change is durable when this returns and is recorded in the reflog (a SQLite store set to
        ``synchronous="normal"`` keeps it through a crash of the process, not a power loss: see ``docs/storage.md``).
        """

    @abstractmethod
    def list(self, prefix: str = "") -> dict[str, ChunkId]:
        """All refs whose name starts with ``prefix``."""

    @abstractmethod
    def reflog(self, name: str | None = None, limit: int | None = None) -> builtins.list[RefLogEntry]:
        """Reflog entries, newest first, for one ref or (``name=None``) for all refs."""

    @abstractmethod
    def value_at(self, name: str, time_ms: int) -> ChunkId | None:
        """The value ``name`` had at ``time_ms`` according to the reflog (``None`` if none/absent)."""

    @abstractmethod
    def prune_reflog(self, before_ms: int) -> int:
        """Drop reflog entries older than ``before_ms``, keeping each ref's newest one; return the count."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; the default does nothing."""

    def lock(self, name: str, timeout: float | None = None) -> AbstractContextManager[None]:
        """Queue with the other writers of ``name``, in every process, until the block ends.

        Fairness only: compare-and-swap stays the correctness mechanism, so a lock that is lost (its
        holder died) or not taken costs retries, never a write. Waiters are served in turn where the
        backend can (PostgreSQL: an advisory lock, released with the transaction or the session).
        ``timeout`` bounds the wait (seconds); a wait that runs out raises
        :class:`~engram.errors.UnavailableError`. The default takes no lock.
        """
        return contextlib.nullcontext()

    def delete(self, name: str, expected: ChunkId, *, actor: str = "", reason: str = "") -> bool:
        """Delete a ref if it is now ``expected``."""
        return self.set(name, None, expected, actor=actor, reason=reason)
