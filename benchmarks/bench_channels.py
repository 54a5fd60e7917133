"""Channels benchmark (issue #13): send latency, filtered + profiled search latency, cross-process event latency.

On SQLite: N messages (default 100k) across 50 channels, seeded through ``Actor.send_many`` (one commit per
batch), then measured through the public API:

- send: ``Actor.send`` (one commit; the search index is brought up to date lazily, so also timed: send followed by
  ``Memory.update_index``, which indexes and embeds the one new message with the hashing embedder);
- search: ``search_messages(query, filter=<nested metadata>, profile="quality")`` over every channel;
- events: a subscriber in another process (``Channels.subscribe``, polling by cursor every 20 ms) sees each message
  event; latency = the time it prints the event minus the time ``send`` returned.

Usage: ``python benchmarks/bench_channels.py [--messages 100000] [--out results.json]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import engram
from engram.channels import Channels
from engram.embed import HashingEmbedder

CHANNELS = 50
ERRORS = [
    "ConnectionRefusedError connecting to {svc} on port {port}",
    "TimeoutError reading from {svc} after {n}s",
    "KeyError {key} in the {svc} handler",
    "PermissionError writing {path}",
    "ValueError parsing {key} in {svc}",
]
SERVICES = ["postgres", "redis", "payments-api", "auth", "search", "queue", "cache", "billing"]


def _text(rng: random.Random) -> str:
    key, path = f"field_{rng.randint(1, 500)}", f"/var/data/{rng.randint(1, 99)}"
    return rng.choice(ERRORS).format(
        svc=rng.choice(SERVICES), port=rng.randint(1000, 9999), n=rng.randint(1, 60), key=key, path=path
    )


def _meta(rng: random.Random) -> dict[str, Any]:
    return {"type": rng.choice(["debug_start", "error_pattern", "fix", "chat"]),
            "resolution": {"status": rng.choice(["solved", "open", "wontfix"]), "attempts": rng.randint(0, 5)},
            "env": {"region": rng.choice(["eu", "us", "ap"])}}  # fmt: skip


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rng = random.Random(13)
    folder = Path(tempfile.mkdtemp(prefix="bench-channels-"))
    url = f"sqlite:///{folder / 'channels.db'}"
    memory = engram.open(url, embedder=HashingEmbedder(), vector_cache=folder / "vectors.db")
    hub = Channels(memory)
    hub.create_project("bench")
    hub.register_agent("agent", project="bench")
    actor = hub.as_agent("agent")
    names = [f"channel-{i:02d}" for i in range(CHANNELS)]
    started = time.perf_counter()
    for name in names:
        actor.create_channel(name)
    per_channel, batch = args.messages // CHANNELS, 500
    for name in names:
        for start in range(0, per_channel, batch):
            actor.send_many(name, [{"content": _text(rng), "metadata": _meta(rng), "confidence": rng.random()}
                                   for _ in range(min(batch, per_channel - start))])  # fmt: skip
    seeded = time.perf_counter() - started
    started = time.perf_counter()
    memory.update_index()
    indexed = time.perf_counter() - started
    print(f"seeded {per_channel * CHANNELS:,} messages in {seeded:.1f} s, indexed in {indexed:.1f} s", flush=True)

    sends, sends_indexed = [], []
    for i in range(args.samples):
        name = names[i % CHANNELS]
        t0 = time.perf_counter()
        actor.send(name, _text(rng), metadata=_meta(rng), confidence=0.5)
        t1 = time.perf_counter()
        memory.update_index()
        sends.append(t1 - t0)
        sends_indexed.append(time.perf_counter() - t0)

    searches = []
    spec = {"type": {"$in": ["debug_start", "error_pattern"]}, "resolution.status": "solved"}
    for _ in range(args.samples):
        query = f"{rng.choice(['connection refused', 'timeout reading', 'permission writing'])} {rng.choice(SERVICES)}"
        t0 = time.perf_counter()
        found = actor.search_messages(query, filter=spec, profile="quality", limit=10)
        searches.append(time.perf_counter() - t0)
        assert found.degraded is None and all(m.metadata["resolution"]["status"] == "solved" for m in found)

    cursor = hub.last_event()
    script = textwrap.dedent(f"""
        import sys, time, engram
        from engram.channels import Channels
        from engram.embed import HashingEmbedder
        hub = Channels(engram.open({url!r}, embedder=HashingEmbedder(), vector_cache={str(folder / "vectors.db")!r}))
        print("ready", flush=True)
        for event in hub.subscribe(["message.created"], after={cursor}, timeout=600):
            print(event.seq, time.time(), flush=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    latencies = []
    for i in range(min(args.samples, 100)):
        actor.send(names[i % CHANNELS], _text(rng))
        sent_at = time.time()
        _, seen_at = child.stdout.readline().split()
        latencies.append(max(0.0, float(seen_at) - sent_at))
        time.sleep(rng.uniform(0.005, 0.03))
    child.terminate()
    child.wait()
    child.stdout.close()
    memory.close()

    result = {
        "messages": per_channel * CHANNELS, "channels": CHANNELS, "seed_s": round(seeded, 1),
        "index_s": round(indexed, 1),
        "send_ms": {"p50": pct(sends, 0.5), "p99": pct(sends, 0.99)},
        "send_and_index_ms": {"p50": pct(sends_indexed, 0.5), "p99": pct(sends_indexed, 0.99)},
        "search_ms": {"p50": pct(searches, 0.5), "p99": pct(searches, 0.99)},
        "event_latency_ms": {"p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99)},
    }  # fmt: skip
    print("| measure | p50 | p99 |\n|---|---|---|")
    for key in ("send_ms", "send_and_index_ms", "search_ms", "event_latency_ms"):
        print(f"| {key} | {result[key]['p50']:.1f} | {result[key]['p99']:.1f} |")  # type: ignore[index]
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, dict)}))
    print(f"median send {statistics.median(sends) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
