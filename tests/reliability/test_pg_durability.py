"""A put that returned survives a PostgreSQL crash, though its chunks commit without waiting for the disk.

Chunks commit with ``synchronous_commit = off`` (one flush per put: the ref move's, which flushes the log
up to itself and so the chunks written before it). An immediate stop is a crash: the server's unwritten
log buffers are lost, so a commit that did not wait for its flush can vanish; every acknowledged put must
still be there, with its chunks and its search rows.
"""

from __future__ import annotations

import threading

import pytest

import engram
from engram.embed import HashingEmbedder
from engram.errors import EngramError
from engram.store import tenant_url

from .harness import PrivatePostgres, wait_until


@pytest.mark.slow
def test_every_acknowledged_put_survives_an_immediate_stop(private_postgres: PrivatePostgres, pg_repo_id: str) -> None:
    url = tenant_url(private_postgres.uri, pg_repo_id)
    mem = engram.open(url, embedder=HashingEmbedder(), search="postgres")
    mem.put(("u",), "first", {"text": "the very first item"})
    mem.update_index()  # every put below moves the search rows in its ref-move transaction
    acknowledged: list[int] = []

    def write() -> None:
        for i in range(100_000):
            try:
                mem.put(("u",), f"k{i}", {"text": f"note {i} on crash safety, word{i}"})
            except EngramError:
                return  # the server is gone: this put was not acknowledged
            acknowledged.append(i)

    writer = threading.Thread(target=write, name="durability-writer")
    writer.start()
    try:
        assert wait_until(lambda: len(acknowledged) >= 40, 60), "the writer did not get going"
        private_postgres.stop("immediate")  # mid-stream, right after a put returned
    finally:
        writer.join(60)
    mem.close()
    assert not writer.is_alive()
    private_postgres.start()
    again = engram.open(url, embedder=HashingEmbedder(), search="postgres")
    try:
        missing = [i for i in acknowledged if again.get(("u",), f"k{i}") is None]
        assert not missing, f"{len(missing)} acknowledged puts were lost, the first k{missing[0]}"
        assert again.repo.fsck().ok  # no ref points at a chunk the crash lost
        sql = again.pool.sql
        assert sql is not None
        state = sql.head_state("main")
        assert state is not None  # the search rows moved with every ref move: they reflect the head
        assert state[0] == again.repo.commit(again.repo.head("main")).tree
    finally:
        again.close()
