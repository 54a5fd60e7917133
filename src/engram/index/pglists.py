"""The sorted lists a PostgreSQL search reads (:mod:`engram.index.pgquery`), how deep, and when to stop.

Each list is sorted by a value that bounds part of an item's score: a query term's postings by impact
(BM25's term weight without idf, computed at the branch's reference average length), the nearest
vectors by cosine, the newest items by ``updated_at``, the most confident by confidence. An item on no
list scores at most what the lists' last values allow (:meth:`Lists.bound`; Fagin's threshold
algorithm). A term list that is short is read whole at once (it is then *closed*: every item holding
the term was read). Each further round deepens, fourfold, the open lists that weigh most in the bound,
so a common term (small idf) is not read deep when rarer terms decide the page.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from engram.index import keyword
from engram.index.fusion import DEFAULT_WEIGHTS
from engram.index.ranking import ModePlan, Ranking, Request, recency_score

#: Items read from each list in the first round (at least twice the page).
FIRST_DEPTH = 64
#: Nearest vectors read in the first round of a filtered search.
FIRST_FILTERED = 16
#: A term list this short (or up to 4x its depth) is read whole in one go.
FULL_LIST = 512
#: Slack on the bound for float rounding (scores themselves are exact).
SLACK = 1e-4
#: List ids besides the query terms' (0, 1, ...); FRESH: the vectors not in the HNSW index yet, read exactly.
VECTOR, NEWEST, CONFIDENT, FRESH = -1, -2, -3, -4


class Lists:
    """The lists of one search: their depths, and the bound on what an unread item could score."""

    def __init__(
        self,
        terms: list[str],
        plan: ModePlan,
        request: Request,
        stats: keyword.Stats,
        *,
        exact: bool,
        excluded: int,
        filtered: bool,
        local: keyword.Stats | None = None,
        weights: tuple[float, float] = DEFAULT_WEIGHTS,
    ) -> None:
        self.terms = terms
        #: A hybrid search's (keyword, semantic) weights (:func:`engram.index.fusion.fusion_weights`).
        self.weights = weights
        self.mode = plan.mode
        self.vector = plan.vector
        #: Whether the vectors are scanned exactly (a small branch) rather than through the HNSW index.
        self.exact = exact
        self.profile = request.profile
        self.newest = request.profile.recency > 0
        self.confident = request.profile.confidence > 0
        self.stats = stats
        self.idf = [stats.idf(t) for t in terms]
        self.ideal = keyword.ideal(self.idf)
        first = max(FIRST_DEPTH, 2 * (request.offset + request.limit))
        # a term's postings in the head rows, at most (a past overlay may have taken some out of the stats); the
        # branch's own frequencies when ``stats`` are a fan-out's (engram.index.corpus): the bound, stretched by
        # their average length, holds for any statistics, and only the lists' lengths are the branch's
        self.sizes = [(local or stats).frequency(t) + excluded for t in terms]
        self.depths: dict[int, int] = {i: self._term_depth(i, first) for i in range(len(terms))}
        if self.vector is not None:
            # A filtered HNSW scan walks past the items the filter rejects, and costs: a semantic search starts
            # it at the page's size; a hybrid one reads the nearest vectors unfiltered (the filter then applies
            # to the items read, and the last cosine still bounds every unread item).
            semantic_filtered = filtered and self.mode == "semantic"
            self.depths[VECTOR] = (
                max(FIRST_FILTERED, 2 * (request.offset + request.limit)) if semantic_filtered else first
            )
        if self.newest:
            self.depths[NEWEST] = first
        if self.confident:
            self.depths[CONFIDENT] = first
        self.open: set[int] = set()
        self.last: dict[int, float] = {}

    def _term_depth(self, i: int, depth: int) -> int:
        size = self.sizes[i]
        return size + 1 if size <= max(FULL_LIST, 4 * depth) else depth

    def any(self) -> bool:
        """Whether any list can hold an item with evidence (a query term or a vector)."""
        return bool(self.terms) or self.vector is not None

    def read(self, summary: dict[int, tuple[int, float]]) -> None:
        """Take in what a round read: per list, how many items and the last value."""
        self.last = {i: v for i, (_, v) in summary.items()}
        self.open = {i for i, (n, _) in summary.items() if n >= self.depths.get(i, self.depths.get(VECTOR, 0))}
        nearest = [last for i, last in self.last.items() if i in (VECTOR, FRESH) and i in self.open]
        if nearest:  # the two vector lists bound the cosine of an unread item together
            self.open.add(VECTOR)
            self.last[VECTOR] = max(nearest)
        else:
            self.open.discard(VECTOR)

    def cosine_cap(self) -> float:
        """The highest cosine an item off the vector lists can have (0 when they hold every vector)."""
        return self.last[VECTOR] if VECTOR in self.open else 0.0

    def bound(self, ref: float, now: int) -> float:
        """The best score an item on no list could have (-inf when every item with evidence was read)."""
        open_, last = self.open, self.last
        if (self.newest and NEWEST not in open_) or (self.confident and CONFIDENT not in open_):
            return -math.inf  # a complete list of the items in scope: every item was read
        kw_open = any(i in open_ for i in range(len(self.terms)))
        vec_open = VECTOR in open_
        similarity = 0.0
        if self.mode == "keyword":
            if not kw_open:
                return -math.inf
            similarity = self._keyword(ref)
        elif self.mode == "semantic":
            if not vec_open:
                return -math.inf
            similarity = max(last[VECTOR], 0.0)
        else:
            if not (kw_open or vec_open):
                return -math.inf
            cosine = max(last[VECTOR], 0.0) if vec_open else 0.0
            similarity = self.weights[0] * self._keyword(ref) + self.weights[1] * cosine
        p = self.profile
        confidence = last[CONFIDENT] if self.confident else 1.0
        recency = 1.0
        if self.newest:
            recency = float(recency_score(np.asarray([int(last[NEWEST])], np.int64), now, p.half_life_hours)[0])
        return p.similarity * similarity + p.confidence * confidence + p.recency * recency + SLACK

    def bounds(self, values: dict[int, npt.NDArray[np.float64]], ref: float, cap: float) -> npt.NDArray[np.float64]:
        """The best scores items read but not scored yet could have, as :meth:`bound` for an unread item:
        ``values[i]`` holds each item's value on list ``i`` (NaN: not read there; the list's last value bounds
        it then), an item off the vector lists has a cosine of ``cap`` at most, and confidence and recency
        count as 1."""
        n = len(next(iter(values.values()))) if values else 0
        stretch = max(1.0, self.stats.avgdl / ref) if ref > 0 else 1.0
        kw = np.zeros(n)
        for i, idf in enumerate(self.idf):
            fill = self.last[i] if i in self.open else 0.0
            found = values.get(i)
            kw += idf * stretch * (np.full(n, fill) if found is None else np.where(np.isnan(found), fill, found))
        kw = kw * (1 + SLACK) + SLACK
        keyword_part = np.where(kw > SLACK, np.tanh(kw / self.ideal), 0.0) if self.ideal > 0 else np.zeros(n)
        cosine = np.full(n, cap)
        for i in (VECTOR, FRESH):
            if i in values:
                cosine = np.where(np.isnan(values[i]), cosine, values[i])
        cosine = np.clip(cosine, 0.0, 1.0)
        if self.mode == "keyword":
            similarity = keyword_part
        elif self.mode == "semantic":
            similarity = cosine
        else:
            similarity = self.weights[0] * keyword_part + self.weights[1] * cosine
        p = self.profile
        return p.similarity * similarity + p.confidence + p.recency + SLACK

    def _contributions(self, ref: float) -> dict[int, float]:
        """Each open term list's share of the bound's BM25: idf x (impact bound at the current length)."""
        stretch = max(1.0, self.stats.avgdl / ref) if ref > 0 else 1.0  # impacts were computed at length ``ref``
        return {i: self.idf[i] * stretch * self.last[i] for i in range(len(self.terms)) if i in self.open}

    def _keyword(self, ref: float) -> float:
        kw = sum(self._contributions(ref).values()) * (1 + SLACK) + SLACK
        return math.tanh(kw / self.ideal) if self.ideal > 0 and kw > SLACK else 0.0

    def deepen(self, ref: float) -> None:
        """Read further next round: the open term lists that weigh at least a quarter of the heaviest one,
        the vector list when it weighs as much as those or no term list is open, and the others."""
        contributions = self._contributions(ref)
        heaviest = max(contributions.values(), default=0.0)
        grown = False
        for i, weight in contributions.items():
            if weight >= heaviest / 4:
                self.depths[i] = self._term_depth(i, 4 * self.depths[i])
                grown = True
        if VECTOR in self.open:
            semantic = self.weights[1] * max(self.last[VECTOR], 0.0)
            keyword_part = self.weights[0] * self._keyword(ref)
            if self.mode == "semantic" or not grown or semantic >= keyword_part / 4:
                self.depths[VECTOR] *= 4
        for i in (NEWEST, CONFIDENT):
            if i in self.open:
                self.depths[i] *= 4

    def settled(self, ranking: Ranking, chosen: list[int], request: Request, bound: float) -> bool:
        """No unread item can enter the page: the page is full and its last item beats the bound, or the
        bound is under ``min_score``, or nothing unread has evidence."""
        if bound == -math.inf or request.limit <= 0:
            return True
        if request.min_score is not None and bound < request.min_score:
            return True
        return len(chosen) >= request.limit and ranking.score(chosen[-1]) > bound


class Reads:
    """What a search's lists read so far, by item: an item gets an id the first time a list gives it; per list,
    the ids it gave and their values (a list read again from its start replaces what it gave before); the
    cosines the vector lists gave (kept across rounds); and which items were fetched or judged unable to rank.
    Arrays over ids, so a round's bookkeeping costs numpy operations, not a dictionary lookup per item."""

    def __init__(self) -> None:
        self.ids: dict[bytes, int] = {}
        self.keys: list[bytes] = []
        self.lists: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}
        self._near = np.zeros(0)
        self._probed = np.zeros(0, dtype=bool)

    def take(self, read: dict[int, tuple[list[bytes], list[float]]]) -> None:
        """Take in what lists gave this round: per list, its keys and values in its order."""
        ids, keys = self.ids, self.keys
        for i, (found, values) in read.items():
            at = np.empty(len(found), dtype=np.int64)
            for n, key in enumerate(found):
                j = ids.get(key)
                if j is None:
                    j = ids[key] = len(keys)
                    keys.append(key)
                at[n] = j
            self.lists[i] = (at, np.asarray(values, dtype=np.float64))
        size = len(keys)
        if len(self._near) < size:
            self._near = np.concatenate([self._near, np.full(size - len(self._near), np.nan)])
            self._probed = np.concatenate([self._probed, np.zeros(size - len(self._probed), dtype=bool)])
        for i in (VECTOR, FRESH):
            if i in read:
                at, cosines = self.lists[i]
                self._near[at] = cosines

    def summary(self) -> dict[int, tuple[int, float]]:
        """Per list read: how many items it gave and its last (lowest) value."""
        return {i: (len(at), float(values.min())) for i, (at, values) in self.lists.items() if len(at)}

    def unprobed(self) -> npt.NDArray[np.int64]:
        """The items on some list that were neither fetched nor judged unable to rank."""
        on = np.zeros(len(self.keys), dtype=bool)
        for at, _ in self.lists.values():
            on[at] = True
        return np.flatnonzero(on & ~self._probed)

    def probed(self, ids: npt.NDArray[np.int64]) -> None:
        """Mark items as decided: fetched, or unable to rank."""
        self._probed[ids] = True

    def values(self, ids: npt.NDArray[np.int64]) -> dict[int, npt.NDArray[np.float64]]:
        """Per list, the value it gave each of ``ids`` (NaN: not on that list)."""
        out = {}
        for i, (at, found) in self.lists.items():
            column = np.full(len(self.keys), np.nan)
            column[at] = found
            out[i] = column[ids]
        return out

    def near(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """The cosines the vector lists gave ``ids`` (NaN: on neither)."""
        return self._near[ids]


__all__ = ["CONFIDENT", "FIRST_DEPTH", "FRESH", "FULL_LIST", "NEWEST", "SLACK", "VECTOR", "Lists", "Reads"]
