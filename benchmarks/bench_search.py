"""Search performance: hybrid search p50/p99 with and without a filter, put throughput with and
without embedding, and a search 1,000 commits in the past against the same search at the head.

    python benchmarks/bench_search.py [--sizes 10000,100000] [--out benchmarks/out/search.json]

Texts are synthetic sentences over a Zipf vocabulary. Up to 100k items, documents are embedded with
the no-model hashing embedder (384-d, real vectors of the real texts). At 1M (``--sizes ...,1000000``)
the vector cache is pre-filled with random-but-clustered vectors instead, since embedding a million
texts would take an hour; the timings are then the index's, not a model's. MiniLM's own query
embedding time is reported separately: add it to the hybrid figures for the default embedder.
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "search.json")
    args = parser.parse_args(argv)
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
