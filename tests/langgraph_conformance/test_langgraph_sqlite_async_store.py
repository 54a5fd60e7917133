"""LangGraph's AsyncSqliteStore suite (langgraph-checkpoint-sqlite: tests/test_async_store.py) on EngramStore.

Swapped: ``AsyncSqliteStore`` (``async with AsyncSqliteStore.from_conn_string(conn, index=...)`` then
``await setup()``) builds an EngramStore over a fresh SQLite file. LangGraph's fixtures and helpers run
unchanged on top of it.
"""

from __future__ import annotations

import lg_harness
import pytest

LANGGRAPH_SUITE = "langgraph-checkpoint-sqlite/tests/test_async_store.py"
LANGGRAPH_BACKEND = "sqlite"

_suite = lg_harness.suite("langgraph-checkpoint-sqlite")
globals().update(_suite.names("test_async_store"))
_suite.module("test_async_store").AsyncSqliteStore = lg_harness.AsyncSqliteStore

pytestmark = pytest.mark.anyio
