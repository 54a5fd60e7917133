"""An incremental BM25 index over numbered slots, scored with numpy.

Documents live in slots (ints). Removing a document frees its slot for good (postings are
tombstoned, not rewritten); :meth:`KeywordIndex.compact` rebuilds when many are dead. Corpus
statistics can be overridden per query, which is how a search in the past scores a few past
versions against the head index exactly as a freshly built index would.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

#: BM25 term-frequency saturation (the usual 1.2).
K1 = 1.2
#: BM25 length normalisation. Memories are short single-topic texts whose extra length carries facts,
#: not repetition, so normalisation is weak (0.3, not the 0.75 tuned for web pages); on LoCoMo this
#: moved keyword recall@10 from 0.621 to 0.642 (benchmarks/RESULTS.md).
B = 0.3


@dataclass(slots=True)
class Stats:
    """Corpus statistics BM25 needs: document count, total length, document frequency per term."""

    docs: int = 0
    length: int = 0
    df: Counter[str] = field(default_factory=Counter)

    @property
    def avgdl(self) -> float:
        """Average document length (1 for an empty corpus)."""
        return self.length / self.docs if self.docs else 1.0

    def idf(self, term: str) -> float:
        """BM25's idf (Lucene's non-negative form)."""
        df = self.df.get(term, 0)
        return math.log(1.0 + (self.docs - df + 0.5) / (df + 0.5))

    def add(self, counts: Mapping[str, int], sign: int = 1) -> None:
        """Count a document in (sign 1) or out (sign -1) of the corpus."""
        self.docs += sign
        self.length += sign * sum(counts.values())
        for term in counts:
            self.df[term] += sign


class OverlayStats(Stats):
    """Corpus statistics of another version: a base plus the difference (shares the base's counts)."""

    def __init__(self, base: Stats) -> None:
        super().__init__(base.docs, base.length, Counter())
        self.base = base

    def idf(self, term: str) -> float:
        df = self.base.df.get(term, 0) + self.df.get(term, 0)
        return math.log(1.0 + (self.docs - df + 0.5) / (df + 0.5))


def bm25(tf: npt.NDArray[np.float32], dl: npt.NDArray[np.float32], idf: float, avgdl: float) -> npt.NDArray[np.float32]:
    """BM25 term weight for term frequencies ``tf`` in documents of lengths ``dl``."""
    return np.asarray(idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl)), dtype=np.float32)


class KeywordIndex:
    """Postings per term (slot, term frequency), document lengths per slot, and corpus stats."""

    def __init__(self) -> None:
        self.stats = Stats()
        self._postings: dict[str, tuple[list[int], list[int]]] = {}
        self._arrays: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]] = {}
        self._counts: dict[int, Counter[str]] = {}
        self._lengths = np.zeros(1024, dtype=np.float32)
        self.size = 0  # one past the highest slot used

    def add(self, slot: int, words: Iterable[str]) -> None:
        """Index a document (its analysed terms) at a fresh slot."""
        counts = Counter(words)
        self._counts[slot] = counts
        self.stats.add(counts)
        if slot >= len(self._lengths):
            grown = np.zeros(max(2 * len(self._lengths), slot + 1), dtype=np.float32)
            grown[: len(self._lengths)] = self._lengths
            self._lengths = grown
        self._lengths[slot] = sum(counts.values())
        self.size = max(self.size, slot + 1)
        for term, tf in counts.items():
            slots, tfs = self._postings.setdefault(term, ([], []))
            slots.append(slot)
            tfs.append(tf)
            self._arrays.pop(term, None)

    def remove(self, slot: int) -> None:
        """Drop the document at ``slot`` (its postings become dead weight until :meth:`compact`)."""
        counts = self._counts.pop(slot, None)
        if counts is not None:
            self.stats.add(counts, -1)
            self._lengths[slot] = 0

    def counts(self, slot: int) -> Counter[str]:
        """Term counts of the document at ``slot`` (empty if none)."""
        return self._counts.get(slot, Counter())

    def _array(self, term: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        found = self._arrays.get(term)
        if found is None:
            slots, tfs = self._postings.get(term, ([], []))
            found = (np.asarray(slots, dtype=np.int64), np.asarray(tfs, dtype=np.float32))
            self._arrays[term] = found
        return found

    def scores(self, query: Iterable[str], size: int, stats: Stats | None = None) -> npt.NDArray[np.float32]:
        """BM25 score of every slot below ``size`` for the query terms (dead slots score 0)."""
        use = stats or self.stats
        out = np.zeros(size, dtype=np.float32)
        avgdl = use.avgdl
        for term in dict.fromkeys(query):
            slots, tfs = self._array(term)
            if not len(slots):
                continue
            live = self._lengths[slots] > 0
            slots, tfs = slots[live], tfs[live]
            out[slots] += bm25(tfs, self._lengths[slots], use.idf(term), avgdl)
        return out

    def score_counts(self, query: Iterable[str], counts: Counter[str], stats: Stats) -> float:
        """BM25 score of one document given by its term counts (for documents outside the index)."""
        length = float(sum(counts.values()))
        total = 0.0
        for term in dict.fromkeys(query):
            tf = counts.get(term, 0)
            if tf:
                total += stats.idf(term) * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / stats.avgdl))
        return total

    def dead_ratio(self) -> float:
        """Share of slots below ``size`` that hold no document."""
        return 1.0 - len(self._counts) / self.size if self.size else 0.0
