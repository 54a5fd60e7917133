"""LangGraph's own store test suites, run against EngramStore (see lg_harness and docs/langgraph.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import lg_harness
import pytest
from lg_marks import EXCLUDED, SLOW

PARAMS = re.compile(r"\[.*\]$")


def pytest_configure(config: pytest.Config) -> None:
    # Markers LangGraph's suites use. Their async tests run under anyio (already installed) instead of
    # pytest-asyncio; pytest-retry is not installed, so `flaky` tests get no retries.
    config.addinivalue_line("markers", "asyncio: LangGraph's pytest-asyncio marker (anyio runs these tests here)")
    config.addinivalue_line("markers", "flaky(retries): LangGraph's pytest-retry marker (no retries here)")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """LangGraph's async tests run on asyncio."""
    return "asyncio"


@pytest.fixture(autouse=True)
def engram_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[lg_harness.Backend]:
    """Every store a test builds is a fresh EngramStore: a SQLite file in ``tmp_path``, or a new repository
    on the pgvector PostgreSQL for the PostgreSQL suites; all are closed after the test."""
    postgres = None
    if getattr(request.module, "LANGGRAPH_BACKEND", "sqlite") == "postgres":
        postgres = request.getfixturevalue("pgvector_url")
    with lg_harness.backend(tmp_path, postgres) as backend:
        yield backend


def exclusion_key(item: pytest.Item) -> tuple[str, str] | None:
    """``(key with params, key without)`` of a test collected from a LangGraph suite, else None."""
    suite = getattr(getattr(item, "module", None), "LANGGRAPH_SUITE", None)
    if suite is None:
        return None
    name = "::".join(item.nodeid.split("::")[1:])
    bare = PARAMS.sub("", name)
    return f"{suite}::{name}", f"{suite}::{bare}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        keys = exclusion_key(item)
        if keys is None:
            continue
        suite = keys[0].split("::")[0]
        reason = EXCLUDED.get(keys[0]) or EXCLUDED.get(keys[1])
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"excluded from LangGraph conformance: {reason}"))
        if suite in SLOW or keys[1] in SLOW:
            item.add_marker(pytest.mark.slow)
