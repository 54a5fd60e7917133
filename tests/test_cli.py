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
    import click

    for name in cli.list_commands(click.Context(cli)):
        assert f"`engram {name}" in doc, f"engram {name} is not in docs/cli.md"


def test_cli_runs_as_a_subprocess(tmp_path: Path) -> None:
    env = {**os.environ, "ENGRAM_STORE": str(tmp_path / "s")}
    exe = [sys.executable, "-m", "engram.cli", "--embedder", "hashing"]
    subprocess.run([*exe, "put", "n", "k", '{"v": 1}'], check=True, env=env, capture_output=True)
    done = subprocess.run([*exe, "get", "n", "k"], check=True, env=env, capture_output=True, text=True)
    assert json.loads(done.stdout) == {"v": 1}


def test_cli_branch_tag_merge_revert_reset_history(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "n", "k", '{"v": 1}')
    assert run("tag", "v1")[0] == 0 and "v1" in run("tag")[1]
    assert run("branch", "fix", "--at", "v1")[0] == 0 and "fix" in run("branch")[1]
    assert run("--branch", "fix", "put", "n", "fix", '{"v": 2}')[0] == 0
    code, out = run("merge", "fix")
    assert code == 0 and "merge fix into main" in out
    code, out = run("history", "n", "fix", "--json")
    assert [v["value"] for v in json.loads(out)] == [{"v": 2}]
    code, out = run("show", "--json")
    assert json.loads(out)["message"] == "merge fix into main" and len(json.loads(out)["parents"]) == 2
    assert run("revert", "HEAD~1")[0] == 0  # undo the first put on main
    assert run("get", "n", "k")[0] == 1 and run("get", "n", "fix")[0] == 0
    assert run("reset", "v1")[0] == 0
    assert run("get", "n", "fix")[0] == 1
    assert "removed" in run("gc")[1]
    assert run("branch", "fix", "-d")[0] == 0


def test_cli_checkout_is_remembered(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run("put", "users/alice", "prefs", '{"theme": "dark"}')
    code, out = run("checkout", "experiment")
    assert code == 2 and "no branch 'experiment'" in out and "Traceback" not in out
    code, out = run("checkout", "-b", "experiment")
    assert code == 0 and "on branch experiment" in out
    run("put", "users/alice", "prefs", '{"theme": "light"}')  # lands on the checked-out branch
    assert json.loads(run("get", "users/alice", "prefs", "--json")[1])["value"] == {"theme": "light"}
    assert json.loads(run("--branch", "main", "get", "users/alice", "prefs", "--json")[1])["value"] == {"theme": "dark"}
    assert "* experiment" in run("branch")[1]
    assert run("checkout", "main")[0] == 0
    assert json.loads(run("get", "users/alice", "prefs", "--json")[1])["value"] == {"theme": "dark"}


def test_cli_export_import_round_trip(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run("put", "users/alice", "prefs", '{"theme": "dark"}', "--author", "agent:onboarding")
    run("put", "users/bob", "note", '{"text": "likes tea"}')
    run("tag", "v1")
    run("put", "users/bob", "note", '{"text": "likes coffee"}')
    dump = tmp_path / "dump.jsonl"
    code, out = run("export", str(dump), "--at", "v1", "--embeddings")
    assert code == 0 and "exported 2 items" in out
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    assert lines[0]["engram"] == "export" and lines[0]["model"].startswith("hashing")
    assert {(tuple(item["namespace"]), item["key"]) for item in lines[1:]} == {
        (("users", "alice"), "prefs"),
        (("users", "bob"), "note"),
    }
    assert all(len(item["embedding"]) == 384 for item in lines[1:])

    other = CliRunner()
    target = str(tmp_path / "target")
    code = other.invoke(cli, ["--store", target, "--embedder", "hashing", "import", str(dump)], obj={}).exit_code
    assert code == 0
    got = other.invoke(cli, ["--store", target, "get", "users/alice", "prefs", "--json"], obj={})
    original = json.loads(run("get", "users/alice", "prefs", "--json")[1])
    assert json.loads(got.output) == original  # value, timestamps and author survive
    args = ["--store", target, "--embedder", "hashing", "export", "--namespace", "users/bob"]
    stdout = other.invoke(cli, args, obj={})
    assert json.loads(stdout.stdout.splitlines()[1])["value"] == {"text": "likes tea"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty file"),
        ('{"x": 1}\n', "not an engram export header"),
        ('{"engram": "export", "format": 1}\nnot json\n', "line 2: not JSON"),
        ('{"engram": "export", "format": 1}\n{"namespace": ["a"], "key": "k"}\n', "line 2: missing"),
        ('{"engram": "export", "format": 1}\n{"namespace": ["a.b"], "key": "k", "value": {}, '
         '"created_at": 1, "updated_at": 1}\n', "line 2:"),
    ],
)  # fmt: skip
def test_cli_import_rejects_bad_files_and_writes_nothing(run, tmp_path: Path, content: str, message: str) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    before = run("log", "--json")[1]
    code, out = run("import", str(bad))
    assert code == 1 and message in out and "Traceback" not in out
    assert run("log", "--json")[1] == before


def test_cli_merge_conflicts_are_listed_with_their_values(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "users/alice", "prefs", '{"theme": "dark"}')
    run("branch", "fix")
    run("--branch", "fix", "put", "users/alice", "prefs", '{"theme": "light"}')
    run("put", "users/alice", "prefs", '{"theme": "neon"}')
    code, out = run("merge", "fix")
    assert code == 1 and "Traceback" not in out
    assert "conflict users/alice/prefs" in out
    assert 'base   {"theme": "dark"}' in out and 'ours   {"theme": "neon"}' in out
    assert 'theirs {"theme": "light"}' in out
