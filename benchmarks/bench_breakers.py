"""What a circuit breaker saves while a dependency is down (issue #15): search latency with a hanging embeddings
endpoint, and cache calls with a dead Redis, each with its breaker and with a breaker that never opens, side by side.

    .venv/bin/python benchmarks/bench_breakers.py [--searches 20]

The embeddings endpoint is a local HTTP server that answers after 1 s; the client times out after 0.25 s with no
retry, so without a breaker every search pays the timeout before it degrades to keyword search. The dead Redis is
a closed port on 127.0.0.1 (connection refused: the cheapest possible failure).
"""

from __future__ import annotations

import argparse
import logging
import socket
import statistics
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import engram
from engram.backends.redis import RedisHealth
from engram.breakers import CircuitBreaker
from engram.embed.openai import OpenAIEmbedder

NEVER = 10**9  # a failure threshold no outage reaches: a breaker that never opens


class Hanging(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        time.sleep(1.0)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def median_ms(run: Callable[[], object], times: int) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        run()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def search_ms(url: str, threshold: int, searches: int) -> tuple[float, str | None]:
    breaker = CircuitBreaker("embedder:bench", failure_threshold=threshold, reset_timeout=60)
    embedder = OpenAIEmbedder(url, "m", dim=384, timeout=0.25, retries=0, breaker=breaker)
    mem = engram.open(":memory:", embedder=embedder)
    for i in range(200):
        mem.put(("notes",), f"n{i}", {"text": f"note number {i} about the harbour of Lisbon"})
    degraded = mem.search(("notes",), query="Lisbon harbour").degraded
    result = median_ms(lambda: mem.search(("notes",), query="Lisbon harbour"), searches)
    embedder.close()
    return result, degraded


def redis_us(port: int, threshold: int, calls: int) -> float:
    health = RedisHealth(f"redis://127.0.0.1:{port}/0", retry_interval=60)
    health.breaker.settings = type(health.breaker.settings)(threshold, 60)
    result = median_ms(lambda: health.run(lambda r: r.get("k")), calls) * 1000
    health.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--searches", type=int, default=20)
    args = parser.parse_args()
    logging.getLogger("engram.redis").setLevel(logging.ERROR)  # a breaker that never opens warns on every call
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hanging)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    rows = []
    for label, threshold in (("breaker (default 5)", 5), ("no breaker", NEVER)):
        ms, degraded = search_ms(url, threshold, args.searches)
        rows.append((label, ms, redis_us(dead, 1 if threshold == 5 else NEVER, 200)))
        assert degraded, "the search did not degrade"
    print(f"{'':22} {'search p50 (embedder hangs)':>28} {'Redis call p50 (refused)':>26}")
    for label, ms, us in rows:
        print(f"{label:22} {ms:>25.1f} ms {us:>23.1f} us")
    print(f"ratio (no breaker / breaker): search {rows[1][1] / rows[0][1]:.0f}x, Redis {rows[1][2] / rows[0][2]:.0f}x")
    server.shutdown()


if __name__ == "__main__":
    main()
