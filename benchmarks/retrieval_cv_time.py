"""The time constants of ``when="auto"`` (``TIME_WEIGHT``, ``HALF_LIFE_DAYS``) chosen by cross-validation.

``bench_retrieval.py --cv-time`` runs, for every question of each data set (LoCoMo, and with ``--chats`` the
generated chats, whose temporal questions ask about a request "in March", "on 5 March", "three weeks ago"), the
usual hybrid search once (``when`` off, the top ``DEPTH`` hits and their scores) and parses its time expressions
against its reference time (:func:`engram.store.timerank.time_query`); then it rescores those hits at each pair of
the grid as ``when="auto"`` does (score + weight x match, the match halving every half-life days outside a window;
ranges keep only the items inside them; a question that asks when adds the answer weight to the hits that state a
time in their own words; ties by namespace and key) and keeps each question's recall@10 and nDCG@10. A question
without a time expression that does not ask when ranks as it does without ``when``, at every point of the grid.
The grid is weight x half-life x answer weight (``--answer-weights``; the answer weight alone with the other two
fixed when they are single values).

The choice is :mod:`retrieval_cv`'s, unchanged: per data set, k folds split by conversation (user), the pair best
on the other folds scored on the held-out one; across data sets, among the pairs never the grid's worst on a data
set or a fold, the largest mean share of each data set's best recall@10, then the best mean nDCG@10 (ties: the
larger weight, then the larger half-life). Nothing here changes ``engram.store.timerank``: a pair found is copied
there by hand, with the figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import retrieval_cv

import engram
from engram import codec
from engram.store import timerank
from engram.store.operations import SearchOp
from engram.store.timeq import asks_when, states_time
from engram.store.timerank import match

#: Hits of the first stage rescored (``when="auto"`` rescores 100 at first and widens until the page is provably
#: the one rescoring every item would give; 400 holds that page at every pair of a grid with weights up to 0.4).
DEPTH = 400

Pair = tuple[float, float, float]  # (weight, half-life in days, answer weight)


def parse_pairs(weights: str, half_lives: str, answers: str | None = None) -> list[Pair]:
    """The grid: every weight (``retrieval_cv.parse_grid`` syntax) with every half-life and answer weight
    (``answers`` None: the one in ``engram.store.timerank``)."""
    found = retrieval_cv.parse_grid(answers) if answers else [timerank.ANSWER_WEIGHT]
    return [(w, h, a) for w in retrieval_cv.parse_grid(weights) for h in retrieval_cv.parse_grid(half_lives)
            for a in found]  # fmt: skip


def signals(mem: engram.Memory, questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per question: its windows (boosts, ranges) and its first stage's hits as (score, tie key, key, item time)."""
    mem.flush_index()
    out = []
    for item in questions:
        op = SearchOp(namespace_prefix=tuple(item["ns"]), query=item["q"], when="auto",
                      reference_time=item["reference"])  # fmt: skip
        parsed = timerank.time_query(op, 0)
        limit = DEPTH if parsed.windows else 10
        hits = mem.search(item["ns"], item["q"], limit=limit, mode="hybrid", profile="similarity", when="off")
        asks = asks_when(item["q"])
        if asks and not parsed.windows:
            hits = mem.search(item["ns"], item["q"], limit=DEPTH, mode="hybrid", profile="similarity", when="off")
        rows = [(h.score or 0.0, codec.encode_key(h.namespace, h.key), h.key, timerank.item_time_ms(h),
                 asks and states_time(timerank.words(h))) for h in hits]  # fmt: skip
        boosts = tuple(w for w in parsed.windows if not w.range)
        out.append({"boosts": boosts, "ranges": parsed.ranges, "hits": rows, "asks": asks})
    return out


def ranked(found: dict[str, Any], pair: Pair) -> list[str]:
    """The top 10 keys of one question at ``pair``, as ``when="auto"`` ranks them."""
    weight, half_life, answer = pair
    boosts, ranges = found["boosts"], found["ranges"]
    if not boosts and not ranges and not found["asks"]:
        return [key for _, _, key, _, _ in found["hits"][:10]]
    weight = weight if boosts else 0.0
    answer = answer if found["asks"] else 0.0
    scored = []
    for score, tie, key, at, stated in found["hits"]:
        if any(match(at, w, half_life) < 1.0 for w in ranges):
            continue
        best = max((match(at, w, half_life) for w in boosts), default=0.0)
        scored.append((score + weight * best + answer * stated, tie, key))
    scored.sort(key=lambda entry: (-entry[0], entry[1]))
    return [key for _, _, key in scored[:10]]


