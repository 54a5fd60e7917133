"""Search filters with MongoDB's query semantics, compiled once and evaluated in Python.

A filter is a dict like ``{"tags": {"$in": ["ui"]}, "score": {"$gte": 0.5}, "$or": [...]}`` over an
item's value, with dotted paths into nested objects (``"profile.tz"``); a path through an array
looks into every element, and a numeric label indexes an array (``"tags.0"``). Semantics follow
MongoDB: ``$ne``, ``$nin`` and ``$not`` match documents that lack the field; comparisons only
compare values of the same type family (numbers with numbers, strings with strings); ``$regex`` is
a real regular expression. Unknown operators and malformed filters raise
:class:`InvalidFilterError`. :func:`compile_filter` returns a tree of plain nodes that other
backends translate (to parameterized SQL for PostgreSQL), so there is one parser.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from engram.errors import InvalidFilterError

__all__ = ["And", "Compare", "Filter", "Nor", "Not", "Or", "compile_filter", "matches"]

_MISSING = object()
COMPARE_OPS = frozenset(
    {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$all", "$size", "$exists", "$regex",
     "$contains", "$between"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Compare:
    """``path`` compared by ``op`` to ``arg`` (``$regex`` carries a compiled pattern)."""

    path: tuple[str, ...]
    op: str
    arg: Any


@dataclass(frozen=True, slots=True)
class And:
    """All parts match."""

    parts: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """Any part matches."""

    parts: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class Nor:
    """No part matches."""

    parts: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class Not:
    """The field-level negation of ``part`` (matches documents lacking the field)."""

    part: Filter


Filter = Compare | And | Or | Nor | Not


def compile_filter(spec: Mapping[str, Any] | None) -> Filter | None:
    """Validate and compile a filter dict; ``None`` or ``{}`` means "match everything"."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise InvalidFilterError(f"a filter is a JSON object, e.g. {{'kind': 'note'}}, not {type(spec).__name__}")
    parts = _document(spec)
    return None if not parts else parts[0] if len(parts) == 1 else And(tuple(parts))


def _document(spec: Mapping[str, Any]) -> list[Filter]:
    parts: list[Filter] = []
    for key, arg in spec.items():
        if not isinstance(key, str):
            raise InvalidFilterError(f"filter keys are strings, got {key!r}")
        if key in ("$and", "$or", "$nor"):
            if not isinstance(arg, list) or not arg or not all(isinstance(p, Mapping) for p in arg):
                raise InvalidFilterError(f"{key} takes a non-empty list of filters, got {arg!r}")
            subs = tuple(compile_filter(p) or And(()) for p in arg)
            parts.append(And(subs) if key == "$and" else Or(subs) if key == "$or" else Nor(subs))
        elif key.startswith("$"):
            raise InvalidFilterError(
                f"unknown top-level operator {key!r}: use $and, $or, $nor, or a field name with an operator"
            )
        else:
            parts.extend(_field(_path(key), arg))
    return parts


def _path(key: str) -> tuple[str, ...]:
    labels = tuple(key.split("."))
    if not all(labels):
        raise InvalidFilterError(f"invalid field path {key!r}: empty segment")
    return labels


def _field(path: tuple[str, ...], arg: Any) -> list[Filter]:
    if not (isinstance(arg, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in arg)):
        return [Compare(path, "$eq", arg)]
    if not all(isinstance(k, str) and k.startswith("$") for k in arg):
        raise InvalidFilterError(f"cannot mix operators and field names in the condition on {'.'.join(path)!r}")
    parts: list[Filter] = []
    options = arg.get("$options")
    for op, value in arg.items():
        if op == "$options":
            if "$regex" not in arg:
                raise InvalidFilterError("$options goes with $regex")
            continue
        if op == "$not":
            if isinstance(value, Mapping):
                inner = _field(path, value)
                parts.append(Not(inner[0] if len(inner) == 1 else And(tuple(inner))))
            elif isinstance(value, re.Pattern | str):
                parts.append(Not(_compare(path, "$regex", value, None)))
            else:
                raise InvalidFilterError(
                    f"$not takes an operator expression, e.g. {{'$not': {{'$gt': 5}}}}, got {value!r}"
                )
        elif op in COMPARE_OPS:
            parts.append(_compare(path, op, value, options if op == "$regex" else None))
        else:
            raise InvalidFilterError(
                f"unknown operator {op!r} on {'.'.join(path)!r}; supported: {', '.join(sorted(COMPARE_OPS | {'$not'}))}"
            )
    return parts


def _compare(path: tuple[str, ...], op: str, value: Any, options: Any) -> Compare:
    if op in ("$in", "$nin", "$all") and not isinstance(value, list):
        raise InvalidFilterError(f"{op} takes a list, got {value!r}")
    if op == "$size" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise InvalidFilterError(f"$size takes a non-negative integer, got {value!r}")
    if op == "$exists" and not isinstance(value, bool | int):
        raise InvalidFilterError(f"$exists takes true or false, got {value!r}")
    if op == "$between" and (not isinstance(value, list) or len(value) != 2):
        raise InvalidFilterError(f"$between takes [low, high], got {value!r}")
    if op == "$regex":
        return Compare(path, op, _regex(value, options))
    if op == "$exists":
        value = bool(value)
    return Compare(path, op, value)


