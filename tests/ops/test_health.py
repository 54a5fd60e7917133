"""Readiness answers within its deadline whatever the store does, with each component's status and latency."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

import engram
from engram.errors import UnavailableError
from engram.ops.health import readiness
from engram.repo import Repository
from engram.store import open_repository, tenant_url


def test_health_a_working_store_is_ready_with_its_latency(tmp_path: Path) -> None:
    repo = open_repository(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        report = readiness(repo, timeout=2.0)
        assert report.ready and report.status == "ok"
        assert set(report.checks) - {"breakers"} == {"store"}  # no cache to report (breakers: the process's)
        store = report.checks["store"]
        assert store["ok"] is True and isinstance(store["ms"], float) and 0 <= store["ms"] < 2000
    finally:
        repo.chunks.close()


def test_health_a_store_that_fails_is_down_and_says_why() -> None:
    def broken() -> Repository:
        raise UnavailableError("PostgreSQL is unavailable: connection refused")

    report = readiness(broken, timeout=1.0)
    assert not report.ready and report.status == "down"
    assert report.checks["store"]["ok"] is False
    assert "PostgreSQL is unavailable" in report.checks["store"]["error"]


def test_health_a_store_that_hangs_is_down_at_the_deadline(postgres_url: str, pg_repo_id: str) -> None:
    """A write the database blocks (another session holds the row) makes readiness answer "timed out" at its
    deadline; while it hangs, later checks wait for the same probe instead of starting more threads."""
    mem = engram.open(tenant_url(postgres_url, pg_repo_id), embedder=None)
    repo = mem.repo
    head = repo.head("main")
    try:
        assert readiness(repo, timeout=5.0).ready
        with psycopg.connect(postgres_url) as blocker:
            blocker.execute(
                "SELECT 1 FROM engram_chunks WHERE repo = %s AND id = %s FOR UPDATE", (pg_repo_id, head)
            ).fetchall()
            for _ in range(3):
                started = time.monotonic()
                report = readiness(repo, timeout=0.5)
                assert time.monotonic() - started < 5.0  # answered at its deadline: the blocked row never frees
                assert not report.ready and report.status == "down"
                assert report.checks["store"] == {"ok": False, "ms": 500.0, "error": "timed out after 0.5 s"}
            probes = [t for t in threading.enumerate() if t.name == "engram-readiness-store"]
            assert len(probes) == 1  # one probe hangs, not one per check
            blocker.rollback()
        deadline = time.monotonic() + 10
        while not (report := readiness(repo, timeout=1.0)).ready and time.monotonic() < deadline:
            time.sleep(0.05)
        assert report.ready and report.status == "ok"
    finally:
        mem.close()


def test_health_a_redis_cache_that_is_down_is_degraded_not_down(postgres_url: str, pg_repo_id: str) -> None:
    repo = open_repository(tenant_url(postgres_url, pg_repo_id), redis="redis://127.0.0.1:1/0")
    try:
        report = readiness(repo, timeout=2.0)
        assert report.ready and report.status == "degraded"
        assert report.checks["store"]["ok"] is True
        assert report.checks["cache"]["ok"] is False and report.checks["cache"]["degraded"] is True
    finally:
        repo.chunks.close()


@pytest.mark.parametrize("timeout", [0.2, 1.0])
def test_health_never_takes_longer_than_its_timeout(timeout: float) -> None:
    gate = threading.Event()

    def stuck() -> Repository:
        gate.wait(10)
        raise UnavailableError("released")

    try:
        started = time.monotonic()
        report = readiness(stuck, timeout=timeout)
        assert time.monotonic() - started < timeout + 5.0  # did not wait for the check (stuck 10 s)
        assert report.checks["store"]["error"] == f"timed out after {timeout:g} s"
    finally:
        gate.set()
