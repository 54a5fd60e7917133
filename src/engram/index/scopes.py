"""Which namespaces a prefix covers: the namespaces an index has seen, kept sorted, so a prefix's namespaces are
one run found by bisection (a search scoped to one tenant never scans every tenant's namespace)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt


class SortedNamespaces:
    """The sorted order of a namespace -> id mapping that only grows (an index's ``namespaces``), caught up lazily:
    namespaces seen since the last lookup are put in their place one by one, or, when many arrived (a bulk load),
    sorted again at once."""

    def __init__(self) -> None:
        self._sorted: list[tuple[str, ...]] = []
        self._ids: list[int] = []
        self._seen = 0
        self._marked: tuple[tuple[str, int, int], npt.NDArray[np.bool_] | None] | None = None

    def ids_under(self, known: Mapping[tuple[str, ...], int], prefix: Sequence[str]) -> list[int]:
        """The ids of the namespaces of ``known`` that start with ``prefix``."""
        self._catch_up(known)
        wanted = tuple(prefix)
        ids = []
        for at in range(bisect.bisect_left(self._sorted, wanted), len(self._sorted)):
            if self._sorted[at][: len(wanted)] != wanted:
                break
            ids.append(self._ids[at])
        return ids

    def ids_marked(self, known: Mapping[tuple[str, ...], int], mark: str) -> list[int]:
        """The ids of the namespaces of ``known`` whose first label starts with the character ``mark``: one run of
        the sorted order, found by bisection."""
        self._catch_up(known)
        lo = bisect.bisect_left(self._sorted, (mark,))
        hi = bisect.bisect_left(self._sorted, (chr(ord(mark) + 1),))
        return self._ids[lo:hi]

    def marked(
        self, known: Mapping[tuple[str, ...], int], mark: str, ns_ids: npt.NDArray[np.int32], size: int
    ) -> npt.NDArray[np.bool_] | None:
        """Per slot below ``size`` (whose namespace ids are ``ns_ids``), whether its namespace's first label starts
        with ``mark``; None when no namespace's does. Slots are only appended, so this is kept until a slot or a
        namespace is added: searches between two writes pay nothing for it."""
        if self._marked is None or self._marked[0] != (mark, len(known), size):
            table = np.zeros(len(known), dtype=bool)
            table[self.ids_marked(known, mark)] = True
            self._marked = ((mark, len(known), size), table[ns_ids[:size]] if table.any() else None)
        return self._marked[1]

    def _catch_up(self, known: Mapping[tuple[str, ...], int]) -> None:
        if self._seen > len(known) or len(known) - self._seen > max(1_000, self._seen // 8):
            self._sorted = sorted(known)
            self._ids = [known[ns] for ns in self._sorted]
        else:  # namespaces seen since (dicts keep insertion order): each put in its place
            for ns in itertools.islice(known, self._seen, None):
                at = bisect.bisect_left(self._sorted, ns)
                self._sorted.insert(at, ns)
                self._ids.insert(at, known[ns])
        self._seen = len(known)


__all__ = ["SortedNamespaces"]
