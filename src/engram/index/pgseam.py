"""What a PostgreSQL search reads of its engine: the seam between :mod:`engram.index.pgquery` (one search) and
:mod:`engram.index.pgengine` (the engine that keeps the search tables and runs searches), so the search depends on
this small protocol and the engine on the search, never both ways."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from engram.backends.postgres import PostgresDatabase
from engram.embed.base import Embedder
from engram.index.cache import VectorCache

#: A filter pushed down to SQL: a boolean SQL expression over ``value`` and the parameters it names.
PreFilter = tuple[str, dict[str, Any]]


class SearchEngine(Protocol):
    """The engine as one search sees it."""

    #: The database (its ``repo`` id and connections).
    db: PostgresDatabase
    #: A search whose scope holds at most this many items scores them exactly.
    scope_exact: int
    #: The store's embedder (None: keyword search only) and the model id its vectors are stored under.
    embedder: Embedder | None
    model: str
    #: The vector cache the engine embeds through.
    cache: VectorCache

    def exact(self, items: int, indexed: int) -> bool:
        """Whether a branch of ``items`` items scans its vectors exactly, the HNSW index holding ``indexed``."""
        ...

    def query_vector(self, text: str) -> npt.NDArray[np.float32]:
        """A query's embedding."""
        ...


__all__ = ["PreFilter", "SearchEngine"]
