"""The filter conformance cases: documents, filters and the ids each filter must match.

Every backend's search must return exactly these ids (see ``engram.testing.FILTER_CASES``).
"""

from __future__ import annotations

from typing import Any

FILTER_DOCS: dict[str, dict[str, Any]] = {
    "a": {"kind": "note", "score": 0.9, "tags": ["ui", "theme"], "owner": {"name": "alice", "tz": "UTC"}, "n": 1},
    "b": {"kind": "note", "score": 0.4, "tags": ["db"], "owner": {"name": "bob"}, "n": 2, "flag": True},
    "c": {"kind": "error", "score": 0.7, "tags": [], "owner": {"name": "carol", "tz": "CET"}, "n": 3, "flag": False},
    "d": {"kind": "error", "tags": ["ui"], "n": "4", "items": [{"sku": "x", "qty": 2}, {"sku": "y", "qty": 5}]},
    "e": {"kind": "Note", "score": None, "owner": None, "text": "Dark mode is ON"},
    "f": {"kind": "log", "score": 1, "tags": ["ui", "db", "theme"], "matrix": [[1, 2], [3]], "text": "dark\nmode"},
}

# (filter, expected ids in sorted order)
FILTER_CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({}, ["a", "b", "c", "d", "e", "f"]),
    ({"kind": "note"}, ["a", "b"]),
    ({"kind": {"$eq": "error"}}, ["c", "d"]),
    ({"kind": "note", "score": {"$gt": 0.5}}, ["a"]),
    ({"owner.name": "alice"}, ["a"]),
    ({"owner.tz": {"$exists": True}}, ["a", "c"]),
    ({"owner.tz": {"$exists": False}}, ["b", "d", "e", "f"]),
    ({"score": {"$ne": 0.9}}, ["b", "c", "d", "e", "f"]),
    ({"score": {"$gte": 0.7}}, ["a", "c", "f"]),
    ({"score": {"$lt": 0.7}}, ["b"]),
    ({"score": {"$lte": 0.7}}, ["b", "c"]),
    ({"score": None}, ["d", "e"]),
    ({"score": {"$ne": None}}, ["a", "b", "c", "f"]),
    ({"n": {"$gt": 1}}, ["b", "c"]),
    ({"n": {"$gt": "1"}}, ["d"]),
    ({"flag": True}, ["b"]),
    ({"flag": 1}, []),
    ({"score": 1}, ["f"]),
    ({"score": 1.0}, ["f"]),
    ({"tags": "ui"}, ["a", "d", "f"]),
    ({"tags": ["ui"]}, ["d"]),
    ({"tags": {"$in": ["db", "nope"]}}, ["b", "f"]),
    ({"tags": {"$nin": ["ui"]}}, ["b", "c", "e"]),
    ({"kind": {"$in": ["log", "error"]}}, ["c", "d", "f"]),
    ({"kind": {"$nin": ["note", "error"]}}, ["e", "f"]),
    ({"tags": {"$all": ["ui", "theme"]}}, ["a", "f"]),
    ({"tags": {"$size": 0}}, ["c"]),
    ({"tags": {"$size": 3}}, ["f"]),
    ({"tags.0": "ui"}, ["a", "d", "f"]),
    ({"items.sku": "y"}, ["d"]),
    ({"items.qty": {"$gt": 4}}, ["d"]),
    ({"items.1.qty": 5}, ["d"]),
    ({"kind": {"$regex": "^no"}}, ["a", "b"]),
    ({"kind": {"$regex": "^no", "$options": "i"}}, ["a", "b", "e"]),
    ({"text": {"$regex": "^mode", "$options": "m"}}, ["f"]),
    ({"text": {"$regex": "dark.mode"}}, []),
    ({"text": {"$regex": "dark.mode", "$options": "s"}}, ["f"]),
    ({"kind": {"$regex": "o.e"}}, ["a", "b", "e"]),
    ({"text": {"$contains": "mode"}}, ["e", "f"]),
    ({"tags": {"$contains": "db"}}, ["b", "f"]),
    ({"score": {"$between": [0.4, 0.7]}}, ["b", "c"]),
    ({"kind": {"$between": ["a", "m"]}}, ["c", "d", "f"]),
    ({"score": {"$not": {"$gt": 0.5}}}, ["b", "d", "e"]),
    ({"kind": {"$not": {"$regex": "^n"}}}, ["c", "d", "e", "f"]),
    ({"$or": [{"kind": "log"}, {"score": {"$lt": 0.5}}]}, ["b", "f"]),
    ({"$and": [{"kind": "error"}, {"tags": "ui"}]}, ["d"]),
    ({"$nor": [{"kind": "note"}, {"kind": "error"}]}, ["e", "f"]),
    ({"$or": [{"owner.name": "bob"}, {"$and": [{"kind": "error"}, {"n": 3}]}]}, ["b", "c"]),
    ({"score": {"$gt": 0.3, "$lt": 0.8}}, ["b", "c"]),
    ({"owner": None}, ["d", "e", "f"]),
    ({"owner": {"name": "bob"}}, ["b"]),
    ({"matrix": [3]}, ["f"]),
    ({"missing.deep.path": {"$exists": False}}, ["a", "b", "c", "d", "e", "f"]),
    ({"missing": {"$nin": [1]}}, ["a", "b", "c", "d", "e", "f"]),
]

# filters that must raise InvalidFilterError
INVALID_FILTERS: list[Any] = [
    {"kind": {"$unknown": 1}},
    {"$where": "1 == 1"},
    {"tags": {"$in": "ui"}},
    {"tags": {"$size": -1}},
    {"kind": {"$regex": "("}},
    {"kind": {"$regex": "a", "$options": "q"}},
    {"$or": []},
    {"$or": {"kind": "note"}},
    {"kind": {"$gt": 1, "plain": 2}},
    {"score": {"$between": [1]}},
    {"a..b": 1},
    {"kind": {"$not": 5}},
    ["not", "a", "dict"],
]
