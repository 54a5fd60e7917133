"""Which namespaces a prefix covers: the namespaces an index has seen, kept sorted, so a prefix's namespaces are
one run found by bisection (a search scoped to one tenant never scans every tenant's namespace)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence


class SortedNamespaces:
    """The sorted order of a namespace -> id mapping that only grows (an index's ``namespaces``), caught up lazily:
    namespaces seen since the last lookup are put in their place one by one, or, when many arrived (a bulk load),
    sorted again at once."""

    def __init__(self) -> None:
        self._sorted: list[tuple[str, ...]] = []
        self._ids: list[int] = []
        self._seen = 0

    def ids_under(self, known: Mapping[tuple[str, ...], int], prefix: Sequence[str]) -> list[int]:
        """The ids of the namespaces of ``known`` that start with ``prefix``."""
        if self._seen > len(known) or len(known) - self._seen > max(1_000, self._seen // 8):
            self._sorted = sorted(known)
            self._ids = [known[ns] for ns in self._sorted]
        else:  # namespaces seen since (dicts keep insertion order): each put in its place
            for ns in itertools.islice(known, self._seen, None):
                at = bisect.bisect_left(self._sorted, ns)
                self._sorted.insert(at, ns)
                self._ids.insert(at, known[ns])
        self._seen = len(known)
        wanted = tuple(prefix)
        ids = []
        for at in range(bisect.bisect_left(self._sorted, wanted), len(self._sorted)):
            if self._sorted[at][: len(wanted)] != wanted:
                break
            ids.append(self._ids[at])
        return ids


__all__ = ["SortedNamespaces"]
