"""Retrieval quality of `EngramStore`'s two search modes on LoCoMo (the same data and metrics as
`bench_retrieval.py`): LangGraph's ranking (the default: cosine of one vector per field) and engram's hybrid.

    python benchmarks/bench_langgraph_retrieval.py [--data PATH] [--modes langgraph,hybrid]

Each turn is stored with `store.put(ns, dia_id, {"text": ..., "session": ..., "date": ...})` under
`index={"dims": 384, "embed": <engram's offline MiniLM>, "fields": ["text"]}`, as a LangGraph user would.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from langgraph.store.base import PutOp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import DEFAULT_DATA, load, metrics

import engram
from engram.embed import embedder_from_spec
from engram.integrations.langgraph import EngramStore


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--modes", default="langgraph,hybrid")
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"LoCoMo data not found at {args.data}: skipping.")
        return 0
    minilm = embedder_from_spec("minilm")

    def embed(texts: list[str]) -> list[list[float]]:
        return [list(map(float, row)) for row in minilm.embed(texts)]

    # the turns and questions, exactly as bench_retrieval reads them
    staging = engram.open(":memory:", embedder=None)
    questions, _ = load(args.data, staging)
    turns = list(staging.iter_items(("locomo",)))
    rows = []
    for mode in args.modes.split(","):
        store = EngramStore(url=":memory:", index={"dims": minilm.dim, "embed": embed, "fields": ["text"]},
                            search=mode)  # type: ignore[arg-type]  # fmt: skip
        store.batch([PutOp(turn.namespace, turn.key, turn.value) for turn in turns])
        store.search(("locomo",), query="warm up", limit=1)  # embeds every turn once
        sums = {"recall@5": 0.0, "recall@10": 0.0, "ndcg@10": 0.0}
        latencies = []
        for item in questions:
            started = time.perf_counter()
            found = store.search(item["ns"], query=item["q"], limit=10)
            latencies.append(time.perf_counter() - started)
            for name, value in metrics([r.key for r in found], set(item["evidence"])).items():
                sums[name] += value
        row: dict[str, Any] = {name: round(value / len(questions), 3) for name, value in sums.items()}
        row |= {"mode": mode, "p50_ms": round(1000 * statistics.median(latencies), 1)}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    print("| EngramStore search | recall@5 | recall@10 | nDCG@10 | p50 ms |\n|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['mode']} | {row['recall@5']:.3f} | {row['recall@10']:.3f} | {row['ndcg@10']:.3f} | "
              f"{row['p50_ms']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