def report(runs: dict[str, dict[Any, list[dict[str, float]]]], folds: list[dict[str, Any]], timed: dict[str, list[int]]
           ) -> dict[str, Any]:  # fmt: skip
    """Print the Markdown tables (every pair; per fold; cross-validated); return everything as JSON-ready data."""
    pick, table = retrieval_cv.summary(runs, folds)
    key = lambda pair: " / ".join(f"{v:g}" for v in pair)  # noqa: E731
    names = list(runs)
    now = (timerank.TIME_WEIGHT, timerank.HALF_LIFE_DAYS, timerank.ANSWER_WEIGHT)

    def on_time(name: str, pair: Pair) -> float:
        rows = [runs[name][pair][i] for i in timed[name]]
        return sum(r["recall@10"] for r in rows) / max(1, len(rows))

    print("| weight / half-life (days) / answer weight | " + " | ".join(f"{n}: recall@10 / nDCG@10 | {n}: recall@10 "
          "of questions with a time expression or asking when" for n in names)
          + " | mean share of the best recall@10 | worst rank |")  # fmt: skip
    print("|---" * (2 * len(names) + 3) + "|")
    for pair, row in table.items():
        mark = " **(pick)**" if pair == pick else " (now)" if pair == now else ""
        cells = [f"{row[n]['recall@10']:.3f} / {row[n]['ndcg@10']:.3f} | {on_time(n, pair):.3f}" for n in names]
        print(f"| {pair[0]:g} / {pair[1]:g} / {pair[2]:g}{mark} | " + " | ".join(cells)
              + f" | {row['relative_recall@10']:.4f} | {row['worst_rank']} of {len(table)} |")  # fmt: skip
    print("\n| data | k | fold | questions | pair chosen on the other folds | held-out recall@10 / nDCG@10 "
          f"| held-out at the pick ({key(pick)}) | held-out now ({key(now)}) |\n"
          + "|---" * 8 + "|")  # fmt: skip
    for f in folds:
        t, p, n = f["test"], f["every"][pick], f["every"].get(now)
        here = f"{n['recall@10']:.3f} / {n['ndcg@10']:.3f}" if n else "(not in the grid)"
        print(
            f"| {f['data']} | {f['k']} | {f['fold']} | {f['questions']} | {key(f['chosen'])} "
            f"| {t['recall@10']:.3f} / {t['ndcg@10']:.3f} | {p['recall@10']:.3f} / {p['ndcg@10']:.3f} | {here} |"
        )
    print("\n| data | k | cross-validated recall@10 | cross-validated nDCG@10 |\n|---|---|---|---|")
    for name in names:
        for k in sorted({f["k"] for f in folds}):
            mine = [f for f in folds if f["data"] == name and f["k"] == k]
            count = sum(f["questions"] for f in mine)
            r = sum(f["test"]["recall@10"] * f["questions"] for f in mine) / count
            g = sum(f["test"]["ndcg@10"] * f["questions"] for f in mine) / count
            print(f"| {name} | {k} | {r:.3f} | {g:.3f} |")
    folds_out = [f | {"chosen": key(f["chosen"]), "every": {key(p): v for p, v in f["every"].items()}} for f in folds]
    return {"pick": key(pick), "pairs": {key(p): row for p, row in table.items()}, "folds": folds_out}


def run(
    stores: dict[str, tuple[engram.Memory, list[dict[str, Any]]]],
    grid: Sequence[Pair],
    ks: Sequence[int],
    metrics: retrieval_cv.Metrics,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Score every data set at every pair, cross-validate per data set, print and return the tables."""
    runs: dict[str, dict[Any, list[dict[str, float]]]] = {}
    folds: list[dict[str, Any]] = []
    timed: dict[str, list[int]] = {}
    for name, (mem, questions) in stores.items():
        start = time.perf_counter()
        found = signals(mem, questions)
        timed[name] = [i for i, f in enumerate(found) if f["boosts"] or f["ranges"] or f["asks"]]
        log(f"{name}: first stage of {len(questions)} questions in {time.perf_counter() - start:.0f} s; "
            f"{len(timed[name])} hold a time expression or ask when")  # fmt: skip
        runs[name] = {}
        for pair in grid:
            runs[name][pair] = [
                metrics(ranked(f, pair), set(q["evidence"])) for q, f in zip(questions, found, strict=True)
            ]
        folds += retrieval_cv.cross_validate(name, questions, runs[name], ks)
    return report(runs, folds, timed)


__all__ = ["DEPTH", "parse_pairs", "ranked", "run", "signals"]
