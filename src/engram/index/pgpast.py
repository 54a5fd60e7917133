"""A past version searched against a branch's head rows in PostgreSQL: what differs, and its corpus statistics.

A search in the past (and a head search whose branch moved on meanwhile) reads the head rows minus the items that
differ (:class:`PastOverlay`), scores those items' past versions in Python, and scores keywords with the past
version's statistics (:func:`with_overlay`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from engram.backends.postgres import PostgresDatabase
from engram.index import keyword
from engram.index.doclist import Doc


@dataclass(slots=True)
class PastOverlay:
    """A past version against the head rows: keys whose head rows are left out, the past documents to
    score instead, and the corpus statistics' difference (documents, total length, frequencies)."""

    excluded: list[bytes]
    docs: list[Doc]
    #: The root of the head rows it differs from (a search applies it only to rows that still reflect it).
    base: bytes = b""
    docs_delta: int = 0
    length_delta: int = 0
    df_delta: Counter[str] = field(default_factory=Counter)


def term_stats(
    db: PostgresDatabase, branch: str, terms: list[str], total: int, length: int, overlay: PastOverlay | None = None
) -> keyword.Stats:
    """The corpus statistics of ``terms`` in a branch of ``total`` indexed items of ``length`` terms in all
    (with the overlay's difference, in the past)."""
    rows = db.run(
        "SELECT term, df FROM engram_index_terms WHERE repo = %s AND branch = %s AND term = ANY(%s)",
        (db.repo, branch, terms),
    ) if terms else []  # fmt: skip
    return with_overlay(keyword.Stats(total, length), {term: int(n) for term, n in rows}, terms, overlay)


def with_overlay(
    stats: keyword.Stats, df: dict[str, int], terms: list[str], overlay: PastOverlay | None
) -> keyword.Stats:
    """``stats`` with the document frequencies ``df`` of ``terms``, and the overlay's difference (in the past)."""
    stats.df.update(df)
    if overlay is not None:
        stats.docs += overlay.docs_delta
        stats.length += overlay.length_delta
        stats.df.update({t: overlay.df_delta[t] for t in terms if t in overlay.df_delta})
    return stats


__all__ = ["PastOverlay", "term_stats", "with_overlay"]
