"""The connection pools of the PostgreSQL databases open in this process, for the ``engram_db_pool_*`` metrics."""

from __future__ import annotations

import weakref
from typing import Any, Protocol

from engram.backends._pgerrors import dependency_name


class _Pooled(Protocol):
    url: str
    pool: Any


#: Every database opened in the process and not collected yet (its pool may be closed).
_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()


def track(db: _Pooled) -> None:
    """Count ``db``'s pool in :func:`pool_stats` for as long as the object lives and its pool is open."""
    _OPEN.add(db)


def pool_stats() -> dict[str, dict[str, int]]:
    """The connection pools open in this process, summed per database (``postgresql:<host>:<port>/<db>``, never
    a user, password or tenant): ``in_use``, ``idle``, ``waiting`` (requests queued for a connection) and ``max``."""
    found: dict[str, dict[str, int]] = {}
    for db in list(_OPEN):
        if db.pool.closed:
            continue
        stats = db.pool.get_stats()
        size, idle = int(stats.get("pool_size", 0)), int(stats.get("pool_available", 0))
        into = found.setdefault(dependency_name(db.url), {"in_use": 0, "idle": 0, "waiting": 0, "max": 0})
        into["in_use"] += max(0, size - idle)
        into["idle"] += idle
        into["waiting"] += int(stats.get("requests_waiting", 0))
        into["max"] += int(db.pool.max_size)
    return found


__all__ = ["pool_stats", "track"]
