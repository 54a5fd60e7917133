"""Readiness with a shard catalog (``/readyz``, ``engram doctor --shard-catalog``), against real PostgreSQL
databases: the catalog and each shard are probed and reported by name, an unreachable active shard (a closed
port, a dropped database) or catalog makes the deployment not ready, probes are bounded and cached."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Cluster, drop_databases, make_databases
from fastapi.testclient import TestClient

from engram.cli import cli
from engram.ops.access import KeyRing
from engram.ops.health import CheckFailed
from engram.ops.shards import Shard, add_shard
from engram.ops.shards.health import ShardProbe
from engram.server.app import create_app
from engram.server.config import ServerConfig

#: A shard URL nothing listens on (port 9, "discard"), with a password that must never be shown.
CLOSED = "postgresql://postgres:sekret@127.0.0.1:9/nothing"


def _place(cluster: Cluster, name: str, url: str, status: str) -> None:
    """Put a shard in the map without connecting to it (``add_shard`` would create its schema)."""
    cluster.catalog.change_map(lambda shards: {**shards, name: Shard(name, url, 1.0, status)}, set)


def test_probe_reports_the_catalog_and_each_shard_by_name(cluster: Cluster) -> None:
    found = ShardProbe(cluster.catalog.url, ttl=0)()
    assert found["catalog"]["ok"] and found["version"] == cluster.catalog.version()
    assert set(found["shards"]) == {"s1", "s2"}
    assert all(s["ok"] and s["status"] == "active" and s["ms"] >= 0 for s in found["shards"].values())
    assert "unreachable" not in found and "degraded" not in found


def test_an_unreachable_draining_shard_degrades_and_an_active_one_is_not_ready(cluster: Cluster) -> None:
    probe = ShardProbe(cluster.catalog.url, ttl=0)
    _place(cluster, "gone", CLOSED, "draining")
    found = probe()  # a draining shard takes no new tenants: degraded, still ready
    assert found["degraded"] is True and found["down"] == ["gone"] and not found["shards"]["gone"]["ok"]
    assert found["shards"]["gone"]["url"] == "postgresql://postgres:***@127.0.0.1:9/nothing"
    assert "sekret" not in json.dumps(found)
    _place(cluster, "gone", CLOSED, "active")
    with pytest.raises(CheckFailed, match="unreachable: gone") as failed:
        probe()
    assert failed.value.details["shards"]["s1"]["ok"] and "9" in failed.value.details["shards"]["gone"]["error"]


def test_a_dropped_shard_database_is_not_ready(cluster: Cluster, postgres_url: str) -> None:
    [(name, url)] = make_databases(postgres_url, 1)
    try:
        add_shard(cluster.catalog, url, name="doomed")
        assert ShardProbe(cluster.catalog.url, ttl=0)()["shards"]["doomed"]["ok"]
    finally:
        drop_databases(postgres_url, [name])
    with pytest.raises(CheckFailed, match="unreachable: doomed") as failed:
        ShardProbe(cluster.catalog.url, ttl=0)()
    assert "does not exist" in failed.value.details["shards"]["doomed"]["error"]


def test_an_unreachable_catalog_is_not_ready_and_the_known_map_is_probed() -> None:
    with pytest.raises(CheckFailed, match="unreachable: catalog") as failed:
        ShardProbe(CLOSED, ttl=0)()
    assert failed.value.details["shards"] == {} and "sekret" not in json.dumps(failed.value.details)
    from engram.ops.shards import ShardMap

    known = ShardMap(3, {"a": Shard("a", CLOSED, 1.0, "readonly")})
    with pytest.raises(CheckFailed, match="unreachable: catalog") as failed:
        ShardProbe(CLOSED, ttl=0, known=lambda: known)()
    assert failed.value.details["shards"]["a"]["status"] == "readonly" and "down" in failed.value.details


def test_probes_are_cached_for_their_ttl(cluster: Cluster) -> None:
    cached = ShardProbe(cluster.catalog.url, ttl=60)
    first = cached()
    _place(cluster, "gone", CLOSED, "active")
    assert cached() == first  # within the TTL: the same answer, no connection made
    with pytest.raises(CheckFailed):
        ShardProbe(cluster.catalog.url, ttl=60)()


def test_a_shard_that_hangs_is_reported_within_the_timeout(cluster: Cluster) -> None:
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        _place(cluster, "stuck", f"postgresql://postgres@127.0.0.1:{port}/nothing", "active")
        started = time.monotonic()
        with pytest.raises(CheckFailed, match="unreachable: stuck") as failed:
            ShardProbe(cluster.catalog.url, ttl=0, timeout=0.4)()
        assert time.monotonic() - started < 5.0  # at its timeout: the silent shard would never answer
        assert "timed out" in failed.value.details["shards"]["stuck"]["error"]
        assert failed.value.details["shards"]["s1"]["ok"]


def test_readyz_and_doctor_probe_the_catalog_and_every_shard(cluster: Cluster, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    KeyRing(keys).create("acme", ["read", "write"], [])
    admin = {"X-API-Key": KeyRing(keys).create("ops", ["admin"], [])[1]}
    config = ServerConfig(store=":memory:", embedder="hashing", keys_file=keys, shard_catalog=cluster.catalog.url,
                          index_delay=None, sweep_ttl=False, writer_extractor=None)  # fmt: skip
    with TestClient(create_app(config)) as client:
        assert client.get("/readyz").json() == {"status": "ok", "checks": {}}  # details need an admin key
        ready = client.get("/readyz", headers=admin)
        assert ready.status_code == 200, ready.text
        shards = ready.json()["checks"]["shards"]
        assert shards["ok"] and set(shards["shards"]) == {"s1", "s2"} and shards["catalog"]["ok"]
        _place(cluster, "gone", CLOSED, "active")
        time.sleep(1.6)  # the last answer is reused for 1.5 s
        down = client.get("/readyz", headers=admin)
        assert down.status_code == 503 and down.headers["Retry-After"] == "1"
        body = down.json()["error"]
        assert body["message"].startswith("the shards are not ready: unreachable: gone")
        assert body["details"]["checks"]["shards"]["shards"]["gone"]["status"] == "active"
        assert "sekret" not in down.text

    runner = CliRunner()
    store = str(tmp_path / "store")
    assert runner.invoke(cli, ["--store", store, "--embedder", "hashing", "init"], obj={}).exit_code == 0
    args = ["--store", store, "--embedder", "hashing", "doctor", "--shard-catalog", cluster.catalog.url]
    result = runner.invoke(cli, [*args, "--json"], obj={})
    assert result.exit_code == 2, result.output
    report = json.loads(result.output)
    assert report["checks"]["store"]["ok"] and not report["checks"]["shards"]["ok"]
    assert report["checks"]["shards"]["unreachable"] == ["gone"]
    result = runner.invoke(cli, args, obj={})
    assert result.exit_code == 2 and "not ready (shards)" in result.output and "sekret" not in result.output
    assert "  gone" in result.output and "  s1" in result.output
    _place(cluster, "gone", CLOSED, "draining")
    result = runner.invoke(cli, args, obj={})
    assert result.exit_code == 0 and "degraded" in result.output, result.output
