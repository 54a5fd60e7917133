"""Search filters with MongoDB's query semantics, compiled once and evaluated in Python.

A filter is a dict like ``{"tags": {"$in": ["ui"]}, "score": {"$gte": 0.5}, "$or": [...]}`` over an
item's value, with dotted paths into nested objects (``"profile.tz"``); a path through an array
looks into every element, and a numeric label indexes an array (``"tags.0"``). Semantics follow
MongoDB: ``$ne``, ``$nin`` and ``$not`` match documents that lack the field; comparisons only
compare values of the same type family (numbers with numbers, strings with strings), exactly even
for integers beyond a 64-bit float; ``$regex`` is a regular expression run by RE2, whose time is
linear in the text (no pattern can stall a search), so what RE2 cannot do in linear time
(backreferences, lookaround, ``$options: "x"``) is refused. Unknown operators, malformed filters and
U+0000 in field names or string arguments raise :class:`InvalidFilterError`. :func:`compile_filter`
returns a tree of plain nodes that other backends translate (to parameterized SQL for PostgreSQL),
so there is one parser.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import re2  # type: ignore[import-untyped]  # google-re2: linear-time matching, no stubs

from engram.errors import InvalidFilterError
from engram.store._validate import nul_path

__all__ = ["And", "Compare", "Filter", "Nor", "Not", "Or", "compile_filter", "matches"]

_MISSING = object()
#: The longest ``$regex`` pattern, in characters.
MAX_REGEX_LENGTH = 1_000
#: A repetition count ``{n}``, ``{n,}`` or ``{n,m}`` not preceded by a backslash.
_REPEAT = re.compile(r"(?<!\\)\{(\d+)(?:,(\d*))?\}")
#: The largest compiled ``$regex`` program, in RE2 instructions: matching costs at most about this many
#: steps per byte of text (when RE2's DFA gives up and it falls back to its NFA).
MAX_REGEX_PROGRAM = 2_000
#: The memory RE2 may use per pattern (its program and DFA cache), in bytes.
REGEX_MAX_MEM = 4 << 20
COMPARE_OPS = frozenset(
    {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$all", "$size", "$exists", "$regex",
     "$contains", "$between"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Compare:
    """``path`` compared by ``op`` to ``arg`` (``$regex`` carries a compiled RE2 pattern)."""

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
    _check_depth(spec)
    return _compile(spec)


#: How deeply a filter may nest objects and arrays (MongoDB allows 100): compiling, evaluating and translating a
#: filter recurse over it, so the depth is bounded before anything recurses.
MAX_FILTER_DEPTH = 64


def _check_depth(spec: Mapping[str, Any]) -> None:
    stack: list[tuple[Any, int]] = [(spec, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_FILTER_DEPTH:
            raise InvalidFilterError(f"the filter nests more than {MAX_FILTER_DEPTH} levels of objects and arrays")
        children = node.values() if isinstance(node, Mapping) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, Mapping | list))


def _compile(spec: Mapping[str, Any]) -> Filter | None:
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
            subs = tuple(_compile(p) or And(()) for p in arg)
            parts.append(And(subs) if key == "$and" else Or(subs) if key == "$or" else Nor(subs))
        elif key.startswith("$"):
            raise InvalidFilterError(
                f"unknown top-level operator {key!r}: use $and, $or, $nor, or a field name with an operator"
            )
        else:
            parts.extend(_field(_path(key), arg))
    return parts


def _path(key: str) -> tuple[str, ...]:
    if "\x00" in key:
        raise InvalidFilterError(f"U+0000 (NUL) cannot be stored, so no field has it: found in the field name {key!r}")
    labels = tuple(key.split("."))
    if not all(labels):
        raise InvalidFilterError(f"invalid field path {key!r}: empty segment")
    return labels


def _field(path: tuple[str, ...], arg: Any) -> list[Filter]:
    if not (isinstance(arg, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in arg)):
        return [_compare(path, "$eq", arg, None)]
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
    where = nul_path(value) if not isinstance(value, re.Pattern) else None
    if where is not None:
        raise InvalidFilterError(
            f"U+0000 (NUL) cannot be stored, so no value has it: found in the {op} argument on "
            f"{'.'.join(path)!r}" + (f" at {where}" if where else "")
        )
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


def _regex(value: Any, options: Any) -> Any:
    """A ``$regex`` as an RE2 pattern (``$options`` i, m, s; a Python ``re.Pattern`` keeps its flags)."""
    letters = options if options is not None else ""
    if isinstance(value, re.Pattern):
        if options is not None:
            raise InvalidFilterError("$options goes with a pattern string: a compiled re.Pattern carries its own flags")
        value, letters = _from_re(value)
    if not isinstance(value, str):
        raise InvalidFilterError(f"$regex takes a pattern string, got {value!r}")
    if not isinstance(letters, str):
        raise InvalidFilterError(f"$options takes a string of letters among i, m, s, got {letters!r}")
    if len(value) > MAX_REGEX_LENGTH:
        raise InvalidFilterError(
            f"$regex pattern is {len(value):,} characters; at most {MAX_REGEX_LENGTH:,} are accepted"
        )
    for match in _REPEAT.finditer(value):  # RE2 reads a count too large to parse as literal text; PCRE refuses it
        if any(int(n) > 1000 for n in match.groups() if n):
            raise InvalidFilterError(
                f"$regex {value!r}: RE2 accepts repetition counts up to 1000, not {match.group(0)}"
            )
    opts = re2.Options()
    opts.max_mem = REGEX_MAX_MEM
    opts.log_errors = False
    opts.never_capture = True  # a match is a yes or no: no submatch tracking, the fast DFA path
    prefix = ""
    for letter in letters:
        if letter == "i":
            opts.case_sensitive = False
        elif letter == "s":
            opts.dot_nl = True
        elif letter == "m":
            prefix = "(?m)"
        elif letter == "x":
            raise InvalidFilterError(
                "$options 'x' is not supported: RE2 (linear-time) has no extended mode; "
                "remove the whitespace and comments from the pattern"
            )
        else:
            raise InvalidFilterError(f"unknown $options letter {letter!r}: use i, m, s")
    try:
        pattern = re2.compile(prefix + value, opts)
    except re2.error as exc:
        raise InvalidFilterError(_regex_refusal(value, exc)) from None
    except UnicodeEncodeError:
        raise InvalidFilterError(f"$regex {value!r} is not valid Unicode (it holds a lone surrogate)") from None
    if pattern.programsize > MAX_REGEX_PROGRAM:
        raise InvalidFilterError(
            f"$regex {value!r} is too complex: it compiles to {pattern.programsize:,} RE2 instructions, at most "
            f"{MAX_REGEX_PROGRAM:,} are accepted (use smaller repetition counts or narrower classes)"
        )
    return pattern


def _from_re(pattern: re.Pattern[Any]) -> tuple[str, str]:
    """The source and ``$options`` letters of a Python pattern, when RE2 can run it."""
    if not isinstance(pattern.pattern, str):
        raise InvalidFilterError("$regex takes a str pattern, not a bytes pattern")
    known = {re.IGNORECASE: "i", re.MULTILINE: "m", re.DOTALL: "s", re.VERBOSE: "x"}
    letters = "".join(letter for flag, letter in known.items() if pattern.flags & flag)
    rest = pattern.flags & ~(re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE | re.UNICODE | re.ASCII)
    if rest:
        raise InvalidFilterError(
            f"$regex {pattern.pattern!r} uses re flags RE2 cannot honour ({re.RegexFlag(rest)!r}): "
            "use IGNORECASE, MULTILINE or DOTALL"
        )
    return pattern.pattern, letters


_NAMED_BACKREFERENCE = re.compile(r"\(\?P=|\\k[<{']|\\g[0-9{<]")
_RE2_LIMITS = (
    (re.compile(r"invalid escape sequence: \\[1-9]|named backreference"),
     "RE2 (linear-time) does not support backreferences"),
    (re.compile(r"invalid perl operator: \(\?<?[=!]"),
     "RE2 (linear-time) does not support lookahead or lookbehind assertions"),
    (re.compile(r"invalid perl operator: \(\?[a-zA-Z-]*x"),
     "RE2 (linear-time) has no extended mode (x): remove the whitespace and comments from the pattern"),
    (re.compile(r"invalid escape sequence: \\Z"), "RE2 writes the end of the text as \\z, not \\Z"),
    (re.compile(r"bad repetition operator: .[+]"), "RE2 (linear-time) does not support possessive quantifiers"),
    (re.compile(r"invalid repetition size"), "RE2 accepts repetition counts up to 1000 (nested counts multiply)"),
    (re.compile(r"pattern too large"), f"it needs more than RE2's {REGEX_MAX_MEM >> 20} MiB; simplify it"),
)  # fmt: skip


def _regex_refusal(pattern: str, exc: Exception) -> str:
    """Why RE2 refused ``pattern``, in words (RE2's own message when no known limit explains it)."""
    raw = exc.args[0] if exc.args else str(exc)
    reason = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    if _NAMED_BACKREFERENCE.search(pattern):
        reason = f"{reason}: a named backreference"
    for test, explained in _RE2_LIMITS:
        if test.search(reason):
            return f"invalid $regex {pattern!r}: {explained} ({reason})"
    return f"invalid $regex {pattern!r} for RE2 (linear-time): {reason}"


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


def _regex_match(values: list[Any], pattern: Any) -> bool:
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
