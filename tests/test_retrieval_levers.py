"""benchmarks/retrieval_levers.py: the offline ranking reproduces the engine's hybrid search (so a lever's figures are
what the engine would give), and a lever changes the scores it claims to change."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

import engram
from engram.index.fusion import fusion_weights

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"

TURNS = {
    ("u", "a"): [
        "Alice: I adopted a beagle called Rex last spring",
        "Bob: my sister moved to Lisbon for work",
        "Alice: Rex loves the beach and chasing seagulls",
        "Bob: we painted the kitchen yellow on Sunday",
        "Alice: the new job at the bakery starts Monday",
        "Bob: Alice, how is your dog doing these days?",
    ],
    ("u", "b"): [
        "Carol: I am learning the cello, slowly",
        "Dan: the cello teacher said practise daily",
        "Carol: Dan bought a red bicycle",
    ],
}
QUESTIONS = [
    (("u", "a"), "What is Alice's dog called?", ["t2"]),
    (("u", "a"), "Where did Bob's sister move?", ["t1"]),
    (("u", "a"), "When does the bakery job start?", ["t4"]),
    (("u", "b"), "What instrument is Carol learning?", ["t0"]),
    (("u", "b"), "What did Dan buy?", ["t2"]),
]


def _levers() -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("retrieval_levers")  # a benchmark script: importable with its folder on the path


def _store() -> tuple[engram.Memory, list[dict[str, object]]]:
    mem = engram.open(":memory:", embedder="hashing:64")
    with mem.transaction("load") as tx:
        for ns, turns in TURNS.items():
            for i, text in enumerate(turns):
                tx.put(ns, f"t{i}", {"text": text})
    mem.flush_index()
    return mem, [{"ns": ns, "q": q, "evidence": ev, "category": 1} for ns, q, ev in QUESTIONS]


def test_the_lever_now_ranks_as_the_hybrid_search_does() -> None:
    levers = _levers()
    mem, questions = _store()
    data = levers.read(mem, questions)
    keyword_weight, _ = fusion_weights(mem.pool.embedder.model_id)  # type: ignore[union-attr]
    now = levers.LEVERS[0]
    assert now.name == "now"
    for item, q in zip(questions, data.questions, strict=True):
        hits = mem.search(item["ns"], item["q"], limit=10, mode="hybrid", when="off")  # type: ignore[arg-type]
        keyword, semantic, has = levers.signals(q, data, now)
        scores = keyword_weight * keyword + (1 - keyword_weight) * semantic
        expected = sorted((h.score for h in hits), reverse=True)
        assert np.allclose(sorted(scores[has], reverse=True)[: len(expected)], expected, atol=1e-6)
        found = levers.metrics(q, scores, has)
        engine = {h.key for h in hits} & set(item["evidence"])  # type: ignore[arg-type]
        assert found["recall@10"] == len(engine) / len(item["evidence"])  # type: ignore[arg-type]


def test_namespace_statistics_lower_the_weight_of_a_term_common_in_the_namespace() -> None:
    levers = _levers()
    mem, questions = _store()
    data = levers.read(mem, questions)
    q = data.questions[0]  # "Alice" is in half of namespace a's turns, and in none of b's
    store_wide = levers.signals(q, data, levers.Lever("store"))[0]
    scoped = levers.signals(q, data, levers.Lever("scope", scope_stats=True))[0]
    names = levers.signals(q, data, levers.Lever("names", names=0.5))[0]
    assert q.proper.any() and not q.proper.all()
    assert not np.allclose(store_wide, scoped)
    assert not np.allclose(store_wide, names)
