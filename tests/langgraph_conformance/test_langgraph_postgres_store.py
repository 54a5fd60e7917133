"""LangGraph's PostgresStore suite (langgraph-checkpoint-postgres: tests/test_store.py) on EngramStore + PostgreSQL.

Swapped, each where LangGraph builds a PostgresStore on a new database:
- ``store``: ``EngramStore(url=<pgvector url>?repo=<fresh id>, ttl=<the suite's ttl config>)`` and
  ``start_ttl_sweeper()``, as LangGraph's fixture does. Its ``default``/``pipe``/``pool`` parameters choose
  PostgresStore connection modes, which EngramStore does not have: one store per test here.
- ``_create_vector_store``: the same ``index=`` config (dims, embed, fields, ``distance_type``,
  ``ann_index_config``) and ``ttl=``; LangGraph's ``vector_store`` fixture runs unchanged on top of it.
- ``_expire_now``/``_row_exists``/``_stored_expires_at`` (SQL on PostgresStore's table): the same effect
  through engram's public API (see lg_harness).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lg_harness
import pytest

from engram.integrations.langgraph import EngramStore

LANGGRAPH_SUITE = "langgraph-checkpoint-postgres/tests/test_store.py"
LANGGRAPH_BACKEND = "postgres"

_suite = lg_harness.suite("langgraph-checkpoint-postgres")
_module = _suite.module("test_store")
globals().update(_suite.names("test_store"))
fake_embeddings = _suite.module("conftest").fake_embeddings


@pytest.fixture
def store() -> Iterator[EngramStore]:
    ttl_config = {
        "default_ttl": _module.TTL_MINUTES,
        "refresh_on_read": True,
        "sweep_interval_minutes": _module.TTL_MINUTES / 2,
    }
    store = lg_harness.new_store(ttl=ttl_config)
    store.start_ttl_sweeper()
    yield store
    store.stop_ttl_sweeper()


@contextmanager
def _create_vector_store(
    vector_type: str,
    distance_type: str,
    fake_embeddings: Any,
    text_fields: list[str] | None = None,
    enable_ttl: bool = True,
) -> Iterator[EngramStore]:
    index_config = {
        "dims": fake_embeddings.dims,
        "embed": fake_embeddings,
        "ann_index_config": {"vector_type": vector_type},
        "distance_type": distance_type,
        "fields": text_fields,
    }
    ttl = {"default_ttl": 2, "refresh_on_read": True} if enable_ttl else None
    yield lg_harness.new_store(index=index_config, ttl=ttl)


_module._create_vector_store = _create_vector_store
_module._expire_now = lg_harness.expire_now
_module._row_exists = lg_harness.row_exists
_module._stored_expires_at = lg_harness.stored_expires_at

pytestmark = pytest.mark.anyio
