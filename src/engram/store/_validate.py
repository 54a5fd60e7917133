"""Input checks with LangGraph's semantics, raising engram's errors with actionable messages.

One rule for every backend: U+0000 (NUL) is refused wherever text enters engram (values, keys,
namespace labels, provenance, ref names, filters), because PostgreSQL's text and JSONB cannot hold
it; a store that accepted it on SQLite could not move to PostgreSQL.

Namespace labels follow LangGraph's rule (a non-empty string without ``.`` or U+0000), plus two things
engram cannot store: text that is not valid Unicode (lone surrogates) and U+001F, which PostgreSQL search
tables put between labels. Keys and labels are NFC-normalised on every read and write, and a write
refuses invisible characters in them (controls, bidirectional overrides, zero-width characters): the
rules are in :mod:`engram._names`. Reads accept them, so data written before those rules stays readable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engram._names import nfc, refuse_invisible
from engram.errors import InvalidInputError, InvalidKeyError, InvalidNamespaceError, InvalidValueError
from engram.index.paths import parse_path

#: The one character besides ``.`` and U+0000 that a namespace label cannot hold: PostgreSQL search tables
#: keep a namespace as its labels joined by it.
LABEL_SEPARATOR = "\x1f"


#: The longest item key and namespace (UTF-8 bytes): an item's namespace and key are one key of a database index on
#: every backend (PostgreSQL's b-tree entries stop at 2,704 bytes), so the same limits hold everywhere.
MAX_KEY_BYTES = 1024
MAX_LABEL_BYTES = 256
MAX_NAMESPACE_BYTES = 1024


def namespace(ns: Sequence[str] | Any, *, allow_empty: bool = False, writing: bool = False) -> tuple[str, ...]:
    """Return ``ns`` as a tuple of NFC labels after checking it is a valid namespace (see the module docstring);
    ``writing`` also refuses invisible characters (for a namespace that is written to)."""
    if isinstance(ns, str):
        raise InvalidNamespaceError(
            f"a namespace is a tuple of labels, not the string {ns!r}: pass a tuple, e.g. ({ns!r},)"
        )
    if not isinstance(ns, Sequence):
        raise InvalidNamespaceError(
            f"a namespace is a tuple of strings, e.g. ('users', 'alice'), not {type(ns).__name__} {ns!r}"
        )
    labels = tuple(nfc(label) if isinstance(label, str) else label for label in ns)
    if not labels and not allow_empty:
        raise InvalidNamespaceError("a namespace cannot be empty: give at least one label, e.g. ('users',)")
    for label in labels:
        if not isinstance(label, str):
            raise InvalidNamespaceError(f"namespace labels must be strings, got {label!r} in {labels!r}")
        if not label:
            raise InvalidNamespaceError(f"namespace labels cannot be empty strings: {labels!r}")
        if NUL in label:
            raise InvalidNamespaceError(f"U+0000 (NUL) cannot be stored: found in the namespace label {label!r}")
        if "." in label:
            raise InvalidNamespaceError(f"namespace labels cannot contain periods ('.'): {label!r} in {labels!r}")
        if LABEL_SEPARATOR in label:
            raise InvalidNamespaceError(
                f"namespace labels cannot hold U+001F (engram's separator between labels): {label!r} in {labels!r}"
            )
        if not _valid_unicode(label):
            raise InvalidNamespaceError(
                f"namespace labels must be valid Unicode text (no lone surrogates): {label!r} in {labels!r}"
            )
        if writing:
            refuse_invisible(label, "namespace label", InvalidNamespaceError)
        if len(label.encode("utf-8")) > MAX_LABEL_BYTES:
            raise InvalidNamespaceError(
                f"a namespace label takes at most {MAX_LABEL_BYTES} bytes (UTF-8): {label[:40]!r}…"
            )
    if sum(len(label.encode("utf-8")) + 1 for label in labels) > MAX_NAMESPACE_BYTES:
        raise InvalidNamespaceError(f"a namespace takes at most {MAX_NAMESPACE_BYTES} bytes (UTF-8, with separators)")
    return labels


def namespace_pattern(ns: Sequence[str] | Any, what: str = "prefix") -> tuple[str, ...] | None:
    """Check a namespace pattern of ``list_namespaces`` (labels, ``*`` matching any one label); None stays None."""
    if ns is None:
        return None
    if isinstance(ns, str):
        raise InvalidNamespaceError(
            f"a namespace {what} is a tuple of labels, not the string {ns!r}: pass a tuple, e.g. ({ns!r},)"
        )
    if not isinstance(ns, Sequence):
        raise InvalidNamespaceError(f"a namespace {what} is a tuple of labels, e.g. ('users', '*'), not {ns!r}")
    checked = iter(namespace([label for label in ns if label != "*"], allow_empty=True))
    return tuple(label if label == "*" else next(checked) for label in ns)


def key(k: Any, *, writing: bool = False) -> str:
    """Check an item key and return it NFC-normalised: a string (an int is converted, as LangGraph does); ``""`` is
    a key too, at every door. ``writing`` also refuses invisible characters (for a key that is written)."""
    if isinstance(k, int) and not isinstance(k, bool):
        return str(k)
    if not isinstance(k, str):
        raise InvalidKeyError(f"an item key is a string, got {type(k).__name__} {k!r}")
    if NUL in k:
        raise InvalidKeyError(f"U+0000 (NUL) cannot be stored: found in the item key {k!r}")
    if not _valid_unicode(k):
        raise InvalidKeyError(f"an item key must be valid Unicode text (no lone surrogates): {k!r}")
    text = nfc(k)
    if writing:
        refuse_invisible(text, "item key", InvalidKeyError)
    if len(text.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidKeyError(
            f"an item key takes at most {MAX_KEY_BYTES} bytes (UTF-8), not {len(text.encode('utf-8')):,}"
        )
    return text


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def index_fields(fields: Any) -> list[str]:
    """Check an ``index=[...]`` list of field paths."""
    if isinstance(fields, str) or not isinstance(fields, Sequence) or not all(isinstance(f, str) for f in fields):
        raise InvalidInputError(
            f"index is False, None or a list of field paths like ['text', 'tags[*]'], got {fields!r}"
        )
    for field in fields:
        if NUL in field:
            raise InvalidInputError(f"U+0000 (NUL) cannot be stored: found in the index field path {field!r}")
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
    """Check an item value: a JSON object (dict with string keys), without U+0000 in any string or key."""
    if isinstance(v, Mapping) and not isinstance(v, dict):
        v = dict(v)
    if not isinstance(v, dict):
        raise InvalidValueError(f"an item value is a JSON object (a dict), got {type(v).__name__}")
    where = nul_path(v)
    if where is not None:
        raise InvalidValueError(f"U+0000 (NUL) cannot be stored: found in the item value at {where}")
    return v


#: The character no text in engram may hold (PostgreSQL's text and JSONB cannot store it).
NUL = "\x00"


def nul_path(obj: Any) -> str | None:
    """Where U+0000 occurs in a JSON-like value (any string, or object key, at any depth), else None.

    The place is a path like ``['notes'][2]['text']`` (``''`` for ``obj`` itself), ending in
    ``(a key)`` when an object key holds it.
    """
    stack: list[tuple[Any, str]] = [(obj, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                return where
        elif isinstance(item, Mapping):
            for k, v in item.items():
                if isinstance(k, str) and NUL in k:
                    return f"{where}[{k!r}] (a key)"
                stack.append((v, f"{where}[{k!r}]"))
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return None


def text(s: Any, what: str) -> Any:
    """Check free text that is stored (an author, a commit message): no U+0000; returns it."""
    if isinstance(s, str) and NUL in s:
        raise InvalidInputError(f"U+0000 (NUL) cannot be stored: found in the {what} {s!r}")
    return s


def provenance(author: Any = None, message: Any = None, sources: Iterable[Any] = ()) -> None:
    """Check a write's author, commit message and sources (see :func:`text`)."""
    text(author, "author")
    text(message, "commit message")
    for source in sources:
        text(source, "source")


__all__ = [
    "LABEL_SEPARATOR",
    "MAX_KEY_BYTES",
    "MAX_LABEL_BYTES",
    "MAX_NAMESPACE_BYTES",
    "NUL",
    "InvalidInputError",
    "index_fields",
    "key",
    "namespace",
    "namespace_pattern",
    "nul_path",
    "provenance",
    "text",
    "ttl",
    "value",
]
