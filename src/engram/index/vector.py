"""Vector search: a growable float32 matrix of normalised rows, exact below ``ANN_MIN`` rows and an
inverted-file (IVF) approximation above it.

The IVF clusters rows around ``~2 sqrt(n)`` centroids (spherical k-means on a sample) and keeps a
copy of the rows ordered by cluster, so a query scores the centroids, then the contiguous blocks of
the ``NPROBE`` closest clusters (a random gather of the same rows is several times slower). Rows set
later join their nearest centroid's (small) overflow list; the clustering is rebuilt when the index
has doubled.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

#: Below this many rows every query scores every row (exact, and fast enough: ~1 ms at 10k).
ANN_MIN = 50_000
#: Clusters scanned per query.
NPROBE = 48


class VectorIndex:
    """Rows by slot; an empty (zero) row scores 0. Cosine = dot product, rows being normalised."""

    def __init__(self, dim: int, *, ann_min: int = ANN_MIN, nprobe: int = NPROBE) -> None:
        self.dim = dim
        self.ann_min = ann_min
        self.nprobe = nprobe
        self._rows = np.zeros((1024, dim), dtype=np.float32)
        self.present = np.zeros(1024, dtype=bool)
        self.count = 0
        self._centroids: npt.NDArray[np.float32] | None = None
        self._assign = np.full(1024, -1, dtype=np.int32)
        self._lists: list[list[int]] = []  # rows set since the build, per cluster
        self._arrays: dict[int, npt.NDArray[np.int64]] = {}
        self._blocks = np.zeros((0, dim), dtype=np.float32)  # rows at build time, ordered by cluster
        self._block_slots = np.zeros(0, dtype=np.int64)
        self._bounds = np.zeros(1, dtype=np.int64)
        self._fresh = np.zeros(1024, dtype=bool)  # the block copy of this slot is current
        self._built_at = 0
        #: Centroids to reuse (from a snapshot) the next time the IVF is built, instead of clustering.
        self.kept: npt.NDArray[np.float32] | None = None

    def set(self, slot: int, vector: npt.NDArray[np.float32]) -> None:
        """Store the vector of a slot."""
        if slot >= len(self._rows):
            size = max(2 * len(self._rows), slot + 1)
            rows = np.zeros((size, self.dim), dtype=np.float32)
            rows[: len(self._rows)] = self._rows
            present = np.zeros(size, dtype=bool)
            present[: len(self.present)] = self.present
            assign = np.full(size, -1, dtype=np.int32)
            assign[: len(self._assign)] = self._assign
            fresh = np.zeros(size, dtype=bool)
            fresh[: len(self._fresh)] = self._fresh
            self._rows, self.present, self._assign, self._fresh = rows, present, assign, fresh
        if not self.present[slot]:
            self.count += 1
        self._rows[slot] = vector
        self.present[slot] = True
        self._fresh[slot] = False
        if self._centroids is not None:
            cluster = int(np.argmax(self._centroids @ self._rows[slot]))
            self._assign[slot] = cluster
            self._lists[cluster].append(slot)
            self._arrays.pop(cluster, None)

    def set_many(self, slots: npt.NDArray[np.int64], matrix: npt.NDArray[np.float32]) -> None:
        """Store the vectors of many slots (rows of ``matrix``) at once."""
        if self._centroids is not None or not len(slots):
            for slot, row in zip(slots.tolist(), matrix, strict=True):
                self.set(slot, row)
            return
        top = int(slots.max())
        if top >= len(self._rows):
            self.set(top, matrix[int(np.argmax(slots))])  # grows every per-slot array
        self.count += int((~self.present[slots]).sum())
        self._rows[slots] = matrix
        self.present[slots] = True
        self._fresh[slots] = False

    def clear(self, slot: int) -> None:
        """Forget the vector of a slot."""
        if slot < len(self._rows) and self.present[slot]:
            self._rows[slot] = 0
            self.present[slot] = False
            self._assign[slot] = -1
            self._fresh[slot] = False
            self.count -= 1

    def get(self, slot: int) -> npt.NDArray[np.float32] | None:
        """The vector at a slot, if any."""
        return self._rows[slot] if slot < len(self.present) and self.present[slot] else None

    @property
    def approximate(self) -> bool:
        """True when queries use the IVF approximation."""
        return self.count >= self.ann_min

    def scores(self, query: npt.NDArray[np.float32], size: int) -> npt.NDArray[np.float32]:
        """Cosine similarity to ``query`` for every slot below ``size`` (0 for rows not probed by the IVF)."""
        query = query.astype(np.float32, copy=False)
        if not self.approximate:
            out = np.zeros(size, dtype=np.float32)
            upto = min(size, len(self._rows))
            out[:upto] = self._rows[:upto] @ query
            return out
        if self._centroids is None or self.count > 2 * self._built_at:
            self._build()
        assert self._centroids is not None
        probe = min(self.nprobe, len(self._centroids))
        nearest = np.argpartition(-(self._centroids @ query), probe - 1)[:probe]
        out = np.zeros(size, dtype=np.float32)
        for c in nearest.tolist():
            lo, hi = int(self._bounds[c]), int(self._bounds[c + 1])
            block_slots = self._block_slots[lo:hi]
            keep = self._fresh[block_slots] & (block_slots < size)
            out[block_slots[keep]] = (self._blocks[lo:hi] @ query)[keep]
        extra = np.concatenate([self._list(int(c)) for c in nearest])
        extra = extra[(extra < size) & self.present[extra]]
        if len(extra):
            out[extra] = self._rows[extra] @ query
        return out

    def _list(self, cluster: int) -> npt.NDArray[np.int64]:
        found = self._arrays.get(cluster)
        if found is None:
            members = np.asarray(self._lists[cluster], dtype=np.int64)
            members = members[self._assign[members] == cluster]  # drop rows that moved or were cleared
            self._lists[cluster] = members.tolist()
            found = self._arrays[cluster] = members
        return found

    def _build(self, iterations: int = 6, seed: int = 0) -> None:
        """Spherical k-means on a sample (or the centroids a snapshot kept), then assign every row to
        its nearest centroid."""
        slots = np.flatnonzero(self.present)
        centroids = self.kept
        self.kept = None
        if centroids is None or centroids.shape[1] != self.dim:
            centroids = self._cluster(slots, iterations, seed)
        clusters = len(centroids)
        assign = np.empty(len(slots), dtype=np.int32)
        for start in range(0, len(slots), 65_536):  # bounded memory for the score block
            block = slots[start : start + 65_536]
            assign[start : start + len(block)] = np.argmax(self._rows[block] @ centroids.T, axis=1)
        self._centroids = centroids.astype(np.float32)
        self._assign[:] = -1
        self._assign[slots] = assign
        order = np.argsort(assign, kind="stable")
        self._bounds = np.searchsorted(assign[order], np.arange(clusters + 1))
        self._block_slots = slots[order]
        self._blocks = self._rows[self._block_slots]
        self._fresh[:] = False
        self._fresh[slots] = True
        self._lists = [[] for _ in range(clusters)]
        self._arrays = {}
        self._built_at = len(slots)

    def _cluster(self, slots: npt.NDArray[np.int64], iterations: int, seed: int) -> npt.NDArray[np.float32]:
        clusters = max(16, int(2 * math.sqrt(len(slots))))
        rng = np.random.default_rng(seed)
        sample = self._rows[rng.choice(slots, size=min(len(slots), 40 * clusters), replace=False)]
        centroids = sample[rng.choice(len(sample), size=clusters, replace=False)].copy()
        for _ in range(iterations):
            labels = np.argmax(sample @ centroids.T, axis=1)
            sums = np.zeros_like(centroids)
            np.add.at(sums, labels, sample)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            empty = norms[:, 0] == 0
            sums[empty] = centroids[empty]
            centroids = sums / np.where(norms == 0, 1, norms)
        return np.asarray(centroids, dtype=np.float32)

    @property
    def centroids(self) -> npt.NDArray[np.float32] | None:
        """The IVF's centroids, if it has been built (a snapshot keeps them: see :attr:`kept`)."""
        return self._centroids
