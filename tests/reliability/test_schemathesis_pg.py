"""Schemathesis against the app's own OpenAPI spec with the store on PostgreSQL (pgvector, search in SQL).

Like tests/server/test_schemathesis.py, which runs on an in-memory store, but here every generated input
reaches PostgreSQL, where a driver error for bad input would surface as a 5xx or a 503: none may.

The schema is read at import from an app on an in-memory store (schemathesis parametrizes by operation at
collection; its fixture-based loader fails under pytest 9: ``'Function' object has no attribute '_nodeid'``);
every case is sent to an app on the session's PostgreSQL, built by the module fixture.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from engram.ops.access import KeyRing
from engram.server import ServerConfig, create_app

EXAMPLES = int(os.environ.get("ENGRAM_FUZZ_EXAMPLES", "8"))  # per operation: bounded (benchmarks raise it)

schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(ServerConfig(store=":memory:", embedder=None)))
_PG: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def _pg_app(pgvector_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The app the cases go to: keys required, one tenant whose repository is in the session's PostgreSQL."""
    keys: Path = tmp_path_factory.mktemp("fuzz-pg") / "keys.json"
    tenant = "fuzz" + uuid.uuid4().hex[:12]  # its own repository: ?repo=<tenant>
    _, _PG["secret"] = KeyRing(keys).create(tenant, ["admin"])
    config = ServerConfig(store=pgvector_url, embedder="hashing", keys_file=keys, require_keys=True, sweep_ttl=False)
    _PG["app"] = app = create_app(config)
    yield
    app.state.engram.tenants.close()
    with psycopg.connect(pgvector_url) as conn:
        refs = conn.execute("SELECT count(*) FROM engram_refs WHERE repo = %s", (tenant,)).fetchone()
    assert refs is not None and refs[0] > 0, "the fuzzed app did not write to PostgreSQL"


# schemathesis's own strategies sometimes use the `random` module, which hypothesis deprecates (not our code)
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
def test_schemathesis_on_postgres_no_server_error(case: schemathesis.Case) -> None:
    """Every route, fuzzed on PostgreSQL: no 5xx (so no 503 for an input error), and every answer conforms."""
    case.call_and_validate(
        headers={"Authorization": f"Bearer {_PG['secret']}"}, app=_PG["app"], excluded_checks=[positive_data_acceptance]
    )
