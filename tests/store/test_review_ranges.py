"""Review from the merge base: ``diff("A...B")`` is what B introduces since the merge base (git's three dots),
``diff("A..B")`` is ``diff("A", "B")``; ``merge_outcome`` says when a merge had nothing to merge."""

from __future__ import annotations

import pytest

import engram
from engram import _refs
from engram.store import Memory

NS = ("users", "alice")


@pytest.fixture
def forked() -> Memory:
    """main and hotfix share a base; each then changes something of its own."""
    mem = engram.open(":memory:", embedder="hashing")
    mem.put(NS, "prefs", {"theme": "dark"})
    mem.put(NS, "font", {"size": 12})
    mem.create_branch("hotfix")
    fixer = engram.Memory(mem.repo, branch="hotfix")
    fixer.put(NS, "font", {"size": 14})
    fixer.put(NS, "fix-note", {"text": "font back to 14"})
    mem.put(NS, "prefs", {"theme": "neon"})
    mem.put(NS, "later", {"text": "written on main after the fork"})
    return mem


def keys(changes: list[engram.ItemChange]) -> dict[str, str]:
    return {c.key: c.kind for c in changes}


def test_three_dots_are_what_the_branch_introduces_since_the_merge_base(forked: Memory) -> None:
    assert keys(forked.diff("main...hotfix")) == {"font": "modified", "fix-note": "added"}
    # two dots keep today's meaning: every difference between the two heads, main's own changes included
    assert keys(forked.diff("main..hotfix")) == keys(forked.diff("main", "hotfix"))
    assert keys(forked.diff("main", "hotfix")) == {
        "font": "modified", "fix-note": "added", "prefs": "modified", "later": "removed"}  # fmt: skip
    # the other way round: what main introduced since the fork
    assert keys(forked.diff("hotfix...main")) == {"prefs": "modified", "later": "added"}
    # an empty side is HEAD (this handle's branch: main)
    assert keys(forked.diff("...hotfix")) == keys(forked.diff("main...hotfix"))


def test_three_dots_equal_what_the_merge_brings_in(forked: Memory) -> None:
    before = forked.head
    brought = keys(forked.diff("main...hotfix"))
    forked.merge("hotfix")
    assert keys(forked.diff(before.id.hex(), "HEAD")) == brought
    assert forked.diff("main...hotfix") == []  # nothing left to review


def test_ranges_in_the_diff_expression_are_parsed_once(forked: Memory) -> None:
    assert _refs.parse_range("main...hotfix") == _refs.RefRange("main", "hotfix", True)
    assert _refs.parse_range("v1..v2") == _refs.RefRange("v1", "v2", False)
    assert _refs.parse_range("main@{2.days.ago}") is None  # dots in a time are not a range
    assert _refs.parse_range("main@{2.days.ago}...hotfix") == _refs.RefRange("main@{2.days.ago}", "hotfix", True)
    with pytest.raises(engram.InvalidRefError):
        forked.diff("a...b...c")
    with pytest.raises(engram.InvalidInputError, match="leave the new version out"):
        forked.diff("main...hotfix", "main")


def test_merge_outcome_says_up_to_date_when_nothing_was_merged(forked: Memory) -> None:
    first = forked.merge_outcome("hotfix", message="bring the font fix")
    assert not first.up_to_date and len(first.commit.parents) == 2 and first.commit.message == "bring the font fix"
    again = forked.merge_outcome("hotfix")
    assert again.up_to_date and again.commit.id == first.commit.id == forked.head.id
    assert forked.merge("hotfix").id == first.commit.id  # merge() keeps returning the (unchanged) head


def test_merge_outcome_lists_the_conflicts_its_strategy_decided(forked: Memory) -> None:
    fixer = engram.Memory(forked.repo, branch="hotfix")
    fixer.put(NS, "prefs", {"theme": "light"})
    done = forked.merge_outcome("hotfix", strategy="theirs", author="reviewer")
    assert not done.up_to_date and done.commit.author == "reviewer"
    assert [(c.key, c.ours.value, c.theirs.value) for c in done.resolved if c.ours and c.theirs] == [
        ("prefs", {"theme": "neon"}, {"theme": "light"})]  # fmt: skip
