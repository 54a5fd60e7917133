"""Honest scores (issue #10) on every engine: absolute, comparable across queries, usable with min_score.

The thresholds below are the ones docs/search.md promises for a hybrid search with the default weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest

import engram
from engram.store import Memory

NS = ("users", "alice")
#: A query none of whose words occur in the store scores below this (its best hit included).
NONSENSE_MAX = 0.1
#: An item whose text is the query scores above this.
EXACT_MIN = 0.7

CORPUS = {
    "theme": {"text": "Alice prefers dark mode in every editor", "kind": "pref", "confidence": 0.9},
    "coffee": {"text": "Alice drinks her coffee black, no sugar", "kind": "pref", "confidence": 0.4},
    "trip": {"text": "Alice is travelling to Lisbon in May for a conference", "kind": "event"},
    "pet": {"text": "Her cat Felix likes to sleep on the keyboard", "kind": "fact"},
    "job": {"text": "Alice works as a data engineer at a logistics company", "kind": "fact"},
    "allergy": {"text": "She is allergic to peanuts and carries an epipen", "kind": "fact", "confidence": 1.0},
    "book": {"text": "Currently reading a novel about a lighthouse keeper", "kind": "event"},
    "gym": {"text": "Goes running by the river three mornings a week", "kind": "habit"},
    "meeting": {"text": "Weekly planning meeting with the platform team on Tuesdays", "kind": "event"},
    "lang": {"text": "Learning Portuguese before the trip, about twenty minutes a day", "kind": "habit"},
}
NONSENSE = ["quantum zebra xylophone", "purple volcanic spaceships orbiting saturn", "zzqx blorf"]


def seed(mem: Memory, notes: dict[str, dict[str, Any]] = CORPUS, ns: tuple[str, ...] = NS) -> None:
    with mem.transaction("seed") as tx:
        for key, value in notes.items():
            tx.put(ns, key, value)


def scored(results: Sequence[Any]) -> dict[str, float]:
    return {item.key: item.score for item in results}


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "semantic"])
def test_a_score_does_not_depend_on_what_else_the_search_returns(smem: Memory, mode: str) -> None:
    seed(smem)
    seed(smem, {"other": {"text": "Bob prefers light mode and tea", "kind": "pref"}}, ("users", "bob"))
    for query in ("dark mode editor", "what does Alice drink", "trip to Lisbon"):
        every = scored(smem.search(NS, query, mode=mode, limit=50))  # type: ignore[arg-type]
        assert every, query
        wider = scored(smem.search(("users",), query, mode=mode, limit=50))  # type: ignore[arg-type]
        prefs = scored(smem.search(NS, query, mode=mode, filter={"kind": "pref"}, limit=50))  # type: ignore[arg-type]
        top = scored(smem.search(NS, query, mode=mode, limit=1))  # type: ignore[arg-type]
        cut = min(every.values()) + (max(every.values()) - min(every.values())) / 2
        above = scored(smem.search(NS, query, mode=mode, min_score=cut, limit=50))  # type: ignore[arg-type]
        for subset in (prefs, top, above, {k: v for k, v in wider.items() if k in every}):
            assert subset.keys() <= every.keys()
            assert subset == pytest.approx({k: every[k] for k in subset}, abs=1e-9), (query, subset)


def test_a_nonsense_query_scores_low_and_an_exact_match_high(smem: Memory) -> None:
    seed(smem)
    for query in NONSENSE:
        found = smem.search(NS, query)
        assert found.mode == "hybrid"
        assert all(item.score is not None and item.score < NONSENSE_MAX for item in found), (query, found[:1])
    for key, value in CORPUS.items():
        best = smem.search(NS, value["text"], limit=1)[0]
        assert best.key == key and best.score is not None and best.score > EXACT_MIN, (key, best.score)


def test_scores_compare_across_queries(smem: Memory) -> None:
    seed(smem)
    strong = smem.search(NS, "dark mode editor")[0]
    partial = smem.search(NS, "dark chocolate cake recipe")[0]  # one word of four, the rest unknown
    assert strong.key == partial.key == "theme"
    assert strong.score is not None and partial.score is not None and strong.score > 2 * partial.score


def test_min_score_filters_predictably(smem: Memory) -> None:
    seed(smem)
    for mode in ("hybrid", "keyword", "semantic"):
        every = smem.search(NS, "Alice coffee trip", mode=mode, limit=50)  # type: ignore[arg-type]
        scores = [item.score for item in every]
        assert len(scores) >= 3 and all(s is not None and 0 <= s <= 1 for s in scores)
        for threshold in (0.0, *sorted({round(s, 6) for s in scores if s is not None}), 0.99):
            kept = smem.search(NS, "Alice coffee trip", mode=mode, limit=50, min_score=threshold)  # type: ignore[arg-type]
            assert [i.key for i in kept] == [i.key for i in every if i.score is not None and i.score >= threshold]
            page = smem.search(NS, "Alice coffee trip", mode=mode, limit=1, offset=1, min_score=threshold)  # type: ignore[arg-type]
            assert [i.key for i in page] == [i.key for i in kept][1:2]


@pytest.mark.parametrize("profile", ["similarity", "balanced", "quality"])
def test_explain_reproduces_the_score_from_raw_values(smem: Memory, profile: str) -> None:
    seed(smem)
    for mode in ("hybrid", "keyword", "semantic"):
        for item in smem.search(NS, "Alice dark coffee", mode=mode, profile=profile, explain=True):  # type: ignore[arg-type]
            e = item.explain
            assert e is not None and e["mode"] == mode and e["profile"] == profile
            assert sum(e["components"].values()) == pytest.approx(item.score, abs=1e-9)
            if mode != "semantic":
                assert e["keyword"] == pytest.approx(math.tanh(e["bm25"] / e["bm25_ideal"]))
                assert f"tanh(bm25 / {e['bm25_ideal']:.6g})" in e["formula"]
            if mode != "keyword":
                assert e["semantic"] == pytest.approx(max(e["cosine"], 0.0)) and e["embedder"] == "hashing-v1-384"
            weights = e["weights"]
            assert item.score == pytest.approx(
                weights["similarity"] * e["similarity"]
                + weights["confidence"] * e["confidence"]
                + weights["recency"] * e["recency"],
                abs=1e-9,
            )


def test_thresholds_hold_with_the_default_model() -> None:
    """The same promises with the default MiniLM embedder, whose cosines of unrelated texts sit near 0-0.2."""
    pytest.importorskip("onnxruntime")
    mem = engram.open(":memory:", embedder="minilm")
    seed(mem)
    for query in NONSENSE:
        best = mem.search(NS, query)[0]
        assert best.score is not None and best.score < NONSENSE_MAX, (query, best.key, best.score)
    for key, value in CORPUS.items():
        best = mem.search(NS, value["text"], limit=1)[0]
        assert best.key == key and best.score is not None and best.score > EXACT_MIN, (key, best.score)
    paraphrase = mem.search(NS, "which colour scheme does she like for her code editor?", explain=True)[0]
    assert paraphrase.key == "theme" and paraphrase.explain is not None and paraphrase.explain["cosine"] > 0.3
