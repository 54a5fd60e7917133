"""A tenant pool's background indexer survives a bug in one tenant's work (an embedder raising anything): it logs
it and goes on serving the other tenants."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

import engram
from engram.embed import HashingEmbedder
from engram.ops.tenants import TenantPool


class _Crashing(HashingEmbedder):
    def embed(self, texts: Any) -> Any:
        raise RuntimeError("a bug in the embedder")


def test_the_background_indexer_logs_a_bug_and_keeps_indexing_the_other_tenants(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stores = {"bad": engram.open(":memory:", embedder=_Crashing()), "good": engram.open(":memory:", embedder="hashing")}
    pool = TenantPool(lambda tenant: stores[tenant], sweep_minutes=None, index_delay=0.01)
    try:
        with caplog.at_level(logging.ERROR, logger="engram"):
            for tenant in ("bad", "good"):
                with pool.lease(tenant) as memory:
                    memory.put(("docs",), "d1", {"text": "postgres connection refused"})
                pool.written(tenant, "main")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(
                "failed unexpectedly" in r.getMessage() for r in caplog.records
            ):
                time.sleep(0.02)
        assert any("background index of tenant bad failed unexpectedly" in r.getMessage() for r in caplog.records)
        with pool.lease("good") as memory:
            memory.put(("docs",), "d2", {"text": "redis timeout"})
        pool.written("good", "main")  # the thread is alive: it brings the good tenant's index up to date
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and stores["good"].index_lag("main").commits:
            time.sleep(0.05)
        assert stores["good"].index_lag("main").commits == 0
    finally:
        pool.close()
