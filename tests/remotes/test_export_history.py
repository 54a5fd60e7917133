"""export --with-history: every commit replayed with its author, time and message, to the same ids."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

import engram
from engram import clock
from engram.errors import ConflictError, InvalidInputError
from engram.store import Memory
from engram.store.transfer import export_history, import_history, is_history


def _story(path: Path) -> Memory:
    with clock.simulated(datetime(2026, 1, 5, 9, 0, tzinfo=UTC)) as sim:
        mem = engram.open(str(path), embedder=None, author="alice")
        mem.put(("users", "bob"), "prefs", {"theme": "dark"}, author="agent:onboarding")
        sim.advance(days=1)
        mem.create_branch("fix")
        mem.checkout("fix")
        mem.put(("users", "bob"), "prefs", {"theme": "light"}, author="agent:fixer")
        mem.checkout("main")
        mem.put(("users", "carol"), "prefs", {"theme": "blue"})
        sim.advance(days=1)
        mem.merge("fix", strategy="theirs", author="reviewer", message="take the fix")
        mem.delete(("users", "carol"), "prefs")
        mem.tag("v1")
    return mem


def test_history_round_trip_keeps_ids_authors_and_times(tmp_path: Path) -> None:
    mem = _story(tmp_path / "a")
    buffer = io.StringIO()
    commits = export_history(mem.repo, buffer)
    text = buffer.getvalue()
    assert is_history(text.splitlines()[0])
    target = engram.open(str(tmp_path / "b"), embedder=None)
    replayed, same = import_history(target.repo, text.splitlines())
    assert replayed == commits == len(list(mem.log())) == 6  # init, 2 puts, the fix, the merge, the delete
    assert same == commits
    assert target.repo.branches() == mem.repo.branches() and target.repo.tags() == mem.repo.tags()
    assert [(c.author, c.time, c.message) for c in target.log()] == [(c.author, c.time, c.message) for c in mem.log()]
    assert target.at("main@{2026-01-05T12:00:00Z}").get(("users", "bob"), "prefs").value == {"theme": "dark"}
    assert target.get(("users", "carol"), "prefs") is None
    assert target.fsck().ok


def test_history_import_refuses_a_store_with_other_history(tmp_path: Path) -> None:
    mem = _story(tmp_path / "a")
    buffer = io.StringIO()
    export_history(mem.repo, buffer)
    other = engram.open(str(tmp_path / "b"), embedder=None)
    other.put(("x",), "y", {"v": 1})
    with pytest.raises(ConflictError):
        import_history(other.repo, buffer.getvalue().splitlines())
    assert other.get(("x",), "y") is not None


def test_history_import_names_a_bad_line(tmp_path: Path) -> None:
    mem = _story(tmp_path / "a")
    buffer = io.StringIO()
    export_history(mem.repo, buffer)
    lines = buffer.getvalue().splitlines()
    broken = [*lines[:3], json.dumps({"namespace": [], "key": "k", "value": {}}), *lines[3:]]
    target = engram.open(str(tmp_path / "b"), embedder=None)
    with pytest.raises(InvalidInputError, match="line 4"):
        import_history(target.repo, broken)
    assert target.count(("users",)) == 0
