"""Prometheus metrics (issue #15): recorded at the storage seam, by commits, caches, search, tenants and backups,
computed at scrape time (index lag, breakers, disk, readiness), served at /metrics and to library users."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from services import require_redis

import engram
from engram import breakers
from engram.backends import LruChunkStore, MemoryChunkStore, open_sqlite
from engram.backends.wrappers import MeteredChunkStore
from engram.cli import cli
from engram.errors import EngramError
from engram.ops import metrics
from engram.ops.access import KeyRing
from engram.ops.backup import create_backup
from engram.ops.remotes.stores import open_remote
from engram.ops.tenants import TenantPool
from engram.server import ServerConfig, create_app
from engram.store import tenant_url
from engram.writer.metrics import default_metrics


def value(name: str, **labels: str) -> float:
    """The current value of one sample on engram's registry (0 when absent)."""
    return metrics.registry().get_sample_value(name, labels) or 0.0


def parsed(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Sample name -> (sorted labels) -> value, from the text exposition format."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


@pytest.fixture
def store(tmp_path: Path) -> Iterator[engram.Memory]:
    # indexed on search (no background indexer): these tests read the index lag that writes leave
    mem = engram.open(str(tmp_path / "store"), embedder="hashing", background_index=False)
    yield mem
    mem.close()


def test_metrics_storage_operations_commits_and_bytes_are_counted_per_backend(store: engram.Memory) -> None:
    puts, ref_sets = (
        value("engram_storage_operation_duration_seconds_count", operation="put_many", backend="sqlite"),
        value("engram_storage_operation_duration_seconds_count", operation="ref_set", backend="sqlite"),
    )
    written, commits = value("engram_chunk_bytes_written_total", backend="sqlite"), value("engram_commits_total")
    seconds = value("engram_storage_operation_duration_seconds_count", operation="put_many", backend="sqlite")
    store.put(("docs",), "a", {"text": "x" * 5000})
    assert value("engram_storage_operation_duration_seconds_count", operation="put_many", backend="sqlite") > puts
    assert (
        value("engram_storage_operation_duration_seconds_count", operation="ref_set", backend="sqlite") == ref_sets + 1
    )
    assert value("engram_chunk_bytes_written_total", backend="sqlite") >= written + 5000
    assert value("engram_commits_total") == commits + 1
    assert value("engram_storage_operation_duration_seconds_count", operation="put_many", backend="sqlite") > seconds


def test_metrics_storage_errors_are_counted_and_still_raised(tmp_path: Path) -> None:
    chunks, refs = open_sqlite(tmp_path / "broken.db")
    metered = MeteredChunkStore(chunks, "sqlite-test")
    metered.put(b"a chunk")
    chunks.close()
    with pytest.raises(EngramError):
        metered.put(b"another chunk")
    assert value("engram_storage_errors_total", operation="put_many", backend="sqlite-test") == 1
    assert value("engram_storage_operation_duration_seconds_count", operation="put_many", backend="sqlite-test") == 2
    refs.close()


def test_metrics_the_lru_cache_reports_lookups_and_misses() -> None:
    inner = MemoryChunkStore()
    cached = LruChunkStore(inner)
    written = cached.put(b"written through: cached")
    stored = inner.put(b"only in the store")
    lookups, misses = value("engram_cache_lookups_total", cache="lru"), value("engram_cache_misses_total", cache="lru")
    assert cached.get_many([written, stored, b"\0" * 32]).keys() == {written, stored}
    assert cached.get_many([stored]).keys() == {stored}  # cached by the first read
    assert value("engram_cache_lookups_total", cache="lru") == lookups + 4
    assert value("engram_cache_misses_total", cache="lru") == misses + 2  # stored (first read) and the unknown id


def test_metrics_a_store_reopened_reads_through_its_lru(tmp_path: Path) -> None:
    with engram.open(str(tmp_path / "store"), embedder=None) as mem:
        mem.put(("docs",), "a", {"text": "hello"})
    lookups = value("engram_cache_lookups_total", cache="lru")
    reads = value("engram_storage_operation_duration_seconds_count", operation="get_many", backend="sqlite")
    with engram.open(str(tmp_path / "store"), embedder=None) as mem:
        assert mem.get(("docs",), "a") is not None
    assert value("engram_cache_lookups_total", cache="lru") > lookups
    assert value("engram_storage_operation_duration_seconds_count", operation="get_many", backend="sqlite") > reads


def test_metrics_the_redis_cache_hit_ratio_is_measured_at_the_seam(postgres_url: str, pg_repo_id: str) -> None:
    redis_url = require_redis()
    url = tenant_url(postgres_url, pg_repo_id)
    writer = engram.open(url, embedder=None, redis=redis_url)
    writer.put(("docs",), "a", {"text": "cached in redis"})
    reader = engram.open(url, embedder=None, redis=redis_url)  # its own, empty LRU: reads go to Redis
    try:
        lookups, misses = (value("engram_cache_lookups_total", cache="redis"),
                           value("engram_cache_misses_total", cache="redis"))  # fmt: skip
        assert reader.get(("docs",), "a") is not None
        asked = value("engram_cache_lookups_total", cache="redis") - lookups
        missed = value("engram_cache_misses_total", cache="redis") - misses
        assert asked >= 2 and missed == 0  # the commit and the tree node came from Redis, none from PostgreSQL
        assert value("engram_storage_operation_duration_seconds_count", operation="put_many", backend="postgres") > 0
    finally:
        reader.close()
        writer.close()


def test_metrics_search_latency_by_the_mode_that_ran(store: engram.Memory) -> None:
    store.put(("docs",), "a", {"text": "metrics for search"})
    before = {mode: value("engram_search_duration_seconds_count", mode=mode) for mode in ("keyword", "hybrid", "list")}
    store.search(("docs",), "search", mode="keyword")
    store.search(("docs",), "search")
    store.search(("docs",), "search", at="HEAD")
    store.search(("docs",))
    assert value("engram_search_duration_seconds_count", mode="keyword") == before["keyword"] + 1
    assert value("engram_search_duration_seconds_count", mode="hybrid") == before["hybrid"] + 2
    assert value("engram_search_duration_seconds_count", mode="list") == before["list"] + 1
    assert value("engram_search_duration_seconds_sum", mode="hybrid") > 0


def test_metrics_index_lag_counts_the_commits_the_index_is_behind(store: engram.Memory) -> None:
    metrics.track_memory(store, tenant="lagging")
    store.put(("docs",), "a", {"text": "one"})
    assert metrics.index_lag(store) == {}  # no index loaded yet: nothing lags (it is built at the next search)
    store.search(("docs",), "one")  # the index catches up with the head
    assert metrics.index_lag(store)["main"].commits == 0
    for i in range(3):
        store.put(("docs",), f"k{i}", {"text": "more"})
    assert metrics.index_lag(store)["main"].commits == 3
    found = parsed(metrics.exposition().decode())
    assert found["engram_index_lag_commits"][(("branch", "main"), ("tenant", "lagging"))] == 3
    assert found["engram_index_pending_vectors"][(("branch", "main"), ("tenant", "lagging"))] == 0
    assert (("branch", "main"), ("tenant", "lagging")) in found["engram_index_graph_backlog"]
    store.search(("docs",), "more")
    assert value("engram_index_lag_commits", tenant="lagging", branch="main") == 0


def test_metrics_tenants_open_follows_the_pool() -> None:
    pool = TenantPool(lambda tenant: engram.open(":memory:", embedder=None), max_open=1, sweep_minutes=None,
                      index_delay=None)  # fmt: skip
    start = value("engram_tenants_open")
    with pool.lease("a"):
        assert value("engram_tenants_open") == start + 1
        with pool.lease("b"):
            assert value("engram_tenants_open") == start + 2  # both in use: neither can be closed
    assert value("engram_tenants_open") == start + 1  # idle beyond max_open: one closed
    pool.close()
    assert value("engram_tenants_open") == start


def test_metrics_a_successful_backup_sets_its_timestamp(store: engram.Memory, tmp_path: Path) -> None:
    store.put(("docs",), "a", {"text": "backed up"})
    url = f"dir://{tmp_path / 'backups'}"
    remote = open_remote(url)
    before = time.time()
    create_backup(store.repo, remote)
    stamp = value("engram_last_backup_success_timestamp_seconds", remote="dir://.../backups")  # no server path
    assert before - 1 <= stamp <= time.time() + 1


def test_metrics_breaker_states_tracked_and_from_the_breaker_registry() -> None:
    state = ["closed"]
    metrics.track_breaker("test:tracked", lambda: state[0])
    real = breakers.register(breakers.CircuitBreaker("test:metrics", failure_threshold=1, reset_timeout=60))
    try:
        assert metrics.breaker_states()["test:tracked"] == "closed"
        assert metrics.breaker_states()["test:metrics"] == "closed"
        real.record_failure("connection refused")
        state[0] = "half-open"
        assert value("engram_breaker_state", breaker="test:metrics", state="open") == 1
        assert value("engram_breaker_state", breaker="test:metrics", state="closed") == 0
        assert value("engram_breaker_state", breaker="test:tracked", state="half_open") == 1
        with pytest.raises(EngramError):
            metrics.track_breaker("", lambda: "open")
    finally:
        metrics.untrack_breaker("test:tracked")
        breakers.unregister(real)
    assert "test:tracked" not in metrics.breaker_states() and "test:metrics" not in metrics.breaker_states()


def test_metrics_route_serves_every_metric_on_one_registry() -> None:
    default_metrics()  # the writer's metrics: on the same registry, so on the same page
    with TestClient(create_app(ServerConfig(store=":memory:", embedder="hashing"))) as client:
        commits, searches = value("engram_commits_total"), value("engram_search_duration_seconds_count", mode="hybrid")
        put = client.put("/store/items", json={"namespace": ["n"], "key": "k", "value": {"text": "hi"}})
        assert put.status_code == 204
        hits = client.post("/store/items/search", json={"query": "hi"}).json()["items"]
        assert [item["key"] for item in hits] == ["k"]
        response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == metrics.CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    found = parsed(response.text)
    assert found["engram_ready"][()] == 1
    assert found["engram_component_up"][(("component", "store"),)] == 1
    assert (
        found["engram_storage_operation_duration_seconds_count"][(("backend", "memory"), ("operation", "put_many"))] > 0
    )
    assert found["engram_commits_total"][()] == commits + 1  # the one PUT, one commit
    assert found["engram_search_duration_seconds_count"][(("mode", "hybrid"),)] == searches + 1
    assert found["engram_tenants_open"][()] >= 1
    assert () in found["engram_writer_run_duration_seconds_count"]  # the writer's own metrics, same page


def test_metrics_http_requests_by_route_template_and_status() -> None:
    with TestClient(create_app(ServerConfig(store=":memory:", embedder="hashing"))) as client:
        route = "/v1/commits/{ref:path}"
        before = {status: value("engram_http_requests_total", method="GET", route=route, status=status)
                  for status in ("200", "404")}  # fmt: skip
        unmatched = value("engram_http_requests_total", method="GET", route="unmatched", status="404")
        timed = value("engram_http_request_duration_seconds_count", method="GET", route=route)
        put = client.put("/v1/items", json={"namespace": ["users", "alice"], "key": "prefs", "value": {"t": 1}})
        assert put.status_code == 200, put.text
        assert client.get("/v1/commits/main").status_code == 200
        assert client.get("/v1/commits/no-such-branch-a1b2").status_code == 404
        assert client.get("/no/such/route/c3d4").status_code == 404
        client.request("BREW", "/v1/commits/main")
        text = client.get("/metrics").text
    assert value("engram_http_requests_total", method="GET", route=route, status="200") == before["200"] + 1
    assert value("engram_http_requests_total", method="GET", route=route, status="404") == before["404"] + 1
    assert value("engram_http_requests_total", method="GET", route="unmatched", status="404") == unmatched + 1
    assert value("engram_http_request_duration_seconds_count", method="GET", route=route) == timed + 2
    assert "a1b2" not in text and "c3d4" not in text  # paths never become label values
    assert 'method="other"' in text and "BREW" not in text


def test_metrics_postgres_connection_pools_per_database(postgres_url: str, pg_repo_id: str) -> None:
    mem = engram.open(tenant_url(postgres_url, pg_repo_id), embedder=None)
    try:
        mem.put(("a",), "k", {"text": "pooled"})
        found = parsed(metrics.exposition().decode())
        databases = {labels[0][1] for labels in found["engram_db_pool_max_connections"]}
        assert databases and all(name.startswith("postgresql:") and "@" not in name for name in databases)
        name = next(iter(databases))
        connections = found["engram_db_pool_connections"]
        assert connections[(("database", name), ("state", "idle"))] >= 1  # min_size kept open
        assert (("database", name), ("state", "in_use")) in connections
        assert found["engram_db_pool_requests_waiting"][(("database", name),)] == 0
        assert found["engram_db_pool_max_connections"][(("database", name),)] >= 1
    finally:
        mem.close()


def test_metrics_route_needs_an_unrestricted_admin_key_on_a_server_with_keys(tmp_path: Path) -> None:
    ring = KeyRing(tmp_path / "keys.json")
    headers = {}
    for name, scopes, prefix in (("admin", ("admin",), ()), ("reader", ("read",), ()), ("narrow", ("admin",), ("a",))):
        headers[name] = {"Authorization": f"Bearer {ring.create('acme', scopes, prefix)[1]}"}
    config = ServerConfig(store=str(tmp_path / "base"), embedder="hashing", keys_file=ring.path, require_keys=True)
    with TestClient(create_app(config)) as client:
        assert client.get("/metrics").json()["error"]["code"] == "unauthorized"
        assert client.get("/metrics", headers=headers["reader"]).status_code == 403
        assert client.get("/metrics", headers=headers["narrow"]).status_code == 403
        assert client.get("/readyz").status_code == 200  # probes stay open
        response = client.get("/metrics", headers=headers["admin"])
        assert response.status_code == 200
        assert "engram_disk_free_bytes" in response.text  # the SQLite store's disk is tracked


def test_metrics_library_users_serve_the_registry_themselves(store: engram.Memory) -> None:
    server, thread = metrics.start_http_server(0)
    try:
        port = server.server_address[1]
        store.put(("docs",), "a", {"text": "served"})
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert parsed(text)["engram_commits_total"][()] >= 1
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_metrics_a_cli_backup_writes_its_timestamp_for_the_textfile_collector(tmp_path: Path) -> None:
    store, textfile = str(tmp_path / "store"), tmp_path / "textfile" / "engram_backup.prom"
    textfile.parent.mkdir()
    runner = CliRunner()
    assert runner.invoke(cli, ["--store", store, "--embedder", "hashing", "put", "a", "k", '{"v": 1}']).exit_code == 0
    remote = f"dir://{tmp_path / 'backups'}"
    before = time.time()
    args = ["--store", store, "backup", "create", "--remote", remote, "--metrics-file", str(textfile)]
    done = runner.invoke(cli, args)
    assert done.exit_code == 0, done.output
    found = parsed(textfile.read_text())
    assert set(found) == {"engram_last_backup_success_timestamp_seconds"}
    stamp = found["engram_last_backup_success_timestamp_seconds"][(("remote", "dir://.../backups"),)]
    assert before - 1 <= stamp <= time.time()
    with pytest.raises(EngramError):
        metrics.write_textfile(textfile, names=())
