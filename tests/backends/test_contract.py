"""Every backend passes the storage contract suites of engram.testing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engram.backends import (
    ChunkStore,
    LruChunkStore,
    MemoryChunkStore,
    MemoryRefStore,
    RefStore,
    ValidatingChunkStore,
    open_sqlite,
)
from engram.testing import ChunkStoreContract, RefStoreContract


class TestMemoryChunkStore(ChunkStoreContract):
    @pytest.fixture
    def chunks(self) -> ChunkStore:
        return ValidatingChunkStore(MemoryChunkStore())


class TestSqliteChunkStore(ChunkStoreContract):
    @pytest.fixture
    def chunks(self, tmp_path: Path) -> ChunkStore:
        return ValidatingChunkStore(open_sqlite(tmp_path / "c.db")[0])


class TestLruOverSqliteChunkStore(ChunkStoreContract):
    @pytest.fixture
    def chunks(self, tmp_path: Path) -> ChunkStore:
        return LruChunkStore(open_sqlite(tmp_path / "c.db")[0], max_bytes=4096)


class TestMemoryRefStore(RefStoreContract):
    @pytest.fixture
    def refs(self) -> RefStore:
        return MemoryRefStore()


class TestSqliteRefStore(RefStoreContract):
    @pytest.fixture
    def refs(self, tmp_path: Path) -> RefStore:
        return open_sqlite(tmp_path / "r.db")[1]


class TestPostgresChunkStore(ChunkStoreContract):
    @pytest.fixture
    def chunks(self, postgres_url: str, pg_repo_id: str) -> Iterator[ChunkStore]:
        from engram.backends.postgres import open_postgres

        store = open_postgres(postgres_url, pg_repo_id)[0]
        yield ValidatingChunkStore(store)
        store.close()


class TestPostgresRefStore(RefStoreContract):
    @pytest.fixture
    def refs(self, postgres_url: str, pg_repo_id: str) -> Iterator[RefStore]:
        from engram.backends.postgres import open_postgres

        store = open_postgres(postgres_url, pg_repo_id)[1]
        yield store
        store.close()
