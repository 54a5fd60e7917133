"""Fusion weights chosen by cross-validation, on LoCoMo and on a generated data set of another kind.

``bench_retrieval.py --cv`` reads, for every question of each data set, the keyword and semantic signal of every
item in its namespace once (a keyword and a semantic search, the store's embedder), then ranks the candidates at
each keyword weight of a grid (the semantic weight is 1 minus it; ADR 0002) and keeps each question's recall@10 and
nDCG@10: the hybrid search's own ranking, without running it once per weight. Then:

- **per fold**: the conversations (users) are split into k folds (k from ``--cv-folds``, e.g. ``2,5``: 2 is "split
  by conversation, both ways"); for each fold the weight best on the other folds (mean recall@10, then nDCG@10) is
  chosen and scored on the held-out fold. The cross-validated figure is the mean over held-out questions.
- **across data sets**: each weight's mean on each data set, its rank (1 = best) on each data set and on each fold
  of each, and the pick: among the weights that are never the grid's worst on any data set or fold, the one whose
  recall@10 is the largest share of each data set's best, on average over the data sets (each counts once, and a
  data set with high figures does not outvote one with low figures); then the best mean nDCG@10.

Nothing here writes the table in ``engram.index.fusion``: the weights found are copied there by hand, with the
figures, into ADR 0002.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any

import engram
from engram.index import fusion

Metrics = Callable[[list[str], set[str]], dict[str, float]]


def parse_grid(text: str) -> list[float]:
    """``"0.5:0.9:0.05"`` (start, stop, step; both ends included) or ``"0.6,0.7,0.8"``."""
    if ":" in text:
        start, stop, step = (float(x) for x in text.split(":"))
        count = round((stop - start) / step) + 1
        return [round(start + i * step, 4) for i in range(count)]
    return [float(x) for x in text.split(",")]


#: Enough hits to hold every item of one conversation's namespace.
EVERY = 100_000


def signals(mem: engram.Memory, questions: list[dict[str, Any]]) -> list[dict[str, tuple[float, float, float]]]:
    """Per question, every candidate's (keyword, semantic) signal, read once: the scores of a keyword and a
    semantic search over the whole namespace (profile ``similarity``, whose score is the signal itself), and
    minus its time (equal scores go newest first)."""
    mem.flush_index()  # every vector made: the background indexer may still be embedding the last writes
    out = []
    for item in questions:
        hits = [*mem.search(item["ns"], item["q"], limit=EVERY, mode="keyword", when="off")]
        keyword = {h.key: h.score for h in hits}
        more = mem.search(item["ns"], item["q"], limit=EVERY, mode="semantic", when="off")
        semantic = {h.key: h.score for h in more}
        hits += more
        newest = {h.key: -h.updated_at.timestamp() for h in hits}
        found = {k: (float(keyword.get(k) or 0.0), max(float(semantic.get(k) or 0.0), 0.0)) for k in keyword | semantic}
        out.append({k: (*v, newest[k]) for k, v in found.items() if v[0] > 0 or v[1] > 0})  # hybrid's candidates
    return out


def per_question(
    questions: list[dict[str, Any]], found: list[dict[str, tuple[float, float, float]]], weight: float, metrics: Metrics
) -> list[dict[str, float]]:
    """Each question's metrics when its candidates are ranked by ``weight * keyword + (1 - weight) * semantic``
    (ADR 0002's hybrid similarity; equal scores newest first, then by key, as the search breaks ties)."""
    out = []
    for item, candidates in zip(questions, found, strict=True):
        scored = sorted(
            candidates.items(), key=lambda kv: (-(weight * kv[1][0] + (1 - weight) * kv[1][1]), kv[1][2], kv[0])
        )
        out.append(metrics([key for key, _ in scored[:10]], set(item["evidence"])))
    return out


def _mean(rows: Sequence[dict[str, float]], name: str) -> float:
    return sum(r[name] for r in rows) / len(rows) if rows else math.nan


def folds_of(questions: list[dict[str, Any]], k: int) -> list[set[tuple[str, ...]]]:
    """The conversations (namespaces) split into ``k`` folds: sorted, dealt round-robin."""
    convs = sorted({tuple(q["ns"]) for q in questions})
    return [set(convs[i::k]) for i in range(k)]


def _best(scores: dict[float, list[dict[str, float]]], keep: list[int]) -> float:
    """The weight whose questions at positions ``keep`` have the best mean recall@10 (then nDCG@10; then the
    larger keyword weight, the one that was already the default)."""

    def key(w: float) -> tuple[float, float, float]:
        rows = [scores[w][i] for i in keep]
        return (round(_mean(rows, "recall@10"), 6), round(_mean(rows, "ndcg@10"), 6), w)

    return max(scores, key=key)


def cross_validate(
    name: str, questions: list[dict[str, Any]], scores: dict[float, list[dict[str, float]]], ks: Sequence[int]
) -> list[dict[str, Any]]:
    """Per k and fold: the weight chosen on the other folds and its held-out figures (plus every weight's)."""
    out = []
    for k in ks:
        for f, fold in enumerate(folds_of(questions, k)):
            test = [i for i, q in enumerate(questions) if tuple(q["ns"]) in fold]
            train = [i for i, q in enumerate(questions) if tuple(q["ns"]) not in fold]
            chosen = _best(scores, train)
            held = {w: {m: _mean([rows[i] for i in test], m) for m in ("recall@10", "ndcg@10")}
                    for w, rows in scores.items()}  # fmt: skip
            out.append({"data": name, "k": k, "fold": f + 1, "conversations": sorted("/".join(c) for c in fold),
                        "questions": len(test), "chosen": chosen, "test": held[chosen], "every": held})  # fmt: skip
    return out


def summary(
    runs: dict[str, dict[float, list[dict[str, float]]]], folds: list[dict[str, Any]]
) -> tuple[float, dict[float, dict[str, Any]]]:
    """Per weight: its mean on each data set, its worst rank over data sets and folds; and the pick."""
    weights = sorted(next(iter(runs.values())))
    table: dict[float, dict[str, Any]] = {w: {"worst_rank": 1} for w in weights}
    groups: list[dict[float, float]] = []  # recall@10 per weight, per data set and per fold
    for name, scores in runs.items():
        means = {w: _mean(rows, "recall@10") for w, rows in scores.items()}
        for w in weights:
            table[w][name] = {"recall@10": means[w], "ndcg@10": _mean(scores[w], "ndcg@10")}
        groups.append(means)
    groups += [{w: f["every"][w]["recall@10"] for w in weights} for f in folds]
    for group in groups:
        ordered = sorted(weights, key=lambda w: -round(group[w], 6))
        for w in weights:
            rank = 1 + sum(1 for v in ordered if round(group[v], 6) > round(group[w], 6))
            table[w]["worst_rank"] = max(table[w]["worst_rank"], rank)
    for w in weights:
        # each data set's recall@10 as a share of the best weight's there: one with high figures does not outvote one
        # with low figures
        shares = [table[w][n]["recall@10"] / max(table[v][n]["recall@10"] for v in weights) for n in runs]
        table[w]["relative_recall@10"] = sum(shares) / len(shares)
        table[w]["mean_recall@10"] = sum(table[w][n]["recall@10"] for n in runs) / len(runs)
        table[w]["mean_ndcg@10"] = sum(table[w][n]["ndcg@10"] for n in runs) / len(runs)
        table[w]["never_worst"] = table[w]["worst_rank"] < len(weights)
    allowed = [w for w in weights if table[w]["never_worst"]] or weights
    pick = max(allowed, key=lambda w: (round(table[w]["relative_recall@10"], 4), round(table[w]["mean_ndcg@10"], 4), w))
    return pick, table


def report(runs: dict[str, dict[float, list[dict[str, float]]]], folds: list[dict[str, Any]]) -> dict[str, Any]:
    """Print the Markdown tables; return everything as JSON-ready data."""
    pick, table = summary(runs, folds)
    names = list(runs)
    print("| keyword / semantic | " + " | ".join(f"{n}: recall@10 / nDCG@10" for n in names)
          + " | mean recall@10 | mean share of the best recall@10 | worst rank (data sets and folds) |")  # fmt: skip
    print("|---" * (len(names) + 4) + "|")
    for w, row in table.items():
        cells = [f"{row[n]['recall@10']:.3f} / {row[n]['ndcg@10']:.3f}" for n in names]
        mark = " **(pick)**" if w == pick else ""
        print(f"| {w:.2f} / {1 - w:.2f}{mark} | " + " | ".join(cells)
              + f" | {row['mean_recall@10']:.3f} | {row['relative_recall@10']:.4f} "
              + f"| {row['worst_rank']} of {len(table)} |")  # fmt: skip
    print("\n| data | k | fold | questions | weight chosen on the other folds | held-out recall@10 | held-out nDCG@10 "
          f"| held-out recall@10 at the pick ({pick:.2f}) |\n" + "|---" * 8 + "|")  # fmt: skip
    for f in folds:
        print(
            f"| {f['data']} | {f['k']} | {f['fold']} | {f['questions']} | {f['chosen']:.2f} | "
            f"{f['test']['recall@10']:.3f} | {f['test']['ndcg@10']:.3f} | {f['every'][pick]['recall@10']:.3f} |"
        )
    print("\n| data | k | cross-validated recall@10 | cross-validated nDCG@10 |\n|---|---|---|---|")
    for name in names:
        for k in sorted({f["k"] for f in folds}):
            mine = [f for f in folds if f["data"] == name and f["k"] == k]
            n = sum(f["questions"] for f in mine)
            r = sum(f["test"]["recall@10"] * f["questions"] for f in mine) / n
            g = sum(f["test"]["ndcg@10"] * f["questions"] for f in mine) / n
            print(f"| {name} | {k} | {r:.3f} | {g:.3f} |")
    return {"pick": pick, "weights": {str(w): row for w, row in table.items()}, "folds": folds}


def run(
    stores: dict[str, tuple[engram.Memory, list[dict[str, Any]]]],
    grid: Sequence[float],
    ks: Sequence[int],
    metrics: Metrics,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Score every data set at every weight, cross-validate per data set, print and return the tables."""
    runs: dict[str, dict[float, list[dict[str, float]]]] = {}
    folds: list[dict[str, Any]] = []
    for name, (mem, questions) in stores.items():
        start = time.perf_counter()
        found = signals(mem, questions)
        log(f"{name}: signals of {len(questions)} questions read in {time.perf_counter() - start:.0f} s")
        runs[name] = {}
        for w in grid:
            runs[name][w] = per_question(questions, found, w, metrics)
            log(f"{name} {w:.2f}/{1 - w:.2f}: recall@10 {_mean(runs[name][w], 'recall@10'):.3f} "
                f"nDCG@10 {_mean(runs[name][w], 'ndcg@10'):.3f}")  # fmt: skip
        folds += cross_validate(name, questions, runs[name], ks)
    return report(runs, folds)


def paired_latency(mem: engram.Memory, questions: list[dict[str, Any]], weights: Sequence[float]) -> dict[float, float]:
    """The p50 of a real hybrid search (top 10) at each keyword weight, interleaved question by question (each
    question's vector made first, the query cache off) so that the machine's load falls on every weight alike."""
    embedder = mem.pool.embedder
    assert embedder is not None, "a hybrid search needs an embedder"
    name, saved = fusion.model_name(embedder.model_id), fusion.FUSION_WEIGHTS
    cache, mem.pool.query_cache = mem.pool.query_cache, None
    times: dict[float, list[float]] = {w: [] for w in weights}
    try:
        for n, item in enumerate(questions):
            mem.search(item["ns"], item["q"], limit=10)  # embeds the question once
            for w in weights if n % 2 == 0 else list(reversed(weights)):
                fusion.FUSION_WEIGHTS = MappingProxyType({**saved, name: (w, round(1 - w, 6))})
                start = time.perf_counter()
                mem.search(item["ns"], item["q"], limit=10, mode="hybrid")
                times[w].append(time.perf_counter() - start)
    finally:
        fusion.FUSION_WEIGHTS = saved
        mem.pool.query_cache = cache
    return {w: 1000 * sorted(t)[len(t) // 2] for w, t in times.items()}


__all__ = ["cross_validate", "folds_of", "paired_latency", "parse_grid", "per_question", "run", "signals", "summary"]