def _regex(value: Any, options: Any) -> re.Pattern[str]:
    if isinstance(value, re.Pattern):
        return value
    if not isinstance(value, str):
        raise InvalidFilterError(f"$regex takes a pattern string, got {value!r}")
    flags = 0
    for letter in options or "":
        flag = {"i": re.I, "m": re.M, "s": re.S, "x": re.X}.get(letter)
        if flag is None:
            raise InvalidFilterError(f"unknown $options letter {letter!r}: use i, m, s, x")
        flags |= flag
    try:
        return re.compile(value, flags)
    except re.error as exc:
        raise InvalidFilterError(f"invalid $regex {value!r}: {exc}") from None


# ------------------------------------------------------------------ evaluation


def matches(node: Filter | None, doc: Mapping[str, Any]) -> bool:
    """True when ``doc`` satisfies the compiled filter (``None`` matches everything)."""
    if node is None:
        return True
    if isinstance(node, Compare):
        return _EVAL[node.op](list(_resolve(doc, node.path)), node.arg)
    if isinstance(node, And):
        return all(matches(p, doc) for p in node.parts)
    if isinstance(node, Or):
        return any(matches(p, doc) for p in node.parts)
    if isinstance(node, Nor):
        return not any(matches(p, doc) for p in node.parts)
    return not matches(node.part, doc)


def _resolve(value: Any, path: tuple[str, ...]) -> Iterator[Any]:
    """Every value at ``path``, fanning out through arrays as MongoDB does (missing yields nothing)."""
    if not path:
        yield value
        return
    head, rest = path[0], path[1:]
    if isinstance(value, Mapping):
        if head in value:
            yield from _resolve(value[head], rest)
    elif isinstance(value, list):
        if head.isdigit() and int(head) < len(value):
            yield from _resolve(value[int(head)], rest)
        for element in value:
            if isinstance(element, Mapping):
                yield from _resolve(element, path)


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _same(a: Any, b: Any) -> bool:
    """MongoDB equality: bools are not numbers; arrays and objects compare element-wise."""
    ka, kb = _kind(a), _kind(b)
    if ka != kb:
        return False
    if ka == "array":
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if ka == "object":
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _candidates(values: list[Any]) -> Iterator[Any]:
    """Each value, and for arrays each element too (how MongoDB matches scalars against arrays)."""
    for v in values:
        yield v
        if isinstance(v, list):
            yield from v


def _eq(values: list[Any], arg: Any) -> bool:
    if arg is None and not values:
        return True  # {field: null} matches a missing field
    return any(_same(v, arg) for v in _candidates(values))


def _ordered(test: Callable[[Any, Any], bool]) -> Callable[[list[Any], Any], bool]:
    def check(values: list[Any], arg: Any) -> bool:
        kind = _kind(arg)
        if kind not in ("number", "string"):
            return False
        return any(_kind(v) == kind and test(v, arg) for v in _candidates(values))

    return check


def _in(values: list[Any], arg: list[Any]) -> bool:
    return any(_eq(values, option) for option in arg)


def _all(values: list[Any], arg: list[Any]) -> bool:
    return bool(arg) and all(_eq(values, x) for x in arg)


def _regex_match(values: list[Any], pattern: re.Pattern[str]) -> bool:
    return any(isinstance(v, str) and pattern.search(v) is not None for v in _candidates(values))


def _contains(values: list[Any], arg: Any) -> bool:
    for v in values:
        if isinstance(v, str) and isinstance(arg, str) and arg in v:
            return True
        if isinstance(v, list) and any(_same(e, arg) for e in v):
            return True
    return False


def _between(values: list[Any], arg: list[Any]) -> bool:
    low, high = arg
    kind = _kind(low)
    if kind != _kind(high) or kind not in ("number", "string"):
        return False
    return any(_kind(v) == kind and low <= v <= high for v in _candidates(values))


_EVAL: dict[str, Callable[[list[Any], Any], bool]] = {
    "$eq": _eq,
    "$ne": lambda values, arg: not _eq(values, arg),
    "$gt": _ordered(lambda v, a: v > a),
    "$gte": _ordered(lambda v, a: v >= a),
    "$lt": _ordered(lambda v, a: v < a),
    "$lte": _ordered(lambda v, a: v <= a),
    "$in": _in,
    "$nin": lambda values, arg: not _in(values, arg),
    "$all": _all,
    "$size": lambda values, arg: any(isinstance(v, list) and len(v) == arg for v in values),
    "$exists": lambda values, arg: bool(values) == arg,
    "$regex": _regex_match,
    "$contains": _contains,
    "$between": _between,
}
