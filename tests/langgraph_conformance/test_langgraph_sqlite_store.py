"""LangGraph's SqliteStore suite (langgraph-checkpoint-sqlite: tests/test_store.py), every store an EngramStore.

Swapped: ``SqliteStore`` (``SqliteStore.from_conn_string(conn, index=...)`` then ``setup()``) builds an
EngramStore over a fresh SQLite file with the same ``index=``/``ttl=``. LangGraph's fixtures and helpers
(``store``, ``create_vector_store``) run unchanged on top of it.
"""

from __future__ import annotations

import lg_harness
import pytest

LANGGRAPH_SUITE = "langgraph-checkpoint-sqlite/tests/test_store.py"
LANGGRAPH_BACKEND = "sqlite"

_suite = lg_harness.suite("langgraph-checkpoint-sqlite")
globals().update(_suite.names("test_store"))
_suite.module("test_store").SqliteStore = lg_harness.SqliteStore

pytestmark = pytest.mark.anyio
