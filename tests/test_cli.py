"""The CLI: each command through click's runner, once as a subprocess, and every command documented."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from engram.cli import cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run(tmp_path: Path):  # type: ignore[no-untyped-def]
    runner = CliRunner()
    store = str(tmp_path / "store")

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, ["--store", store, "--embedder", "hashing", *args], obj={})
        return result.exit_code, result.output

    return invoke


def test_cli_put_get_log_diff_search(run) -> None:  # type: ignore[no-untyped-def]
    assert run("put", "users/alice", "prefs", '{"theme": "dark"}')[0] == 0
    assert run("put", "users/alice", "prefs", '{"theme": "light"}', "-m", "switch")[0] == 0
    code, out = run("get", "users/alice", "prefs", "--at", "HEAD~1", "--json")
    assert code == 0 and json.loads(out)["value"] == {"theme": "dark"}
    code, out = run("log", "--json")
    assert [c["message"] for c in json.loads(out)] == ["switch", "put users/alice/prefs", "init"]
    code, out = run("diff", "HEAD~1", "--json")
    assert json.loads(out) == [
        {"namespace": ["users", "alice"], "key": "prefs", "kind": "modified",
         "old": {"theme": "dark"}, "new": {"theme": "light"}}
    ]  # fmt: skip
    code, out = run("search", "users", "dark", "--at", "HEAD~1", "--json")
    assert [i["key"] for i in json.loads(out)["items"]] == ["prefs"]
    assert "1 items changed" in run("diff", "HEAD~1")[1]
    assert run("ls", "--json")[1].strip().startswith("[")
    assert "ok" in run("fsck")[1]
    assert "indexed 1 items" in run("reindex")[1]
    assert run("rm", "users/alice", "prefs")[0] == 0
    assert run("get", "users/alice", "prefs")[0] == 1


def test_cli_user_mistakes_are_one_line_not_tracebacks(run) -> None:  # type: ignore[no-untyped-def]
    for args in (["get", "users/x", "k", "--at", "nope"], ["put", "a.b", "k", "{}"], ["log", "HEAD~9"]):
        code, out = run(*args)
        assert code == 1 and "Traceback" not in out and "error:" in out
    code, out = run("put", "a", "k", "not json")
    assert code == 2 and "not JSON" in out


def test_cli_every_command_is_documented() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    for name in cli.commands:
        assert f"`engram {name}" in doc, f"engram {name} is not in docs/cli.md"


def test_cli_runs_as_a_subprocess(tmp_path: Path) -> None:
    env = {**os.environ, "ENGRAM_STORE": str(tmp_path / "s")}
    exe = [sys.executable, "-m", "engram.cli", "--embedder", "hashing"]
    subprocess.run([*exe, "put", "n", "k", '{"v": 1}'], check=True, env=env, capture_output=True)
    done = subprocess.run([*exe, "get", "n", "k"], check=True, env=env, capture_output=True, text=True)
    assert json.loads(done.stdout) == {"v": 1}
