"""How a branch's search rows in PostgreSQL encode an item: shared by the writer and the queries."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np

from engram.index.doclist import Doc

_SEP = "\x1f"  # between namespace labels (labels cannot contain control characters)


def ns_path(namespace: tuple[str, ...] | list[str]) -> str:
    """A namespace as the ``ns_path`` column holds it."""
    return "".join(label + _SEP for label in namespace)


def like_prefix(namespace: tuple[str, ...]) -> str:
    """A LIKE pattern for every ``ns_path`` under ``namespace``."""
    raw = ns_path(namespace)
    return raw.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def vector_text(vector: Any) -> str:
    """A vector as pgvector's text input."""
    return "[" + ",".join(map(repr, np.asarray(vector, dtype=np.float32).tolist())) + "]"


def counts_of(doc: Doc) -> Counter[str]:
    """A document's term counts as its rows hold them (none when it is not searchable)."""
    return Counter(t for t in doc.terms if "\x00" not in t) if doc.indexed else Counter()


def jsonb_text(value: dict[str, Any]) -> str:
    """An item value as JSON that PostgreSQL's JSONB accepts, for the filter pre-filter.

    JSONB cannot hold U+0000, which engram refuses on input, but a record written before that rule may
    have it: such strings lose it here, and object keys holding it are left out (no filter can name
    them), so one old record can never make a search fail. The record itself is untouched.
    """
    text = json.dumps(value)
    return text if "\\u0000" not in text else json.dumps(_without_nul(value))


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {k: _without_nul(v) for k, v in value.items() if "\x00" not in k}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


__all__ = ["counts_of", "jsonb_text", "like_prefix", "ns_path", "vector_text"]
