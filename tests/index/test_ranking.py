"""The one ranking function (engram.index.ranking): absolute scores, min_score, explain, ties, paging."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import numpy as np
import pytest

from engram.errors import EmbedderError
from engram.index import keyword
from engram.index.ranking import (
    KEYWORD_WEIGHT,
    PROFILES,
    SEMANTIC_WEIGHT,
    Profile,
    Signals,
    keyword_score,
    plan_mode,
    rank,
    select,
)

NOW = 1_800_000_000_000
HOUR = 3_600_000
SRC = Path(__file__).resolve().parents[2] / "src" / "engram"


def signals(bm25: list[float], cosine: list[float], *, ideal: float = 4.0, **extra: object) -> Signals:
    n = len(bm25)
    return Signals(
        np.asarray(extra.get("eligible", [True] * n), dtype=bool),
        np.asarray(extra.get("updated", [NOW] * n), dtype=np.int64),
        np.asarray(extra.get("confidence", [0.5] * n), dtype=np.float32),
        bm25=np.asarray(bm25, dtype=np.float32),
        cosine=np.asarray(cosine, dtype=np.float32),
        ideal=ideal,
    )


def test_keyword_score_is_absolute_and_saturates() -> None:
    ideal = 5.0
    values = keyword_score(np.array([0.0, 1.0, 5.0, 10.0, 1e6]), ideal)
    assert values[0] == 0.0
    assert values[2] == pytest.approx(math.tanh(1.0))  # every query term once, average length: 0.76
    assert list(values) == sorted(values) and values[-1] <= 1.0
    assert keyword_score(np.array([3.0]), 0.0)[0] == 0.0  # no query term in the corpus: no keyword evidence


def test_ideal_is_the_bm25_of_an_average_item_holding_each_term_once() -> None:
    stats = keyword.Stats()
    for words in (["dark", "mode"], ["coffee"], ["dark", "coffee", "black"]):
        stats.add({w: 1 for w in words})
    terms = ["dark", "coffee"]
    one = np.ones(1, dtype=np.float32)
    avg = np.full(1, stats.avgdl, dtype=np.float32)
    by_formula = sum(float(keyword.bm25(one, avg, stats.idf(t), stats.avgdl)[0]) for t in terms)
    assert keyword.ideal(stats.idf(t) for t in terms) == pytest.approx(by_formula, rel=1e-6)


def test_a_score_does_not_depend_on_the_other_candidates() -> None:
    alone = rank(signals([2.0], [0.4]), "hybrid", PROFILES["similarity"], NOW)
    crowd = rank(signals([2.0, 9.0, 0.1, 0.0], [0.4, 0.9, 0.05, 0.3]), "hybrid", PROFILES["similarity"], NOW)
    expected = KEYWORD_WEIGHT * math.tanh(2.0 / 4.0) + SEMANTIC_WEIGHT * float(np.float32(0.4))
    assert alone.score(0) == pytest.approx(expected) == crowd.score(0)


def test_modes_use_their_own_signal_and_need_evidence() -> None:
    found = signals([0.0, 3.0, 0.0], [0.5, -0.2, -0.1])
    assert list(rank(found, "keyword", PROFILES["similarity"], NOW).positions) == [1]
    assert list(rank(found, "semantic", PROFILES["similarity"], NOW).positions) == [0]
    hybrid = rank(found, "hybrid", PROFILES["similarity"], NOW)
    assert list(hybrid.positions) == [0, 1]  # position 2 has no keyword and no positive cosine
    assert hybrid.score(1) == pytest.approx(KEYWORD_WEIGHT * math.tanh(3.0 / 4.0))  # negative cosine counts as 0
    ineligible = signals([3.0], [0.9], eligible=[False])
    assert len(rank(ineligible, "hybrid", PROFILES["similarity"], NOW).positions) == 0


def test_min_score_keeps_exactly_what_reaches_it() -> None:
    found = signals([0.5, 1.0, 2.0, 4.0, 8.0], [0.1, 0.2, 0.3, 0.4, 0.5])
    every = rank(found, "hybrid", PROFILES["similarity"], NOW)
    all_scores = {int(p): every.score(int(p)) for p in every.positions}
    for threshold in (0.0, 0.2, 0.45, 0.7, 0.99):
        kept = rank(found, "hybrid", PROFILES["similarity"], NOW, threshold)
        assert {int(p): kept.score(int(p)) for p in kept.positions} == {
            p: s for p, s in all_scores.items() if s >= threshold
        }


def test_profiles_add_confidence_and_recency() -> None:
    found = signals([2.0, 2.0], [0.5, 0.5], updated=[NOW - 24 * HOUR, NOW], confidence=[1.0, 0.0])
    profile = Profile(0.5, 0.3, 0.2, half_life_hours=24)
    ranked = rank(found, "hybrid", profile, NOW)
    similarity = KEYWORD_WEIGHT * math.tanh(0.5) + SEMANTIC_WEIGHT * 0.5
    assert ranked.score(0) == pytest.approx(0.5 * similarity + 0.3 * 1.0 + 0.2 * 0.5)
    assert ranked.score(1) == pytest.approx(0.5 * similarity + 0.3 * 0.0 + 0.2 * 1.0)


def test_explain_lists_raw_values_weighted_components_and_the_formula() -> None:
    profile = PROFILES["balanced"]
    ranked = rank(signals([3.0], [0.6], ideal=6.0), "hybrid", profile, NOW, embedder="model-x")
    explained = ranked.explain(0)
    assert explained["bm25"] == 3.0 and explained["bm25_ideal"] == 6.0
    assert explained["keyword"] == pytest.approx(math.tanh(0.5))
    assert explained["cosine"] == pytest.approx(0.6) and explained["semantic"] == pytest.approx(0.6)
    assert explained["embedder"] == "model-x" and explained["mode"] == "hybrid" and explained["profile"] == "balanced"
    assert (explained["keyword_weight"], explained["semantic_weight"]) == (KEYWORD_WEIGHT, SEMANTIC_WEIGHT)
    parts = explained["components"]
    assert set(parts) == {"keyword", "semantic", "confidence", "recency"}
    assert sum(parts.values()) == pytest.approx(ranked.score(0))
    assert parts["keyword"] == pytest.approx(profile.similarity * KEYWORD_WEIGHT * math.tanh(0.5))
    assert explained["formula"] == (
        "score = 0.34*similarity + 0.33*confidence + 0.33*recency; similarity = 0.8*keyword + 0.2*semantic; "
        "keyword = tanh(bm25 / 6); semantic = max(cosine, 0); recency = 0.5^(age_hours / 168)"
    )
    keyword_only = rank(signals([3.0], [0.6], ideal=6.0), "keyword", PROFILES["similarity"], NOW).explain(0)
    assert "cosine" not in keyword_only and set(keyword_only["components"]) == {"keyword", "confidence", "recency"}
    assert keyword_only["formula"] == "score = 1*similarity; similarity = keyword; keyword = tanh(bm25 / 6)"


def test_ties_go_newest_first_then_by_key() -> None:
    found = signals([2.0] * 4, [0.5] * 4, updated=[NOW - 5, NOW, NOW, NOW - 5])
    keys = [b"d", b"b", b"a", b"c"]
    ranked = rank(found, "hybrid", PROFILES["similarity"], NOW)
    assert [keys[p] for p in ranked.order(keys.__getitem__, 4)] == [b"a", b"b", b"c", b"d"]


def test_order_is_complete_past_the_first_round() -> None:
    rng = np.random.default_rng(3)
    n = 1000
    found = signals(rng.random(n).tolist(), rng.random(n).tolist())
    ranked = rank(found, "hybrid", PROFILES["similarity"], NOW)
    order = list(ranked.order(lambda i: i.to_bytes(4, "big"), 2))
    assert sorted(order) == list(range(n))
    values = [ranked.score(i) for i in order]
    assert values == sorted(values, reverse=True)


def test_select_pages_through_a_filter() -> None:
    assert select(iter(range(10)), 2, 3) == [2, 3, 4]
    asked: list[list[int]] = []

    def even(batch: list[int]) -> list[bool]:
        asked.append(batch)
        return [i % 2 == 0 for i in batch]

    assert select(iter(range(100)), 1, 3, even) == [2, 4, 6]
    assert asked[0] == [0, 1, 2, 3]  # the first batch is the page's size; later ones grow
    assert select(iter(range(5)), 0, 0) == []
    assert select(iter(range(3)), 0, 10, even) == [0, 2]


def test_plan_mode_degrades_hybrid_and_refuses_semantic() -> None:
    def down() -> np.ndarray:
        raise EmbedderError("model server unreachable")

    vector = np.ones(3, dtype=np.float32)
    assert plan_mode(None, has_embedder=True, vector_error=None, embed=lambda: vector).mode == "hybrid"
    assert plan_mode(None, has_embedder=False, vector_error=None, embed=down).mode == "keyword"
    degraded = plan_mode("hybrid", has_embedder=True, vector_error=None, embed=down)
    assert (degraded.mode, degraded.requested, degraded.vector) == ("keyword", "hybrid", None)
    assert degraded.degraded is not None and "unreachable" in degraded.degraded
    assert plan_mode("hybrid", has_embedder=True, vector_error="stale", embed=lambda: vector).mode == "keyword"
    with pytest.raises(EmbedderError):
        plan_mode("semantic", has_embedder=True, vector_error=None, embed=down)


def test_the_index_layer_never_imports_the_memory_api() -> None:
    """Imports point down (DESIGN.md section 2): the engines and the ranking function take plain values."""
    offenders = []
    for path in (SRC / "index").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{path.name}: {n}" for n in names if n == "engram.store" or n.startswith("engram.store.")]
    assert offenders == []


def test_the_bm25_formula_is_written_once() -> None:
    """Only engram.index.keyword spells out BM25 (K1 and B); every engine calls it."""
    spelled = re.compile(r"\bK1\b")
    users = [p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py") if spelled.search(p.read_text(encoding="utf-8"))]
    assert users == ["index/keyword.py"]
