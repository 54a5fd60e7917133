"""An incremental BM25 index over numbered slots, scored with numpy.

Documents live in slots (ints). Removing a document frees its slot for good (postings are
tombstoned, not rewritten); :meth:`KeywordIndex.compact` rebuilds when many are dead. Corpus
statistics can be overridden per query, which is how a search in the past scores a few past
versions against the head index exactly as a freshly built index would.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

#: BM25 term-frequency saturation (the usual 1.2).
K1 = 1.2
#: BM25 length normalisation: none. Memories are short single-topic texts whose extra length carries facts,
#: not repetition, so a longer item is not penalised (not the 0.75 tuned for web pages; 0.3 before). Chosen
#: with the fusion weights by cross-validation on LoCoMo and the generated chats (benchmarks/RESULTS.md,
#: "Ranking levers"; ADR 0002, fourth amendment). A term's weight is then ``idf * tf * (K1 + 1) / (tf + K1)``,
#: whatever the item's length; the length-normalised form stays for a B above 0.
B = 0.0


#: Query terms whose live postings (and their BM25 weights at the last statistics) are kept for the next
#: queries, up to this many (the oldest go first): ~20 bytes a posting.
SCORED_TERMS = 4_096


@dataclass(slots=True)
class _Scored:
    """A term's live postings, ascending by slot, and their BM25 weights at the statistics they were
    computed for (reused while ``idf`` and ``avgdl`` stay the same: the same numbers, not recomputed)."""

    slots: npt.NDArray[np.int64]
    tfs: npt.NDArray[np.float32]
    lengths: npt.NDArray[np.float32]
    weights: npt.NDArray[np.float32] | None = None
    idf: float = 0.0
    avgdl: float = 0.0


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

    def frequency(self, term: str) -> int:
        """How many documents hold ``term``."""
        return self.df.get(term, 0)

    def idf(self, term: str) -> float:
        """BM25's idf of ``term`` in this corpus (see :func:`idf`)."""
        return idf(self.frequency(term), self.docs)

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

    def frequency(self, term: str) -> int:
        return self.base.df.get(term, 0) + self.df.get(term, 0)


def idf(df: int, docs: int) -> float:
    """BM25's idf of a term held by ``df`` of ``docs`` documents (Lucene's non-negative form)."""
    return math.log(1.0 + (docs - df + 0.5) / (df + 0.5))


def bm25(tf: npt.NDArray[np.float32], dl: npt.NDArray[np.float32], idf: float, avgdl: float) -> npt.NDArray[np.float32]:
    """BM25 term weight for term frequencies ``tf`` in documents of lengths ``dl``.

    The one BM25 formula: the in-process index and the PostgreSQL engine (which reads term frequencies
    and lengths per candidate row) both score with it.
    """
    return np.asarray(idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl)), dtype=np.float32)


def ideal(idfs: Iterable[float]) -> float:
    """A query's ideal BM25: the score of an average-length document holding each query term once.

    With ``tf = 1`` and ``dl = avgdl`` a term's BM25 weight is its idf (``(K1 + 1) / (1 + K1) = 1``), so
    this is the sum of the query terms' idfs: a function of the query and the corpus statistics, never
    of the other results. Search divides BM25 by it to get a score that means the same across queries.
    """
    return float(sum(idfs))


