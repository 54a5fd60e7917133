"""Search in PostgreSQL for the memory API: a :class:`SearchOp` run by the PostgreSQL engine.

The engine (:mod:`engram.index.pgengine`) keeps each indexed branch head's rows and ranks candidates
with the one ranking function; this module adds what belongs to the memory API: checking the
operation, compiling its filter into the exact predicate and a parameterized SQL/JSON pre-filter (a
superset of the MongoDB semantics), and shaping the results.
"""

from __future__ import annotations

import json
from typing import Any

from engram.hashing import ChunkId
from engram.index.pgengine import EXACT_BELOW, SEARCH_MIGRATIONS, PgEngine, has_pgvector
from engram.index.pgseam import PreFilter
from engram.store.filters import And, Compare, Filter, Nor, Not, Or, compile_filter
from engram.store.item import SearchResults
from engram.store.operations import SearchOp
from engram.store.search import engine_request, results


class PgSearch(PgEngine):
    """The PostgreSQL search indexes of one repository, searched with the memory API's operations."""

    def search(self, branch: str, root: ChunkId, request: SearchOp, now: int) -> SearchResults | None:
        """Run a search at the branch head ``root`` in PostgreSQL; None when it must run in process."""
        spec = engine_request(request)
        found = self.query(branch, root, spec, now, prefilter(request.filter))
        return None if found is None else results(found)

    def search_past(self, branch: str, root: ChunkId, request: SearchOp, now: int) -> SearchResults | None:
        """Run a search at any version ``root`` from ``branch``'s head rows (minus what differs, plus the past
        versions of those items); None when it must run in process."""
        found = self.query_past(branch, root, engine_request(request), now, prefilter(request.filter))
        return None if found is None else results(found)


def prefilter(spec: Any) -> PreFilter | None:
    """A filter as a parameterized SQL pre-filter on ``value`` (None: no filter)."""
    compiled = compile_filter(spec)
    if compiled is None:
        return None
    params: dict[str, Any] = {}
    return _FilterSql(params).build(compiled), params


class _FilterSql:
    """A compiled filter as a parameterized SQL pre-filter on ``value`` (SQL/JSON path, lax mode).

    Every clause is a superset of the MongoDB semantics (the exact filter runs on the ranked rows
    afterwards); negations, sizes, string ranges and numeric path labels, whose SQL/JSON meaning
    differs, become TRUE, and so do numbers beyond +-2**53 (JSONB compares the decimal a float is
    written as, Python the float's exact binary value: past 2**53 an integer can fall between the two).
    ``$regex`` is TRUE too, never PostgreSQL's backtracking regular expressions: RE2 decides it in
    Python, in time linear in the text.
    """

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.n = 0

    def build(self, node: Filter) -> str:
        if isinstance(node, And):
            return "(" + " AND ".join([self.build(p) for p in node.parts] or ["TRUE"]) + ")"
        if isinstance(node, Or):
            return "(" + " OR ".join(self.build(p) for p in node.parts) + ")"
        if isinstance(node, Nor | Not):
            return "TRUE"
        return self._compare(node)

    def _compare(self, node: Compare) -> str:
        if any(label.isdigit() for label in node.path):
            return "TRUE"
        path = "$" + "".join('."' + label.replace("\\", "\\\\").replace('"', '\\"') + '"' for label in node.path)
        op, arg = node.op, node.arg
        if op == "$exists":
            return self._exists(path, None) if arg else "TRUE"
        if op == "$eq":
            return self._eq(path, arg)
        if op in ("$in", "$all"):
            parts = [self._eq(path, a) for a in arg]
            if not parts:
                return "FALSE" if op == "$in" else "TRUE"
            return "(" + (" OR " if op == "$in" else " AND ").join(parts) + ")"
        if op in ("$gt", "$gte", "$lt", "$lte") and _number(arg):
            symbol = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[op]
            return self._exists(path, f"@ {symbol} $v", arg)
        if op == "$between" and _number(arg[0]) and _number(arg[1]):
            return self._exists(path, "@ >= $v && @ <= $w", arg[0], arg[1])
        return "TRUE"

    def _eq(self, path: str, arg: Any) -> str:
        if arg is None or isinstance(arg, list | dict) or (_numeric(arg) and not _number(arg)):
            return "TRUE"
        return self._exists(path, "@ == $v", arg)

    def _exists(self, path: str, test: str | None, v: Any = None, w: Any = None) -> str:
        self.n += 1
        key = f"fp{self.n}"
        self.params[key] = path + (f" ? ({test})" if test else "")
        self.params[key + "v"] = json.dumps({"v": v, "w": w}, allow_nan=False)
        return f"jsonb_path_exists(value, %({key})s::jsonpath, %({key}v)s::jsonb)"


#: Numbers this far from zero compare the same in JSONB and in Python (beyond, the clause is TRUE).
EXACT_LIMIT = 2**53


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    """A JSON number that JSONB compares as Python does: finite (JSON cannot carry infinities) and
    within +-2**53 (an integer of any size is fine for both, but not next to a float that large)."""
    return _numeric(value) and -EXACT_LIMIT < value < EXACT_LIMIT


__all__ = ["EXACT_BELOW", "SEARCH_MIGRATIONS", "PgSearch", "has_pgvector", "prefilter"]
