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
    [change] = json.loads(out)
    assert (change["namespace"], change["key"], change["kind"]) == (["users", "alice"], "prefs", "modified")
    assert (change["old"]["value"], change["new"]["value"]) == ({"theme": "dark"}, {"theme": "light"})
    code, out = run("search", "users", "dark", "--at", "HEAD~1", "--json")
    assert [i["key"] for i in json.loads(out)["items"]] == ["prefs"]
    assert " 1 item changed: 0 added, 1 modified" in run("diff", "HEAD~1")[1]
    assert run("ls", "--json")[1].strip().startswith("[")
    assert "ok" in run("fsck")[1]
    assert "indexed 1 item on branch" in run("reindex")[1]
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
    assert [v["item"]["value"] for v in json.loads(out)] == [{"v": 2}]
    code, out = run("show", "--json")
    assert json.loads(out)["message"] == "merge fix into main" and len(json.loads(out)["parents"]) == 2
    assert run("revert", "HEAD~1")[0] == 0  # undo the first put on main
    assert run("get", "n", "k")[0] == 1 and run("get", "n", "fix")[0] == 0
    assert run("reset", "v1")[0] == 0
    assert run("get", "n", "fix")[0] == 1
    assert "grace period" in run("gc")[1]  # a fresh store: nothing old enough to collect, and why
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
    run("init")
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


def test_cli_bad_input_to_every_command_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Issue #12: bad JSON, a missing file, an unknown ref or a bad namespace: one error line, non-zero exit."""
    runner = CliRunner()
    base = ["--store", str(tmp_path / "store"), "--embedder", "hashing", "--vector-cache", "none"]
    runner.invoke(cli, [*base, "put", "users/alice", "prefs", '{"theme": "dark"}'], obj={})
    missing = str(tmp_path / "nonexistent" / "dir" / "x.jsonl")
    cases = [
        ["init", "--nope"],
        ["put", "a.b", "k", "{}"], ["put", "users", "k", "{bad}"], ["put", "users", "k", "[1]"],
        ["get", "a.b", "k"], ["get", "users", "k", "--at", "nope"],
        ["rm", "a.b", "k"],
        ["search", "users", "--filter", "{bad}"], ["search", "users", "--filter", "[1]"],
        ["search", "a.b", "q"], ["search", "users", "q", "--at", "nope"], ["search", "users", "q", "--profile", "nope"],
        ["ls", "--prefix", "a.b"], ["ls", "--at", "nope"],
        ["log", "nope"], ["log", "--namespace", "a.b"],
        ["diff", "nope"], ["diff", "HEAD", "nope"], ["diff", "HEAD", "--namespace", "a.b"],
        ["show", "nope"],
        ["history", "a.b", "k"], ["blame", "a.b", "k"], ["blame", "users", "k", "--at", "nope"],
        ["log", "--key", "k"], ["log", "main@{3 fortnights ago}"], ["get", "users", "k", "--at", "main@{1 year ago}"],
        ["put", "users", "k", "{}", "--sources", "a\x00b"], ["revert", "HEAD", "-m", "x\x00"],
        ["--tenant", "bad name!", "log"], ["--tenant", "ghost", "log"], ["tenants", "--keys-file", str(tmp_path)],
        ["search", "nowhere"],
        ["branch", "x", "--at", "nope"], ["branch", "bad..name"], ["branch", "nope", "-d"],
        ["tag", "t", "--at", "nope"], ["tag", "bad..name"],
        ["merge", "nope"], ["revert", "nope"], ["reset", "nope"],
        ["gc", "--keep-reflog-days", "x"],
        ["checkout", "nope"],
        ["export", missing], ["export", "--at", "nope"], ["export", "--namespace", "a.b"],
        ["import", missing], ["import", str(tmp_path)],
        ["db", "migrate"], ["db", "status"],
    ]  # fmt: skip
    for args in cases:
        result = runner.invoke(cli, [*base, *args], obj={})
        # CliRunner catches what escapes: anything but SystemExit would be a traceback in a terminal
        assert isinstance(result.exception, SystemExit), (args, result.exception)
        assert result.exit_code != 0 and "Traceback" not in result.output, (args, result.output)
        assert result.output.strip(), args


