"""Field paths that choose which parts of a value are indexed, in LangGraph's syntax.

``$`` is the whole value; ``a.b`` a nested field; ``a[*].b`` every element of an array;
``a[0]`` / ``a[-1]`` one element; ``a.{b,c}`` several fields. The text of a value is its string
leaves (and numbers), joined by newlines; object keys are not text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any

from engram import runtime
from engram.errors import InvalidInputError

_TOKEN = re.compile(r"\[(\*|-?\d+)\]|\{([^{}]*)\}|([^.\[\]{}]+)")


@lru_cache(maxsize=1024)
def parse_path(path: str) -> tuple[str | int | tuple[str, ...], ...]:
    """Split a path into steps: field names, array indexes (``*`` is -0.5 never; kept as "*"), field sets."""
    if path == "$":
        return ()
    steps: list[str | int | tuple[str, ...]] = []
    pos = 0
    text = path[2:] if path.startswith("$.") else path
    while pos < len(text):
        if text[pos] == ".":
            pos += 1
            continue
        match = _TOKEN.match(text, pos)
        if match is None:
            raise InvalidInputError(f"invalid index field path {path!r} near {text[pos:]!r}")
        index, group, name = match.groups()
        if index is not None:
            steps.append("[*]" if index == "*" else int(index))
        elif group is not None:
            steps.append(tuple(part.strip() for part in group.split(",") if part.strip()))
        else:
            steps.append(name)
        pos = match.end()
    if not steps:
        raise InvalidInputError(f"invalid index field path {path!r}")
    return tuple(steps)


runtime.register("engram.index.paths", reset=parse_path.cache_clear)


def _walk(value: Any, steps: Sequence[str | int | tuple[str, ...]]) -> Iterator[Any]:
    if not steps:
        yield value
        return
    step, rest = steps[0], steps[1:]
    if step == "[*]":
        if isinstance(value, list):
            for element in value:
                yield from _walk(element, rest)
    elif isinstance(step, int):
        if isinstance(value, list) and -len(value) <= step < len(value):
            yield from _walk(value[step], rest)
    elif isinstance(step, tuple):
        for name in step:
            if isinstance(value, dict) and name in value:
                yield from _walk(value[name], rest)
    elif isinstance(value, dict) and step in value:
        yield from _walk(value[step], rest)


def _leaves(value: Any, out: list[str]) -> None:
    """Append the texts of ``value`` (strings, and numbers as text) to ``out``, depth first."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _leaves(v, out)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, out)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out.append(str(value))


def texts_at(value: dict[str, Any], fields: Sequence[str]) -> list[str]:
    """The texts of a value at the given field paths, in order."""
    out: list[str] = []
    for field in fields:
        for found in _walk(value, parse_path(field)):
            _leaves(found, out)
    return out


def document_text(value: dict[str, Any], fields: Sequence[str]) -> str:
    """One searchable text for a value: the texts at ``fields`` joined by newlines."""
    return "\n".join(t for t in texts_at(value, fields) if t)
