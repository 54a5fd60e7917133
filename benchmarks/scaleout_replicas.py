"""Reads served by the replica under load, with read-your-writes (issue #17).

A private PostgreSQL 15 primary with a real streaming standby (``tests/scaleout/replica_cluster.py``), once with
plain streaming and once with the standby replaying late on purpose (``--delays``). ``--clients`` threads each
loop: one write in N operations (``--mixes``), keeping the token it returns, otherwise a point read carrying the
client's newest token; one more thread reads without a token. Reported: the share of reads the replica served
(with and without a token), reads and writes per second, and the median read latency by who served it.

Runs standalone: ``.venv/bin/python benchmarks/scaleout_replicas.py [--seconds 20] [--clients 6] [--mixes 10,50]
[--delays 0,2]``; prints a JSON summary and writes it to ``benchmarks/out/scaleout_replicas.json``. ``run(...)``
is the hook a combined scale-out benchmark calls.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "scaleout")]

from replica_cluster import Cluster, start_cluster  # noqa: E402

from engram.embed import HashingEmbedder  # noqa: E402
from engram.store.connect import migrate  # noqa: E402
from engram.store.replicas import ReplicatedStore, Token, open_replicated  # noqa: E402


def _load(cluster: Cluster, seconds: float, clients: int, write_every: int) -> dict[str, Any]:
    url = f"{cluster.primary_url}?repo=b{uuid.uuid4().hex[:12]}&replica={cluster.replica_url}"
    store: ReplicatedStore = open_replicated(url, embedder=HashingEmbedder(), author="bench")
    keys = [f"k{i}" for i in range(200)]
    with store.primary.transaction(message="seed") as tx:
        for key in keys:
            tx.put(("bench",), key, {"text": f"item {key}"})
    cluster.wait_replayed()
    store.probe()
    lock = threading.Lock()
    latency: dict[str, list[float]] = {"primary": [], "replica": []}
    served = {"token": {"primary": 0, "replica": 0}, "none": {"primary": 0, "replica": 0}}
    writes = [0]
    stop = time.monotonic() + seconds

    def client(n: int) -> None:
        rng = random.Random(n)
        token: Token | None = None
        ops = 0
        while time.monotonic() < stop:
            ops += 1
            if write_every and ops % write_every == 0:
                key = rng.choice(keys)
                made = store.primary.put(("bench",), key, {"text": f"item {key} by {n} at {ops}"})
                token = Token(store.primary.branch, made.id)
                with lock:
                    writes[0] += 1
                continue
            began = time.perf_counter()
            routed = store.route([token] if token else [])
            routed.memory.get(("bench",), rng.choice(keys))
            took = time.perf_counter() - began
            with lock:
                latency[routed.served_by].append(took)
                served["token" if token else "none"][routed.served_by] += 1

    def tokenless() -> None:
        rng = random.Random(-1)
        while time.monotonic() < stop:
            began = time.perf_counter()
            routed = store.route()
            routed.memory.get(("bench",), rng.choice(keys))
            took = time.perf_counter() - began
            with lock:
                latency[routed.served_by].append(took)
                served["none"][routed.served_by] += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    threads.append(threading.Thread(target=tokenless))
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    store.close()

    def share(counts: dict[str, int]) -> float | None:
        total = counts["primary"] + counts["replica"]
        return round(counts["replica"] / total, 3) if total else None

    reads = sum(len(v) for v in latency.values())
    return {
        "replica_share_all_reads": share({k: served["token"][k] + served["none"][k] for k in ("primary", "replica")}),
        "replica_share_token_reads": share(served["token"]),
        "replica_share_tokenless_reads": share(served["none"]),
        "reads_per_s": round(reads / elapsed),
        "writes_per_s": round(writes[0] / elapsed, 1),
        "read_p50_ms": {k: round(statistics.median(v) * 1000, 3) if v else None for k, v in latency.items()},
        "reads": {"token": served["token"], "none": served["none"]},
    }


def run(
    seconds: float = 20.0,
    clients: int = 6,
    mixes: tuple[int, ...] = (10, 50),
    delays: tuple[float, ...] = (0.0, 2.0),
) -> dict[str, Any]:
    """Measure each standby delay (one cluster each) with each mix (one write in N operations per client),
    side by side in one run; the hook for a combined scale-out benchmark."""
    results: dict[str, Any] = {"load_before": os.getloadavg(), "seconds": seconds, "clients": clients, "runs": {}}
    for delay in delays:
        cluster = start_cluster(delay)
        try:
            migrate(cluster.primary_url)
            cluster.wait_replayed(60)
            for write_every in mixes:
                name = f"delay {delay:g} s, 1 write in {write_every} ops"
                results["runs"][name] = _load(cluster, seconds, clients, write_every)
        finally:
            cluster.stop()
    results["load_after"] = os.getloadavg()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--mixes", default="10,50", help="one write in N operations per client, per run")
    parser.add_argument("--delays", default="0,2", help="standby replay delays to measure, seconds")
    args = parser.parse_args()
    delays = tuple(float(d) for d in args.delays.split(","))
    results = run(args.seconds, args.clients, tuple(int(m) for m in args.mixes.split(",")), delays)
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "scaleout_replicas.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
