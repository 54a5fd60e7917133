"""The HTTP doors keep one channels hub and one memory writer per tenant (issue #27, DESIGN.md §2): every request
of a tenant reuses them, other tenants get their own, closing the server closes them, and the caller still
decides every access (commit authors, read-only keys)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fastapi.testclient import TestClient

from engram.ops.access import KeyRing
from engram.server import ServerConfig, create_app
from engram.server.config import Tenants
from engram.store import Memory
from engram.writer import MemoryWriter

from .conftest import error_of


@dataclass
class CountingConfig(ServerConfig):
    """The server's configuration, counting the writers it builds (one per tenant store)."""

    built: list[Memory] = field(default_factory=list)

    def writer(self, memory: Memory, trace_dir: Path | None = None) -> MemoryWriter:
        self.built.append(memory)
        return super().writer(memory, trace_dir)


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_http_requests_of_a_tenant_share_its_services(tmp_path: Path) -> None:
    ring = KeyRing(tmp_path / "keys.json")
    keys = {}
    for tenant in ("acme", "globex"):
        _, admin = ring.create(tenant, ("admin",))
        agent_key, agent = ring.create(tenant, ("read", "write"))
        reader_key, reader = ring.create(tenant, ("read",))
        keys[tenant] = (_bearer(admin), (agent_key.id, reader_key.id), _bearer(agent), _bearer(reader))
    config = CountingConfig(store=str(tmp_path / "base"), embedder="hashing", keys_file=ring.path, require_keys=True)
    with TestClient(create_app(config)) as client:
        tenants: Tenants = client.app.state.engram.tenants  # type: ignore[attr-defined]
        seen = {}
        for tenant, (admin, key_ids, agent, reader) in keys.items():
            assert client.post("/v1/projects", json={"id": tenant}, headers=admin).status_code == 201
            assert client.post("/v1/agents", json={"id": "alice", "project": tenant}, headers=admin).status_code == 201
            services = tenants.services(tenant)
            hub = services.channels
            for key_id in key_ids:
                body = {"key_id": key_id, "agents": ["alice"]}
                assert client.post("/v1/agents/keys", json=body, headers=admin).status_code == 200
            made = client.post("/v1/channels", json={"name": "debugging"}, headers=agent)
            assert made.status_code == 201, made.text
            sent = client.post("/v1/channels/debugging/messages", json={"content": "pool restart"}, headers=agent)
            assert sent.status_code == 201 and sent.json()["sender"] == "alice"
            found = client.post("/v1/messages/search", json={"query": "pool"}, headers=reader)
            assert found.status_code == 200 and [m["id"] for m in found.json()["results"]] == [f"{tenant}:debugging#1"]
            # a read key stays read-only through the shared hub, whoever wrote through it before
            error_of(client.post("/v1/channels/debugging/messages", json={"content": "x"}, headers=reader), 403)
            with tenants.pool.lease(tenant) as memory:
                assert memory.head.author == "alice"  # channel writes commit as the agent, as before
                assert tenants.services(tenant) is services and services.channels is hub
                cached = hub._shared.directory  # filled by the requests' search, not by this test
                assert cached is not None and cached.root == memory.head.tree and hub.directory() is cached

            turn = {"conversation_id": "c1", "target": ["users", "alice"]}
            assert client.post("/v1/conversations", json=turn, headers=agent).status_code == 200
            writer = services.writer
            for role, text in (("user", "I live in Lyon."), ("assistant", "Noted."), ("user", "I am a nurse."),
                               ("assistant", "Noted too.")):  # fmt: skip
                sent = client.post("/v1/conversations/c1/turns", json={"role": role, "text": text}, headers=agent)
                assert sent.status_code == 200, sent.text
            assert sent.json()["decision"]["action"] == "queued"  # the tenant's background worker runs it
            error_of(client.post("/v1/writer/users.alice/run-now", headers=reader), 403, "missing_scope")
            status = client.get("/v1/writer/users.alice/status", params={"wait": 30}, headers=reader)
            assert status.status_code == 200 and status.json()["last_run"]["outcome"] == "merged"
            with tenants.pool.lease(tenant) as memory:
                assert memory.head.author == "writer"  # the writer's commits keep its author, as before
            assert tenants.services(tenant) is services and services.writer is writer
            seen[tenant] = services
        assert seen["acme"] is not seen["globex"]
        assert seen["acme"].channels is not seen["globex"].channels
        assert seen["acme"].writer is not seen["globex"].writer
        assert len(config.built) == 2  # one writer per tenant for every writer request
        assert not any(services.closed for services in seen.values())
    assert all(services.closed for services in seen.values())  # closed with the server's tenant stores
