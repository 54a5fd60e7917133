"""Input checks with LangGraph's semantics, raising engram's errors with actionable messages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engram.errors import InvalidInputError, InvalidKeyError, InvalidNamespaceError, InvalidValueError
from engram.index.paths import parse_path


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
        if not _printable(label):
            raise InvalidNamespaceError(
                f"namespace labels cannot hold control characters or invalid Unicode: {label!r} in {labels!r}"
            )
    if labels and labels[0] == "langgraph":
        raise InvalidNamespaceError(f'the root label "langgraph" is reserved: {labels!r}')
    return labels


def key(k: Any) -> str:
    """Check an item key: a string (an int is converted, as LangGraph does)."""
    if isinstance(k, int) and not isinstance(k, bool):
        return str(k)
    if not isinstance(k, str):
        raise InvalidKeyError(f"an item key is a string, got {type(k).__name__} {k!r}")
    if not _valid_unicode(k):
        raise InvalidKeyError(f"an item key must be valid Unicode text (no lone surrogates): {k!r}")
    return k


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _printable(label: str) -> bool:
    return _valid_unicode(label) and not any(ord(ch) < 0x20 for ch in label)


def index_fields(fields: Any) -> list[str]:
    """Check an ``index=[...]`` list of field paths."""
    if isinstance(fields, str) or not isinstance(fields, Sequence) or not all(isinstance(f, str) for f in fields):
        raise InvalidInputError(
            f"index is False, None or a list of field paths like ['text', 'tags[*]'], got {fields!r}"
        )
    for field in fields:
        parse_path(field)
    return list(fields)


#: The longest TTL (about 1,900 years): beyond it expiry times leave the 64-bit range.
MAX_TTL_MINUTES = 1e9


def ttl(minutes: Any) -> float:
    """Check a TTL in minutes."""
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not 0 < minutes <= MAX_TTL_MINUTES:
        raise InvalidInputError(
            f"ttl is a positive number of minutes up to {MAX_TTL_MINUTES:.0e} (or None for no expiry), got {minutes!r}"
        )
    return float(minutes)


def value(v: Any) -> dict[str, Any]:
    """Check an item value: a JSON object (dict with string keys)."""
    if isinstance(v, Mapping) and not isinstance(v, dict):
        v = dict(v)
    if not isinstance(v, dict):
        raise InvalidValueError(f"an item value is a JSON object (a dict), got {type(v).__name__}")
    return v


__all__ = ["InvalidInputError", "index_fields", "key", "namespace", "ttl", "value"]
