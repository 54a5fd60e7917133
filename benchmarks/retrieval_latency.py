"""Search latency of the default configuration against ``when="off"``, paired question by question.

Every question is searched once with each arm first (to embed it and read its candidates, so neither arm pays a
first-time cost), then timed ``reps`` times per arm, the arms alternating and their order flipping from question to
question, the query cache cleared before each timed search. A question's latency in an arm is the median of its
``reps``; the p50 and p90 are over questions, for all of them and for each group: with a time expression (the time
stage rescores candidates by their dates), asking when (the answer prior only), neither (the same code in both arms,
so their difference is the machine's noise). Used by ``bench_retrieval.py --latency``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import engram
from engram.store.timeq import asks_when, parse_time

ARMS = ("off", "default")


def group(question: dict[str, Any]) -> str:
    """Which time path a question takes: ``time`` (a time expression), ``asks`` (asks when), else ``neither``."""
    if parse_time(question["q"], question["reference"]).windows:
        return "time"
    return "asks" if asks_when(question["q"]) else "neither"


def paired(
    mem: engram.Memory, questions: list[dict[str, Any]], reps: int = 3, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """p50 / p90 (ms) per arm and group, and each group's size."""

    def search(question: dict[str, Any], arm: str) -> float:
        start = time.perf_counter()
        mem.search(question["ns"], question["q"], limit=10, mode="hybrid", reference_time=question["reference"],
                   when="off" if arm == "off" else None)  # fmt: skip
        return time.perf_counter() - start

    cache = mem.pool.query_cache
    for question in questions:
        for arm in ARMS:
            search(question, arm)
    each: dict[str, dict[str, list[float]]] = {}
    for n, question in enumerate(questions):
        times: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for _ in range(reps):
            for arm in ARMS if n % 2 else reversed(ARMS):
                if cache is not None:
                    cache.clear()
                times[arm].append(search(question, arm))
        for name in ("all", group(question)):
            for arm in ARMS:
                each.setdefault(name, {a: [] for a in ARMS})[arm].append(1000 * statistics.median(times[arm]))
        if progress is not None and n % 500 == 499:
            progress(f"  latency: {n + 1} of {len(questions)} questions")
    out: dict[str, Any] = {}
    for name, arms in each.items():
        row: dict[str, Any] = {"n": len(arms["off"])}
        for arm, values in arms.items():
            values.sort()
            row[f"p50_{arm}"] = values[len(values) // 2]
            row[f"p90_{arm}"] = values[int(0.9 * (len(values) - 1))]
        out[name] = row
    return out


def print_table(found: dict[str, Any]) -> None:
    """The markdown table of :func:`paired`."""
    print("| questions | n | p50 off | p50 default | p90 off | p90 default |\n|---|---|---|---|---|---|")
    labels = {"all": "all", "time": "with a time expression", "asks": "asking when (no time expression)",
              "neither": "neither"}  # fmt: skip
    for name, label in labels.items():
        row = found.get(name)
        if row is not None:
            print(f"| {label} | {row['n']} | {row['p50_off']:.2f} ms | {row['p50_default']:.2f} ms | "
                  f"{row['p90_off']:.2f} ms | {row['p90_default']:.2f} ms |")  # fmt: skip


__all__ = ["ARMS", "group", "paired", "print_table"]
