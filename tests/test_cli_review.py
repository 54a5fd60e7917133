"""``engram diff main...fix`` (three dots) is what fix introduces since the merge base, as in git; two dots keep
the meaning of ``engram diff main fix``; a merge with nothing to merge says "already up to date"."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from engram.cli import cli

BASE = ["--embedder", "hashing", "--vector-cache", "none"]
Run = Callable[..., tuple[int, str]]


@pytest.fixture
def run(tmp_path: Path) -> Run:
    runner = CliRunner()
    store = str(tmp_path / "store")

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, ["--store", store, *BASE, *args], obj={})
        assert not result.exception or isinstance(result.exception, SystemExit), result.exception
        return result.exit_code, result.output

    assert invoke("init")[0] == 0
    return invoke


def test_cli_diff_three_dots_from_the_merge_base_two_dots_as_before(run: Run) -> None:
    assert run("put", "users/alice", "prefs", '{"theme": "dark"}')[0] == 0
    assert run("branch", "fix")[0] == 0
    assert run("--branch", "fix", "put", "users/alice", "font", '{"size": 14}')[0] == 0
    assert run("put", "users/bob", "prefs", '{"theme": "blue"}')[0] == 0  # main moves on
    code, three = run("diff", "main...fix", "--name-only")
    assert code == 0 and "users/alice/font" in three and "users/bob" not in three
    _, two = run("diff", "main..fix", "--name-only")
    _, plain = run("diff", "main", "fix", "--name-only")
    assert two == plain and "users/alice/font" in two and "users/bob/prefs" in two


def test_cli_merge_twice_says_already_up_to_date(run: Run) -> None:
    assert run("put", "users/alice", "prefs", '{"theme": "dark"}')[0] == 0
    assert run("branch", "fix")[0] == 0
    assert run("--branch", "fix", "put", "users/alice", "font", '{"size": 14}')[0] == 0
    assert run("put", "users/bob", "prefs", '{"theme": "blue"}')[0] == 0
    code, first = run("merge", "fix", "-m", "take the fix")
    assert code == 0 and "take the fix" in first and "up to date" not in first
    code, second = run("merge", "fix")
    assert code == 0 and "already up to date" in second
