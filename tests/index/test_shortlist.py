"""Pruned ranking (issue #11): a page found from a shortlist is the page of ranking every candidate.

Also the caches the fast path leans on: the tie order sorted in numpy, and each query term's live postings
with their BM25 weights kept between queries.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from engram.index import ranking
from engram.index.keyword import KeywordIndex
from engram.index.ranking import (
    PROFILES,
    SAMPLE,
    SAMPLED_FROM,
    Profile,
    Signals,
    best_first,
    best_matches,
    rank,
    rank_page,
    select,
    shortlist,
)

NOW = 1_800_000_000_000
HOUR = 3_600_000


def corpus(rng: np.random.Generator, size: int, *, dense_cosine: bool = False) -> Signals:
    """Candidates like an engine's over an HNSW graph: BM25 for many, a positive cosine for a few."""
    bm25 = np.where(rng.random(size) < 0.5, rng.gamma(2.0, 1.5, size), 0).astype(np.float32)
    bm25[rng.random(size) < 0.05] = 3.0  # ties
    cosine = np.zeros(size, dtype=np.float32)
    near = rng.random(size) < (1.0 if dense_cosine else 0.02)
    cosine[near] = rng.uniform(-0.2, 0.9, int(near.sum()))
    updated = NOW - rng.integers(0, 400 * HOUR, size)
    updated[rng.random(size) < 0.1] = NOW - HOUR  # ties on updated_at too
    return Signals(
        rng.random(size) < 0.9,
        updated.astype(np.int64),
        rng.random(size).astype(np.float32),
        bm25=bm25,
        cosine=cosine,
        ideal=4.0,
    )


def key_of(position: int) -> bytes:
    return f"k{position % 97:03d}-{position}".encode()  # not in position order


def full_page(signals: Signals, mode: str, profile: Profile, **page: Any) -> tuple[list[int], list[float]]:
    ranked = rank(signals, mode, profile, NOW, page.get("min_score"))
    want = page["offset"] + page["limit"]
    chosen = select(ranked.order(key_of, want), page["offset"], page["limit"], page.get("admit"))
    return chosen, [ranked.score(i) for i in chosen]


def pruned_page(signals: Signals, mode: str, profile: Profile, **page: Any) -> tuple[list[int], list[float]]:
    ranked, chosen = rank_page(
        signals, mode, profile, NOW, page.get("min_score"), key_of=key_of, offset=page["offset"],
        limit=page["limit"], admit=page.get("admit"),
    )  # fmt: skip
    return chosen, [ranked.score(i) for i in chosen]


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "semantic"])
@pytest.mark.parametrize("profile", ["similarity", "balanced", "recent", "quality"])
def test_rank_page_gives_the_page_of_ranking_every_candidate(mode: str, profile: str) -> None:
    rng = np.random.default_rng(hash((mode, profile)) % 2**32)
    for trial in range(12):
        signals = corpus(rng, 6_000)
        page: dict[str, Any] = {"offset": int(rng.integers(0, 30)), "limit": int(rng.integers(0, 25))}
        if trial % 3 == 1:
            page["min_score"] = float(rng.uniform(0.1, 0.7))
        if trial % 4 == 2:
            page["admit"] = lambda batch: [p % 7 != 0 for p in batch]
        assert pruned_page(signals, mode, PROFILES[profile], **page) == full_page(
            signals, mode, PROFILES[profile], **page
        )


def test_the_shortlist_decides_the_page_for_plain_queries_and_bounds_what_it_leaves_out() -> None:
    rng = np.random.default_rng(5)
    signals = corpus(rng, 20_000)
    found = shortlist(signals, "hybrid", PROFILES["similarity"], NOW, keep=256)
    assert found is not None
    short, bound = found
    assert len(short.positions) < 1_500  # the 256 best keyword matches and the few positive cosines
    everything = rank(signals, "hybrid", PROFILES["similarity"], NOW)
    left_out = np.setdiff1d(everything.positions, short.positions)
    assert len(left_out) > 5_000
    assert max(everything.score(int(p)) for p in left_out) <= bound
    chosen = select(short.order(key_of, 10), 0, 10)
    assert short.score(chosen[-1]) > bound  # so the page is settled without ranking the rest
    assert chosen == full_page(signals, "hybrid", PROFILES["similarity"], offset=0, limit=10)[0]


