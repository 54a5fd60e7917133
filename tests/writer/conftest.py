"""Fixtures of the memory writer's tests: a store on SQLite and on PostgreSQL, and a fresh metrics registry."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

import engram
from engram.store import Memory, tenant_url
from engram.writer import WriterMetrics

WRITER_BACKENDS = ["sqlite", "postgres"]


def store_url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh store URL on one backend (PostgreSQL: a repository no other test uses)."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'writer.db'}"
    base = request.getfixturevalue("postgres_url")
    return tenant_url(base, "w" + uuid.uuid4().hex[:16])


@pytest.fixture(params=WRITER_BACKENDS)
def wurl(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL on SQLite, then on PostgreSQL."""
    return store_url(request.param, tmp_path, request)


@pytest.fixture
def wmem(wurl: str) -> Iterator[Memory]:
    """A store (hashing embedder, in-process search) on each writer backend."""
    mem = engram.open(wurl, embedder="hashing", search="local")
    yield mem
    mem.close()


@pytest.fixture
def metrics() -> WriterMetrics:
    """Writer metrics on a registry of their own."""
    return WriterMetrics(CollectorRegistry())


def sample(metrics: WriterMetrics, name: str, **labels: str) -> float:
    """The value of one metric sample (0 when absent)."""
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
