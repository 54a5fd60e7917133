"""Exact vector search: a growable float32 matrix of normalised rows, scored by one matrix product."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


class VectorIndex:
    """Rows by slot; an empty (zero) row scores 0. Cosine = dot product, rows being normalised."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._rows = np.zeros((1024, dim), dtype=np.float32)
        self.present = np.zeros(1024, dtype=bool)

    def set(self, slot: int, vector: npt.NDArray[np.float32]) -> None:
        """Store the vector of a slot."""
        if slot >= len(self._rows):
            size = max(2 * len(self._rows), slot + 1)
            rows = np.zeros((size, self.dim), dtype=np.float32)
            rows[: len(self._rows)] = self._rows
            present = np.zeros(size, dtype=bool)
            present[: len(self.present)] = self.present
            self._rows, self.present = rows, present
        self._rows[slot] = vector
        self.present[slot] = True

    def clear(self, slot: int) -> None:
        """Forget the vector of a slot."""
        if slot < len(self._rows):
            self._rows[slot] = 0
            self.present[slot] = False

    def get(self, slot: int) -> npt.NDArray[np.float32] | None:
        """The vector at a slot, if any."""
        return self._rows[slot] if slot < len(self.present) and self.present[slot] else None

    def scores(self, query: npt.NDArray[np.float32], size: int) -> npt.NDArray[np.float32]:
        """Cosine similarity of every slot below ``size`` to ``query``."""
        if size > len(self._rows):
            out = np.zeros(size, dtype=np.float32)
            out[: len(self._rows)] = self._rows @ query
            return out
        return np.asarray(self._rows[:size] @ query.astype(np.float32, copy=False), dtype=np.float32)
