"""Ranking levers measured offline, each over a grid of fusion weights and cross-validated on both data sets.

``bench_retrieval.py --levers`` reads, once per data set, what the hybrid search scores with: every live item's
analysed terms, length, vector and namespace, the store's corpus statistics, and each question's terms and vector
(from the store's own index, so the figures are the engine's: at the lever ``now`` and the weight in
``engram.index.fusion`` it reproduces the hybrid search's recall@10 and nDCG@10). Then every lever is ranked
offline at every keyword weight of ``--grid``, and for each lever:

- its figures per data set and per category (LoCoMo's categories, the chats' kinds) at the weight the
  cross-data-set procedure picks within the lever (``retrieval_cv.summary``: never the grid's worst on any data set
  or fold, then the largest mean share of each data set's best recall@10);
- per data set, the cross-validated figures (k folds by conversation, each fold at the weight chosen on the
  others: ``retrieval_cv.cross_validate``) and each fold's held-out figures.

A lever is a change of the scoring that ADR 0002 defines (``keyword = tanh(bm25 / ideal)``, ``semantic =
max(cosine, 0)``, ``similarity = kw * keyword + sem * semantic``), of BM25's constants, or of the statistics BM25
reads. The candidates are every item of the question's namespace with a query term or a positive cosine (the
hybrid search's; its shortlist never changes the page). Ties go by item key, as the search orders them.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import retrieval_cv

import engram
from engram.index import keyword as bm25_index
from engram.index import text as analysis

Array = npt.NDArray[np.float64]


@dataclass
class Question:
    """One question's candidates (its namespace's items) with what every lever scores them by."""

    ns: tuple[str, ...]
    category: Any
    tfs: Array  # query terms x candidates
    df: Array  # per query term, in the whole store
    scope_df: Array  # per query term, in the question's namespace
    lengths: Array
    cosine: Array
    relevant: npt.NDArray[np.bool_]
    evidence: int
    proper: npt.NDArray[np.bool_]  # per query term: a capitalised word not first in the question (a name)


@dataclass
class DataSet:
    """A data set read from its store: the questions and the corpus statistics of the store and each namespace."""

    questions: list[Question]
    docs: int
    avgdl: float
    scope_docs: dict[tuple[str, ...], int]
    scope_avgdl: dict[tuple[str, ...], float]


def read(mem: engram.Memory, questions: list[dict[str, Any]]) -> DataSet:
    """Read every item's terms and vector from ``mem``'s index and each question's terms and vector."""
    mem.flush_index()
    index = mem.pool.index(mem.branch)
    slots = np.flatnonzero(index.alive[: index.size])
    docs = [index.docs[int(s)] for s in slots]
    assert index.vectors is not None and all(d is not None for d in docs)
    vectors = np.asarray(index.vectors.rows(slots.astype(np.int64)), dtype=np.float32)
    counts = [Counter(d.terms) for d in docs]  # type: ignore[union-attr]
    lengths = np.array([sum(c.values()) for c in counts], dtype=np.float64)
    df: Counter[str] = Counter()
    by_ns: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, (doc, c) in enumerate(zip(docs, counts, strict=True)):
        df.update(c.keys())
        by_ns[doc.namespace].append(i)  # type: ignore[union-attr]
    scope_df = {}
    for ns, ids in by_ns.items():
        ids.sort(key=lambda i: docs[i].key)  # type: ignore[union-attr]  # the search's tie order: by tree key
        scope_df[ns] = Counter(t for i in ids for t in counts[i])
    out = []
    for item in questions:
        ns = tuple(item["ns"])
        ids = by_ns[ns]
        terms = list(dict.fromkeys(analysis.terms(item["q"])))
        tfs = np.array([[counts[i].get(t, 0) for i in ids] for t in terms], dtype=np.float64).reshape(len(terms), -1)
        vector = np.asarray(index.query_vector(item["q"]), dtype=np.float32)
        evidence = set(item["evidence"])
        names = set(analysis.terms(" ".join(re.findall(r"(?<!^)\b[A-Z][a-z]+", item["q"]))))
        out.append(Question(
            ns, item["category"], tfs, np.array([df.get(t, 0) for t in terms], dtype=np.float64),
            np.array([scope_df[ns].get(t, 0) for t in terms], dtype=np.float64), lengths[ids],
            np.einsum("ij,j->i", vectors[ids], vector).astype(np.float64),
            np.array([docs[i].item_key in evidence for i in ids]), len(evidence),  # type: ignore[union-attr]
            np.array([t in names for t in terms], dtype=bool),
        ))  # fmt: skip
    return DataSet(out, len(docs), float(lengths.mean()), {ns: len(ids) for ns, ids in by_ns.items()},
                   {ns: float(lengths[ids].mean()) for ns, ids in by_ns.items()})  # fmt: skip


