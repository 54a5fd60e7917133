"""Overhead of engram's metrics at the storage seam (issue #15): put/get with and without the metered wrappers.

Both variants run side by side in one process, in alternating rounds (so machine load hits both alike), on the
memory and SQLite backends: "plain" is a repository on the raw stores, "metered" the one ``engram.open`` builds
(``MeteredChunkStore`` / ``MeteredRefStore``). The hooks that are always on (commit counter, LRU lookups, search
timing) run in both. The ratio is the median of the per-round ratios (metered / plain, each pair measured back
to back). Also prints the cost of one metered call and of one counter increment.

    .venv/bin/python benchmarks/bench_metrics.py [--puts 1000] [--gets 5000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from engram import observe
from engram.backends import ChunkStore, LruChunkStore, MemoryChunkStore, MemoryRefStore, RefStore, open_sqlite
from engram.backends.wrappers import MeteredChunkStore, MeteredRefStore
from engram.repo import Repository
from engram.store import Memory
from engram.store.indexing import IndexPool


def memory_stores(_: Path) -> tuple[ChunkStore, RefStore]:
    return MemoryChunkStore(), MemoryRefStore()


def sqlite_stores(folder: Path) -> tuple[ChunkStore, RefStore]:
    return open_sqlite(folder / f"s{time.monotonic_ns()}.db")


def handle(stores: tuple[ChunkStore, RefStore], backend: str, metered: bool) -> Memory:
    chunks, refs = stores
    if metered:
        chunks, refs = MeteredChunkStore(chunks, backend), MeteredRefStore(refs, backend)
    repo = Repository(LruChunkStore(chunks) if backend == "sqlite" else chunks, refs)
    repo.init()
    return Memory(repo, pool=IndexPool(repo))


def timed(n: int, work: Callable[[int], object]) -> float:
    """Microseconds per call of ``work(i)`` for i in range(n)."""
    started = time.perf_counter()
    for i in range(n):
        work(i)
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=1000)
    parser.add_argument("--gets", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for backend, make in (("memory", memory_stores), ("sqlite", sqlite_stores)):
            samples: dict[tuple[str, bool], list[float]] = {}
            for _ in range(args.rounds):
                for metered in (False, True):
                    mem = handle(make(folder), backend, metered)
                    put = timed(args.puts, lambda i, m=mem: m.put(("bench",), f"k{i}", {"text": f"item {i}", "n": i}))
                    get = timed(args.gets, lambda i, m=mem: m.get(("bench",), f"k{i % args.puts}"))
                    samples.setdefault(("put", metered), []).append(put)
                    samples.setdefault(("get", metered), []).append(get)
                    mem.close()
            for op in ("put", "get"):
                plain = statistics.median(samples[(op, False)])
                metered_us = statistics.median(samples[(op, True)])
                pairs = zip(samples[(op, False)], samples[(op, True)], strict=True)
                paired = statistics.median(m / p for p, m in pairs)
                results[f"{backend} {op}"] = {"plain_us": round(plain, 2), "metered_us": round(metered_us, 2),
                                              "ratio": round(paired, 3)}  # fmt: skip
    meter = observe.StorageMeter("bench", ("op",))
    results["one metered call"] = {"us": round(timed(200_000, lambda i: meter.run("op", int)), 3)}
    results["one counter increment"] = {"us": round(timed(200_000, lambda i: observe.commit_written()), 3)}
    print(f"{'workload':<24}{'plain µs':>10}{'metered µs':>12}{'ratio':>8}")
    for name, row in results.items():
        if "ratio" in row:
            print(f"{name:<24}{row['plain_us']:>10.2f}{row['metered_us']:>12.2f}{row['ratio']:>8.3f}")
        else:
            print(f"{name:<24}{row['us']:>10.3f}")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "bench_metrics.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