def test_no_shortlist_when_most_positions_have_a_cosine() -> None:
    """Exact vector search (a small index) scores every position: a shortlist would not be shorter."""
    signals = corpus(np.random.default_rng(6), 5_000, dense_cosine=True)
    assert shortlist(signals, "hybrid", PROFILES["similarity"], NOW) is None
    assert shortlist(signals, "keyword", PROFILES["similarity"], NOW) is not None


def test_a_shortlist_that_cannot_settle_the_page_falls_back_to_every_candidate() -> None:
    """All BM25 equal: whatever the shortlist keeps, what it leaves out ties with its page."""
    size = 3_000
    signals = Signals(
        np.ones(size, dtype=bool),
        np.full(size, NOW, dtype=np.int64),
        np.full(size, 0.5, dtype=np.float32),
        bm25=np.full(size, 2.0, dtype=np.float32),
        cosine=np.zeros(size, dtype=np.float32),
        ideal=4.0,
    )
    found = shortlist(signals, "keyword", PROFILES["similarity"], NOW, keep=256)
    assert found is not None and len(found[0].positions) == 256
    page = {"offset": 0, "limit": 10}
    chosen, _ = pruned_page(signals, "keyword", PROFILES["similarity"], **page)
    assert chosen == sorted(range(size), key=key_of)[:10]  # ties by key over every candidate
    assert chosen == full_page(signals, "keyword", PROFILES["similarity"], **page)[0]


def test_best_matches_are_the_top_bm25_and_the_best_left_out() -> None:
    bm25 = np.array([0, 5, 1, 4, 0, 3, 2], dtype=np.float32)
    eligible = np.array([True, True, True, True, True, False, True])
    top, rest = best_matches(bm25, eligible, 2)
    assert sorted(top.tolist()) == [1, 3] and rest == 2.0
    top, rest = best_matches(bm25, eligible, 10)
    assert sorted(top.tolist()) == [1, 2, 3, 6] and rest == 0.0


def test_best_matches_of_a_large_corpus_select_from_a_sampled_threshold_and_stay_exact() -> None:
    """Above SAMPLED_FROM positions the selection starts from a threshold read off a sample: the top and the
    best left out are still exact, with a filter, with ties, with fewer matches than asked for, and when the
    sample misjudges (only sampled positions score high) and every match must be looked at."""
    rng = np.random.default_rng(11)
    size = 300_000
    step = size // SAMPLE

    def reference(bm25: np.ndarray, eligible: np.ndarray, keep: int) -> tuple[list[float], float]:
        values = np.sort(bm25[eligible & (bm25 > 0)])[::-1]
        return values[:keep].tolist(), float(values[keep]) if len(values) > keep else 0.0

    common = np.where(rng.random(size) < 0.95, rng.gamma(2.0, 1.5, size), 0).astype(np.float32)
    tied = np.where(rng.random(size) < 0.9, 3.0, 0).astype(np.float32)
    tied[rng.choice(size, 100, replace=False)] = 4.0
    few = np.zeros(size, dtype=np.float32)
    few[rng.choice(size, 200, replace=False)] = rng.random(200).astype(np.float32) + 0.5
    fooled = np.full(size, 0.5, dtype=np.float32)
    fooled[: 6 * step : step] = 9.0  # six sampled positions score high: too few pass the threshold
    everyone, filtered = np.ones(size, dtype=bool), rng.random(size) < 0.25
    for bm25 in (common, tied, few, fooled):
        for eligible in (everyone, filtered):
            for keep in (10, 256, 1024):
                top, rest = best_matches(bm25, eligible, keep)
                values, best_rest = reference(bm25, eligible, keep)
                assert sorted(bm25[top].tolist(), reverse=True) == values
                assert bool(eligible[top].all()) and rest == best_rest
    assert size >= SAMPLED_FROM


