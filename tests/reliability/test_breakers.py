"""Circuit breakers and retries (engram.breakers, issue #15): the state machine on a fake clock, thread safety,
the registry that /readyz and /metrics read, tenacity-backed retries, and how each client uses its breaker."""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from engram import breakers
from engram.backends._pgerrors import Breaker, dependency_name
from engram.breakers import CircuitBreaker, RetryPolicy, retry_call, s3_transient
from engram.embed.openai import OpenAIEmbedder
from engram.errors import CircuitOpenError, ConfigError, EmbedderError, UnavailableError, WriterError

from .harness import LocalHttp


class FakeClock:
    """Monotonic seconds that move only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make(clock: FakeClock, threshold: int = 3, reset: float = 10.0) -> CircuitBreaker:
    return CircuitBreaker("embedder:test", failure_threshold=threshold, reset_timeout=reset, clock=clock)


# ------------------------------------------------------------------------------ the state machine


def test_breaker_opens_at_the_threshold_of_consecutive_failures(clock: FakeClock) -> None:
    b = make(clock)
    b.record_failure("refused")
    b.record_failure("refused")
    assert b.state == "closed" and b.acquire() is False
    b.record_success()  # an answer resets the count: failures must be consecutive
    b.record_failure("refused")
    b.record_failure("refused")
    assert b.state == "closed"
    b.record_failure("connection refused")
    assert b.state == "open" and b.is_open
    with pytest.raises(CircuitOpenError, match=r"embedder:test is unavailable \(connection refused\)") as info:
        b.acquire()
    assert isinstance(info.value, UnavailableError) and info.value.dependency == "embedder:test"
    assert info.value.retry_after == pytest.approx(10.0)
    clock.now += 9.5
    with pytest.raises(CircuitOpenError) as info:
        b.acquire()
    assert info.value.retry_after == 1.0  # never less than a second: a client must not spin


def test_breaker_half_open_lets_one_probe_through_and_its_success_closes(clock: FakeClock) -> None:
    b = make(clock, threshold=1)
    b.record_failure("down")
    clock.now += 10.0
    assert b.state == "half_open"
    assert b.acquire() is True  # the probe
    with pytest.raises(CircuitOpenError):
        b.acquire()  # everyone else still fails fast while it runs
    b.record_success(probe=True)
    assert b.state == "closed" and b.acquire() is False
    snap = b.snapshot()
    assert snap["state"] == "closed" and snap["opened_at"] is None and snap["trips"] == 1 and snap["failures"] == 0


def test_breaker_a_failed_probe_opens_it_for_another_period(clock: FakeClock) -> None:
    b = make(clock, threshold=1)
    b.record_failure("first failure")
    opened_at = b.snapshot()["opened_at"]
    clock.now += 10.0
    assert b.acquire() is True
    b.record_failure("probe timed out", probe=True)
    snap = b.snapshot()
    assert snap["state"] == "open" and snap["retry_in"] == pytest.approx(10.0)
    assert snap["reason"] == "first failure" and snap["opened_at"] == opened_at and snap["trips"] == 1


def test_breaker_a_late_success_does_not_close_it_while_a_probe_runs(clock: FakeClock) -> None:
    b = make(clock, threshold=1)
    b.record_failure("down")
    clock.now += 10.0
    assert b.acquire() is True
    b.record_success(probe=False)  # a call that started before the outage answered late
    assert b.state == "half_open"
    b.release_probe()  # the probe ended without a verdict: the next caller probes
    assert b.acquire() is True


def test_breaker_call_counts_only_dependency_failures(clock: FakeClock) -> None:
    b = make(clock, threshold=1)

    def refuse() -> None:
        raise ConnectionResetError("reset by peer")

    def bad_request() -> None:
        raise ValueError("the dependency answered: 400")

    with pytest.raises(ValueError):
        b.call(bad_request, failure=lambda exc: isinstance(exc, OSError))
    assert b.state == "closed"
    with pytest.raises(ConnectionResetError):
        b.call(refuse, failure=lambda exc: isinstance(exc, OSError))
    assert b.state == "open" and "reset by peer" in (b.snapshot()["reason"] or "")
    with pytest.raises(CircuitOpenError):
        b.call(lambda: 1)
    clock.now += 10
    assert b.call(lambda: 42) == 42 and b.state == "closed"


def test_breaker_settings_are_checked() -> None:
    with pytest.raises(ConfigError):
        CircuitBreaker("x", failure_threshold=0)
    with pytest.raises(ConfigError):
        CircuitBreaker("x", reset_timeout=-1)
    with pytest.raises(ConfigError):
        RetryPolicy(attempts=0)
    with pytest.raises(ConfigError):
        breakers.configure("mainframe", reset_timeout=1)


def test_breaker_admits_exactly_one_probe_among_many_threads(clock: FakeClock) -> None:
    b = make(clock, threshold=1)
    b.record_failure("down")
    clock.now += 10.0
    start = threading.Barrier(16)
    probes: list[bool] = []
    rejected: list[int] = []

    def caller() -> None:
        start.wait()
        try:
            probes.append(b.acquire())
        except CircuitOpenError:
            rejected.append(1)

    threads = [threading.Thread(target=caller) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert probes == [True] and len(rejected) == 15


def test_breaker_counts_failures_from_many_threads_exactly(clock: FakeClock) -> None:
    b = make(clock, threshold=10_000)
    threads = [threading.Thread(target=lambda: [b.record_failure("x") for _ in range(500)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert b.snapshot()["failures"] == 4000 and b.state == "closed"


# ------------------------------------------------------------------------------------- the registry


def test_registry_shares_one_breaker_per_dependency_and_snapshots_it() -> None:
    name = "model:registry-test:1"
    try:
        first = breakers.breaker(name)
        assert breakers.breaker(name) is first
        assert first.settings == breakers.DEFAULTS["model"]
        first.record_failure("boom")
        assert breakers.snapshot()[name]["failures"] == 1
        breakers.configure("model", failure_threshold=1)
        assert first.settings.failure_threshold == 1
        first.record_failure("boom again")
        assert breakers.snapshot()[name]["state"] == "open"
    finally:
        breakers.configure("model", failure_threshold=5)
        breakers.forget(name)
    assert name not in breakers.snapshot()


def test_registry_forgets_a_breaker_nobody_holds() -> None:
    b = breakers.breaker("embedder:forgotten-host")
    assert "embedder:forgotten-host" in breakers.snapshot()
    del b
    gc.collect()
    assert "embedder:forgotten-host" not in breakers.snapshot()


def test_registry_names_a_second_live_breaker_of_one_dependency_apart() -> None:
    a = breakers.register(CircuitBreaker("s3:twice/bucket"))
    b = breakers.register(CircuitBreaker("s3:twice/bucket"))
    try:
        assert (a.name, b.name) == ("s3:twice/bucket", "s3:twice/bucket#2")
        assert {"s3:twice/bucket", "s3:twice/bucket#2"} <= set(breakers.snapshot())
        breakers.unregister(a)
        assert "s3:twice/bucket" not in breakers.snapshot()
    finally:
        breakers.unregister(b)


def test_listeners_see_every_transition_and_a_broken_one_is_ignored(clock: FakeClock) -> None:
    seen: list[tuple[str, str, str]] = []

    def broken(name: str, old: str, new: str) -> None:
        raise RuntimeError("listener bug")

    def listener(name: str, old: str, new: str) -> None:
        seen.append((name, old, new))

    breakers.add_listener(broken)
    breakers.add_listener(listener)
    try:
        b = make(clock, threshold=1)
        b.record_failure("down")
        clock.now += 10
        b.acquire()
        b.record_success(probe=True)
    finally:
        breakers.remove_listener(broken)
        breakers.remove_listener(listener)
    assert seen == [
        ("embedder:test", "closed", "open"),
        ("embedder:test", "open", "half_open"),
        ("embedder:test", "half_open", "closed"),
    ]


# --------------------------------------------------------------------------------------------- retries


def test_retry_call_retries_transient_failures_with_bounded_jittered_waits() -> None:
    waits: list[float] = []
    calls = iter([OSError("reset"), OSError("reset"), "ok"])

    def flaky() -> str:
        got = next(calls)
        if isinstance(got, Exception):
            raise got
        return got

    policy = RetryPolicy(attempts=3, initial=0.5, maximum=0.8)
    assert retry_call(flaky, transient=lambda e: isinstance(e, OSError), policy=policy, sleep=waits.append) == "ok"
    assert len(waits) == 2 and 0 <= waits[0] <= 0.5 and 0 <= waits[1] <= 0.8


def test_retry_call_gives_up_after_its_attempts_and_raises_the_last_failure() -> None:
    attempts: list[int] = []

    def down() -> None:
        attempts.append(1)
        raise OSError(f"refused {len(attempts)}")

    with pytest.raises(OSError, match="refused 4"):
        retry_call(down, transient=lambda e: True, policy=RetryPolicy(attempts=4, initial=0), sleep=lambda s: None)
    assert len(attempts) == 4


def test_retry_call_never_retries_a_permanent_failure_nor_an_open_breaker(clock: FakeClock) -> None:
    attempts: list[int] = []

    def refused() -> None:
        attempts.append(1)
        raise PermissionError("403")

    with pytest.raises(PermissionError):
        retry_call(refused, transient=lambda e: not isinstance(e, PermissionError), sleep=lambda s: None)
    assert len(attempts) == 1
    b = make(clock, threshold=2)

    def down() -> None:
        attempts.append(1)
        raise OSError("refused")

    with pytest.raises(CircuitOpenError):  # attempt 1 and 2 fail and open it; attempt 3 is refused at once
        retry_call(down, transient=lambda e: True, breaker=b, policy=RetryPolicy(attempts=5), sleep=lambda s: None)
    assert len(attempts) == 3 and b.state == "open"


def test_retry_call_honours_a_retry_after_hint_up_to_the_maximum() -> None:
    waits: list[float] = []
    calls = iter([UnavailableError("busy", 0.3), UnavailableError("busy", 60.0), "ok"])

    def busy() -> str:
        got = next(calls)
        if isinstance(got, Exception):
            raise got
        return got

    policy = RetryPolicy(attempts=3, initial=0.01, maximum=2.0)
    assert retry_call(busy, transient=lambda e: True, policy=policy, sleep=waits.append) == "ok"
    assert waits == [0.3, 2.0]


def test_s3_transient_classifies_botocore_errors() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

    def client_error(code: str, status: int) -> ClientError:
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")

    assert s3_transient(client_error("SlowDown", 503))
    assert s3_transient(client_error("InternalError", 500))
    assert s3_transient(client_error("ThrottlingException", 400))
    assert not s3_transient(client_error("NoSuchKey", 404))
    assert not s3_transient(client_error("AccessDenied", 403))
    assert not s3_transient(client_error("PreconditionFailed", 412))
    assert s3_transient(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    assert s3_transient(ReadTimeoutError(endpoint_url="http://127.0.0.1:1"))
    assert s3_transient(ConnectionResetError())
    assert not s3_transient(ValueError("bad"))


# ------------------------------------------------------------------------------- clients use them


def test_postgres_breaker_probes_at_once_after_a_broken_connection(clock: FakeClock) -> None:
    b = Breaker(2.0, "postgresql:unit-test:5432/x")
    try:
        b.opened("server closed the connection", suspect=True)
        assert b.open and b.admit() is True  # the next caller probes a fresh connection at once
        with pytest.raises(UnavailableError, match=r"PostgreSQL is unavailable \(server closed the connection\)"):
            b.admit()
        b.opened("connection refused")  # the probe could not connect: fail fast for the window
        assert breakers.snapshot()["postgresql:unit-test:5432/x"]["state"] == "open"
        b.opened("another stale connection", suspect=True)  # says nothing new while open
        assert breakers.snapshot()["postgresql:unit-test:5432/x"]["retry_in"] > 1.5
    finally:
        breakers.unregister(b)
    assert dependency_name("postgresql://u:secret@db.example:6543/engram") == "postgresql:db.example:6543/engram"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_redis_health_runs_through_its_breaker(clock: FakeClock) -> None:
    pytest.importorskip("redis")
    from engram.backends.redis import RedisHealth

    health = RedisHealth(f"redis://127.0.0.1:{_free_port()}/0", retry_interval=5.0, clock=clock)
    try:
        assert health.run(lambda r: r.ping()) is None  # nothing listens: down, breaker open
        name = health.breaker.name
        assert name.startswith("redis:127.0.0.1:") and breakers.snapshot()[name]["state"] == "open"
        tried: list[int] = []
        started = time.perf_counter()
        for _ in range(100):
            assert health.run(lambda r: tried.append(1)) is None
        assert tried == [] and time.perf_counter() - started < 3.0  # skipped without a connection attempt
        clock.now += 5.0
        assert health.run(lambda r: "answered") == "answered"  # the probe (no I/O here) closes it
        assert health.status()["ok"] and breakers.snapshot()[name]["state"] == "closed"
    finally:
        health.close()
    assert name not in breakers.snapshot()


class _Endpoint:
    """A local HTTP endpoint that answers 503 to every POST, counting them."""

    def __init__(self) -> None:
        hits = self.hits = [0]

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                hits[0] += 1
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(503)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = LocalHttp(Handler)
        self.url = self.server.url

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def failing_endpoint() -> Iterator[_Endpoint]:
    endpoint = _Endpoint()
    yield endpoint
    endpoint.close()


def test_openai_embedder_fails_fast_once_its_breaker_opens(failing_endpoint: _Endpoint, clock: FakeClock) -> None:
    b = CircuitBreaker("embedder:local", failure_threshold=3, reset_timeout=30.0, clock=clock)
    with OpenAIEmbedder(failing_endpoint.url, "m", dim=4, retries=2, backoff=0.0, breaker=b) as embedder:
        with pytest.raises(EmbedderError, match="503 after 3 tries"):
            embedder.embed(["x"])
        assert b.state == "open" and failing_endpoint.hits[0] == 3
        with pytest.raises(EmbedderError, match=r"is unavailable.*trying it again"):
            embedder.embed_query("y")
        assert failing_endpoint.hits[0] == 3  # not called while open
        clock.now += 30
        with pytest.raises(EmbedderError):
            embedder.embed(["z"])
        assert failing_endpoint.hits[0] == 4 and b.state == "open"  # one probe, failed: open again


def test_openai_embedder_shares_the_breaker_of_its_host() -> None:
    one = OpenAIEmbedder("http://127.0.0.1:9/v1", "a", dim=4)
    two = OpenAIEmbedder("http://127.0.0.1:9/v1", "b", dim=4)
    try:
        assert one.breaker is two.breaker and one.breaker.name == "embedder:127.0.0.1:9"
    finally:
        one.close()
        two.close()


def test_model_endpoint_breaker_fails_the_run_cleanly_then_the_writer_skips(
    failing_endpoint: _Endpoint, clock: FakeClock, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import engram
    from engram.writer import MemoryWriter, OpenAIExtractor

    b = CircuitBreaker("model:local", failure_threshold=2, reset_timeout=60.0, clock=clock)
    extractor = OpenAIExtractor(failing_endpoint.url, "m", retries=1, backoff=0.0, breaker=b)
    mem = engram.open(":memory:", embedder=None)
    writer = MemoryWriter(mem, extractor=extractor, interval=1, trace_dir=tmp_path / "traces", background=False)
    try:
        writer.start_conversation("c1", ("users", "alice"))
        writer.append("c1", "user", "I moved to Lisbon")
        first = writer.append("c1", "assistant", "Noted!").decision
        assert first is not None and first.action == "ran"
        assert first.run is not None and first.run["outcome"] == "model_error" and first.run["trace"] is not None
        assert b.state == "open" and failing_endpoint.hits[0] == 2
        writer.append("c1", "user", "and I like jazz")
        with caplog.at_level("DEBUG", logger="engram.writer"):  # skips log at DEBUG
            second = writer.append("c1", "assistant", "Great.").decision
        assert second is not None and (second.action, second.reason) == ("skipped", "model_unavailable")
        assert failing_endpoint.hits[0] == 2  # not called: the run was never started
        assert any("reason=model_unavailable" in r.getMessage() for r in caplog.records)
        with pytest.raises(WriterError, match="model endpoint is unavailable"):
            extractor._complete([], [])
    finally:
        writer.close()
        extractor.close()


def test_server_config_sets_breakers_for_the_process_and_refuses_unknown_settings() -> None:
    from engram.server import ServerConfig, create_app

    saved = breakers.DEFAULTS["model"]
    try:
        create_app(ServerConfig(store=":memory:", embedder=None, breakers={"model": {"reset_timeout": 7.5}}))
        assert breakers.DEFAULTS["model"].reset_timeout == 7.5 and breakers.DEFAULTS["model"].failure_threshold == 5
        with pytest.raises(ConfigError, match="failure_threshold and reset_timeout"):
            create_app(ServerConfig(store=":memory:", embedder=None, breakers={"model": {"timeout": 1}}))
        with pytest.raises(ConfigError, match="unknown dependency kind"):
            create_app(ServerConfig(store=":memory:", embedder=None, breakers={"mainframe": {"reset_timeout": 1}}))
        with pytest.raises(ConfigError, match="failure_threshold must be at least 1"):
            create_app(ServerConfig(store=":memory:", embedder=None, breakers={"model": {"failure_threshold": 0}}))
    finally:
        breakers.DEFAULTS["model"] = saved
