"""benchmarks/retrieval_latency.py: questions fall in the right time group, and every group is timed in both arms."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import engram

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_paired_latency_groups_questions_and_times_both_arms() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        latency = importlib.import_module("retrieval_latency")
    finally:
        sys.path.remove(str(BENCH))
    ns = ("u", "a")
    questions = [
        {"ns": ns, "q": "What did Alice bake in May 2023?", "reference": "2023-10-01"},
        {"ns": ns, "q": "When did Alice adopt the beagle?", "reference": "2023-10-01"},
        {"ns": ns, "q": "What is the beagle called?", "reference": "2023-10-01"},
    ]
    assert [latency.group(q) for q in questions] == ["time", "asks", "neither"]
    with engram.open(":memory:", embedder="hashing:64") as mem:
        mem.put(ns, "t0", {"text": "Alice adopted a beagle called Rex yesterday", "date": "2023-05-08"})
        mem.put(ns, "t1", {"text": "Alice baked bread", "date": "2023-05-09"})
        mem.flush_index()
        found = latency.paired(mem, questions, reps=2)
    assert {name: row["n"] for name, row in found.items()} == {"all": 3, "time": 1, "asks": 1, "neither": 1}
    for row in found.values():
        assert all(row[f"{p}_{arm}"] > 0 for p in ("p50", "p90") for arm in latency.ARMS)
