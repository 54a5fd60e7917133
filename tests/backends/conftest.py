"""Fixtures of the storage tests: the session's S3 server (``tests/s3server.py``) for the S3 chunk store, and the
test Redis with a key prefix of each test's own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from s3server import S3Server, s3, s3_server
from services import require_redis

from engram.backends.redis import open_redis

__all__ = ["S3Server", "s3", "s3_server"]


@pytest.fixture(scope="module")
def redis_url() -> str:
    """A reachable Redis, or the module is skipped (failed under ENGRAM_REQUIRE_SERVICES=1)."""
    return require_redis()


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own, so tests never see each other's keys."""
    return f"engram-test-{uuid.uuid4().hex}:"


@pytest.fixture
def client(redis_url: str, prefix: str) -> Iterator[redis.Redis]:
    """A cache client on the test Redis; removes this test's keys afterwards."""
    conn = open_redis(redis_url, timeout=5)
    yield conn
    keys = list(conn.scan_iter(match=prefix + "*", count=1000))
    for i in range(0, len(keys), 1000):
        conn.delete(*keys[i : i + 1000])
    conn.close()
