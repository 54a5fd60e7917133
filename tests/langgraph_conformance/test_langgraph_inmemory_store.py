"""LangGraph's InMemoryStore suite (langgraph-checkpoint: tests/test_store.py), every store an EngramStore on SQLite.

Swapped: the ``InMemoryStore`` class the tests build (``InMemoryStore(index=...)``) is an EngramStore
subclass with the same constructor. Everything else is LangGraph's, unchanged.
"""

from __future__ import annotations

import lg_harness
import pytest

LANGGRAPH_SUITE = "langgraph-checkpoint/tests/test_store.py"
LANGGRAPH_BACKEND = "sqlite"

_suite = lg_harness.suite("langgraph-checkpoint")
globals().update(_suite.names("test_store"))
_suite.module("test_store").InMemoryStore = lg_harness.InMemoryStore

pytestmark = pytest.mark.anyio