@dataclass(frozen=True)
class Lever:
    """A scoring: BM25's constants and statistics, the keyword and semantic transforms."""

    name: str
    k1: float = bm25_index.K1
    b: float = bm25_index.B
    scope_stats: bool = False  # BM25's idf and average length from the searched namespace, not the whole store
    names: float = 1.0  # query terms that are names (capitalised inside the question) weigh this much
    keyword: Callable[[Array], Array] = np.tanh  # of bm25 / ideal
    semantic: Callable[[Array], Array] = lambda c: np.clip(c, 0.0, 1.0)


def _idf(df: Array, docs: int) -> Array:
    return np.log(1.0 + (docs - df + 0.5) / (df + 0.5))


def signals(q: Question, data: DataSet, lever: Lever) -> tuple[Array, Array, npt.NDArray[np.bool_]]:
    """A question's keyword and semantic signals under ``lever``, and which candidates have evidence."""
    if lever.scope_stats:
        idf, avgdl = _idf(q.scope_df, data.scope_docs[q.ns]), data.scope_avgdl[q.ns]
    else:
        idf, avgdl = _idf(q.df, data.docs), data.avgdl
    idf = idf * np.where(q.proper, lever.names, 1.0)
    weight = q.tfs * (lever.k1 + 1) / (q.tfs + lever.k1 * (1 - lever.b + lever.b * q.lengths / avgdl))
    bm25 = (idf[:, None] * weight).sum(0) if len(idf) else np.zeros(len(q.cosine))
    ideal = float(idf.sum())
    keyword = lever.keyword(bm25 / ideal) if ideal > 0 else np.zeros_like(bm25)
    return keyword, lever.semantic(q.cosine), (bm25 > 0) | (q.cosine > 0)


def metrics(q: Question, scores: Array, has: npt.NDArray[np.bool_]) -> dict[str, float]:
    """recall@5, recall@10, nDCG@10 of the candidates ranked by ``scores`` (ties by key)."""
    idx = np.flatnonzero(has)
    top = idx[np.argsort(-scores[idx], kind="stable")][:10]
    found = q.relevant[top]
    dcg = sum(1 / math.log2(i + 2) for i, hit in enumerate(found) if hit)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(10, q.evidence)))
    return {"recall@5": float(found[:5].sum()) / q.evidence, "recall@10": float(found.sum()) / q.evidence,
            "ndcg@10": dcg / ideal}  # fmt: skip


def grid_scores(data: DataSet, lever: Lever, grid: Sequence[float]) -> dict[float, list[dict[str, float]]]:
    """Each question's metrics at every keyword weight of ``grid`` (semantic weight 1 minus it)."""
    out: dict[float, list[dict[str, float]]] = {w: [] for w in grid}
    for q in data.questions:
        keyword, semantic, has = signals(q, data, lever)
        for w in grid:
            out[w].append(metrics(q, w * keyword + (1 - w) * semantic, has))
    return out


def _clip_linear(x: Array) -> Array:
    return np.minimum(x, 1.0)


#: The levers measured (``now`` is the scoring of ADR 0002 as it is).
LEVERS = [
    Lever("now"),
    Lever("keyword = min(bm25 / ideal, 1)", keyword=_clip_linear),
    Lever("keyword = bm25 / (bm25 + ideal)", keyword=lambda x: x / (1 + x)),
    Lever("keyword = tanh(0.75 bm25 / ideal)", keyword=lambda x: np.tanh(0.75 * x)),
    Lever("keyword = tanh(1.5 bm25 / ideal)", keyword=lambda x: np.tanh(1.5 * x)),
    Lever("semantic = max(cosine, 0) ** 0.5", semantic=lambda c: np.sqrt(np.clip(c, 0.0, 1.0))),
    Lever("semantic = max(cosine, 0) ** 2", semantic=lambda c: np.clip(c, 0.0, 1.0) ** 2),
    Lever("semantic = clip((cosine - 0.1) / 0.9)", semantic=lambda c: np.clip((c - 0.1) / 0.9, 0.0, 1.0)),
    Lever("semantic = clip((cosine - 0.2) / 0.8)", semantic=lambda c: np.clip((c - 0.2) / 0.8, 0.0, 1.0)),
    Lever("BM25 K1 0.6", k1=0.6),
    Lever("BM25 K1 2.0", k1=2.0),
    Lever("BM25 B 0", b=0.0),
    Lever("BM25 B 0.15", b=0.15),
    Lever("BM25 B 0.75", b=0.75),
    Lever("query names weigh 0.5", names=0.5),
    Lever("query names weigh 2", names=2.0),
    Lever("BM25 statistics of the namespace searched", scope_stats=True),
    Lever("namespace statistics + B 0.15 + min(bm25 / ideal, 1)", b=0.15, scope_stats=True, keyword=_clip_linear),
]


def _mean(rows: Sequence[dict[str, float]], name: str) -> float:
    return sum(r[name] for r in rows) / len(rows) if rows else math.nan


