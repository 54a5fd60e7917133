"""Channels benchmark (issues #13, #29): send latency, filtered + profiled search latency, cross-process event latency,
the first search after many sends, pattern detection.

On SQLite: N messages (default 100k) across 50 channels, seeded through ``Actor.send_many`` (one commit per
batch), then measured through the public API, with the embedder ``--embedder`` names (``hashing``, the default, or
``minilm``, the offline model, which takes minutes to seed 100k messages on a small machine: ``--messages 10000``):

- send: ``Actor.send`` (one commit; the search index is brought up to date lazily, so also timed: send followed by
  ``Memory.update_index``, which indexes and embeds the one new message);
- search: ``search_messages(query, filter=<nested metadata>, profile="quality")`` over every channel;
- send with ``synchronous=normal`` (see ``docs/storage.md``): the same sends after the store is switched to the
  durability mode that survives a process crash but not a power loss (skipped on an engram without the option);
- events: a subscriber in another process (``Channels.subscribe``, polling by cursor every 20 ms) sees each message
  event; latency = the time it prints the event minus the time ``send`` returned.

``--first-search N`` measures instead the first search after N sends (default 2,000): a fresh SQLite store opened as
the library opens it by default (``engram.open`` with its background indexer), a hub, an agent, N ``send`` over 5
channels, then the time of the first ``search_messages(query)``, whose query is words of the last message sent
(the run fails unless the search finds it); ``--runs`` repeats it on fresh stores.

``--patterns N`` measures pattern detection instead: N error reports with stack traces (default 1,000) across 5
channels of a fresh SQLite store, indexed (so the store keeps their vectors), then ``detect_patterns`` three times
with the default arguments and twice with ``on="first_line"``, for MiniLM and the hashing embedder.

Sends and searches are measured once the opened store's vectors are in its graph (a store opened with vectors not
in its saved graph builds it in a background thread, which slows what runs beside it: ``--no-settle`` measures at
once, as before). Searches run with the query cache off (when the engram has one), so they measure the search,
not a cache hit.
``--keep DIR`` saves the seeded, indexed store in DIR; ``--seeded DIR`` starts from a copy of such a store instead
of seeding (so several engram versions can be measured on the same data: run with ``PYTHONPATH=<checkout>/src``).

Usage: ``python benchmarks/bench_channels.py [--embedder hashing|minilm] [--messages 100000] [--keep DIR | --seeded
DIR] [--out results.json]``, ``python benchmarks/bench_channels.py --first-search 2000 [--embedder minilm] [--runs 3]``
or ``python benchmarks/bench_channels.py --patterns 1000 [--out results.json]``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
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


def seed(
    url: str, folder: Path, names: list[str], per_channel: int, rng: random.Random, embedder: str
) -> tuple[float, float]:
    """Create the project, the agent, the channels and their messages; index them. Returns (seed s, index s)."""
    memory = engram.open(url, embedder=embedder, vector_cache=folder / "vectors.db")
    hub = Channels(memory)
    hub.create_project("bench")
    hub.register_agent("agent", project="bench")
    actor = hub.as_agent("agent")
    started = time.perf_counter()
    for name in names:
        actor.create_channel(name)
    for name in names:
        for start in range(0, per_channel, 500):
            actor.send_many(name, [{"content": _text(rng), "metadata": _meta(rng), "confidence": rng.random()}
                                   for _ in range(min(500, per_channel - start))])  # fmt: skip
    seeded = time.perf_counter() - started
    started = time.perf_counter()
    memory.update_index()
    indexed = time.perf_counter() - started
    memory.close()
    return seeded, indexed


def _report(rng: random.Random) -> str:
    """An error report as a debugging session posts it: the error line, then a stack trace of 2-4 frames."""
    frames = "\n".join(
        f'  File "/srv/{rng.choice(SERVICES)}/{rng.choice(["app", "db", "client", "handlers"])}.py", '
        f"line {rng.randint(10, 900)}, in {rng.choice(['connect', 'handle', 'run', 'fetch', 'save'])}\n"
        f"    {rng.choice(['conn.open()', 'return self._send(req)', 'rows = cur.fetchall()', 'yield item'])}"
        for _ in range(rng.randint(2, 4))
    )
    return f"{_text(rng)}\n\nTraceback (most recent call last):\n{frames}"


def patterns(count: int, embedder: str) -> dict[str, Any]:
    """Seconds ``detect_patterns`` takes over ``count`` indexed error reports (three default runs, two on the first
    line), and the clusters it found."""
    rng = random.Random(29)
    folder = Path(tempfile.mkdtemp(prefix="bench-patterns-"))
    memory = engram.open(f"sqlite:///{folder / 'p.db'}", embedder=embedder)
    hub = Channels(memory)
    hub.create_project("bench")
    hub.register_agent("agent", project="bench")
    actor = hub.as_agent("agent")
    names = [f"channel-{i}" for i in range(5)]
    for name in names:
        actor.create_channel(name)
    for start in range(0, count, 200):
        actor.send_many(names[start // 200 % 5], [{"content": _report(rng)} for _ in range(min(200, count - start))])
    started = time.perf_counter()
    memory.update_index()
    indexed = time.perf_counter() - started
    runs, found = [], 0
    for _ in range(3):
        t0 = time.perf_counter()
        found = len(actor.detect_patterns(limit=count))
        runs.append(time.perf_counter() - t0)
    lines, first_line = 0, []
    for _ in range(2):  # the first run embeds the first lines, the second finds them in the vector cache
        t0 = time.perf_counter()
        try:
            lines = len(actor.detect_patterns(limit=count, on="first_line"))
        except TypeError:  # an engram without ``on``
            break
        first_line.append(time.perf_counter() - t0)
    memory.close()
    shutil.rmtree(folder)
    return {"embedder": embedder, "messages": count, "index_s": round(indexed, 2),
            "detect_s": [round(r, 3) for r in runs], "clusters": found,
            "first_line_s": [round(r, 3) for r in first_line],
            "first_line_clusters": lines}  # fmt: skip


def first_search(count: int, embedder: str) -> dict[str, Any]:
    """``count`` sends to a fresh store opened with the library's defaults (background indexing), then the time of the
    first search, whose query is words of the last message sent; fails unless it finds that message."""
    rng = random.Random(2000)
    folder = Path(tempfile.mkdtemp(prefix="bench-first-search-"))
    memory = engram.open(f"sqlite:///{folder / 'first.db'}", embedder=embedder)
    if getattr(memory.pool, "query_cache", None) is not None:
        memory.pool.query_cache = None
    hub = Channels(memory)
    hub.create_project("bench")
    hub.register_agent("agent", project="bench")
    actor = hub.as_agent("agent")
    names = [f"channel-{i}" for i in range(5)]
    for name in names:
        actor.create_channel(name)
    started = time.perf_counter()
    for i in range(count - 1):
        actor.send(names[i % 5], _text(rng), metadata=_meta(rng))
    last = actor.send(names[0], "the nightly deploy of build 7f3a9 stalled on a missing schema migration")
    sent = time.perf_counter() - started
    started = time.perf_counter()
    found = actor.search_messages("deploy stalled missing schema migration")
    first = time.perf_counter() - started
    assert last.id in [m.id for m in found], "the first search did not find the message sent last"
    started = time.perf_counter()
    memory.flush_index()
    flushed = time.perf_counter() - started
    memory.close()
    shutil.rmtree(folder)
    return {"embedder": embedder, "sends": count, "sends_per_s": round(count / sent), "first_search_s": round(first, 3),
            "rank_of_last": [m.id for m in found].index(last.id) + 1, "mode": found.mode,
            "flush_after_s": round(flushed, 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--keep", type=Path, help="save the seeded, indexed store in this directory")
    parser.add_argument("--seeded", type=Path, help="start from a copy of a store saved with --keep")
    parser.add_argument("--ab", action="store_true",
                        help="also time each search beside its twin scoped by an exact list of channels")  # fmt: skip
    parser.add_argument("--patterns", type=int, help="measure detect_patterns over this many error reports instead")
    parser.add_argument("--embedder", choices=["hashing", "minilm"], default="hashing")
    parser.add_argument("--first-search", type=int, metavar="N",
                        help="measure the first search after N sends to a fresh store instead")  # fmt: skip
    parser.add_argument("--runs", type=int, default=3, help="fresh stores for --first-search")
    parser.add_argument("--no-settle", dest="settle", action="store_false",
                        help="measure at once after opening (the graph may still build)")  # fmt: skip
    args = parser.parse_args()
    if args.first_search:
        runs = []
        for _ in range(args.runs):
            runs.append(first_search(args.first_search, args.embedder))
            print(json.dumps(runs[-1]), flush=True)
        times = [r["first_search_s"] for r in runs]
        print(f"first search after {args.first_search:,} sends ({args.embedder}): median "
              f"{statistics.median(times):.3f} s, max {max(times):.3f} s (target <= 1 s)")  # fmt: skip
        if args.out:
            args.out.write_text(json.dumps(runs, indent=2))
        return
    if args.patterns:
        measured = [patterns(args.patterns, name) for name in ("minilm", "hashing")]
        print("| embedder | index | detect_patterns, three runs | on first_line |\n|---|---|---|---|")
        for m in measured:
            runs, lines = (", ".join(f"{r} s" for r in m[k]) for k in ("detect_s", "first_line_s"))
            print(f"| {m['embedder']} | {m['index_s']} s | {runs} ({m['clusters']} clusters) "
                  f"| {lines} ({m['first_line_clusters']} clusters) |")  # fmt: skip
        if args.out:
            args.out.write_text(json.dumps(measured, indent=2))
        return
    rng = random.Random(13)
    folder = Path(tempfile.mkdtemp(prefix="bench-channels-"))
    url = f"sqlite:///{folder / 'channels.db'}"
    names = [f"channel-{i:02d}" for i in range(CHANNELS)]
    per_channel = args.messages // CHANNELS
    seeded = indexed = 0.0
    if args.seeded:
        shutil.rmtree(folder)
        shutil.copytree(args.seeded, folder)
    else:
        seeded, indexed = seed(url, folder, names, per_channel, rng, args.embedder)
        if args.keep:
            shutil.copytree(folder, args.keep)
    memory = engram.open(url, embedder=args.embedder, vector_cache=folder / "vectors.db")
    if getattr(memory.pool, "query_cache", None) is not None:
        memory.pool.query_cache = None  # measure searches, not cache hits
    started = time.perf_counter()
    memory.update_index()
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    vectors = getattr(memory.pool.index("main"), "vectors", None) if args.settle else None
    if vectors is not None:  # steady state: the vectors loaded into the graph (a background build after open)
        vectors.wait()
    print(f"seeded {per_channel * CHANNELS:,} messages in {seeded:.1f} s, indexed in {indexed:.1f} s "
          f"(index loaded in {loaded:.1f} s, graph built in {time.perf_counter() - started:.1f} s)",
          flush=True)  # fmt: skip
    hub = Channels(memory)
    actor = hub.as_agent("agent")

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
        assert found and found.degraded is None and all(m.metadata["resolution"]["status"] == "solved" for m in found)
    exact, twins, overlap = [], [], []  # the twins match the same messages; an approximate (ANN) candidate
    # stage may still rank a few differently, so how many of the 10 results they share is reported too
    stored = {f"metadata.{path}": arg for path, arg in spec.items()}  # the filter on the stored message
    if args.ab:  # each search beside its twin done as before #13's tuning (channels listed, exact $in scope)
        for i in range(args.samples):
            query = f"{rng.choice(['connection refused', 'timeout reading'])} {rng.choice(SERVICES)}"

            def listed_exact(query: str = query) -> list[str]:
                mine = {i.key for i in memory.iter_items(("_channels", "memberships", "agent"))}
                ids = sorted(c.id for c in hub.list_channels_raw() if c.kind != "notes" and (c.id in mine or (
                    c.kind == "channel" and c.access == "open")))  # fmt: skip
                found = memory.search(
                    ("_channels", "messages"),
                    query,
                    profile="quality",
                    limit=10,
                    filter={
                        "$and": [{"kind": "message"}, {"deleted": {"$ne": True}}, stored, {"channel": {"$in": ids}}]
                    },
                )
                return [f"{m.value['channel']}#{m.value['number']}" for m in found]  # fmt: skip

            def library(query: str = query) -> list[str]:
                return [m.id for m in actor.search_messages(query, filter=spec, profile="quality", limit=10)]

            pair = [(exact, listed_exact), (twins, library)]
            got = []
            for times, search in pair if i % 2 == 0 else pair[::-1]:  # alternate who goes first (warm caches)
                t0 = time.perf_counter()
                got.append(search())
                times.append(time.perf_counter() - t0)
            assert got[0] and got[1], f"no results for {query!r}"
            overlap.append(len(set(got[0]) & set(got[1])) / max(len(got[0]), len(got[1])))

    sends_normal = []
    try:
        from engram.backends.sqlite import set_synchronous
    except ImportError:  # an engram without the option
        set_synchronous = None
    if set_synchronous is not None:
        memory.close()
        set_synchronous(folder / "channels.db", "normal")
        memory = engram.open(url, embedder=args.embedder, vector_cache=folder / "vectors.db")
        hub = Channels(memory)
        actor = hub.as_agent("agent")
        for i in range(args.samples):
            t0 = time.perf_counter()
            actor.send(names[i % CHANNELS], _text(rng), metadata=_meta(rng), confidence=0.5)
            sends_normal.append(time.perf_counter() - t0)
        memory.close()
        set_synchronous(folder / "channels.db", "full")
        memory = engram.open(url, embedder=args.embedder, vector_cache=folder / "vectors.db")
        hub = Channels(memory)
        actor = hub.as_agent("agent")

    cursor = hub.last_event()
    script = textwrap.dedent(f"""
        import sys, time, engram
        from engram.channels import Channels
        hub = Channels(engram.open({url!r}, embedder={args.embedder!r}, vector_cache={str(folder / "vectors.db")!r}))
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
        "embedder": args.embedder, "messages": per_channel * CHANNELS, "channels": CHANNELS, "seed_s": round(seeded, 1),
        "index_s": round(indexed, 1),
        "send_ms": {"p50": pct(sends, 0.5), "p99": pct(sends, 0.99)},
        "send_normal_ms": {"p50": pct(sends_normal, 0.5), "p99": pct(sends_normal, 0.99)} if sends_normal else None,
        "send_and_index_ms": {"p50": pct(sends_indexed, 0.5), "p99": pct(sends_indexed, 0.99)},
        "search_ms": {"p50": pct(searches, 0.5), "p99": pct(searches, 0.99)},
        "search_exact_scope_ms": {"p50": pct(exact, 0.5), "p99": pct(exact, 0.99)} if exact else None,
        "search_twin_ms": {"p50": pct(twins, 0.5), "p99": pct(twins, 0.99)} if twins else None,
        "search_twins_overlap": round(statistics.mean(overlap), 3) if overlap else None,
        "event_latency_ms": {"p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99)},
    }  # fmt: skip
    print("| measure | p50 | p99 |\n|---|---|---|")
    for key in (
        "send_ms",
        "send_normal_ms",
        "send_and_index_ms",
        "search_ms",
        "search_exact_scope_ms",
        "search_twin_ms",
        "event_latency_ms",
    ):
        if result[key] is not None:
            print(f"| {key} | {result[key]['p50']:.1f} | {result[key]['p99']:.1f} |")  # type: ignore[index]
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, dict)}))
    print(f"median send {statistics.median(sends) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