def test_cli_rm_missing_and_merge_merged_say_nothing_to_do(run) -> None:  # type: ignore[no-untyped-def]
    """Issue #12: a no-op says so (exit 0) instead of printing the head as if it made a commit."""
    run("put", "users/alice", "prefs", '{"theme": "dark"}')
    before = run("log", "--json")[1]
    code, out = run("rm", "users/alice", "x")
    assert code == 0 and "nothing to delete: no item users/alice/x" in out
    assert run("log", "--json")[1] == before
    run("branch", "fix")
    run("--branch", "fix", "put", "users/bob", "note", '{"v": 1}')
    run("put", "users/carol", "note", '{"v": 2}')
    code, out = run("merge", "fix")
    assert code == 0 and "merge fix into main" in out
    merged = run("log", "--json")[1]
    code, out = run("merge", "fix")
    assert code == 0 and "already up to date" in out
    assert run("log", "--json")[1] == merged


def test_cli_output_is_not_wrapped_when_not_a_terminal(run) -> None:  # type: ignore[no-untyped-def]
    """Issue #12: `engram log | grep` sees each commit on one line, however long its message."""
    message = "remember " + " ".join(f"word{i}" for i in range(60))
    run("put", "users/alice", "prefs", '{"theme": "dark"}', "-m", message)
    code, out = run("log")
    assert code == 0 and any(line.endswith(message) and line.startswith("* ") for line in out.splitlines())
    code, out = run("log", "x" * 200)
    assert code == 1 and any(line.startswith("error:") and "x" * 200 in line for line in out.splitlines())


def test_cli_version(run) -> None:  # type: ignore[no-untyped-def]
    from importlib.metadata import version

    code, out = run("--version")
    assert code == 0 and out.strip() == f"engram {version('engram')}"


def test_cli_tag_delete(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "n", "k", '{"v": 1}')
    run("tag", "v1")
    code, out = run("tag", "-d", "v1")
    assert code == 0 and "deleted tag v1" in out and "v1" not in run("tag")[1]
    assert run("tag", "v1", "--at", "HEAD~1")[0] == 0  # the name is free again: a tag moves by delete + create
    code, out = run("tag", "-d", "nope")
    assert code == 1 and "tag 'nope' does not exist" in out
    assert run("tag", "-d")[0] == 2


def test_cli_reflog_newest_first(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "n", "k", '{"v": 1}')
    run("put", "n", "k", '{"v": 2}')
    run("reset", "HEAD~1")
    code, out = run("reflog", "--json")
    entries = json.loads(out)
    assert code == 0 and [e["reason"].split(":")[0] for e in entries] == ["reset", "commit", "commit", "init"]
    assert entries[0]["old"] == entries[1]["new"] and entries[-1]["old"] is None
    assert set(entries[0]) == {"time", "old", "new", "actor", "reason"}
    code, out = run("reflog", "-n", "2")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2 and f"{entries[0]['old'][:10]} -> {entries[0]['new'][:10]}" in lines[0]
    run("branch", "gone")
    run("branch", "gone", "-d")
    assert "branch: deleted" in run("reflog", "gone")[1]  # a deleted branch's moves are still there
    code, out = run("reflog", "nope")
    assert code == 1 and "branch 'nope' does not exist" in out


def test_cli_wording_plurals_no_double_parentheses_readable_commit_repr(run) -> None:  # type: ignore[no-untyped-def]
    """Issue #12: "1 items changed", "a tag ((none))" and a Commit repr full of raw bytes."""
    run("put", "n", "a", '{"v": 1}')
    run("put", "n", "b", '{"v": 1}')
    run("put", "n", "c", '{"v": 1}')
    assert " 1 item changed: 1 added" in run("diff", "HEAD~1")[1]
    assert " 2 items changed: 2 added" in run("diff", "HEAD~2")[1]
    code, out = run("show", "nope")
    assert code == 1 and "a tag (none)" in out and "((none))" not in out

    import engram

    commit = engram.open(":memory:", embedder=None).put(("users", "alice"), "k", {"v": 1}, author="alice")
    assert repr(commit) == f"<Commit {commit.short_id} by alice: 'put users/alice/k'>"
