"""Fixtures for the HTTP API, tested in-process (ASGI): apps with and without API keys."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from engram.ops.access import KeyRing
from engram.server import ServerConfig, create_app

ERROR_KEYS = {"code", "message", "details"}


def error_of(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """Assert ``response`` is an error in the one shape, with this status (and code); return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    error: dict[str, Any] = body["error"]
    assert isinstance(error["code"], str) and isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code, error
    return error


@pytest.fixture
def client() -> Iterator[TestClient]:
    """A client of a server without keys (one local tenant, every scope) on a fresh in-memory store."""
    with TestClient(create_app(ServerConfig(store=":memory:", embedder="hashing"))) as test_client:
        yield test_client


Keyed = Callable[..., tuple[TestClient, Callable[..., dict[str, str]]]]


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[Keyed]:
    """Make a server with API keys on a SQLite base store; returns (client, make_key(tenant, *scopes, prefix=))
    where make_key gives the headers of a new key."""
    clients: list[TestClient] = []

    def make(**config: Any) -> tuple[TestClient, Callable[..., dict[str, str]]]:
        ring = KeyRing(tmp_path / "keys.json")

        def make_key(tenant: str, *scopes: str, prefix: tuple[str, ...] = ()) -> dict[str, str]:
            _, secret = ring.create(tenant, scopes or ("read", "write"), prefix)
            return {"Authorization": f"Bearer {secret}"}

        settings = {"store": str(tmp_path / "base"), "embedder": "hashing", "keys_file": ring.path,
                    "require_keys": True, **config}  # fmt: skip
        test_client = TestClient(create_app(ServerConfig(**settings)))
        test_client.__enter__()
        clients.append(test_client)
        return test_client, make_key

    yield make
    for test_client in clients:
        test_client.__exit__(None, None, None)


@pytest.fixture
def servers() -> Iterator[list[Any]]:
    """Real `engram serve` processes a test starts (``test_serve_subprocess.Server``), stopped when it ends."""
    started: list[Any] = []
    yield started
    for server in started:
        server.stop()
