"""The CLI as a git user expects it (issue #12): the store is found upward and never created by a read, diffs
show values, provenance flags, relative times, ``log --graph``, ``blame``, tenants, times with their zone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from engram.cli import cli
from engram.cli._graph import draw
from engram.objects import Commit

BASE = ["--embedder", "hashing", "--vector-cache", "none"]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Run engram in ``tmp_path`` with no ENGRAM_STORE, as a user in a fresh folder."""
    for name in ("ENGRAM_STORE", "ENGRAM_BRANCH", "ENGRAM_TENANT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, [*BASE, *args], obj={})
        assert not result.exception or isinstance(result.exception, SystemExit), result.exception
        return result.exit_code, result.output

    return invoke


@pytest.fixture
def run(tmp_path: Path):  # type: ignore[no-untyped-def]
    runner = CliRunner()
    store = str(tmp_path / "store")

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, ["--store", store, *BASE, *args], obj={})
        assert not result.exception or isinstance(result.exception, SystemExit), result.exception
        return result.exit_code, result.output

    return invoke


# ---------------------------------------------------------------- finding 1: where the store is


@pytest.mark.parametrize("read", [["log"], ["get", "users", "k"], ["search", "users", "q"], ["ls"], ["fsck"]])
def test_reads_in_a_folder_without_a_store_say_so_and_create_nothing(here, tmp_path: Path, read: list[str]) -> None:  # type: ignore[no-untyped-def]
    code, out = here(*read)
    assert code == 1 and "no engram store here" in out and "engram init" in out
    assert not (tmp_path / ".engram").exists()


