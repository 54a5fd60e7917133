"""Concurrent PUT throughput over HTTP: N clients writing to one `engram serve` (SQLite store, hashing embedder).

    python benchmarks/bench_http_puts.py [--clients 16] [--seconds 10] [--engram PATH] [--same-key]

Each client is a thread with its own HTTP connection sending ``PUT /store/items`` (a distinct key each
time, or with ``--same-key`` all clients the same key) as fast as the server answers. Reports puts/s,
latency p50/p99 and how many commits the puts made (fewer commits than puts means concurrent writes were
coalesced into one commit per event-loop tick); with ``--same-key`` also ``lost``, the acknowledged values
that are no version in the key's history (each must be one).
``--engram`` runs another build's ``engram`` executable (e.g. a checkout of an older commit) for a
before/after comparison on the same machine in the same session.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"engram serve exited with {proc.returncode}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("engram serve did not become healthy")


def run(engram: str, store: Path, clients: int, seconds: float, extra: list[str], same_key: bool) -> dict[str, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [engram, "--store", str(store), "--embedder", "hashing", "serve", "--port", str(port), "--log-level",
           "warning", *extra]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(url, proc)
        with httpx.Client(base_url=url, timeout=30) as http:
            before = len(http.get("/v1/log", params={"limit": 10000}).json()["commits"])
        latencies: list[float] = []
        acknowledged: set[str] = set()
        errors = 0
        lock = threading.Lock()
        stop_at = time.monotonic() + seconds

        def client(n: int) -> None:
            nonlocal errors
            mine: list[float] = []
            landed: set[str] = set()
            bad = 0
            with httpx.Client(base_url=url, timeout=30) as http:
                i = 0
                while time.monotonic() < stop_at:
                    text = f"note {n} {i}"
                    where = ["bench", "shared"] if same_key else ["bench", f"c{n}"]
                    body = {"namespace": where, "key": "k" if same_key else f"k{i}", "value": {"text": text}}
                    started = time.perf_counter()
                    status = http.put("/store/items", json=body).status_code
                    mine.append(time.perf_counter() - started)
                    bad += status != 204
                    if status == 204:
                        landed.add(text)
                    i += 1
            with lock:
                latencies.extend(mine)
                acknowledged.update(landed)
                errors += bad

        threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        with httpx.Client(base_url=url, timeout=30) as http:
            after = len(http.get("/v1/log", params={"limit": 10000}).json()["commits"])
            lost = 0
            if same_key:
                found = http.get("/v1/history", params={"namespace": "bench.shared", "key": "k"}).json()["versions"]
                lost = len(acknowledged - {v["item"]["value"]["text"] for v in found if v["item"] is not None})
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    latencies.sort()
    return {
        "clients": clients,
        "puts": len(latencies),
        "errors": errors,
        "puts_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 1),
        "commits": after - before,
        **({"lost": lost} if same_key else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--engram", default=shutil.which("engram") or str(Path(sys.executable).with_name("engram")))
    parser.add_argument("--label", default="this build")
    parser.add_argument("--same-key", action="store_true", help="every client writes the same key")
    parser.add_argument("--serve-arg", action="append", default=[], help="extra argument for engram serve")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args.engram, Path(tmp) / "store", args.clients, args.seconds, args.serve_arg, args.same_key)
    result["label"] = args.label
    print(json.dumps(result))


if __name__ == "__main__":
    main()
