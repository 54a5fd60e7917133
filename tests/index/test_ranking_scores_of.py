"""Ranking.scores_of: the scores of a page's positions in one lookup, the same as one score() each."""

from __future__ import annotations

import numpy as np

from engram.index.ranking import Signals, get_profile, rank


def test_scores_of_matches_score_for_every_returned_position() -> None:
    rng = np.random.default_rng(7)
    n = 200
    signals = Signals(
        np.ones(n, dtype=bool), rng.integers(0, 10**12, n), rng.random(n), bm25=rng.random(n) * (rng.random(n) > 0.5),
        cosine=rng.random(n) - 0.3, ideal=1.0,
    )  # fmt: skip
    ranking = rank(signals, "hybrid", get_profile("balanced"), 10**12)
    picked = [int(p) for p in ranking.positions[::7][::-1]]  # any order, as a page gives them
    assert picked and ranking.scores_of(picked) == [ranking.score(p) for p in picked]
    assert ranking.scores_of([]) == []
