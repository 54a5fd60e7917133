"""The in-process engine (issue #11): ANN recall and latency, load-to-searchable, footprint, first search.

    python benchmarks/bench_inprocess.py ann --sizes 100000,300000
    python benchmarks/bench_inprocess.py store --size 100000 [--langgraph]

``ann`` measures :class:`engram.index.vector.VectorIndex` alone on realistic vectors (clustered, low-rank
384-d, with top-10 cosines of 0.5-0.6 like MiniLM's on short texts; i.i.d. random vectors say nothing about
an ANN index): graph build rate, recall@10 of the exact top-10 (all vectors, and with 1 in 8 eligible),
query p50/p99, memory, and reopening the saved graph memory-mapped.

``store`` loads a SQLite store with vectors already in the vector cache and measures: load rate, load to
searchable, hybrid p50/p99 (query embedding excluded: queries are embedded once before timing) while the
graph is being built and after, the first search after reopening, RSS added and disk per item. With
``--langgraph`` it also loads LangGraph's ``InMemoryStore`` with the same cached vectors, for the rate ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import sentences

import engram
from engram.embed import HashingEmbedder
from engram.index import ann, vector
from engram.index.ann import Graph
from engram.index.cache import as_blobs, text_hash
from engram.index.paths import document_text
from engram.index.vector import VectorIndex
from engram.store.connect import shared_vector_cache


def realistic(n: int, dim: int = 384, seed: int = 0, rank: int = 48) -> np.ndarray:
    """``n`` unit vectors around ``n / 200`` topics in a 48-d subspace, plus isotropic noise."""
    rng = np.random.default_rng(seed)
    basis = np.random.default_rng(99).normal(size=(rank, dim)).astype(np.float32)
    topics = np.random.default_rng(98).normal(size=(max(50, n // 200), rank)).astype(np.float32)
    out = np.empty((n, dim), np.float32)
    for lo in range(0, n, 50_000):
        m = min(50_000, n - lo)
        latent = topics[rng.integers(0, len(topics), m)] + 1.5 * rng.normal(size=(m, rank)).astype(np.float32)
        block = latent @ basis + 0.35 * np.sqrt(rank) * rng.normal(size=(m, dim)).astype(np.float32)
        out[lo : lo + m] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def exact_top(rows: np.ndarray, query: np.ndarray, mask: np.ndarray | None, k: int = 10) -> set[int]:
    sims = rows @ query
    if mask is not None:
        sims = np.where(mask, sims, -np.inf)
    return set(np.argpartition(-sims, k)[:k].tolist())


def recall(index: VectorIndex, rows: np.ndarray, qs: np.ndarray, eligible: np.ndarray | None) -> dict[str, float]:
    """recall@10 of the exact top-10 (of the ``eligible`` rows) over queries ``qs``, and the query latency."""
    hits, lat = 0, []
    for q in qs:
        t = time.perf_counter()
        scores, _ = index.search(q, len(rows), eligible, 32)
        if eligible is not None:
            scores = np.where(eligible, scores, -np.inf)
        top = set(np.argpartition(-scores, 10)[:10].tolist())
        lat.append(time.perf_counter() - t)
        hits += len(top & exact_top(rows, q, eligible))
    return {"recall10": round(hits / (10 * len(qs)), 4), "p50_ms": round(pct(lat, 0.5), 2),
            "p99_ms": round(pct(lat, 0.99), 2)}  # fmt: skip


def bench_ann(n: int, queries: int, tmp: Path, threads: int, efs: list[int], factors: list[float]) -> dict[str, Any]:
    rows = realistic(n)
    qs = realistic(queries, seed=7)
    index = VectorIndex(rows.shape[1], background=False)
    start = time.perf_counter()
    index.set_many(np.arange(n, dtype=np.int64), rows)
    index.build(threads=threads)
    build = time.perf_counter() - start
    mask = np.random.default_rng(3).random(n) < 1 / 8
    out: dict[str, Any] = {"n": n, "build_s": round(build, 1), "build_per_s": round(n / build), "threads": threads,
                           "connectivity": ann.CONNECTIVITY, "expansion_add": ann.EXPANSION_ADD}  # fmt: skip
    default_ef = ann.EXPANSION_SEARCH
    out["ef"] = ann.expansion(n)
    for ef in efs:
        ann.EXPANSION_SEARCH = ef  # a sweep: the graph's size-scaled default at this base
        out[f"ef_base_{ef}"] = {"ef": ann.expansion(n), **recall(index, rows, qs, None)}
    ann.EXPANSION_SEARCH = default_ef
    default_factor = vector.FILTER_OVERSAMPLE
    for factor in factors:
        vector.FILTER_OVERSAMPLE = factor  # a sweep of the filtered search's oversampling
        out[f"1_in_8_oversample_{factor:g}"] = recall(index, rows, qs, mask)
    vector.FILTER_OVERSAMPLE = default_factor
    out["all"] = recall(index, rows, qs, None)
    out["1_in_8"] = recall(index, rows, qs, mask)
    assert index._graph is not None
    out["graph_mb"] = round(index._graph.nbytes / 1e6)
    path = tmp / f"g{n}.hnsw"
    index._graph.save(path)
    start = time.perf_counter()
    graph = Graph.open(path, rows.shape[1], n)
    assert graph is not None
    graph.search(qs[0], 10)
    out["reopen_mmap_s"] = round(time.perf_counter() - start, 3)
    out["file_mb"] = round(path.stat().st_size / 1e6)
    print(json.dumps(out), flush=True)
    return out


def bench_store(n: int, queries: int, tmp: Path, langgraph: bool, build_threads: int = 0) -> dict[str, Any]:
    """Load a store of ``n`` items in ``tmp`` and measure it; a store an earlier run left in ``tmp``
    (``--keep``) is reopened and searched instead (a 1M load and graph build take half an hour)."""
    if (tmp / "store.db").exists():
        return search_kept(n, queries, tmp)
    texts = sentences(n)
    vectors = realistic(n)
    values = [{"kind": ["pref", "fact", "event", "task"][i % 4], "text": t} for i, t in enumerate(texts)]
    embedder = HashingEmbedder()
    hashes = [text_hash(document_text(v, ("$",))) for v in values]
    cache_file = tmp / "vectors.db"
    cache = shared_vector_cache(cache_file)
    for lo in range(0, n, 50_000):
        cache.put_many(embedder.model_id, as_blobs(vectors[lo : lo + 50_000], hashes[lo : lo + 50_000]))
    words = [t.split() for t in sentences(queries, seed=5)]
    query_texts = [" ".join(w[:4]) for w in words]
    out: dict[str, Any] = {"n": n}
    gc.collect()
    base = rss_mb()
    db = tmp / "store.db"
    mem = engram.open(f"sqlite:///{db}", embedder=embedder, vector_cache=cache_file)
    if hasattr(mem.pool, "query_cache"):
        mem.pool.query_cache = None  # time the engine, not the cache of repeated queries
    start, cpu = time.perf_counter(), time.process_time()
    with mem.transaction("load") as tx:
        for i, value in enumerate(values):
            tx.put((f"user-{i % 100}", "notes"), f"n{i}", value)
    load = time.perf_counter() - start
    start = time.perf_counter()
    mem.update_index()
    index_s = time.perf_counter() - start
    out["load_and_index_cpu_s"] = round(time.process_time() - cpu, 2)  # with the graph thread's start
    out.update(load_s=round(load, 2), index_s=round(index_s, 2), load_per_s=round(n / load),
               searchable_per_s=round(n / (load + index_s)))  # fmt: skip
    index = mem.pool.current(mem.branch, mem.head.tree)
    assert index.vectors is not None
    out["backlog_after_load"] = index.vectors.backlog
    if hasattr(mem, "index_lag"):
        out["index_lag_after_load"] = dataclasses.asdict(mem.index_lag())
    for q in query_texts:  # embed every query once: timings exclude the query's embedding
        index.query_vector(q)

    def timed(label: str, count: int = len(query_texts), **kwargs: Any) -> None:
        out[label] = time_searches(mem, query_texts[:count], **kwargs)

    timed("hybrid_while_building", 10 if build_threads else len(query_texts))
    print(f"[while building] {json.dumps(out)}", file=sys.stderr, flush=True)  # a 1M run builds for half an hour
    start = time.perf_counter()
    if build_threads:  # build the graph in the foreground with more threads (the background builder uses one)
        index.vectors.build(threads=build_threads)
    index.vectors.wait()
    out["graph_build_after_load_s"] = round(time.perf_counter() - start + 0.0, 1)
    out.update(search_modes(mem, query_texts))
    gc.collect()
    out["rss_added_mb"] = round(rss_mb() - base)
    mem.close()
    sizes = {p.name: p.stat().st_size for p in tmp.rglob("*") if p.is_file() and "vectors.db" not in p.name}
    value_bytes = sum(len(json.dumps(v)) for v in values)
    out["disk_bytes_per_item"] = round(sum(sizes.values()) / n)
    out["disk_bytes_per_item_less_value"] = round((sum(sizes.values()) - value_bytes) / n)
    out["vector_cache_bytes_per_item"] = round(cache_file.stat().st_size / n)
    start = time.perf_counter()
    again = engram.open(f"sqlite:///{db}", embedder=embedder, vector_cache=cache_file)
    again.search((), query_texts[0], limit=10)
    out["reopen_first_search_s"] = round(time.perf_counter() - start, 2)
    again.close()
    if langgraph:
        out["langgraph_inmemory_per_s"] = round(langgraph_rate(values, vectors))
        out["ratio_to_langgraph"] = round(out["searchable_per_s"] / out["langgraph_inmemory_per_s"], 2)
    print(json.dumps(out), flush=True)
    return out


def time_searches(mem: Any, query_texts: list[str], **kwargs: Any) -> dict[str, float]:
    """Latency and CPU p50/p99 of a search per query (``scoped``: under ``("user-7",)``)."""
    lat, cpu = [], []
    for q in query_texts:
        c, t = time.process_time(), time.perf_counter()
        mem.search(("user-7",) if kwargs.get("scoped") else (), q, limit=10,
                   filter=kwargs.get("filter"), mode=kwargs.get("mode"))  # fmt: skip
        lat.append(time.perf_counter() - t)
        # CPU of the search in every thread (a hybrid search's graph search runs in a worker): what a busy
        # machine inflates least; while the graph builds, the builder's CPU is counted too
        cpu.append(time.process_time() - c)
    return {"p50_ms": round(pct(lat, 0.5), 2), "p99_ms": round(pct(lat, 0.99), 2),
            "cpu_p50_ms": round(pct(cpu, 0.5), 2), "cpu_p99_ms": round(pct(cpu, 0.99), 2)}  # fmt: skip


def search_modes(mem: Any, query_texts: list[str]) -> dict[str, Any]:
    """Every mode's latency on a store whose graph is built: hybrid twice (the machine is shared: compare the
    two passes), keyword, semantic, filtered (1 in 4) and scoped (1 in 100) hybrid."""
    return {
        "hybrid": time_searches(mem, query_texts),
        "hybrid_again": time_searches(mem, query_texts),
        "keyword": time_searches(mem, query_texts, mode="keyword"),
        "semantic": time_searches(mem, query_texts, mode="semantic"),
        "hybrid_filtered": time_searches(mem, query_texts, filter={"kind": "fact"}),
        "hybrid_scoped": time_searches(mem, query_texts, scoped=True),
    }


def search_kept(n: int, queries: int, tmp: Path) -> dict[str, Any]:
    """Reopen the store an earlier ``store`` run kept in ``tmp`` and measure its searches."""
    embedder = HashingEmbedder()
    start = time.perf_counter()
    mem = engram.open(f"sqlite:///{tmp / 'store.db'}", embedder=embedder, vector_cache=tmp / "vectors.db")
    if hasattr(mem.pool, "query_cache"):
        mem.pool.query_cache = None
    query_texts = [" ".join(t.split()[:4]) for t in sentences(queries, seed=5)]
    mem.search((), query_texts[0], limit=10)
    out: dict[str, Any] = {"n": n, "kept": True, "reopen_first_search_s": round(time.perf_counter() - start, 2)}
    index = mem.pool.current(mem.branch, mem.head.tree)
    assert index.vectors is not None
    index.vectors.wait()
    for q in query_texts:
        index.query_vector(q)
    out.update(search_modes(mem, query_texts))
    mem.close()
    print(json.dumps(out), flush=True)
    return out


def langgraph_rate(values: list[dict[str, Any]], vectors: np.ndarray) -> float:
    """Items/s LangGraph's InMemoryStore takes with an embedding function that only looks vectors up."""
    from langgraph.store.base import PutOp
    from langgraph.store.memory import InMemoryStore

    known = {v["text"]: vectors[i].tolist() for i, v in enumerate(values)}

    def embed(texts: list[str]) -> list[list[float]]:
        return [known[t] for t in texts]

    store = InMemoryStore(index={"dims": vectors.shape[1], "embed": embed, "fields": ["text"]})
    start = time.perf_counter()
    for lo in range(0, len(values), 1000):
        part = range(lo, min(lo + 1000, len(values)))
        store.batch([PutOp((f"user-{i % 100}", "notes"), f"n{i}", values[i]) for i in part])
    return len(values) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["ann", "store"])
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--langgraph", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="graph insert threads (ann)")
    parser.add_argument("--ef", default="", help="also measure recall with these base search expansions (ann)")
    parser.add_argument("--build-threads", type=int, default=0, help="build the graph in the foreground (store)")
    parser.add_argument("--connectivity", type=int, default=ann.CONNECTIVITY, help="graph degree (ann)")
    parser.add_argument("--expansion-add", type=int, default=ann.EXPANSION_ADD, help="insert candidates (ann)")
    parser.add_argument("--oversample", default="", help="also measure filtered recall with these factors (ann)")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--keep", type=Path, default=None,
        help="store: load into this folder and keep it; when it already holds a store, search that one (store)",
    )  # fmt: skip
    args = parser.parse_args()
    ann.CONNECTIVITY, ann.EXPANSION_ADD = args.connectivity, args.expansion_add
    factors = [float(f) for f in args.oversample.split(",")] if args.oversample else []
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() if args.keep is None else nullcontext(str(args.keep)) as tmp:
        efs = [int(e) for e in args.ef.split(",")] if args.ef else []
        if args.what == "ann":
            results: Any = [
                bench_ann(int(s), args.queries, Path(tmp), args.threads, efs, factors) for s in args.sizes.split(",")
            ]
        else:
            results = bench_store(args.size, args.queries, Path(tmp), args.langgraph, args.build_threads)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