def run(
    stores: dict[str, tuple[engram.Memory, list[dict[str, Any]]]],
    grid: Sequence[float],
    ks: Sequence[int],
    categories: Callable[[Any], str],
    log: Callable[[str], None],
    only: str | None = None,
) -> dict[str, Any]:
    """Measure every lever (or those whose name holds ``only``) on every data set; print the tables."""
    read_in: dict[str, tuple[DataSet, list[dict[str, Any]]]] = {}
    for name, (mem, questions) in stores.items():
        start = time.perf_counter()
        read_in[name] = (read(mem, questions), questions)
        log(f"{name}: {len(questions)} questions read in {time.perf_counter() - start:.0f} s")
    found: dict[str, Any] = {}
    for lever in [lv for lv in LEVERS if only is None or only in lv.name or lv.name == "now"]:
        runs: dict[str, dict[float, list[dict[str, float]]]] = {}
        folds: list[dict[str, Any]] = []
        for name, (data, questions) in read_in.items():
            runs[name] = grid_scores(data, lever, grid)
            folds += retrieval_cv.cross_validate(name, questions, runs[name], ks)
        pick, table = retrieval_cv.summary(runs, folds)
        found[lever.name] = {"pick": pick, "table": table, "folds": folds, "runs": runs}
        log(f"{lever.name}: pick {pick:.2f}: " + ", ".join(
            f"{n} {table[pick][n]['recall@10']:.3f} / {table[pick][n]['ndcg@10']:.3f}" for n in runs))  # fmt: skip
    report(found, read_in, categories)
    return {name: {k: v for k, v in f.items() if k != "runs"} for name, f in found.items()}


def _cv(folds: list[dict[str, Any]], name: str, k: int) -> tuple[float, float]:
    mine = [f for f in folds if f["data"] == name and f["k"] == k]
    n = sum(f["questions"] for f in mine)
    return (sum(f["test"]["recall@10"] * f["questions"] for f in mine) / n,
            sum(f["test"]["ndcg@10"] * f["questions"] for f in mine) / n)  # fmt: skip


def report(found: dict[str, Any], read_in: dict[str, Any], categories: Callable[[Any], str]) -> None:
    """Markdown tables: per lever at fixed weights and at its pick; cross-validated; per category; per fold."""
    names = list(read_in)
    weights = sorted(next(iter(found.values()))["runs"][names[0]])
    print("| lever | " + " | ".join(f"{n} at {w:.2f}" for w in weights for n in names) + " |")
    print("|---" * (1 + len(weights) * len(names)) + "|")
    for lever, f in found.items():
        cells = [f"{f['table'][w][n]['recall@10']:.3f} / {f['table'][w][n]['ndcg@10']:.3f}" for w in weights
                 for n in names]  # fmt: skip
        print(f"| {lever} | " + " | ".join(cells) + " |")
    ks = sorted({fold["k"] for fold in next(iter(found.values()))["folds"]})
    print("\n| lever | pick (keyword weight) | " + " | ".join(f"{n} at the pick" for n in names) + " | "
          + " | ".join(f"{n} CV k={k}" for n in names for k in ks) + " | mean share | worst rank |")  # fmt: skip
    print("|---" * (4 + len(names) + len(names) * len(ks)) + "|")
    for lever, f in found.items():
        row = f["table"][f["pick"]]
        cells = [f"{row[n]['recall@10']:.3f} / {row[n]['ndcg@10']:.3f}" for n in names]
        cvs = [" / ".join(f"{v:.3f}" for v in _cv(f["folds"], n, k)) for n in names for k in ks]
        print(f"| {lever} | {f['pick']:.2f} | " + " | ".join(cells + cvs)
              + f" | {row['relative_recall@10']:.4f} | {row['worst_rank']} of {len(f['table'])} |")  # fmt: skip
    for name in names:
        questions = read_in[name][1]
        groups = list(dict.fromkeys(categories(q["category"]) for q in questions))
        print(f"\n{name}, per category at each lever's pick (recall@10 / nDCG@10):\n\n| lever | all | "
              + " | ".join(groups) + " |\n" + "|---" * (2 + len(groups)) + "|")  # fmt: skip
        for lever, f in found.items():
            rows = f["runs"][name][f["pick"]]
            cells = []
            for g in ["all", *groups]:
                mine = [r for r, q in zip(rows, questions, strict=True) if g == "all" or categories(q["category"]) == g]
                cells.append(f"{_mean(mine, 'recall@10'):.3f} / {_mean(mine, 'ndcg@10'):.3f}")
            print(f"| {lever} | " + " | ".join(cells) + " |")
    print("\nPer fold, held-out recall@10 / nDCG@10 at the weight chosen on the other folds (that weight):\n")
    folds0 = next(iter(found.values()))["folds"]
    print("| lever | " + " | ".join(f"{f['data']} k={f['k']} fold {f['fold']}" for f in folds0) + " |")
    print("|---" * (1 + len(folds0)) + "|")
    for lever, f in found.items():
        print(
            f"| {lever} | "
            + " | ".join(
                f"{x['test']['recall@10']:.3f} / {x['test']['ndcg@10']:.3f} ({x['chosen']:.2f})" for x in f["folds"]
            )
            + " |"
        )


__all__ = ["LEVERS", "DataSet", "Lever", "Question", "grid_scores", "metrics", "read", "run", "signals"]
