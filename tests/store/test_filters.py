"""The filter compiler follows MongoDB semantics on every conformance case."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from engram.errors import InvalidFilterError
from engram.store.filters import compile_filter, matches
from engram.testing import FILTER_CASES, FILTER_DOCS, INVALID_FILTERS


@pytest.mark.parametrize(("spec", "expected"), FILTER_CASES, ids=[repr(c[0]) for c in FILTER_CASES])
def test_filter_conformance_in_python(spec: dict[str, Any], expected: list[str]) -> None:
    compiled = compile_filter(spec)
    assert sorted(i for i, doc in FILTER_DOCS.items() if matches(compiled, doc)) == expected


@pytest.mark.parametrize("spec", INVALID_FILTERS, ids=repr)
def test_filter_invalid_raises_clear_error(spec: Any) -> None:
    with pytest.raises(InvalidFilterError) as info:
        compile_filter(spec)
    assert isinstance(info.value, ValueError) and len(str(info.value)) > 10


def test_filter_none_matches_everything() -> None:
    assert compile_filter(None) is None and compile_filter({}) is None
    assert matches(None, {"a": 1})


def test_filter_regex_catastrophic_pattern_is_linear_time() -> None:
    compiled = compile_filter({"text": {"$regex": "(a+)+$"}})
    benign = compile_filter({"text": {"$regex": "a+$"}})  # the same language, no nested repetition
    for size in (27, 10_000, 1_000_000):
        value = {"text": "a" * size + "!"}
        start = time.perf_counter()
        assert not matches(benign, value)
        healthy = time.perf_counter() - start
        start = time.perf_counter()
        assert not matches(compiled, value)
        # as fast as the harmless pattern: a backtracking engine takes seconds at 27 characters already
        assert time.perf_counter() - start < 10 * healthy + 0.25, (size, healthy)


@pytest.mark.parametrize(
    ("pattern", "options", "reason"),
    [
        ("(a)\\1", None, "does not support backreferences"),
        ("(?P<x>a)(?P=x)", None, "does not support backreferences"),
        ("(?<x>a)\\k<x>", None, "does not support backreferences"),
        ("(?=a)", None, "does not support lookahead or lookbehind"),
        ("(?<=a)b", None, "does not support lookahead or lookbehind"),
        ("a", "x", "no extended mode"),
        ("(?x) a", None, "no extended mode"),
        ("a\\Z", None, "\\z"),
        ("a++", None, "possessive"),
        ("a{1001}", None, "up to 1000"),
        ("a" * 1001, None, "at most 1,000"),
        ("(.*){1000}", None, "too complex"),
    ],
)
def test_filter_regex_refusals_say_why(pattern: str, options: str | None, reason: str) -> None:
    spec: dict[str, Any] = {"$regex": pattern} if options is None else {"$regex": pattern, "$options": options}
    with pytest.raises(InvalidFilterError) as info:
        compile_filter({"kind": spec})
    assert reason in str(info.value)


def test_filter_regex_takes_a_python_pattern_with_its_flags() -> None:
    compiled = compile_filter({"kind": {"$regex": re.compile("^NOTE$", re.IGNORECASE)}})
    assert sorted(i for i, doc in FILTER_DOCS.items() if matches(compiled, doc)) == ["a", "b", "e"]
    dotall = compile_filter({"text": {"$not": re.compile("dark.mode", re.S)}})
    assert sorted(i for i, doc in FILTER_DOCS.items() if matches(dotall, doc)) == ["a", "b", "c", "d", "e"]
    for bad, reason in [(re.compile("a", re.X), "extended"), (re.compile(b"a"), "str pattern"),
                        (re.compile("(a)\\1"), "backreferences")]:  # fmt: skip
        with pytest.raises(InvalidFilterError, match=reason):
            compile_filter({"kind": {"$regex": bad}})
    with pytest.raises(InvalidFilterError, match="flags"):
        compile_filter({"kind": {"$regex": re.compile("a"), "$options": "i"}})


def test_filter_refuses_nul_saying_where() -> None:
    with pytest.raises(InvalidFilterError, match=r"U\+0000 \(NUL\) cannot be stored.*field name"):
        compile_filter({"a\x00": 1})
    with pytest.raises(InvalidFilterError, match=r"U\+0000 \(NUL\) cannot be stored.*\$in argument on 'tags' at \[1\]"):
        compile_filter({"tags": {"$in": ["ui", "d\x00b"]}})
