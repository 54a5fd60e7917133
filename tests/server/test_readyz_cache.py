"""/readyz reports a PostgreSQL store's Redis cache: ok when up, degraded (still 200) when down."""

from __future__ import annotations

from fastapi.testclient import TestClient
from services import require_redis

from engram.server import ServerConfig, create_app
from engram.store import tenant_url


def test_readyz_reports_the_cache(postgres_url: str, pg_repo_id: str) -> None:
    store = tenant_url(postgres_url, pg_repo_id)
    config = ServerConfig(store=store, embedder=None, redis=require_redis(), require_keys=False)
    with TestClient(create_app(config)) as client:
        body = client.get("/readyz").json()
        assert body["status"] == "ok" and body["checks"]["cache"]["ok"] is True


def test_readyz_says_degraded_when_redis_is_down(postgres_url: str, pg_repo_id: str) -> None:
    store = tenant_url(postgres_url, pg_repo_id)
    config = ServerConfig(store=store, embedder=None, redis="redis://127.0.0.1:1/0", require_keys=False)
    with TestClient(create_app(config)) as client:
        client.put("/store/items", json={"namespace": ["a"], "key": "k", "value": {"v": 1}})
        assert client.get("/store/items", params={"namespace": "a", "key": "k"}).json()["value"] == {"v": 1}
        response = client.get("/readyz")
        assert response.status_code == 200
        body = response.json()
        assert body["status"] == "degraded" and body["checks"]["cache"]["degraded"] is True
        assert body["checks"]["store"]["ok"] is True
