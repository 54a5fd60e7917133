"""The filter compiler follows MongoDB semantics on every conformance case."""

from __future__ import annotations

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
