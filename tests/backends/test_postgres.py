"""PostgreSQL: migrations, tenants that never mix, many processes writing one branch, engram.open on it."""

from __future__ import annotations

import traceback
from typing import Any

import psycopg
import pytest
from processes import race

import engram
from engram.backends.postgres import MIGRATIONS, migrate, open_postgres, schema_version
from engram.store import tenant_url

NS = ("load",)
PROCESSES = 4
PUTS = 25
TIMEOUT = 90.0


def test_migrations_are_recorded_and_idempotent(postgres_url: str) -> None:
    migrate(postgres_url)
    assert schema_version(postgres_url) == MIGRATIONS[-1].version
    assert migrate(postgres_url) == []  # nothing left to apply
    with psycopg.connect(postgres_url) as conn:
        versions = [row[0] for row in conn.execute("SELECT version FROM engram_schema ORDER BY version")]
    assert versions == [m.version for m in MIGRATIONS]


def test_migrations_on_an_empty_database_create_every_table(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        schema = "m" + postgres_url.__hash__().__abs__().__str__()[:8]
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    scoped = postgres_url + ("&" if "?" in postgres_url else "?") + f"options=-csearch_path%3D{schema}"
    try:
        assert schema_version(scoped) == 0
        assert [m.version for m in migrate(scoped)] == [m.version for m in MIGRATIONS]
        with psycopg.connect(scoped) as conn:
            tables = {row[0] for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))}  # fmt: skip
        assert {"engram_schema", "engram_chunks", "engram_refs", "engram_reflog", "engram_vectors"} <= tables
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_tenants_in_one_database_never_mix(postgres_url: str, pg_repo_id: str) -> None:
    a = engram.open(tenant_url(postgres_url, pg_repo_id + "a"), embedder="hashing")
    b = engram.open(tenant_url(postgres_url, pg_repo_id + "b"), embedder="hashing")
    try:
        a.put(("users", "alice"), "secret", {"text": "alice's secret plan"})
        a.tag("v1")
        assert b.get(("users", "alice"), "secret") is None
        assert b.search(("users",), "secret plan") == []
        assert b.list_namespaces() == []
        assert "v1" not in b.tags()
        assert len(b.log()) == 1  # only its own init commit
        assert a.head.id not in set(b.repo.chunks.iter_ids())  # rows are per repository
        assert b.repo.chunks.has_many([a.head.id]) == {a.head.id}
    finally:
        a.close()
        b.close()


def test_memory_api_on_postgres(postgres_url: str, pg_repo_id: str) -> None:
    url = tenant_url(postgres_url, pg_repo_id)
    mem = engram.open(url, embedder="hashing")
    try:
        mem.put(("users", "alice"), "prefs", {"text": "prefers dark mode"}, author="agent:a", sources=["m1"])
        mem.tag("day1")
        mem.put(("users", "alice"), "prefs", {"text": "switched to light mode"})
        assert [i.key for i in mem.search(("users",), "light mode", mode="keyword")] == ["prefs"]
        assert mem.at("day1").get(("users", "alice"), "prefs").value == {"text": "prefers dark mode"}  # type: ignore[union-attr]
        assert [i.key for i in mem.search(("users",), "dark", mode="keyword", at="day1")] == ["prefs"]
        assert [v.item.value["text"] for v in mem.history(("users", "alice"), "prefs") if v.item] == [
            "switched to light mode",
            "prefers dark mode",
        ]
        assert mem.fsck().ok
    finally:
        mem.close()
    again = engram.open(url, embedder="hashing")  # a second process sees the same repository
    try:
        assert again.get(("users", "alice"), "prefs").value == {"text": "switched to light mode"}  # type: ignore[union-attr]
    finally:
        again.close()


def _writer(url: str, writer: int, start: Any, results: Any) -> None:
    try:
        mem = engram.open(url, author=f"proc{writer}", embedder=None)
        try:
            start.wait()
            acks = [mem.put(NS, f"w{writer}-k{i % 10}", {"writer": writer, "i": i}).id.hex() for i in range(PUTS)]
        finally:
            mem.close()
        results.put((writer, acks, None))
    except BaseException:
        results.put((writer, [], traceback.format_exc()))


def test_processes_writing_one_branch_lose_nothing(postgres_url: str, pg_repo_id: str) -> None:
    url = tenant_url(postgres_url, pg_repo_id)
    engram.open(url, embedder=None).close()
    reports = race(_writer, [(url, w) for w in range(PROCESSES)], TIMEOUT)
    errors = [error for _, _, error in reports if error]
    assert not errors, "\n".join(errors)
    mem = engram.open(url, embedder=None)
    try:
        log = mem.log()
        assert len(log) == PROCESSES * PUTS + 1  # every put is one commit on a linear chain
        assert all(len(c.parents) == 1 for c in log[:-1])
        ids = {c.id.hex() for c in log}
        assert all(ack in ids for _, acks, _ in reports for ack in acks)
        for w in range(PROCESSES):
            for k in range(10):
                last = max(i for i in range(PUTS) if i % 10 == k)
                assert mem.get(NS, f"w{w}-k{k}").value == {"writer": w, "i": last}  # type: ignore[union-attr]
        assert len(mem.repo.refs.reflog("heads/main")) == PROCESSES * PUTS + 1
        assert mem.fsck().ok
    finally:
        mem.close()