def test_writes_without_a_store_are_refused_too_but_init_creates_one(here, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, out = here("put", "users/alice", "prefs", '{"theme": "dark"}')
    assert code == 1 and "no engram store here" in out and not (tmp_path / ".engram").exists()
    code, out = here("init")
    assert code == 0 and "store ready on branch main" in out and (tmp_path / ".engram" / "engram.db").is_file()
    assert here("put", "users/alice", "prefs", '{"theme": "dark"}')[0] == 0


def test_a_subfolder_uses_the_store_above_it(here, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    here("init")
    here("put", "users/alice", "prefs", '{"theme": "dark"}')
    deep = tmp_path / "src" / "pkg"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    code, out = here("get", "users/alice", "prefs")
    assert code == 0 and json.loads(out) == {"theme": "dark"}
    assert here("checkout", "-b", "fix")[0] == 0  # the checkout is remembered beside the found store
    assert not (deep / ".engram").exists() and not (tmp_path / "src" / ".engram").exists()
    monkeypatch.chdir(tmp_path)
    assert "* fix" in here("branch")[1]


def test_an_explicit_store_is_created_by_a_write_never_by_a_read(here, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "elsewhere"
    code, out = here("--store", str(target), "log")
    assert code == 1 and f"no engram store at {target}" in out and not target.exists()
    assert here("--store", str(target), "put", "n", "k", '{"v": 1}')[0] == 0
    assert here("--store", str(target), "get", "n", "k")[1].strip() == '{\n  "v": 1\n}'


# ---------------------------------------------------------------- finding 2: values in diffs


def test_diff_and_show_print_old_and_new_values(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "users/alice", "prefs", '{"theme": "dark", "font": 14, "old": true}')
    run("put", "users/bob", "prefs", '{"theme": "light"}')
    run("put", "users/alice", "prefs", '{"theme": "light", "font": 14, "lang": "de"}')
    code, out = run("diff", "HEAD~2")
    assert code == 0
    assert " ~ users/alice/prefs" in out
    assert '~ theme: "dark" -> "light"' in out and "- old: true" in out and '+ lang: "de"' in out
    assert "font" not in out  # unchanged fields are not shown
    assert ' + users/bob/prefs {"theme": "light"}' in out
    assert "2 items changed: 1 added, 1 modified, 0 removed" in out
    code, out = run("show")
    assert '~ theme: "dark" -> "light"' in out and "users/bob" not in out
    run("rm", "users/bob", "prefs")
    assert ' - users/bob/prefs {"theme": "light"}' in run("show")[1]


def test_diff_stat_and_name_only_keep_the_old_forms(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "users/alice", "prefs", '{"theme": "dark"}')
    run("put", "users/alice", "prefs", '{"theme": "light"}')
    code, out = run("diff", "HEAD~1", "--stat")
    assert code == 0 and out.splitlines() == [" ~ users/alice/prefs", " 1 item changed: 0 added, 1 modified, 0 removed"]
    assert run("diff", "HEAD~1", "--name-only")[1].splitlines() == ["users/alice/prefs"]
    assert run("show", "--name-only")[1].splitlines() == ["users/alice/prefs"]


def test_long_values_are_folded_unless_full(run) -> None:  # type: ignore[no-untyped-def]
    long_text = "x" * 1000
    run("put", "notes", "n", json.dumps({"text": long_text}))
    out = run("show")[1]
    assert "more characters)" in out and long_text not in out
    assert long_text in run("show", "--full")[1]


def test_show_json_has_old_and_new_items(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "users/alice", "prefs", '{"theme": "dark"}')
    run("put", "users/alice", "prefs", '{"theme": "light"}', "--sources", "m1,m2")
    shown = json.loads(run("show", "--json")[1])
    [change] = shown["changes"]
    assert change["kind"] == "modified" and change["old"]["value"] == {"theme": "dark"}
    assert change["new"]["value"] == {"theme": "light"} and change["new"]["sources"] == ["m1", "m2"]


def test_history_and_blame_show_sources(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "users/alice", "prefs", '{"theme": "dark"}', "--sources", "msg-1", "--author", "onboarding-bot")
    run("put", "users/alice", "prefs", '{"theme": "light"}', "--sources", "msg-7, msg-8", "--author", "assistant")
    history = run("history", "users/alice", "prefs")[1]
    blame = run("blame", "users/alice", "prefs")[1]
    assert history == blame
    lines = blame.splitlines()
    assert len(lines) == 2
    assert 'assistant: {"theme": "light"} sources: msg-7, msg-8' in lines[0]
    assert 'onboarding-bot: {"theme": "dark"} sources: msg-1' in lines[1]
    versions = json.loads(run("blame", "users/alice", "prefs", "--json")[1])
    assert [v["item"]["sources"] for v in versions] == [["msg-7", "msg-8"], ["msg-1"]]
    assert [v["commit"]["author"] for v in versions] == ["assistant", "onboarding-bot"]


# ---------------------------------------------------------------- finding 3: provenance from the CLI


def test_rm_merge_revert_reset_take_author_and_message(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "users/alice", "prefs", '{"theme": "dark"}')
    run("branch", "fix")
    run("--branch", "fix", "put", "users/bob", "prefs", '{"theme": "x"}')
    run("merge", "fix", "-m", "take bob's fix", "--author", "reviewer")
    run("rm", "users/alice", "prefs", "-m", "alice asked to forget", "--author", "alice")
    log = json.loads(run("log", "--json", "-n", "2")[1])
    assert [(c["author"], c["message"]) for c in log] == [
        ("alice", "alice asked to forget"),
        ("reviewer", "take bob's fix"),
    ]
    run("revert", "HEAD", "-m", "alice changed her mind", "--author", "support")
    head = json.loads(run("show", "--json")[1])
    assert (head["author"], head["message"]) == ("support", "alice changed her mind")
    code, out = run("reset", "HEAD~1", "-m", "undo the undo", "--author", "oncall")
    assert code == 0 and "is now at" in out
    entry = json.loads(run("reflog", "--json", "-n", "1")[1])[0]
    assert entry["actor"] == "oncall" and entry["reason"].endswith("undo the undo")
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", entry["time"])  # ISO 8601 in JSON
    assert "nothing to do" in run("reset", "HEAD")[1]
    run("put", "n", "k", '{"v": 1}')
    assert "revert" in run("revert", "HEAD")[1]
    code, out = run("revert", "HEAD~1")  # the same put again: already undone
    assert code == 0 and "nothing to revert: main already lacks what HEAD~1 changed" in out


# ---------------------------------------------------------------- finding 8: search with a string namespace


def test_search_with_the_query_as_namespace_explains_itself(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "users/alice", "prefs", '{"theme": "dark"}')
    code, out = run("search", "theme")
    assert code == 1 and "no items under namespace 'theme'" in out and "namespaces: users" in out
    assert 'engram search "" theme' in out
    code, out = run("search", "", "dark")
    assert code == 0 and "users/alice/prefs" in out
    code, out = run("search", "users", "zebra", "--mode", "keyword")
    assert code == 0 and "no items matching 'zebra' under 'users'" in out


# ---------------------------------------------------------------- finding 10: git habits


def test_relative_times_in_refs(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "users/alice", "prefs", '{"theme": "dark"}')
    code, out = run("get", "users/alice", "prefs", "--at", "main@{now}")
    assert code == 0 and json.loads(out) == {"theme": "dark"}
    code, out = run("get", "users/alice", "prefs", "--at", "main@{yesterday}")
    assert code == 1 and "no commit at or before" in out
    assert run("log", "main@{2.days.ago}")[0] == 1
    code, out = run("log", "main@{3 parsecs ago}")
    assert code == 1 and "3 days ago" in out


def test_log_graph_draws_merges(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "n", "base", '{"v": 0}')
    run("branch", "feature")
    run("--branch", "feature", "put", "n", "f1", '{"v": 1}', "-m", "feature 1")
    run("--branch", "feature", "put", "n", "f2", '{"v": 2}', "-m", "feature 2")
    run("put", "n", "m1", '{"v": 3}', "-m", "main work")
    run("merge", "feature", "-m", "merge feature")
    lines = run("log", "--graph")[1].splitlines()
    graph = [re.split(r" [0-9a-f]{10} ", line)[0] for line in lines]
    assert graph[0] == "*" and "merge feature" in lines[0]
    assert graph[1] == "|\\"
    assert "/" in "".join(graph), lines  # the branch joins main again where it forked
    assert sum(1 for line in lines if "feature " in line and line.startswith("| *")) == 2
    assert any(line.startswith("* |") and "main work" in line for line in lines)


def _commit(name: str, *parents: str) -> Commit:
    ids = {n: n.encode().ljust(20, b"\0") for n in (name, *parents)}
    return Commit(ids[name], ids[name], tuple(ids[p] for p in parents), 0, "t", name, {})


def test_graph_of_a_merge_forks_then_joins() -> None:
    commits = [_commit("m", "a2", "b1"), _commit("b1", "a1"), _commit("a2", "a1"), _commit("a1")]
    rows = [(lanes.rstrip(), c.message if c else None) for lanes, c in draw(commits)]
    assert rows == [("*", "m"), ("|\\", None), ("| *", "b1"), ("* |", "a2"), ("|/", None), ("*", "a1")]


def test_graph_of_two_merges_keeps_every_lane() -> None:
    commits = [_commit("m2", "m1", "c1"), _commit("c1", "a1"), _commit("m1", "a1", "b1"), _commit("b1", "a1"),
               _commit("a1")]  # fmt: skip
    rows = [(lanes.rstrip(), c.message if c else None) for lanes, c in draw(commits)]
    assert rows[0] == ("*", "m2") and rows[1] == ("|\\", None)
    assert ("* |", "m1") in rows and rows[-1] == ("*", "a1")
    assert sum(1 for lanes, c in rows if c is None and "/" in lanes) == 2  # two lanes join a1


# ---------------------------------------------------------------- finding 11: small things


def test_times_carry_their_zone(run, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    run("put", "n", "k", '{"v": 1}')
    out = run("log")[1]
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4} ", out), out
    iso = json.loads(run("log", "--json")[1])[0]["time"]
    assert iso.endswith("+00:00")


def test_tenant_stores_are_listed_and_readable(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run("init")
    assert "no tenants yet" in run("tenants")[1]
    assert run("--tenant", "acme", "put", "users/alice", "prefs", '{"theme": "dark"}')[0] == 0
    code, out = run("tenants")
    assert code == 0 and out.startswith("acme  0 keys, store: ") and "tenants/acme" in out
    code, out = run("--tenant", "acme", "get", "users/alice", "prefs")
    assert code == 0 and json.loads(out) == {"theme": "dark"}
    assert run("get", "users/alice", "prefs")[0] == 1  # the base store is another store
    code, out = run("--tenant", "nobody", "log")
    assert code == 1 and "no store for tenant 'nobody'" in out


def test_gc_on_a_fresh_store_mentions_the_grace_period(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "n", "k", '{"v": 1}')
    run("put", "n", "k", '{"v": 2}')
    run("reset", "HEAD~1")
    code, out = run("gc")
    assert code == 0 and "nothing to remove" in out and "last 10 minutes" in out


def test_wording(run) -> None:  # type: ignore[no-untyped-def]
    run("put", "n", "k", '{"v": 1}')
    assert "1 item changed:" in run("show")[1]
    assert "(none)" not in run("tag")[1]
    run("checkout", "-b", "fix")
    code, out = run("branch", "-d", "fix")
    assert code == 1 and "it is the branch in use" in out and "handle" not in out
    code, out = run("fsck")
    assert re.search(r"\d+ commits, \d+ tree nodes?: ok", out)


# ---------------------------------------------------------------- finding 9: the store remembers its embedder


def test_the_store_remembers_its_embedder_and_refuses_another(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["--store", str(tmp_path / "store"), "--vector-cache", "none"]

    def engram(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, [*base, *args], obj={})
        assert not result.exception or isinstance(result.exception, SystemExit), result.exception
        return result.exit_code, result.output

    assert engram("--embedder", "hashing", "put", "users/alice", "prefs", '{"text": "dark mode"}')[0] == 0
    code, out = engram("search", "users", "dark", "--explain", "--json")  # no --embedder: the recorded one
    assert code == 0 and json.loads(out)["items"][0]["explain"]["embedder"].startswith("hashing")
    code, out = engram("--embedder", "hashing:64", "search", "users", "dark")
    assert code == 1 and "indexed with 'hashing'" in out and "engram reindex --embedder hashing:64" in out
    code, out = engram("reindex", "--embedder", "hashing:64")
    assert code == 0 and "indexed 1 item" in out and "hashing:64" in out
    code, out = engram("search", "users", "dark", "--explain", "--json")
    assert code == 0 and json.loads(out)["items"][0]["explain"]["embedder"].startswith("hashing")
    assert engram("--embedder", "hashing", "search", "users", "dark")[0] == 1  # now hashing:64 is the store's
