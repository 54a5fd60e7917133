"""Which PostgreSQL commits wait for the log flush: one per put, the ref move's.

Chunks, vector-cache rows and moves of vectors into the HNSW table commit with ``synchronous_commit = off``
(:data:`engram.backends.postgres.ASYNC_COMMIT`): the ref move that makes them reachable commits
synchronously, and PostgreSQL flushes its log in order, so it makes them durable too. These tests record,
with deferred triggers that run at each commit, the setting every commit of a test repository runs with.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import engram
from engram.backends.postgres import PostgresChunkStore, PostgresDatabase, ensure_schema
from engram.embed import HashingEmbedder
from engram.index.cache import PostgresVectorCache
from engram.store import Memory, tenant_url

#: Tables whose rows the triggers watch: content (chunks), refs (the reflog row of every move), the search
#: rows written with a move, the vector cache and the HNSW table the background mover fills.
WATCHED = ("engram_chunks", "engram_reflog", "engram_docs", "engram_vectors", "engram_doc_vectors")


class Commits:
    """The ``synchronous_commit`` setting each commit that wrote a row of the repository ran with."""

    def __init__(self, url: str, repo: str) -> None:
        self.url = url
        self.repo = repo
        self.log = f"commits_{repo}"

    def install(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {self.log} (tbl text, setting text, xid bigint)")
            conn.execute(
                f"CREATE FUNCTION {self.log}_f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"INSERT INTO {self.log} VALUES (TG_TABLE_NAME, current_setting('synchronous_commit'), "
                "txid_current()); RETURN NULL; END $$"
            )
            for table in WATCHED:  # deferred: they run at commit time, with the setting the commit uses
                conn.execute(
                    f"CREATE CONSTRAINT TRIGGER {self.log}_{table} AFTER INSERT OR UPDATE ON {table} "
                    f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.repo = '{self.repo}') "
                    f"EXECUTE FUNCTION {self.log}_f()"
                )

    def remove(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            for table in WATCHED:
                conn.execute(f"DROP TRIGGER IF EXISTS {self.log}_{table} ON {table}")
            conn.execute(f"DROP FUNCTION IF EXISTS {self.log}_f()")
            conn.execute(f"DROP TABLE IF EXISTS {self.log}")

    def settings(self) -> dict[str, set[str]]:
        """Table -> the settings of the commits that wrote its rows (since the last :meth:`clear`)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(f"SELECT tbl, setting FROM {self.log}").fetchall()
        found: dict[str, set[str]] = {}
        for table, setting in rows:
            found.setdefault(table, set()).add(setting)
        return found

    def transactions(self, table: str) -> set[int]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(f"SELECT DISTINCT xid FROM {self.log} WHERE tbl = %s", (table,)).fetchall()
        return {int(xid) for (xid,) in rows}

    def count(self, table: str) -> int:
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(f"SELECT count(*) FROM {self.log} WHERE tbl = %s", (table,)).fetchone()
        return int(row[0]) if row else 0

    def clear(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"DELETE FROM {self.log}")


@pytest.fixture
def watched(pgvector_url: str) -> Iterator[tuple[Memory, Commits]]:
    """A store searched in PostgreSQL, its branch indexed, and the commits of its repository watched."""
    repo = "t" + uuid.uuid4().hex[:16]
    mem = engram.open(tenant_url(pgvector_url, repo), embedder=HashingEmbedder(), search="postgres")
    commits = Commits(pgvector_url, repo)
    commits.install()
    try:
        mem.put(("u",), "first", {"text": "the very first item"})
        mem.update_index()  # from here on every commit moves the index in its ref-move transaction
        assert mem.pool.sql is not None
        mem.pool.sql.settle()
        commits.clear()
        yield mem, commits
    finally:
        mem.close()
        commits.remove()


def test_a_single_put_waits_for_one_flush_the_ref_moves(watched: tuple[Memory, Commits]) -> None:
    mem, commits = watched
    mem.put(("u",), "k1", {"text": "a brand new sentence about cats and dogs"})
    found = commits.settings()
    assert found["engram_chunks"] == {"off"}  # its tree nodes and commit: nothing pointed to them yet
    assert found["engram_reflog"] == {"on"}  # the ref move, with the search rows and vector-cache row it wrote
    assert found["engram_docs"] == {"on"}
    assert found["engram_vectors"] == {"on"}
    # the chunks committed on their own, before the move (whose synchronous commit flushed them too)
    assert commits.transactions("engram_chunks").isdisjoint(commits.transactions("engram_reflog"))
    assert commits.transactions("engram_reflog") == commits.transactions("engram_docs")
    assert mem.get(("u",), "k1") is not None


def test_a_batched_commit_also_flushes_once(watched: tuple[Memory, Commits]) -> None:
    mem, commits = watched
    with mem.transaction("load") as tx:
        for i in range(100):  # more than SMALL_WRITE: the rows go by COPY
            tx.put(("u", "notes"), f"n{i}", {"text": f"note number {i} about topic {i % 7}"})
    found = commits.settings()
    assert found["engram_chunks"] == {"off"}
    assert found["engram_reflog"] == found["engram_docs"] == found["engram_vectors"] == {"on"}
    assert len(commits.transactions("engram_reflog")) == 1


def test_derived_rows_written_outside_a_move_do_not_wait(watched: tuple[Memory, Commits]) -> None:
    mem, commits = watched
    sql = mem.pool.sql
    assert sql is not None
    for i in range(3):
        mem.put(("u",), f"v{i}", {"text": f"a vector to move into the graph {i}"})
    sql.settle()  # whatever the background mover has not moved yet
    assert sql.lag("main") == 0
    assert commits.settings()["engram_doc_vectors"] == {"off"}
    assert commits.count("engram_doc_vectors") == 3
    cache = PostgresVectorCache(sql.db)
    commits.clear()
    cache.put_many("some-model", {b"h" * 32: b"\x00" * 16})
    assert commits.settings() == {"engram_vectors": {"off"}}


def test_the_setting_ends_with_its_statement(pgvector_url: str, pg_repo_id: str) -> None:
    """``set_config(..., true)`` in an autocommit statement lasts until its commit: the pooled connection that
    wrote chunks runs its next transaction (a ref move, say) synchronously."""
    ensure_schema(pgvector_url)
    db = PostgresDatabase(pgvector_url, pg_repo_id, max_size=1)  # one connection: the next call reuses it
    try:
        db.run("INSERT INTO engram_repos (repo) VALUES (%s) ON CONFLICT DO NOTHING", (pg_repo_id,))
        PostgresChunkStore(db).put_many({b"\x01" * 32: b"data"})

        def setting(conn: Any) -> str:
            return str(conn.execute("SHOW synchronous_commit").fetchone()[0])

        assert db.transaction(setting) == "on"
        assert db.run("SHOW synchronous_commit") == [("on",)]
    finally:
        db.close()
