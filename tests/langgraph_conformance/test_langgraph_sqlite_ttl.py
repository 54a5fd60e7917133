"""LangGraph's SQLite TTL suite (langgraph-checkpoint-sqlite: tests/test_ttl.py) on EngramStore.

Swapped: ``SqliteStore`` and ``AsyncSqliteStore`` (``from_conn_string(path, ttl=...)`` then ``setup()``)
build an EngramStore over a fresh SQLite file with the same ``ttl=`` config.
"""

from __future__ import annotations

import lg_harness
import pytest

LANGGRAPH_SUITE = "langgraph-checkpoint-sqlite/tests/test_ttl.py"
LANGGRAPH_BACKEND = "sqlite"

_suite = lg_harness.suite("langgraph-checkpoint-sqlite")
globals().update(_suite.names("test_ttl"))
_suite.module("test_ttl").SqliteStore = lg_harness.SqliteStore
_suite.module("test_ttl").AsyncSqliteStore = lg_harness.AsyncSqliteStore

pytestmark = pytest.mark.anyio
