"""Input checks with LangGraph's semantics, raising engram's errors with actionable messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engram.errors import InvalidKeyError, InvalidNamespaceError, InvalidValueError


def namespace(ns: Sequence[str] | Any, *, allow_empty: bool = False) -> tuple[str, ...]:
    """Return ``ns`` as a tuple after checking it is a valid namespace."""
    if isinstance(ns, str) or not isinstance(ns, Sequence):
        raise InvalidNamespaceError(
            f"a namespace is a tuple of strings, e.g. ('users', 'alice'), not {type(ns).__name__} {ns!r}"
        )
    labels = tuple(ns)
    if not labels and not allow_empty:
        raise InvalidNamespaceError("a namespace cannot be empty: give at least one label, e.g. ('users',)")
    for label in labels:
        if not isinstance(label, str):
            raise InvalidNamespaceError(f"namespace labels must be strings, got {label!r} in {labels!r}")
        if not label:
            raise InvalidNamespaceError(f"namespace labels cannot be empty strings: {labels!r}")
        if "." in label:
            raise InvalidNamespaceError(f"namespace labels cannot contain periods ('.'): {label!r} in {labels!r}")
    if labels and labels[0] == "langgraph":
        raise InvalidNamespaceError(f'the root label "langgraph" is reserved: {labels!r}')
    return labels


def key(k: Any) -> str:
    """Check an item key."""
    if not isinstance(k, str) or not k:
        raise InvalidKeyError(f"an item key is a non-empty string, got {k!r}")
    return k


def value(v: Any) -> dict[str, Any]:
    """Check an item value: a JSON object (dict with string keys)."""
    if not isinstance(v, dict):
        raise InvalidValueError(f"an item value is a JSON object (a dict), got {type(v).__name__}")
    return v
