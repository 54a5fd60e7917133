"""Fixtures for the channels service: a hub over SQLite and over PostgreSQL (pgvector, search in SQL)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import engram
from engram.channels import Actor, Channels
from engram.embed import Embedder, HashingEmbedder
from engram.store import Memory, tenant_url

CHANNEL_BACKENDS = ["sqlite", "postgres"]


def open_memory(kind: str, tmp_path: Path, request: pytest.FixtureRequest, embedder: Embedder | None = None) -> Memory:
    """A fresh store with the no-model hashing embedder (hybrid search), or ``embedder``, on one backend."""
    chosen = embedder or HashingEmbedder()
    if kind == "postgres":
        url = request.getfixturevalue("pgvector_url")
        return engram.open(tenant_url(url, "t" + uuid.uuid4().hex[:16]), author="tester", embedder=chosen,
                           search="postgres")  # fmt: skip
    return engram.open(f"sqlite:///{tmp_path / 'channels.db'}", author="tester", embedder=chosen)


def populate(service: Channels) -> Channels:
    """Project ``acme`` (and ``other``) with agents ``alice``, ``bob`` (acme), ``gus`` (global), ``olga`` (other)."""
    service.create_project("acme")
    service.create_project("other")
    for name, project in (("alice", "acme"), ("bob", "acme"), ("gus", None), ("olga", "other")):
        service.register_agent(name, project=project)
    return service


@pytest.fixture(params=CHANNEL_BACKENDS)
def hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Channels]:
    """A channels service with project ``acme`` and agents ``alice``, ``bob`` (acme) and ``gus`` (global)."""
    memory = open_memory(request.param, tmp_path, request)
    yield populate(Channels(memory, max_content=2_000))
    memory.close()


@pytest.fixture
def alice(hub: Channels) -> Actor:
    """Agent ``alice`` of project ``acme``."""
    return hub.as_agent("alice")


@pytest.fixture
def bob(hub: Channels) -> Actor:
    """Agent ``bob`` of project ``acme``."""
    return hub.as_agent("bob")
