"""Read replicas with read-your-writes, against a real PostgreSQL streaming standby replaying 2 s late.

A write returns a token; a read carrying it is served by the primary while the standby lacks the commit and by
the standby once it has replayed it; reads without a token go to the standby (library and HTTP).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from replica_cluster import Cluster, replica_cluster

from engram.embed import HashingEmbedder
from engram.errors import ConfigError, InvalidRefError
from engram.ops.access import KeyRing
from engram.server import ServerConfig, create_app
from engram.store import tenant_url
from engram.store.replicas import ReplicatedStore, Token, open_replicated, parse_tokens, replica_urls

__all__ = ["replica_cluster"]


def _repo() -> str:
    return "t" + uuid.uuid4().hex[:16]


@pytest.fixture
def replicated(replica_cluster: Cluster) -> Iterator[ReplicatedStore]:
    url = f"{replica_cluster.primary_url}?repo={_repo()}&replica={replica_cluster.replica_url}"
    store = open_replicated(url, embedder=HashingEmbedder(), author="tester", probe_interval=0.2)
    replica_cluster.wait_replayed()  # the repository's first commit is on the standby
    yield store
    store.close()


def test_replica_token_parses_and_rejects_garbage() -> None:
    token = Token("main", bytes(range(20)))
    assert Token.parse(str(token)) == token
    assert parse_tokens(f" {token} , dev@{'ab' * 20}") == [token, Token("dev", bytes.fromhex("ab" * 20))]
    assert parse_tokens(None) == [] and parse_tokens("  ") == []
    for bad in ("main", "@" + "ab" * 20, "main@xyz", "main@abcd"):
        with pytest.raises(InvalidRefError, match="consistency token"):
            Token.parse(bad)


def test_replica_read_your_writes_in_the_library(replicated: ReplicatedStore, replica_cluster: Cluster) -> None:
    replicated.primary.put(("notes",), "a", {"text": "first"})
    token = replicated.token()
    routed = replicated.route([token])
    assert routed.served_by == "primary"  # the standby replays 2 s late: it lacks the commit
    assert routed.memory.get(("notes",), "a") is not None
    replica_cluster.wait_replayed()
    routed = replicated.route([token])
    assert routed.served_by == "replica" and routed.memory.read_only, replicated.status()
    assert routed.memory.get(("notes",), "a").value == {"text": "first"}  # type: ignore[union-attr]
    value, served_by = replicated.read(lambda mem: mem.get(("notes",), "a"), [token])
    assert served_by == "replica" and value is not None
    # A newer write on the primary: the standby is behind the new token, not the old one.
    replicated.primary.put(("notes",), "b", {"text": "second"})
    newer = replicated.token()
    assert replicated.route([newer]).served_by == "primary"
    assert replicated.route([token]).served_by == "replica"  # the older token is still satisfied there
    replica_cluster.wait_replayed()
    time.sleep(replicated.probe_interval)
    assert replicated.route().served_by == "replica"  # no token: a replica that keeps up
    assert replicated.served["replica"] >= 3 and replicated.served["primary"] >= 2


def test_replica_descendant_head_satisfies_an_older_token(
    replicated: ReplicatedStore, replica_cluster: Cluster
) -> None:
    replicated.primary.put(("notes",), "a", {"text": "one"})
    old = replicated.token()
    replicated.primary.put(("notes",), "a", {"text": "two"})
    replica_cluster.wait_replayed()
    replica = replicated.replicas[0]
    head = replica.handle().repo.head("main")
    assert head != old.commit and replica.has(old)  # the standby's head descends from the token's commit
    assert not replica.has(Token("main", bytes(20)))  # a commit it never saw
    assert not replica.has(Token("no-such-branch", old.commit))


def test_replica_reads_refresh_ttls_on_the_primary(replicated: ReplicatedStore, replica_cluster: Cluster) -> None:
    made = replicated.primary.put(("notes",), "t", {"text": "short-lived"}, ttl=0.1)  # 6 s
    token = Token("main", made.id)
    replica_cluster.wait_replayed()  # 2 s: more than the 10 % of the TTL after which a read refreshes it

    def expiry() -> object:
        return replicated.primary.get(("notes",), "t", refresh_ttl=False).expires_at  # type: ignore[union-attr]

    before = expiry()
    routed = replicated.route([token])
    assert routed.served_by == "replica"
    assert routed.memory.handle(read_only=True).get(("notes",), "t") is not None  # a reader who may not write
    assert expiry() == before
    assert routed.memory.get(("notes",), "t") is not None
    assert expiry() > before  # type: ignore[operator]  # the replica's read refreshed the TTL on the primary
    assert routed.memory.repo.head("main") == made.id  # and the replica itself was not written


def test_replica_that_is_down_is_skipped(replica_cluster: Cluster) -> None:
    dead = "postgresql://postgres@127.0.0.1:9/postgres?connect_timeout=1"
    url = f"{replica_cluster.primary_url}?repo={_repo()}&replica={dead}"
    store = open_replicated(url, embedder=HashingEmbedder(), retry_interval=30)
    try:
        token = store.token()
        assert store.route([token]).served_by == "primary"
        assert store.replicas[0].status()["up"] is False and "9" in (store.replicas[0].error or "")
        assert store.route().served_by == "primary"
    finally:
        store.close()


def test_replica_over_http(replica_cluster: Cluster) -> None:
    """Writes return the token (header and body); reads with it move from the primary to the standby."""
    store = f"{replica_cluster.primary_url}?repo={_repo()}"
    config = ServerConfig(store=store, embedder=HashingEmbedder(), replicas=(replica_cluster.replica_url,),
                          index_delay=None, writer_extractor=None)  # fmt: skip
    with TestClient(create_app(config)) as client:
        wrote = client.put("/v1/items", json={"namespace": ["notes"], "key": "a", "value": {"text": "hello"}})
        assert wrote.status_code == 200, wrote.text
        token = wrote.headers["Engram-Commit"]
        assert token == wrote.json()["token"] == f"main@{wrote.json()['commit']['id']}"
        params = {"namespace": "notes", "key": "a"}
        read = client.get("/v1/items", params=params, headers={"Engram-Commit": token})
        assert read.status_code == 200 and read.headers["Engram-Served-By"] == "primary"
        assert read.json()["value"] == {"text": "hello"}
        replica_cluster.wait_replayed()
        read = client.get("/v1/items", params=params, headers={"Engram-Commit": token})
        assert read.status_code == 200 and read.headers["Engram-Served-By"] == "replica"
        assert read.json()["value"] == {"text": "hello"}
        time.sleep(1.0)  # one lag probe later the standby has reached a snapshot of the primary
        search = client.post("/store/items/search", json={"namespace_prefix": ["notes"], "query": "hello"})
        assert search.headers["Engram-Served-By"] == "replica" and search.json()["items"][0]["key"] == "a"
        # LangGraph's PUT (204) carries the token too; a malformed token is a 422 in the error shape.
        put = client.put("/store/items", json={"namespace": ["notes"], "key": "b", "value": {"text": "x"}})
        assert put.status_code == 204 and put.headers["Engram-Commit"].startswith("main@")
        bad = client.get("/v1/items", params=params, headers={"Engram-Commit": "main@nothex"})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_ref"
        assert "Engram-Commit" not in read.headers  # reads answer who served them, not a token


def test_replica_token_less_clients_read_their_own_writes(replica_cluster: Cluster, tmp_path: Path) -> None:
    """LangGraph's SDK never sends the token back: the server remembers each caller's last write for a few
    seconds, so its reads go where that write is (the primary while the standby replays 2 s late); another
    caller's token-less read still goes to the standby. /readyz shows each replica's state and lag."""
    keys = tmp_path / "keys.json"
    tenant = _repo()
    _, writer = KeyRing(keys).create(tenant, ["read", "write", "admin"])
    _, other = KeyRing(keys).create(tenant, ["read"])
    config = ServerConfig(store=replica_cluster.primary_url, embedder=HashingEmbedder(), keys_file=keys,
                          replicas=(replica_cluster.replica_url,), index_delay=None, writer_extractor=None)  # fmt: skip
    as_writer, as_other = {"Authorization": f"Bearer {writer}"}, {"Authorization": f"Bearer {other}"}
    item = {"namespace": "notes", "key": "a"}
    with TestClient(create_app(config)) as client:
        assert client.get("/v1/log", headers=as_writer).status_code == 200  # the tenant's store exists
        replica_cluster.wait_replayed()
        put = client.put("/store/items", json={"namespace": ["notes"], "key": "a", "value": {"text": "hi"}},
                         headers=as_writer)  # fmt: skip
        assert put.status_code == 204, put.text
        mine = client.get("/store/items", params=item, headers=as_writer)  # no token, as LangGraph's SDK
        assert mine.status_code == 200 and mine.headers["Engram-Served-By"] == "primary", mine.text
        theirs = client.get("/store/items", params=item, headers=as_other)
        assert theirs.headers["Engram-Served-By"] == "replica"  # not this caller's write: no reason to wait
        ready = client.get("/readyz", headers=as_writer)
        assert ready.status_code == 200, ready.text
        replicas = ready.json()["checks"]["replicas"]
        assert replicas["ok"] and replicas["down"] == [], replicas
        [status] = replicas["tenants"][tenant]
        assert status["name"] == "replica-1" and status["up"] and "lag" in status


def test_replica_tokens_without_replicas() -> None:
    """A server without replicas still returns tokens on writes and checks the ones reads send."""
    config = ServerConfig(store=":memory:", embedder=HashingEmbedder(), index_delay=None, writer_extractor=None)
    with TestClient(create_app(config)) as client:
        wrote = client.post("/v1/branches", json={"name": "dev"})
        assert wrote.status_code == 201 and wrote.headers["Engram-Commit"] == f"dev@{wrote.json()['commit']}"
        deleted = client.delete("/v1/items", params={"namespace": "a", "key": "k", "branch": "dev"})
        assert deleted.json()["token"] == f"dev@{deleted.json()['commit']['id']}"
        read = client.get("/v1/log", headers={"Engram-Commit": deleted.json()["token"]})
        assert read.status_code == 200 and "Engram-Served-By" not in read.headers
        bad = client.get("/v1/log", headers={"Engram-Commit": "dev@123"})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_ref"


def test_replica_urls_follow_each_tenant() -> None:
    url = "postgresql://app@primary/db?replica=postgresql://app@standby/db&replica=postgresql://app@other/db"
    derived = tenant_url(url, "acme")
    assert "repo=acme" in derived
    assert replica_urls(derived) == ["postgresql://app@standby/db?repo=acme", "postgresql://app@other/db?repo=acme"]
    assert replica_urls("/srv/engram") == []


def test_replicas_need_a_postgres_store() -> None:
    with pytest.raises(ConfigError, match="PostgreSQL standbys"):
        create_app(ServerConfig(store=":memory:", replicas=("postgresql://app@standby/db",)))
