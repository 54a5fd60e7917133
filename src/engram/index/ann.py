"""An approximate nearest-neighbour graph (HNSW, from the ``usearch`` library) over unit vectors.

Vectors are stored as float16; keys are plain integers the caller maps to its own slots. Vectors added in
this process live in blocks of rows owned by :class:`Graph`, which the library points into instead of
copying them (one copy of each vector, which exact scoring reads too). A graph saved to a file can be opened
memory-mapped (read-only: the operating system pages it in as queries touch it) and copied into memory when
it must change again.

Measured on realistic (clustered, low-rank) 384-d vectors: recall@10 of the exact top-10 was 0.990 at
100k vectors and 0.989 at 1M with the size-scaled ``expansion_search`` (192 and 607; benchmarks/RESULTS.md,
"In-process engine (#11)").
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

#: Graph degree (usearch's ``connectivity``): 32 links per node on upper levels, 64 on the base. At 16, no
#: search expansion reached recall@10 0.98 at 1M (0.977 at 1,214); at 32 an expansion of 607 gives 0.989, for
#: twice the build time and a graph a quarter larger (1,317 MB at 1M).
CONNECTIVITY = 32
#: Candidates kept while inserting: 64 built as good a graph as 128 on our data, 1.6x faster.
EXPANSION_ADD = 64
#: Candidates kept while searching up to 100k vectors: 128 gave recall@10 0.971 at 100k, 192 gave 0.990.
EXPANSION_SEARCH = 192
#: The same for a graph of degree 16, saved by an earlier version (0.987 at 100k).
EXPANSION_SEARCH_16 = 384
#: Rows per block of the vectors added in this process (12.6 MB of 384-d float16 rows).
BLOCK = 16_384
#: Graph size from which the candidates grow (with the square root of the size): at 1M, the base 192 alone
#: (at degree 32) keeps less than 404 (0.973 of the exact top 10).
EXPANSION_FROM = 100_000


def expansion(size: int, connectivity: int = CONNECTIVITY) -> int:
    """Candidates kept while searching a graph of ``size`` vectors and degree ``connectivity``."""
    base = EXPANSION_SEARCH if connectivity >= 32 else EXPANSION_SEARCH_16
    return int(base * max(1.0, (size / EXPANSION_FROM) ** 0.5))


def _usearch() -> Any:
    from usearch.index import Index  # imported on first use: small stores never load it

    return Index


class Graph:
    """An HNSW graph of float16 unit vectors under integer keys (cosine similarity)."""

    def __init__(
        self,
        dim: int,
        *,
        native: Any = None,
        path: Path | None = None,
        keys: int = 0,
        connectivity: int = CONNECTIVITY,
    ) -> None:
        self.dim = dim
        if native is None:  # a new graph; a loaded one keeps the links per node it was built with
            native = _usearch()(
                ndim=dim, metric="cos", dtype="f16", connectivity=connectivity, expansion_add=EXPANSION_ADD
            )
        self._index = native
        #: The file this graph is a read-only view of (None once it is in memory and writable).
        self.view_of = path
        #: Keys below this came with the saved graph (their vectors are in the library's memory or file);
        #: keys from it on are added in this process, in order, and their vectors live in ``_blocks``.
        self.first = keys
        self._blocks: list[npt.NDArray[np.float16]] = []
        self._stored = 0

    @classmethod
    def open(cls, path: Path, dim: int, keys: int) -> Graph | None:
        """The graph saved at ``path`` (with keys below ``keys``), memory-mapped; None when it is absent,
        unreadable or of another size."""
        try:
            native = _usearch().restore(str(path), view=True)
        except (OSError, RuntimeError, ValueError):
            return None
        if native is None or native.ndim != dim:
            return None
        return cls(dim, native=native, path=path, keys=keys)

    def __len__(self) -> int:
        return int(self._index.size)

    @property
    def nbytes(self) -> int:
        """Memory the graph and its vectors take (what usearch reports, plus the blocks it points into)."""
        return int(self._index.memory_usage) + sum(b.nbytes for b in self._blocks)

    def writable(self) -> None:
        """Copy a memory-mapped graph into memory, so it can change."""
        if self.view_of is not None:
            self._index = _usearch().restore(str(self.view_of), view=False)
            self.view_of = None

    def add(self, keys: npt.NDArray[np.int64], rows: npt.NDArray[np.float32], threads: int = 1) -> None:
        """Insert rows (unit vectors) under new keys: the next keys in order (``first``, ``first + 1``, ...)."""
        self.writable()
        if len(keys) and (keys[0] != self.first + self._stored or np.any(np.diff(keys) != 1)):
            raise ValueError("graph keys must be added in order, each once")
        half = np.asarray(rows, dtype=np.float16)
        done = 0
        while done < len(keys):
            at = self._stored % BLOCK
            if at == 0:
                self._blocks.append(np.zeros((BLOCK, self.dim), dtype=np.float16))
            take = min(BLOCK - at, len(keys) - done)
            block = self._blocks[-1]
            block[at : at + take] = half[done : done + take]
            # the library keeps pointers into the block (never reallocated), not a copy
            part = keys[done : done + take].astype(np.uint64)
            self._index.add(part, block[at : at + take], copy=False, threads=threads)
            self._stored += take
            done += take

    def stored(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.float16]:
        """The float16 vectors of keys added in this process (``keys >= first``)."""
        at = keys - self.first
        block, row = at // BLOCK, at % BLOCK
        out = np.empty((len(keys), self.dim), dtype=np.float16)
        order = np.argsort(block, kind="stable")  # the keys of each block together: one gather per block
        ends = np.searchsorted(block[order], np.arange(len(self._blocks) + 1))
        for b in range(len(self._blocks)):
            if ends[b] < ends[b + 1]:
                chosen = order[ends[b] : ends[b + 1]]
                out[chosen] = self._blocks[b][row[chosen]]
        return out

    def remove(self, keys: npt.NDArray[np.int64]) -> None:
        """Drop keys (a memory-mapped graph keeps them: callers ignore keys they dropped)."""
        if self.view_of is None and len(keys):
            self._index.remove(keys.astype(np.uint64))

    def search(
        self, query: npt.NDArray[np.float32], count: int, *, deep: bool = False
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Keys of about the ``count`` nearest vectors and their cosine similarity, best first. ``deep`` (a
        filtered search, which keeps only some of them) keeps twice the candidates: at 1M vectors with 1 in 8
        eligible, 0.986 of the exact top 10 of the eligible ones."""
        if not len(self) or count <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        ef = expansion(len(self), self._index.connectivity) * (2 if deep else 1)
        self._index.expansion_search = max(ef, 2 * count)
        found = self._index.search(np.ascontiguousarray(query, dtype=np.float32), count, threads=1)
        keys = np.asarray(found.keys, dtype=np.int64)
        return keys, (1.0 - np.asarray(found.distances, dtype=np.float32))

    def vectors(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The stored vectors of ``keys`` (all present), as float32 rows."""
        if not len(keys):
            return np.zeros((0, self.dim), dtype=np.float32)
        found = self._index.get(keys.astype(np.uint64), dtype=np.float32)
        return np.asarray(np.stack(found) if isinstance(found, tuple) else found, dtype=np.float32).reshape(
            -1, self.dim
        )

    def all_vectors(self, keys: int) -> npt.NDArray[np.float16]:
        """The vectors of keys ``0 .. keys - 1`` as float16 rows (zero rows for keys it lacks)."""
        out = np.zeros((keys, self.dim), dtype=np.float16)
        present = np.asarray(self._index.keys, dtype=np.int64)
        present = present[present < keys]
        for lo in range(0, len(present), 65_536):
            part = present[lo : lo + 65_536]
            found = self._index.get(part.astype(np.uint64), dtype=np.float16)
            out[part] = np.stack(found) if isinstance(found, tuple) else found
        return out

    def save(self, path: Path) -> None:
        """Write the graph to ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.view_of is not None:
            shutil.copyfile(self.view_of, path)
        else:
            self._index.save(str(path))
        with open(path, "rb") as f:  # on disk before a snapshot names it
            os.fsync(f.fileno())
