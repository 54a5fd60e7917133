"""PostgreSQL's errors mean what they say: input it refuses is InvalidInputError (HTTP 422), a database that is
down or busy is UnavailableError (503), any other fault StorageError (500), on every path that talks to it.

The input here bypasses the API's validation on purpose (a NUL in a ref name, a record whose value holds
``\\u0000``): this translation is the safety net below that validation.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import engram
from engram import codec
from engram.backends.postgres import PostgresDatabase, PostgresRefStore, migrate, open_postgres, schema_version
from engram.errors import InvalidInputError, StorageError, UnavailableError
from engram.objects import Record, encode_record
from engram.repo import HEADS
from engram.store import tenant_url


def _only(exc: BaseException, cls: type[BaseException]) -> None:
    """``exc`` is exactly of class ``cls`` among engram's three storage answers."""
    kinds = (InvalidInputError, UnavailableError, StorageError)
    found = next(k for k in kinds if isinstance(exc, k))
    assert found is cls, f"{type(exc).__name__}: {exc}"


@pytest.fixture
def pg(postgres_url: str, pg_repo_id: str) -> Iterator[PostgresRefStore]:
    chunks, refs = open_postgres(postgres_url, pg_repo_id)
    yield refs
    chunks.close()


def test_pg_errors_nul_in_a_ref_name_is_invalid_input(pg: PostgresRefStore) -> None:
    cid = pg.db.run("SELECT decode(repeat('ab', 32), 'hex')")[0][0]
    for call in (
        lambda: pg.get("heads/a\x00b"),
        lambda: pg.set("heads/a\x00b", bytes(cid), None),
        lambda: pg.list("heads/\x00"),
        lambda: pg.reflog("heads/\x00"),
    ):
        with pytest.raises(InvalidInputError, match=r"PostgreSQL refused the input: .*NUL") as info:
            call()
        _only(info.value, InvalidInputError)
    assert pg.list() == {}  # nothing was written


def test_pg_errors_huge_number_is_invalid_input(pg: PostgresRefStore) -> None:
    with pytest.raises(InvalidInputError, match="out of range") as info:
        pg.db.run("SELECT %s::bigint", (10**30,))
    _only(info.value, InvalidInputError)
    with pytest.raises(InvalidInputError, match="invalid input syntax"):
        pg.db.rowcount("UPDATE engram_refs SET name = name WHERE repo = %s AND %s::int = 1", (pg.repo, "x"))


def test_pg_errors_a_fault_that_is_not_input_nor_an_outage_is_a_storage_error(pg: PostgresRefStore) -> None:
    with pytest.raises(StorageError, match="no_such_table") as info:
        pg.db.run("SELECT * FROM no_such_table")
    _only(info.value, StorageError)
    assert pg.db.available  # a failed statement says nothing about the connection


def test_pg_errors_statement_timeout_is_unavailable(pg: PostgresRefStore) -> None:
    def slow(conn: Any) -> None:
        conn.execute("SET LOCAL statement_timeout = '50ms'")
        conn.execute("SELECT pg_sleep(2)")

    with pytest.raises(UnavailableError, match="statement timeout") as info:
        pg.db.transaction(slow)
    assert info.value.retry_after is not None
    assert pg.db.available


def test_pg_errors_a_killed_connection_is_unavailable_then_recovers(postgres_url: str, pg_repo_id: str) -> None:
    migrate(postgres_url)
    db = PostgresDatabase(postgres_url, pg_repo_id, min_size=1, max_size=1)
    try:
        pid = db.run("SELECT pg_backend_pid()")[0][0]
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(UnavailableError, match="PostgreSQL is unavailable") as info:
            db.run("SELECT 1")
        assert info.value.retry_after is not None
        assert db.run("SELECT 1") == [(1,)]  # the next request probes a fresh connection: no outage here
        assert db.available
    finally:
        db.close()


def test_pg_errors_deadlocks_are_retried(postgres_url: str) -> None:
    table = "engram_test_" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int NOT NULL)")
        admin.execute(f"INSERT INTO {table} VALUES (1, 0), (2, 0)")
    db = PostgresDatabase(postgres_url, "deadlocks", min_size=2, max_size=4)
    both = threading.Barrier(2, timeout=10)
    runs: list[int] = []
    try:

        def crossing(first: int, second: int) -> None:
            def work(conn: Any) -> None:
                runs.append(first)
                conn.execute(f"UPDATE {table} SET n = n + 1 WHERE id = %s", (first,))
                if runs.count(first) == 1:
                    both.wait()  # both hold their first row: one of them deadlocks on its second
                conn.execute(f"UPDATE {table} SET n = n + 1 WHERE id = %s", (second,))

            db.transaction(work)

        threads = [threading.Thread(target=crossing, args=order) for order in ((1, 2), (2, 1))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(runs) == 3  # one transaction was rolled back by the deadlock detector and run again
        assert db.run(f"SELECT n FROM {table} ORDER BY id") == [(2,), (2,)]
    finally:
        db.close()
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP TABLE {table}")


def test_pg_errors_unreachable_database_is_unavailable() -> None:
    url = "postgresql://nobody@127.0.0.1:1/none"
    for call in (lambda: schema_version(url), lambda: migrate(url), lambda: open_postgres(url)):
        with pytest.raises(UnavailableError, match="PostgreSQL") as info:
            call()
        _only(info.value, UnavailableError)


# ----------------------------------------------------------------------------------- search


def _record(value: dict[str, Any], updated_at: int = 1) -> bytes:
    return encode_record(Record(value, 1, updated_at, author="tester"))


#: Records the search index cannot hold, written below the API's validation: a namespace label with a NUL
#: (a text column) and an update time past PostgreSQL's bigint.
REFUSED = {
    "nul": {codec.encode_key(("d\x00cs",), "bad"): _record({"text": "bad words"})},
    "huge": {codec.encode_key(("docs",), "bad"): _record({"text": "bad words"}, updated_at=10**20)},
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_pg_errors_search_index_refusing_a_record_is_invalid_input(pgvector_url: str, case: str) -> None:
    """On every path of the search index: building it says what PostgreSQL refused (422, not an outage);
    a search then answers in process; a write on an indexed branch is refused whole, with its index change."""
    bad = REFUSED[case]
    mem = engram.open(tenant_url(pgvector_url, "t" + uuid.uuid4().hex[:16]), embedder=None, search="postgres")
    sql = mem.pool.sql
    assert sql is not None
    try:
        mem.put(("docs",), "ok", {"text": "plain words"})
        mem.repo.commit_edits("main", bad, author="tester", message="below validation")  # not indexed yet
        root = mem.repo.commit(mem.repo.head("main")).tree
        for call in (lambda: sql.ensure("main", root), lambda: sql.rebuild("main", root)):
            with pytest.raises(InvalidInputError, match="PostgreSQL refused the input") as info:
                call()
            _only(info.value, InvalidInputError)
        if case == "nul":  # (the in-process index cannot hold an update time past int64 either: not ours here)
            assert [item.key for item in mem.search((), "bad", mode="keyword")] == ["bad"]  # in process

        mem.repo.commit_edits("main", dict.fromkeys(bad), author="tester", message="fix")
        assert [item.key for item in mem.search(("docs",), "plain")] == ["ok"]  # indexed in PostgreSQL now
        head = mem.repo.head("main")
        with pytest.raises(InvalidInputError, match="PostgreSQL refused the input"):
            mem.repo.commit_edits("main", bad, author="tester", message="refused with its index change")
        assert mem.repo.refs.get(HEADS + "main") == head  # the ref did not move
    finally:
        mem.close()
