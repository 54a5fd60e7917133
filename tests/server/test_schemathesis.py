"""Schemathesis against the app's own OpenAPI spec, in-process: no 5xx, and every response conforms."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from engram.ops.access import KeyRing
from engram.server import ServerConfig, create_app

_DIR = Path(tempfile.mkdtemp(prefix="engram-fuzz-"))
_, SECRET = KeyRing(_DIR / "keys.json").create("fuzz", ["admin"])
APP = create_app(ServerConfig(store=":memory:", embedder="hashing", keys_file=_DIR / "keys.json"))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    APP.state.engram.tenants.close()
    shutil.rmtree(_DIR, ignore_errors=True)


# schemathesis's own strategies sometimes use the `random` module, which hypothesis deprecates (not our code)
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
@schema.parametrize()
@settings(max_examples=25, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
def test_schemathesis_every_route_conforms(case: schemathesis.Case) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {SECRET}"}, excluded_checks=[positive_data_acceptance])
