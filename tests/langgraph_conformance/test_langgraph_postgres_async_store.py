"""LangGraph's AsyncPostgresStore suite (langgraph-checkpoint-postgres: tests/test_async_store.py) on EngramStore.

Swapped, each where LangGraph builds an AsyncPostgresStore on a new database:
- ``store``: ``EngramStore(url=<pgvector url>?repo=<fresh id>, ttl=<the suite's ttl config>)`` and
  ``await store.start_ttl_sweeper()``, as LangGraph's fixture does. Its ``default``/``pipe``/``pool``
  parameters choose connection modes EngramStore does not have: one store per test here.
- ``_create_vector_store``: the same ``index=`` config; LangGraph's ``vector_store`` fixture runs unchanged.
- ``_aexpire_now``/``_arow_exists``/``_astored_expires_at`` (SQL on AsyncPostgresStore's table): the same
  effect through engram's public API (see lg_harness).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import lg_harness
import pytest

from engram.integrations.langgraph import EngramStore

LANGGRAPH_SUITE = "langgraph-checkpoint-postgres/tests/test_async_store.py"
LANGGRAPH_BACKEND = "postgres"

_suite = lg_harness.suite("langgraph-checkpoint-postgres")
_module = _suite.module("test_async_store")
globals().update(_suite.names("test_async_store"))
fake_embeddings = _suite.module("conftest").fake_embeddings


@pytest.fixture
async def store() -> AsyncIterator[EngramStore]:
    ttl_config = {
        "default_ttl": _module.TTL_MINUTES,
        "refresh_on_read": True,
        "sweep_interval_minutes": _module.TTL_MINUTES / 2,
    }
    store = lg_harness.new_store(ttl=ttl_config)
    await store.start_ttl_sweeper()
    yield store
    await store.stop_ttl_sweeper()


@asynccontextmanager
async def _create_vector_store(
    vector_type: str,
    distance_type: str,
    fake_embeddings: Any,
    text_fields: list[str] | None = None,
) -> AsyncIterator[EngramStore]:
    index_config = {
        "dims": fake_embeddings.dims,
        "embed": fake_embeddings,
        "ann_index_config": {"vector_type": vector_type},
        "distance_type": distance_type,
        "fields": text_fields,
    }
    yield lg_harness.new_store(index=index_config)


_module._create_vector_store = _create_vector_store
_module._aexpire_now = lg_harness.aexpire_now
_module._arow_exists = lg_harness.arow_exists
_module._astored_expires_at = lg_harness.astored_expires_at

pytestmark = pytest.mark.anyio