class KeywordIndex:
    """Postings per term (slot, term frequency), document lengths per slot, and corpus stats.

    Postings loaded from a snapshot stay in compressed-row arrays (``_base_*``, often memory-mapped);
    postings added since live in per-term lists; a term's scoring array joins the two.
    """

    def __init__(self) -> None:
        self.stats = Stats()
        self._postings: dict[str, tuple[list[int], list[int]]] = {}
        self._arrays: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]] = {}
        self._scored: dict[str, _Scored] = {}
        self._lengths = np.zeros(1024, dtype=np.float32)
        self._base_terms: dict[str, int] = {}
        self._base_ends = np.zeros(1, dtype=np.int64)
        self._base_slots = np.zeros(0, dtype=np.int32)
        self._base_tfs = np.zeros(0, dtype=np.float32)
        self.live = 0  # documents indexed
        self.size = 0  # one past the highest slot used

    def add(self, slot: int, words: Iterable[str]) -> None:
        """Index a document (its analysed terms) at a fresh slot."""
        counts = Counter(words)
        stats, postings, arrays = self.stats, self._postings, self._arrays
        length = sum(counts.values())
        stats.docs += 1
        stats.length += length
        stats.df.update(counts.keys())
        self.live += 1
        if slot >= len(self._lengths):
            grown = np.zeros(max(2 * len(self._lengths), slot + 1), dtype=np.float32)
            grown[: len(self._lengths)] = self._lengths
            self._lengths = grown
        self._lengths[slot] = length
        if slot >= self.size:
            self.size = slot + 1
        for term, tf in counts.items():
            found = postings.get(term)
            if found is None:
                postings[term] = ([slot], [tf])
            else:
                found[0].append(slot)
                found[1].append(tf)
            if arrays:
                arrays.pop(term, None)
            if self._scored:
                self._scored.pop(term, None)

    def remove(self, slot: int, counts: Mapping[str, int]) -> None:
        """Drop the document at ``slot``, whose term counts are ``counts`` (its postings become dead
        weight until the owner rebuilds)."""
        self.stats.add(counts, -1)
        self.live -= 1
        self._lengths[slot] = 0
        for term in counts:
            self._scored.pop(term, None)

    def _array(self, term: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        found = self._arrays.get(term)
        if found is None:
            slots, tfs = self._postings.get(term, ([], []))
            at = self._base_terms.get(term)
            if at is None:
                found = (np.asarray(slots, dtype=np.int64), np.asarray(tfs, dtype=np.float32))
            else:
                lo, hi = int(self._base_ends[at]), int(self._base_ends[at + 1])
                found = (
                    np.concatenate([self._base_slots[lo:hi].astype(np.int64), np.asarray(slots, dtype=np.int64)]),
                    np.concatenate([self._base_tfs[lo:hi], np.asarray(tfs, dtype=np.float32)]),
                )
            self._arrays[term] = found
        return found

    def scores(self, query: Iterable[str], size: int, stats: Stats | None = None) -> npt.NDArray[np.float32]:
        """BM25 score of every slot below ``size`` for the query terms (dead slots score 0)."""
        use = stats or self.stats
        out = np.zeros(size, dtype=np.float32)
        avgdl = use.avgdl
        first = True
        for term in dict.fromkeys(query):
            scored = self._scored.get(term)
            if scored is None:
                scored = self._score_term(term)
            if not len(scored.slots):
                continue
            idf = use.idf(term)
            if scored.weights is None or scored.idf != idf or scored.avgdl != avgdl:
                scored.weights, scored.idf, scored.avgdl = bm25(scored.tfs, scored.lengths, idf, avgdl), idf, avgdl
            if first:  # 0 + w is w: the same sums without reading zeros back (-1.4 ms for a 960k-slot list)
                out[scored.slots] = scored.weights
                first = False
            else:
                out[scored.slots] += scored.weights
        return out

    def scores_at(
        self, query: Iterable[str], slots: npt.NDArray[np.int64], stats: Stats | None = None
    ) -> npt.NDArray[np.float32]:
        """BM25 score of the given slots (ascending) for the query terms: :meth:`scores` at those slots, the same
        numbers, found by bisecting each term's postings (cost grows with the slots, not the postings)."""
        use = stats or self.stats
        out = np.zeros(len(slots), dtype=np.float32)
        avgdl = use.avgdl
        for term in dict.fromkeys(query):
            scored = self._scored.get(term)
            if scored is None:
                scored = self._score_term(term)
            if not len(scored.slots) or not len(slots):
                continue
            at = np.searchsorted(scored.slots, slots)
            hit = at < len(scored.slots)
            hit[hit] = scored.slots[at[hit]] == slots[hit]
            if hit.any():
                where = at[hit]
                out[hit] += bm25(scored.tfs[where], scored.lengths[where], use.idf(term), avgdl)
        return out

    def _score_term(self, term: str) -> _Scored:
        slots, tfs = self._array(term)
        live = self._lengths[slots] > 0
        slots, tfs = slots[live], tfs[live]
        found = _Scored(slots, tfs, self._lengths[slots])
        if len(self._scored) >= SCORED_TERMS:
            self._scored.pop(next(iter(self._scored)))
        self._scored[term] = found
        self._arrays.pop(term, None)  # the live postings above replace it
        return found

    def add_many(self, slots: Sequence[int], docs: Sequence[Sequence[str]]) -> None:
        """Index many documents (their analysed terms) at fresh slots, ascending and above every slot used:
        the same index as :meth:`add` one at a time, built with array operations (a bulk load)."""
        self.add_flat(slots, list(itertools.chain.from_iterable(docs)), [len(d) for d in docs])

    def add_flat(self, slots: Sequence[int], flat: list[str], sizes: Sequence[int]) -> None:
        """:meth:`add_many` with the documents' terms one after the other in ``flat`` (``sizes[i]`` of them
        for ``slots[i]``): a bulk load keeps no list per document. ``flat`` is emptied."""
        if not len(slots):
            return
        at = np.asarray(slots, dtype=np.int64)
        lengths = np.asarray(sizes, dtype=np.int64)
        vocab = dict.fromkeys(flat)  # the batch's terms, in first-seen order (built in C: no Python loop)
        names = list(vocab)
        vocab.update(zip(names, range(len(names)), strict=True))
        ids = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
        flat.clear()
        span = int(at[-1]) + 1
        pairs, tfs = np.unique(ids * span + np.repeat(at, lengths), return_counts=True)  # by term, then slot
        term_of, new_slots = pairs // span, pairs % span
        df = np.bincount(term_of, minlength=len(names))
        self.stats.docs += len(at)
        self.stats.length += int(lengths.sum())
        self.stats.df.update(dict(zip(names, df.tolist(), strict=True)))
        self.live += len(at)
        if span > len(self._lengths):
            grown = np.zeros(max(2 * len(self._lengths), span), dtype=np.float32)
            grown[: len(self._lengths)] = self._lengths
            self._lengths = grown
        self._lengths[at] = lengths
        self.size = max(self.size, span)
        self.freeze()  # then merge two sorted postings arrays: the old ones first in each term (lower slots)
        terms = dict(self._base_terms)
        for name in names:
            terms.setdefault(name, len(terms))
        new_ids = np.fromiter((terms[name] for name in names), dtype=np.int64, count=len(names))[term_of]
        old_ids = np.repeat(np.arange(len(self._base_terms), dtype=np.int64), np.diff(self._base_ends))
        order = np.argsort(np.concatenate([old_ids, new_ids]), kind="stable")
        self._base_slots = np.concatenate([self._base_slots, new_slots.astype(np.int32)])[order]
        self._base_tfs = np.concatenate([self._base_tfs, tfs.astype(np.float32)])[order]
        counts = np.bincount(np.concatenate([old_ids, new_ids]), minlength=len(terms))
        self._base_ends = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._base_terms = terms

    def freeze(self) -> None:
        """Move every posting into the compressed-row arrays (4 + 4 bytes a posting instead of two Python ints
        in lists); postings of removed documents stay, ignored as before."""
        if not self._postings:  # already all in the arrays
            self._arrays, self._scored = {}, {}
            return
        terms = list(dict.fromkeys([*self._base_terms, *self._postings]))
        parts_slots, parts_tfs, ends = [], [], [0]
        for term in terms:
            slots, tfs = self._array(term)
            self._arrays.pop(term, None)
            parts_slots.append(slots.astype(np.int32))
            parts_tfs.append(tfs)
            ends.append(ends[-1] + len(slots))
        self._base_terms = {term: i for i, term in enumerate(terms)}
        self._base_ends = np.asarray(ends, dtype=np.int64)
        self._base_slots = np.concatenate(parts_slots) if parts_slots else np.zeros(0, np.int32)
        self._base_tfs = np.concatenate(parts_tfs).astype(np.float32) if parts_tfs else np.zeros(0, np.float32)
        self._postings = {}
        self._arrays = {}
        self._scored = {}

    def export(self, new_slot: npt.NDArray[np.int64]) -> tuple[list[str], dict[str, npt.NDArray[Any]]]:
        """Live postings renumbered by ``new_slot`` (old slot -> new slot, -1 for dead), as the term
        list and compressed-row arrays that :meth:`load` takes back."""
        terms: list[str] = []
        parts_slots: list[npt.NDArray[np.int64]] = []
        parts_tfs: list[npt.NDArray[np.float32]] = []
        ends = [0]
        for term in dict.fromkeys([*self._base_terms, *self._postings]):
            slots, tfs = self._array(term)
            self._arrays.pop(term, None)  # exporting touches every term: do not keep them all cached
            mapped = new_slot[slots]
            keep = mapped >= 0
            if not keep.any():
                continue
            terms.append(term)
            parts_slots.append(mapped[keep])
            parts_tfs.append(tfs[keep])
            ends.append(ends[-1] + int(keep.sum()))
        live = new_slot >= 0
        lengths = np.zeros(int(live.sum()), dtype=np.float32)
        padded = np.zeros(len(new_slot), dtype=np.float32)
        upto = min(len(new_slot), len(self._lengths))
        padded[:upto] = self._lengths[:upto]
        lengths[new_slot[live]] = padded[live]
        arrays: dict[str, npt.NDArray[Any]] = {
            "kw_ends": np.asarray(ends, dtype=np.int64),
            "kw_slots": np.concatenate(parts_slots).astype(np.int32) if parts_slots else np.zeros(0, np.int32),
            "kw_tfs": np.concatenate(parts_tfs).astype(np.float32) if parts_tfs else np.zeros(0, np.float32),
            "kw_lengths": lengths,
            "kw_df": np.diff(np.asarray(ends, dtype=np.int64)),
        }
        return terms, arrays

    @classmethod
    def load(cls, terms: list[str], arrays: Mapping[str, npt.NDArray[Any]], indexed: int) -> KeywordIndex:
        """An index over the postings :meth:`export` wrote, for ``indexed`` live documents."""
        index = cls()
        index._base_terms = {term: i for i, term in enumerate(terms)}
        index._base_ends = arrays["kw_ends"]
        index._base_slots = arrays["kw_slots"]
        index._base_tfs = arrays["kw_tfs"]
        index._lengths = np.array(arrays["kw_lengths"], dtype=np.float32)  # a writable copy
        index.size = len(index._lengths)
        index.live = indexed
        df = Counter(dict(zip(terms, arrays["kw_df"].tolist(), strict=True)))
        index.stats = Stats(indexed, int(index._lengths.sum()), df)
        return index
