"""Probes of dependency outages behind a running server: Redis killed and restarted, PostgreSQL stopped and
started, while a client streams writes and reads through the HTTP API.

The server is the real app served by uvicorn from a thread (:class:`ThreadedServer`), so every request has a
client timeout and a measured latency. Every write answered 2xx is checked at the end.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from engram.server import ServerConfig, create_app

from .harness import (
    Outcome,
    PrivatePostgres,
    PrivateRedis,
    ProbeResult,
    ThreadedServer,
    is_error_shape,
    request,
    wait_until,
)
from .probes_http import check_answer

NS = "outage"


@dataclass
class Stream:
    """A thread that alternates a PUT of a new key and a GET of it through one client, recording everything.

    Bounded: at most ``limit`` PUTs, and it gives up after ``give_up`` seconds of failed PUTs in a row (time, not
    a count: a server that fails fast answers hundreds of 503s a second, which must not end the stream before
    the outage and the recovery it is given are over)."""

    url: str
    timeout: float
    limit: int = 20000
    give_up: float = 30.0
    pause: float = 0.01
    outcomes: list[Outcome] = field(default_factory=list)
    acks: dict[str, dict[str, Any]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, name="reliability-stream", daemon=True)

    def _run(self) -> None:
        failing_since: float | None = None
        with httpx.Client(base_url=self.url, timeout=self.timeout) as client:
            for i in range(self.limit):
                gave_up = failing_since is not None and time.monotonic() - failing_since > self.give_up
                if self.stop.is_set() or gave_up:
                    return
                key, value = f"s{i}", {"text": f"stream write {i}", "i": i}
                put = request(client, "PUT", "/v1/items", json={"namespace": [NS], "key": key, "value": value})
                self.outcomes.append(put)
                failing_since = None if put.ok else (failing_since or time.monotonic())
                if put.ok:
                    self.acks[key] = value
                    self.outcomes.append(request(client, "GET", "/v1/items", params={"namespace": NS, "key": key}))
                time.sleep(self.pause)

    def oks(self, after: float = 0.0) -> int:
        """How many requests that started at or after ``after`` (monotonic) succeeded."""
        return sum(1 for o in list(self.outcomes) if o.ok and o.started >= after)

    def wait_oks(self, count: int, timeout: float, after: float = 0.0) -> bool:
        """Wait until ``count`` requests started after ``after`` succeeded (False at the timeout, or at once
        when the stream has stopped)."""
        wait_until(lambda: self.oks(after) >= count or not self.thread.is_alive(), timeout)
        return self.oks(after) >= count

    def __enter__(self) -> Stream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(self.timeout * 3)


def _check_acks(client: httpx.Client, acks: dict[str, dict[str, Any]], result: ProbeResult) -> None:
    result.acknowledged = len(acks)
    for key, value in acks.items():
        got = request(client, "GET", "/v1/items", params={"namespace": NS, "key": key})
        if not got.ok or got.body.get("value") != value:
            result.lose(key, f"acknowledged write {key} is not readable: {got.describe()}")


def _readyz(client: httpx.Client, timeout: float) -> Outcome:
    return request(client, "GET", "/readyz", timeout=timeout)


# ------------------------------------------------------------------------------------ Redis restart


def run_redis_restart(
    store: str, redis: PrivateRedis, *, outage_ops: int = 40, bound: float = 2.0, recovery: float = 20.0
) -> ProbeResult:
    """Kill the Redis cache of a PostgreSQL store (``store`` carries ``?redis=``) during a stream of writes and
    reads, then restart it: every request succeeds within ``bound`` s, ``/readyz`` says degraded meanwhile, and
    after the restart ``/readyz`` is ok again and the cache fills again."""
    result = ProbeResult("Redis killed and restarted", runs=1)
    config = ServerConfig(store=store, embedder=None, require_keys=False, sweep_ttl=False)
    with ThreadedServer(create_app(config)) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        with Stream(server.url, timeout=10) as stream:
            if not stream.wait_oks(20, 30):
                result.problem("the stream did not get going with Redis up")
                return _finish_redis(result, stream, client, bound)
            ready = _readyz(client, bound)
            if not (ready.ok and ready.body.get("status") == "ok"):
                result.problem(f"/readyz with Redis up: {ready.describe()}")
            redis.kill()
            killed = time.monotonic()
            if not stream.wait_oks(outage_ops, 60, after=killed):
                result.problem(f"fewer than {outage_ops} requests succeeded within 60 s with Redis down")
            ready = _readyz(client, bound)
            check_answer(result, ready, bound=bound, label="/readyz with Redis down")
            if not (ready.status == 200 and ready.body.get("status") == "degraded"):
                result.problem(f"/readyz with Redis down does not say degraded: {ready.describe()}")
            redis.start()
            restarted = time.monotonic()
            if not wait_until(lambda: (_readyz(client, bound).body or {}).get("status") == "ok", recovery, 0.25):
                result.problem(f"/readyz not ok within {recovery} s of the Redis restart")
            cache = redis.client()
            try:
                if not wait_until(lambda: cache.dbsize() > 0, recovery, 0.25):
                    result.problem(f"the cache stayed empty for {recovery} s after the restart: not used again")
                result.notes["redis_keys_after_restart"] = cache.dbsize()
            finally:
                cache.close()
            stream.wait_oks(20, 30, after=restarted)
        return _finish_redis(result, stream, client, bound)


def _finish_redis(result: ProbeResult, stream: Stream, client: httpx.Client, bound: float) -> ProbeResult:
    """Every request of the stream succeeded within ``bound``; every acknowledged write is readable."""
    stream.stop.set()
    stream.thread.join(stream.timeout * 3)
    for outcome in stream.outcomes:
        check_answer(result, outcome, bound=bound, label="stream")
        if outcome.status is not None and 400 <= outcome.status < 500:
            result.problem(f"stream: refused with Redis down or back: {outcome.describe()}")
    _check_acks(client, stream.acks, result)
    return result


# ------------------------------------------------------------------------------- PostgreSQL restart


def run_postgres_restart(
    pg: PrivatePostgres,
    store: str,
    *,
    outage: float = 3.0,
    bound: float = 2.0,
    ready_bound: float = 1.0,
    recovery: float = 15.0,
) -> ProbeResult:
    """Stop the PostgreSQL behind a server during a stream of requests and start it again.

    While it is down every request answers within ``bound`` s, either 2xx or 503 with ``Retry-After`` in the
    error shape, and ``/readyz`` is a 503 within ``ready_bound`` s. After the start, requests succeed again
    within ``recovery`` s without restarting the app, none fails after the first success, and no write
    answered 2xx is lost.
    """
    result = ProbeResult("PostgreSQL stopped and started", runs=1)
    config = ServerConfig(store=store, embedder=None, require_keys=False, sweep_ttl=False)
    with ThreadedServer(create_app(config)) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        with Stream(server.url, timeout=bound + 3) as stream:
            if not stream.wait_oks(20, 30):
                result.problem("the stream did not get going with PostgreSQL up")
                _classify(stream.outcomes, time.monotonic(), time.monotonic(), bound, result)
                return result
            stopping = time.monotonic()
            pg.stop("immediate")
            down_until = time.monotonic() + outage
            while time.monotonic() < down_until:
                ready = _readyz(client, ready_bound + 3)
                result.requests += 1
                result.latency(ready.seconds)
                result.notes["readyz_down_max_s"] = max(result.notes.get("readyz_down_max_s", 0.0), ready.seconds)
                if ready.status != 503 or not is_error_shape(ready.body) or ready.seconds > ready_bound:
                    result.problem(
                        f"/readyz with PostgreSQL down must be a 503 in the error shape within "
                        f"{ready_bound} s: {ready.describe()}"
                    )
                time.sleep(0.5)
            pg.start()
            started = time.monotonic()
            if not stream.wait_oks(1, recovery, after=started):
                result.problem(f"no request succeeded within {recovery} s of the PostgreSQL start")
            recovered = min((o.started for o in stream.outcomes if o.ok and o.started >= started), default=started)
            stream.wait_oks(20, 30, after=recovered)
            ready = _readyz(client, ready_bound + 3)
            if ready.status != 200:
                result.problem(f"/readyz after the restart: {ready.describe()}")
        _classify(stream.outcomes, stopping, recovered, bound, result)
        during = [o for o in stream.outcomes if stopping <= o.started < started]
        if len(during) < 3:
            result.problem(f"only {len(during)} stream requests were sent while PostgreSQL was down: checks nothing")
        result.notes["requests_during_outage"] = len(during)
        result.notes["outage_answers"] = sorted(
            {o.status for o in stream.outcomes if o.started >= stopping and o.started < recovered}, key=str
        )
        _check_acks(client, stream.acks, result)
    return result


def _classify(outcomes: list[Outcome], stopping: float, recovered: float, bound: float, result: ProbeResult) -> None:
    """Before the stop and after the recovery every request succeeds; in between each is a 2xx, or a quick 503
    with ``Retry-After`` in the error shape."""
    for outcome in outcomes:
        result.requests += 1
        result.latency(outcome.seconds)
        ended = outcome.started + outcome.seconds
        if ended < stopping or outcome.started > recovered:
            if not outcome.ok:
                result.server_errors += 1
                when = "before the stop" if ended < stopping else "after requests succeeded again"
                result.problem(f"failed {when}: {outcome.describe()}")
            continue
        if outcome.ok:
            pass
        elif outcome.status == 503:
            if "retry-after" not in outcome.headers:
                result.problem(f"503 without Retry-After during the outage: {outcome.describe()}")
        else:
            result.server_errors += 1
            result.problem(f"during the outage, neither 2xx nor 503: {outcome.describe()}")
        if outcome.seconds > bound:
            result.problem(f"slower than {bound} s during the outage: {outcome.describe()}")
