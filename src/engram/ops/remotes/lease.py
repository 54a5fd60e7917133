"""A lease on a remote: backups share it, a prune holds it alone, so a sweep never runs beside a backup.

The lease is one object, ``lease``, changed only by the bucket's compare-and-swap (:meth:`Bucket.write_if`). It
lists its holders, each with its kind (``backup`` or ``prune``), who it is and an expiry (UTC ms). A holder renews
its expiry on a thread every third of the time to live, so a process that dies frees the lease within ``ttl``
seconds; expired holders are ignored and dropped by the next writer. A backup waits while a prune holds the lease;
a prune waits while any backup holds it; both give up with a :class:`ConflictError` after ``wait`` seconds::

    with hold_lease(remote.chunks.bucket, "prune", who="ops@host"):
        ...  # no backup writes meanwhile
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from engram.backends.base import now_ms
from engram.backends.buckets import Bucket
from engram.errors import ConflictError, StorageError

log = logging.getLogger("engram.remotes")

LEASE = "lease"
#: Seconds a holder's claim lasts without a renewal.
LEASE_TTL = 60.0
#: Seconds between two looks at a lease held by another kind of work.
POLL = 0.2

Kind = Literal["backup", "prune"]


@dataclass
class Lease:
    """A claim on a remote's lease, renewed in the background until released."""

    bucket: Bucket
    holder: str
    kind: Kind
    ttl: float
    lost: str | None = None  # why the claim lapsed (None while it holds)

    def check(self) -> None:
        """Raise :class:`ConflictError` if the claim lapsed (not renewed in time, or removed by another process)."""
        if self.lost is not None:
            raise ConflictError(f"the {self.kind} lost its lease on the remote ({self.lost}); nothing more is changed")


def _holders(bucket: Bucket) -> tuple[dict[str, dict[str, object]], str | None]:
    """The live holders of the lease (expired ones left out) and the object's version (None: no object)."""
    found = bucket.read(LEASE)
    if found is None:
        return {}, None
    try:
        holders = json.loads(found[0])["holders"]
    except (ValueError, KeyError, TypeError):
        raise StorageError(f"the lease object on {bucket.url} is damaged: {found[0][:80]!r}") from None
    now = now_ms()
    return {name: h for name, h in holders.items() if isinstance(h, dict) and int(h["until"]) > now}, found[1]


def _blocking(holders: dict[str, dict[str, object]], kind: Kind) -> dict[str, object] | None:
    """The holder that keeps ``kind`` out: any holder for a prune, a prune for a backup."""
    for holder in holders.values():
        if kind == "prune" or holder["kind"] == "prune":
            return holder
    return None


def _write(bucket: Bucket, holders: dict[str, dict[str, object]], version: str | None) -> bool:
    """Replace the lease object if it is still at ``version`` (it is never deleted: an empty one stays)."""
    return bucket.write_if(LEASE, json.dumps({"holders": holders}, sort_keys=True).encode(), version)


def acquire(bucket: Bucket, kind: Kind, *, who: str = "", ttl: float = LEASE_TTL, wait: float = 600.0) -> Lease:
    """Claim the lease for ``kind`` (waiting up to ``wait`` seconds for a holder that keeps it out)."""
    holder = f"{who or 'engram'}@{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
    deadline = time.monotonic() + wait
    while True:
        holders, version = _holders(bucket)
        blocker = _blocking(holders, kind)
        if blocker is None:
            holders[holder] = {"kind": kind, "until": now_ms() + int(ttl * 1000)}
            if _write(bucket, holders, version):
                return Lease(bucket, holder, kind, ttl)
            continue  # another process changed the lease meanwhile: look again
        if time.monotonic() >= deadline:
            until = time.strftime("%H:%M:%S", time.gmtime(int(str(blocker["until"])) / 1000))
            raise ConflictError(f"a {blocker['kind']} holds the lease on {bucket.url} (renewed until {until} UTC): "
                                f"a {kind} waits for it; try again later")  # fmt: skip
        time.sleep(POLL)


def renew(lease: Lease) -> bool:
    """Push the claim's expiry ``ttl`` seconds ahead; False (and ``lease.lost`` set) if it had lapsed."""
    while True:
        holders, version = _holders(lease.bucket)
        if lease.holder not in holders:
            lease.lost = "its claim expired before it was renewed"
            return False
        holders[lease.holder]["until"] = now_ms() + int(lease.ttl * 1000)
        if _write(lease.bucket, holders, version):
            return True


def release(lease: Lease) -> None:
    """Give the claim up (nothing to do if it lapsed)."""
    while True:
        holders, version = _holders(lease.bucket)
        if lease.holder not in holders:
            return
        del holders[lease.holder]
        if _write(lease.bucket, holders, version):
            return


@contextlib.contextmanager
def hold_lease(
    bucket: Bucket, kind: Kind, *, who: str = "", ttl: float = LEASE_TTL, wait: float = 600.0
) -> Iterator[Lease]:
    """Hold the remote's lease for ``kind`` inside the block, renewing it on a thread every ``ttl / 3`` seconds."""
    lease = acquire(bucket, kind, who=who, ttl=ttl, wait=wait)
    stop = threading.Event()

    def renewing() -> None:
        while not stop.wait(ttl / 3):
            try:
                if not renew(lease):
                    return
            except StorageError as exc:  # the remote is failing: the next renewal tries again, the expiry decides
                log.warning("could not renew the %s lease on %s: %s", kind, bucket.url, exc)

    thread = threading.Thread(target=renewing, name=f"engram-lease-{kind}", daemon=True)
    thread.start()
    try:
        yield lease
    finally:
        stop.set()
        thread.join()
        release(lease)


__all__ = ["LEASE", "LEASE_TTL", "Kind", "Lease", "acquire", "hold_lease", "release", "renew"]