def test_order_sorts_in_numpy_and_reads_keys_only_for_ties() -> None:
    values = np.array([0.5, 0.9, 0.5, 0.5, 0.1, 0.9])
    updated = np.array([1, 2, 3, 3, 4, 2], dtype=np.int64)
    positions = np.array([10, 11, 12, 13, 14, 15], dtype=np.int64)
    asked: list[int] = []

    def key(position: int) -> bytes:
        asked.append(position)
        return {11: b"b", 15: b"a", 12: b"z", 13: b"y", 10: b"c"}[position]

    assert list(best_first(values, updated, positions, key, 10)) == [15, 11, 10, 13, 12, 14]
    assert sorted(asked) == [10, 11, 12, 13, 15]  # only the two runs of equal value, ordered by key alone


def test_keyword_scores_reuse_weights_until_the_statistics_change() -> None:
    docs = {0: "red apple pie", 1: "green apple", 2: "red wine", 3: "apple apple cider"}
    index = KeywordIndex()
    for slot, text in docs.items():
        index.add(slot, text.split())

    def fresh(live: dict[int, str], size: int) -> np.ndarray:
        other = KeywordIndex()
        for slot, text in live.items():
            other.add(slot, text.split())
        return other.scores(["apple", "red"], size)

    first = index.scores(["apple", "red"], 4)
    assert np.array_equal(index.scores(["apple", "red"], 4), first)
    assert np.array_equal(first, fresh(docs, 4))
    index.remove(0, Counter(docs[0].split()))  # the statistics and a live posting change
    live = {s: t for s, t in docs.items() if s}
    assert np.array_equal(index.scores(["apple", "red"], 4), fresh(live, 4))
    index.add(4, "red red apple".split())
    live[4] = "red red apple"
    assert np.array_equal(index.scores(["apple", "red"], 5), fresh(live, 5))
    index.freeze()
    assert np.array_equal(index.scores(["apple", "red"], 5), fresh(live, 5))


def test_the_kept_query_terms_are_bounded() -> None:
    from engram.index.keyword import SCORED_TERMS

    index = KeywordIndex()
    index.add(0, [f"w{i}" for i in range(SCORED_TERMS + 10)])
    for i in range(SCORED_TERMS + 10):
        index.scores([f"w{i}"], 1)
    assert len(index._scored) == SCORED_TERMS


def test_shortlist_size_grows_with_the_page() -> None:
    assert ranking.shortlist_size(10) == ranking.SHORTLIST
    assert ranking.shortlist_size(1_000) == 4_000


def test_add_many_builds_the_index_add_builds() -> None:
    rng = np.random.default_rng(8)
    words = [f"w{i}" for i in range(60)]
    docs = [list(rng.choice(words, int(rng.integers(0, 12)))) for _ in range(3_000)]
    one, bulk = KeywordIndex(), KeywordIndex()
    for slot, terms in enumerate(docs[:500]):  # some postings already there, in lists and in arrays
        one.add(slot, terms)
        bulk.add(slot, terms)
    bulk.freeze()
    bulk.add(500, docs[500])
    one.add(500, docs[500])
    for slot, terms in enumerate(docs[501:], start=501):
        one.add(slot, terms)
    bulk.add_many(list(range(501, len(docs))), docs[501:])
    assert (bulk.stats.docs, bulk.stats.length, bulk.stats.df) == (one.stats.docs, one.stats.length, one.stats.df)
    assert (bulk.live, bulk.size) == (one.live, one.size)
    for query in (["w1"], ["w2", "w30", "w59"], ["nope", "w7"]):
        assert np.array_equal(bulk.scores(query, len(docs)), one.scores(query, len(docs)))
    renumber = np.arange(len(docs), dtype=np.int64)
    (terms_a, arrays_a), (terms_b, arrays_b) = one.export(renumber), bulk.export(renumber)
    assert sorted(terms_a) == sorted(terms_b)
    for term in terms_a:
        ia, ib = terms_a.index(term), terms_b.index(term)
        a = arrays_a["kw_slots"][arrays_a["kw_ends"][ia] : arrays_a["kw_ends"][ia + 1]]
        b = arrays_b["kw_slots"][arrays_b["kw_ends"][ib] : arrays_b["kw_ends"][ib + 1]]
        assert np.array_equal(a, b)
