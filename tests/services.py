"""Gate integration tests on real services (DESIGN.md §10: services are real, never mocked).

A test that needs a service calls ``require_<service>()``, which returns the service's URL. When the
service is not reachable the test is skipped with the reason, unless ``ENGRAM_REQUIRE_SERVICES=1``
(as in CI), which turns the skip into a failure so that a missing service can never pass silently.
"""

from __future__ import annotations

import functools
import os
from typing import NoReturn

import pytest

#: The Redis the tests use (db 0; every test keeps to its own key prefix).
REDIS_URL = os.environ.get("ENGRAM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def services_required() -> bool:
    """True when a missing service must fail the run instead of skipping tests."""
    return os.environ.get("ENGRAM_REQUIRE_SERVICES") == "1"


def unavailable(service: str, reason: str) -> NoReturn:
    """Skip the calling test because ``service`` is unavailable, or fail under ENGRAM_REQUIRE_SERVICES=1."""
    if services_required():
        pytest.fail(f"{service} is required (ENGRAM_REQUIRE_SERVICES=1) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"{service} is not available: {reason} (set ENGRAM_REQUIRE_SERVICES=1 to fail instead)")


@functools.cache
def _redis_problem(url: str) -> str | None:
    """Why Redis at ``url`` cannot be used, or None; probed once per session."""
    try:
        import redis
    except ImportError:
        return "redis-py is not installed (pip install 'engram[redis]')"
    client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        return f"{url} did not answer PING ({type(exc).__name__}: {exc})"
    finally:
        client.close()
    return None


def require_redis() -> str:
    """The URL of a reachable Redis (``ENGRAM_TEST_REDIS_URL``, default ``redis://127.0.0.1:6379/0``)."""
    problem = _redis_problem(REDIS_URL)
    if problem is not None:
        unavailable("Redis", problem)
    return REDIS_URL
