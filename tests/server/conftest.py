"""Fixtures for the HTTP API, tested in-process (ASGI): apps with and without API keys."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from engram.ops.access import KeyRing
from engram.server import ServerConfig, create_app
from engram.server.framing import uvicorn_options

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


class ThreadServer:
    """``create_app`` served by uvicorn as ``engram serve`` serves it (``uvicorn_options``), on a free loopback port,
    from a thread of this process; for tests that speak raw HTTP/1.1 over a socket."""

    def __init__(self, app: Any, header_timeout: float) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port: int = sock.getsockname()[1]
        options = uvicorn_options(header_timeout)
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", **options)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="engram-framing-server", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the test server did not start"
            time.sleep(0.02)

    def connect(self) -> socket.socket:
        """A new client connection (reads time out after 30 s)."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        return sock

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@pytest.fixture
def served() -> Iterator[Callable[..., ThreadServer]]:
    """Start real servers of a keyless in-memory app: ``served(header_timeout=...)``; stopped when the test ends."""
    started: list[ThreadServer] = []

    def start(header_timeout: float = 10.0) -> ThreadServer:
        server = ThreadServer(create_app(ServerConfig(store=":memory:", embedder="hashing")), header_timeout)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
