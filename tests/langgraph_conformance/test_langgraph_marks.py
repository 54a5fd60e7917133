"""The exclusion and slow lists name real LangGraph tests, and docs/langgraph.md lists every exclusion."""

from __future__ import annotations

import re
from pathlib import Path

import lg_harness
import pytest
from lg_marks import EXCLUDED, SLOW

DOC = Path(__file__).resolve().parents[2] / "docs" / "langgraph.md"


@pytest.mark.parametrize("key", [*EXCLUDED, *SLOW])
def test_marks_name_langgraph_tests(key: str) -> None:
    path, _, name = key.partition("::")
    dist, _, file = path.partition("/tests/")
    target: object = lg_harness.suite(dist).module(file.removesuffix(".py"))
    for part in filter(None, re.sub(r"\[.*\]$", "", name).split("::")):
        target = getattr(target, part, None)
        assert target is not None, f"{key}: {part} is not in LangGraph's {path}"


@pytest.mark.parametrize("key", list(EXCLUDED))
def test_docs_list_every_exclusion(key: str) -> None:
    assert f"| `{key}` |" in DOC.read_text(), f"docs/langgraph.md does not list {key}"


def test_docs_list_nothing_else() -> None:
    listed = re.findall(r"^\| `([^`]+::[^`]+)` \|", DOC.read_text(), re.M)
    assert sorted(set(listed) - set(EXCLUDED)) == []
