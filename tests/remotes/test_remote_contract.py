"""Remotes pass the storage contract suites every local backend passes: in a folder and on a real S3 server."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import S3Server

from engram.backends.base import ChunkStore, RefStore
from engram.ops.remotes import open_remote
from engram.testing import ChunkStoreContract, RefStoreContract


class TestDirChunkStore(ChunkStoreContract):
    @pytest.fixture
    def chunks(self, tmp_path: Path) -> ChunkStore:
        return open_remote(f"dir://{tmp_path / 'remote'}").chunks


class TestDirRefStore(RefStoreContract):
    @pytest.fixture
    def refs(self, tmp_path: Path) -> RefStore:
        return open_remote(f"dir://{tmp_path / 'remote'}").refs


class TestS3ChunkStore(ChunkStoreContract):
    @pytest.fixture
    def chunks(self, s3: S3Server) -> ChunkStore:
        return open_remote(s3.url()).chunks


class TestS3RefStore(RefStoreContract):
    @pytest.fixture
    def refs(self, s3: S3Server) -> RefStore:
        return open_remote(s3.url()).refs
