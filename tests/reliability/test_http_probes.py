"""Reliability probes over HTTP: two servers on one store, tenant isolation through every read route.

tests/server/test_auth_tenants.py pins each route's answer for one foreign ref; this probe sends every read
route as five kinds of caller with every kind of ref and scans every answer for data the caller may not see.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engram.store import tenant_url

from .probes_http import run_tenant_isolation, run_two_servers

THREADS = 4
PUTS = 15  # per thread


@pytest.mark.slow
def test_two_servers_on_one_sqlite_store_lose_no_acknowledged_write(tmp_path: Path) -> None:
    """Two `engram serve` processes on one SQLite store take concurrent PUTs: every 2xx write is readable
    through either server, and no write is refused."""
    result = run_two_servers(tmp_path / "store", threads=THREADS, puts=PUTS)
    result.assert_clean()
    assert result.requests >= THREADS * PUTS


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "pgvector"])
def test_tenants_and_prefixes_never_see_foreign_data_through_any_read_route(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Admin, read-only and prefix-restricted keys of three tenants read every route with every kind of ref;
    no answer shows another tenant's data or data outside the prefix, and read-only reads make no commit."""
    if backend == "sqlite":
        store = str(tmp_path / "base")
    else:
        store = tenant_url(request.getfixturevalue("pgvector_url"), request.getfixturevalue("pg_repo_id"))
    result = run_tenant_isolation(store, tmp_path / "keys.json")
    result.assert_clean()
    assert result.requests > 1000  # count the requests checked: the probe cannot pass by checking nothing
