"""Read replicas per shard: the catalog records each shard's streaming standbys (``engram shard add/set-replicas
--replica``) and a server with the catalog routes each tenant's reads to its shard's replicas under the
read-your-writes rule, against a real PostgreSQL streaming standby replaying 2 s late."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Cluster, drop_databases, make_databases
from fastapi.testclient import TestClient
from replica_cluster import Cluster as ReplicaCluster
from replica_cluster import replica_cluster

from engram.cli import cli
from engram.errors import ConfigError, InvalidInputError, NotFoundError
from engram.ops.access import KeyRing
from engram.ops.shards import ShardCatalog, add_shard, move_tenant, set_replicas
from engram.server.app import create_app
from engram.server.config import ServerConfig

__all__ = ["replica_cluster"]


@pytest.fixture
def catalog(postgres_url: str, replica_cluster: ReplicaCluster) -> Iterator[ShardCatalog]:
    """A catalog with two shards: ``primary`` (the streaming cluster's primary, its standby as replica) and
    ``plain`` (a database of the machine's PostgreSQL, no replica)."""
    made = make_databases(postgres_url, 2)
    found = ShardCatalog(made[0][1])
    try:
        add_shard(found, replica_cluster.primary_url, name="primary", replicas=[replica_cluster.replica_url])
        add_shard(found, made[1][1], name="plain")
        yield found
    finally:
        found.close()
        drop_databases(postgres_url, [name for name, _ in made])


def _tenant_on(catalog: ShardCatalog, shard: str) -> str:
    while True:
        tenant = "t" + uuid.uuid4().hex[:12]
        if catalog.load().route(tenant).name == shard:
            return tenant


def test_a_server_reads_each_tenant_from_its_shards_replicas(
    catalog: ShardCatalog, replica_cluster: ReplicaCluster, tmp_path: Path
) -> None:
    assert catalog.load().replicas == {"primary": (replica_cluster.replica_url,)}
    near, far = _tenant_on(catalog, "primary"), _tenant_on(catalog, "plain")
    keys = tmp_path / "keys.json"
    ring = KeyRing(keys)
    auth = {t: {"Authorization": f"Bearer {ring.create(t, ['read', 'write'], [])[1]}"} for t in (near, far)}
    config = ServerConfig(store=":memory:", embedder="hashing", keys_file=keys, shard_catalog=catalog.url,
                          index_delay=None, sweep_ttl=False, writer_extractor=None)  # fmt: skip
    params = {"namespace": "notes", "key": "a"}

    def read(tenant: str, token: str) -> tuple[str | None, object]:
        got = client.get("/v1/items", params=params, headers={**auth[tenant], "Engram-Commit": token})
        assert got.status_code == 200, got.text
        return got.headers.get("Engram-Served-By"), got.json()["value"]

    with TestClient(create_app(config)) as client:
        tokens = {}
        for tenant in (near, far):
            wrote = client.put("/v1/items", json={"namespace": ["notes"], "key": "a", "value": {"text": tenant}},
                               headers=auth[tenant])  # fmt: skip
            assert wrote.status_code == 200, wrote.text
            tokens[tenant] = wrote.headers["Engram-Commit"]
        assert read(near, tokens[near]) == ("primary", {"text": near})  # the standby lacks the commit yet
        replica_cluster.wait_replayed()
        assert read(near, tokens[near]) == ("replica", {"text": near})
        assert read(far, tokens[far]) == (None, {"text": far})  # its shard has no replica

        set_replicas(catalog, "primary", [])  # servers see it at their next map check (1 s)
        time.sleep(1.1)
        assert read(near, tokens[near]) == (None, {"text": near})
        set_replicas(catalog, "primary", [replica_cluster.replica_url])
        time.sleep(1.1)
        assert read(near, tokens[near]) == ("replica", {"text": near})

        # A tenant moved onto the replicated shard: its old token is honoured by the new shard's standby.
        move_tenant(catalog, far, "primary")
        time.sleep(1.1)
        read(far, tokens[far])  # this request finds the map changed: the next ones open the tenant on its new shard
        served, value = read(far, tokens[far])
        assert value == {"text": far} and served in ("primary", "replica")
        replica_cluster.wait_replayed()
        assert read(far, tokens[far]) == ("replica", {"text": far})
        newer = client.put("/v1/items", json={"namespace": ["notes"], "key": "a", "value": {"text": "newer"}},
                           headers=auth[far])  # fmt: skip
        assert read(far, newer.headers["Engram-Commit"]) == ("primary", {"text": "newer"})  # read-your-writes


def test_server_replicas_and_a_shard_catalog_are_not_combined(catalog: ShardCatalog, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    KeyRing(keys).create("acme", ["read"], [])
    config = ServerConfig(store="postgresql://postgres@127.0.0.1/test", embedder="hashing", keys_file=keys,
                          shard_catalog=catalog.url, replicas=("postgresql://postgres@127.0.0.1/test",))  # fmt: skip
    with pytest.raises(ConfigError, match="engram shard set-replicas"):
        create_app(config)


def test_shard_replicas_from_the_command_line(cluster: Cluster) -> None:
    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, ["shard", "--catalog", cluster.catalog.url, *args], obj={})
        return result.exit_code, result.output

    standby = "postgresql://app:sekret@standby.internal/db"
    code, text = run("set-replicas", "s1", "--replica", standby, "--replica", standby + "2")
    assert code == 0 and "2 read replicas" in text
    code, text = run("add", cluster.extra["s3"], "--name", "s3", "--replica", "postgresql://app@other/db")
    assert code == 0, text
    listed = {s["name"]: s["replicas"] for s in json.loads(run("list", "--json")[1])["shards"]}
    assert listed == {"s1": ["postgresql://app:***@standby.internal/db", "postgresql://app:***@standby.internal/db2"],
                      "s2": [], "s3": ["postgresql://app@other/db"]}  # fmt: skip
    code, text = run("list")
    assert code == 0 and "replica postgresql://app:***@standby.internal/db2" in text and "sekret" not in text
    assert run("set-replicas", "s1")[0] == 0
    assert cluster.catalog.load().replicas == {"s3": ("postgresql://app@other/db",)}
    code, text = run("set-replicas", "nope", "--replica", standby)
    assert code == 1 and "no shard 'nope'" in text
    code, text = run("set-replicas", "s2", "--replica", "mysql://x/y")
    assert code == 1 and "PostgreSQL" in text and "Traceback" not in text
    with pytest.raises(InvalidInputError, match="named twice"):
        set_replicas(cluster.catalog, "s2", [standby, standby])
    with pytest.raises(NotFoundError):
        cluster.catalog.set_replicas("nope", [])
