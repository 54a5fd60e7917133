"""``engram shard`` and ``engram serve --shard-catalog``: thin doors over the library, against real PostgreSQL."""

from __future__ import annotations

import json

from click.testing import CliRunner
from conftest import Cluster
from fastapi.testclient import TestClient

from engram.cli import cli
from engram.ops.access import KeyRing
from engram.server.app import create_app
from engram.server.config import ServerConfig


def _run(cluster: Cluster, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["shard", "--catalog", cluster.catalog.url, *args], obj={})
    return result.exit_code, result.output


def test_shard_commands_plan_add_move_and_collect(cluster: Cluster) -> None:
    for tenant in ("acme", "globex", "initech", "umbrella", "hooli", "wonka"):
        mem = cluster.router.open(tenant, embedder="hashing")
        mem.put(("notes",), "k", {"text": tenant})
        mem.close()
    code, text = _run(cluster, "list", "--json")
    assert code == 0 and [s["name"] for s in json.loads(text)["shards"]] == ["s1", "s2"]
    code, text = _run(cluster, "add", cluster.extra["s3"], "--name", "s3", "--plan", "--json")
    planned = json.loads(text)
    assert code == 0 and planned["planned"] and all(m["to"] == "s3" for m in planned["moves"].values())
    code, text = _run(cluster, "add", cluster.extra["s3"], "--name", "s3", "--json")
    assert code == 0 and json.loads(text)["moves"] == planned["moves"]
    code, text = _run(cluster, "plan", "--json")
    assert code == 0 and json.loads(text)["moves"] == planned["moves"]
    code, text = _run(cluster, "where", "acme")
    here = text.strip()
    target = "s1" if here != "s1" else "s2"
    code, text = _run(cluster, "move", "acme", "--to", target, "--json")
    assert code == 0, text
    report = json.loads(text[text.index("{") :])
    assert report["tenant"] == "acme" and report["target"] == target
    assert _run(cluster, "where", "acme")[1].strip() == target
    code, text = _run(cluster, "gc")
    assert code == 0 and "would drop 1 old copy" in text and "acme" in text
    code, text = _run(cluster, "gc", "--yes")
    assert code == 0 and "dropped 1 old copy" in text
    code, text = _run(cluster, "rebalance")
    assert code == 0
    assert json.loads(_run(cluster, "plan", "--json")[1])["moves"] == {}
    code, text = _run(cluster, "set-status", "s3", "draining", "--plan")
    assert code == 0 and "would move" in text


def test_shard_commands_report_mistakes_in_one_line(cluster: Cluster) -> None:
    code, text = _run(cluster, "move", "acme", "--to", "nowhere")
    assert code == 1 and "no shard 'nowhere'" in text and "Traceback" not in text
    code, text = _run(cluster, "add", "mysql://x/y")
    assert code == 1 and "PostgreSQL" in text
    result = CliRunner().invoke(cli, ["shard", "list"], obj={}, env={"ENGRAM_SHARD_CATALOG": ""})
    assert result.exit_code == 1 and "name the shard catalog" in result.output


def test_server_with_a_shard_catalog_follows_moves(cluster: Cluster, tmp_path: object) -> None:
    from pathlib import Path

    keys = Path(str(tmp_path)) / "keys.json"
    _, secret = KeyRing(keys).create("acme", ["read", "write"], [])
    config = ServerConfig(store=":memory:", embedder="hashing", keys_file=keys, shard_catalog=cluster.catalog.url,
                          index_delay=None, sweep_ttl=False, writer_extractor=None)  # fmt: skip
    headers = {"Authorization": f"Bearer {secret}"}
    with TestClient(create_app(config)) as client:
        put = client.put("/store/items", json={"namespace": ["notes"], "key": "k1", "value": {"text": "one"}},
                         headers=headers)  # fmt: skip
        assert put.status_code in (200, 204), put.text
        here = cluster.router.route("acme").name
        from engram.ops.shards import move_tenant

        move_tenant(cluster.catalog, "acme", "s1" if here != "s1" else "s2")
        put = client.put("/store/items", json={"namespace": ["notes"], "key": "k2", "value": {"text": "two"}},
                         headers=headers)  # fmt: skip
        assert put.status_code in (200, 204), put.text
        got = client.post("/store/items/search", json={"namespace_prefix": ["notes"], "limit": 10}, headers=headers)
        assert got.status_code == 200 and {i["key"] for i in got.json()["items"]} == {"k1", "k2"}
    cluster.router.refresh()
    mem = cluster.router.open("acme", embedder="hashing")
    assert {i.key for i in mem.iter_items(("notes",))} == {"k1", "k2"}
    mem.close()


def test_server_refuses_a_shard_catalog_without_api_keys(cluster: Cluster) -> None:
    import pytest

    from engram.errors import ConfigError

    config = ServerConfig(store=":memory:", embedder="hashing", shard_catalog=cluster.catalog.url, require_keys=False)
    with pytest.raises(ConfigError, match="needs API keys"):
        create_app(config)
