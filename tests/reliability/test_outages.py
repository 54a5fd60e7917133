"""Dependency outages behind a running server: Redis killed and restarted, PostgreSQL stopped and started.

tests/backends/test_redis.py cuts Redis with a TCP proxy at the cache layer and tests/server/test_readyz_cache.py
points a server at a Redis that never existed; these probes kill the real processes under a live stream of
HTTP writes and reads, and bring them back.
"""

from __future__ import annotations

import pytest

from engram.store import tenant_url

from .harness import PrivatePostgres, PrivateRedis
from .probes_outage import run_postgres_restart, run_redis_restart


@pytest.mark.slow
def test_redis_killed_and_restarted_under_traffic_loses_nothing(
    postgres_url: str, pg_repo_id: str, private_redis: PrivateRedis
) -> None:
    """Redis dies mid-stream: every request still succeeds from PostgreSQL, /readyz says degraded; after the
    restart /readyz is ok and the cache fills again; every acknowledged write is readable."""
    store = f"{tenant_url(postgres_url, pg_repo_id)}&redis={private_redis.url}"
    result = run_redis_restart(store, private_redis, bound=10.0)  # generous: the benchmark keeps the tight bound
    result.assert_clean()
    assert result.acknowledged >= 60


@pytest.mark.slow
def test_postgres_stopped_and_started_under_traffic_fails_fast_and_recovers(
    private_postgres: PrivatePostgres, pg_repo_id: str
) -> None:
    """PostgreSQL stops mid-stream: requests answer 503 with Retry-After and /readyz a 503, without waiting out
    the pool's 30 s (bounds generous for a loaded machine, 10 s and 5 s; benchmarks/bench_reliability.py keeps the
    tight 2 s and 1 s); once it is back requests succeed again without restarting the app, and no acknowledged
    write is lost."""
    result = run_postgres_restart(
        private_postgres, tenant_url(private_postgres.uri, pg_repo_id), bound=10.0, ready_bound=5.0
    )
    result.assert_clean()
    assert result.acknowledged >= 20