def test_bad_postgres_urls_fail_with_one_clear_error() -> None:
    from engram.errors import ConfigError, StorageError

    with pytest.raises(StorageError, match="PostgreSQL"):
        open_postgres("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1")
    with pytest.raises(ConfigError, match="invalid repository id"):
        engram.open("postgresql://postgres@127.0.0.1:5432/test?repo=bad%20id")


def test_cli_db_migrate_and_status(postgres_url: str) -> None:
    from click.testing import CliRunner

    from engram.cli import cli

    runner = CliRunner()
    done = runner.invoke(cli, ["--store", postgres_url, "db", "migrate"], obj={})
    assert done.exit_code == 0 and "up to date" in done.output
    done = runner.invoke(cli, ["--store", postgres_url, "db", "status"], obj={})
    assert done.exit_code == 0 and f"schema version {MIGRATIONS[-1].version}" in done.output
    done = runner.invoke(cli, ["--store", ":memory:", "db", "migrate"], obj={})
    assert done.exit_code == 2 and "need a PostgreSQL store" in done.output


def test_postgres_with_a_redis_cache_and_its_status(postgres_url: str, pg_repo_id: str) -> None:
    from services import require_redis

    from engram.store.connect import cache_status

    redis_url = require_redis()
    url = tenant_url(postgres_url, pg_repo_id)
    mem = engram.open(url, embedder=None, redis=redis_url)
    other = engram.open(url + f"&redis={redis_url}", embedder=None)
    try:
        mem.put(("users", "alice"), "prefs", {"theme": "dark"})
        assert other.get(("users", "alice"), "prefs").value == {"theme": "dark"}  # type: ignore[union-attr]
        status = cache_status(mem)
        assert status is not None and status["ok"] and not status["degraded"]
        assert cache_status(engram.open(":memory:", embedder=None)) is None
        scoped = tenant_url(url + f"&redis={redis_url}", "x")
        assert "redis=" in scoped and scoped.endswith("repo=x")
    finally:
        mem.close()
        other.close()


def test_the_writer_lock_reads_the_head_as_it_is_granted_and_the_swap_still_guards_it(
    postgres_url: str, pg_repo_id: str
) -> None:
    chunks, refs = open_postgres(postgres_url, pg_repo_id)
    _, other = open_postgres(postgres_url, pg_repo_id)  # a writer that does not queue (e.g. another tool)
    try:
        a, b, c = b"a" * 32, b"b" * 32, b"c" * 32
        assert refs.set("heads/main", a, None)
        with refs.lock("heads/main"):
            assert other.set("heads/main", b, a)  # moves while we hold the lock, after our read
            assert refs.get("heads/main") == a  # the value read with the lock: no statement
            assert not refs.set("heads/main", c, a)  # ... which the compare-and-swap refuses
            assert refs.get("heads/main") == b  # read again
            assert refs.set("heads/main", c, b)
        assert refs.get("heads/main") == c and other.get("heads/main") == c
    finally:
        refs.close()
        other.close()
        chunks.close()


class _FailingHook:
    """A ref-move hook whose work inside the transaction fails."""

    def __init__(self, pipelined: bool) -> None:
        self.pipelined_answer = pipelined
        self.started = 0

    def prepare(self, name: str, old: Any, new: Any) -> Any:
        return None

    def pipelined(self, prepared: Any) -> bool:
        return self.pipelined_answer

    def start(self, conn: Any, name: str) -> Any:
        self.started += 1
        return conn.execute("SELECT 1")

    def apply(self, conn: Any, name: str, old: Any, new: Any, prepared: Any, started: Any) -> None:
        assert started.fetchone() == (1,)
        conn.execute("SELECT 1 / 0")  # in pipeline mode the error surfaces with COMMIT


@pytest.mark.parametrize("pipelined", [True, False])
def test_a_ref_move_whose_hook_fails_moves_nothing(postgres_url: str, pg_repo_id: str, pipelined: bool) -> None:
    chunks, refs = open_postgres(postgres_url, pg_repo_id)
    try:
        a, b = b"a" * 32, b"b" * 32
        assert refs.set("heads/main", a, None)
        hook = _FailingHook(pipelined)
        refs.hook = hook
        with pytest.raises(engram.errors.EngramError):
            refs.set("heads/main", b, a)
        assert hook.started == 1
        refs.hook = None
        assert refs.get("heads/main") == a
        assert [e.new for e in refs.reflog("heads/main")] == [a]  # no log entry for the move that failed
        assert refs.set("heads/main", b, a)  # the pooled connection is usable again
    finally:
        refs.close()
        chunks.close()
