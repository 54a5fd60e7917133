"""Corpus statistics of one query, as a value: what BM25 needs to score it, restricted to its terms.

A search over several repositories (a tenant split by routing rules, :mod:`engram.ops.shards.routing`) ranks
like one repository holding every item only when every repository scores keywords with the same statistics:
Elasticsearch's ``dfs_query_then_fetch``. Each repository reports its :class:`CorpusStats` for the query
(:meth:`engram.store.reader.Reader.corpus_stats`), the caller sums them (:meth:`CorpusStats.total`), and every
repository's engine then scores with the sum (``Request.stats``) instead of its own: the idfs, the average
length and the keyword score's ``ideal`` are then those of the union.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from engram.errors import InvalidInputError
from engram.index import text as analysis
from engram.index.keyword import Stats


def query_terms(query: str) -> list[str]:
    """The distinct analysed terms of a query, in order: the terms BM25 scores it by."""
    return list(dict.fromkeys(analysis.terms(query)))


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """A corpus's BM25 statistics for one query: indexed documents, their total length, and how many of them
    hold each query term (``df``; a term it does not list is held by none)."""

    docs: int
    length: int
    df: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        counts = (self.docs, self.length, *self.df.values())
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in counts):
            raise InvalidInputError(f"corpus statistics are non-negative integers, got {self!r}")
        if any(n > self.docs for n in self.df.values()):
            raise InvalidInputError("a term cannot be held by more documents than the corpus has")

    @classmethod
    def of(cls, stats: Stats, terms: Iterable[str]) -> CorpusStats:
        """The statistics an engine scores ``terms`` with, from its :class:`~engram.index.keyword.Stats`."""
        return cls(stats.docs, stats.length, {term: stats.frequency(term) for term in dict.fromkeys(terms)})

    @classmethod
    def total(cls, parts: Iterable[CorpusStats]) -> CorpusStats:
        """The statistics of the union of disjoint corpora: every count summed."""
        docs = length = 0
        df: Counter[str] = Counter()
        for part in parts:
            docs += part.docs
            length += part.length
            df.update(part.df)
        return cls(docs, length, dict(df))

    def stats(self) -> Stats:
        """As the :class:`~engram.index.keyword.Stats` an engine scores with."""
        return Stats(self.docs, self.length, Counter(self.df))

    def key(self) -> list[object]:
        """A plain, ordered form (for cache keys)."""
        return [self.docs, self.length, sorted(self.df.items())]


__all__ = ["CorpusStats", "query_terms"]
