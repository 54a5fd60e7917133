"""The production-debugging scenario of issue #4 (examples/production_debugging.py): every figure the
example reports, the same investigation through the CLI, and the example run as a script."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner

import engram
from engram.cli import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "production_debugging.py"
FINAL = "Final counts: checkpoint 145, day1 147, day2 147, problem 167, main after the hotfix 168"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("production_debugging", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _load()
ERROR = example.path_of(*example.ERROR)
FIX = example.path_of(*example.FIX)
#: What day 3 added: the accessibility error and 19 error logs (12 for alice, 7 for bob).
DAY3 = sorted(
    [ERROR]
    + [
        example.path_of(u, f"logs.dashboard.error_{i:02d}")
        for u, n in example.ERROR_LOGS.items()
        for i in range(1, n + 1)
    ]
)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any], str]:
    """The scenario played once on a SQLite store: (store path, results, narration)."""
    store = str(tmp_path_factory.mktemp("production") / "store")
    lines: list[str] = []
    results = example.run(store, "hashing", echo=lines.append)
    return store, results, "\n".join(lines)


@pytest.fixture
def run(scenario: tuple[str, dict[str, Any], str]) -> Callable[..., tuple[int, str]]:
    """Invoke the CLI on the scenario's store: run("diff", "day2", "problem") -> (exit code, output)."""
    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, ["--store", scenario[0], "--embedder", "hashing", *args], obj={})
        return result.exit_code, result.output

    return invoke


def _json(run: Callable[..., tuple[int, str]], *args: str) -> Any:
    code, out = run(*args, "--json")
    assert code == 0, out
    return json.loads(out)


def test_production_debugging_counts_at_every_tag(scenario: tuple[str, dict[str, Any], str]) -> None:
    _, results, narration = scenario
    assert results["counts"] == {
        "history": 144, "checkpoint": 145, "day1": 147, "day2": 147, "problem": 167, "current": 167,
        "at_checkpoint": 145, "at_day1": 147, "at_day2": 147, "at_problem": 167,
        "hotfix": 148, "merged": 168, "at_day2_after_merge": 147,
    }  # fmt: skip
    assert FINAL in narration
    assert results["fsck_ok"] is True
    assert results["commits"] > 100  # a realistic history: one commit per message, not one big batch


def test_production_debugging_finds_what_changed(scenario: tuple[str, dict[str, Any], str]) -> None:
    _, results, _ = scenario
    assert results["error_at_problem"] is True and results["error_at_day2"] is False
    assert results["diff"] == DAY3 and len(results["diff"]) == 20
    assert results["diff_kinds"] == ["added"]
    assert (results["color_day1"], results["color_day2"]) == (example.ACCESSIBLE, example.UNREADABLE)
    assert results["color_day2_provenance"] == ("agent:personalization", ["msg-alice-245"])
    assert [(v["value"], v["author"], v["sources"]) for v in results["theme_history"]] == [
        ("solarized dark", "agent:chat", ["msg-alice-188"]),
        ("dark", "agent:chat", ["msg-alice-122"]),
        ("light", "agent:onboarding", ["signup-alice"]),
    ]
    assert len({v["commit"] for v in results["theme_history"]}) == 3
    assert results["search_problem"][0] == ERROR
    assert ERROR not in results["search_day2"]
    assert "/preferences/accessibility/" in results["search_day2"][0]  # only preferences matched before day 3


def test_production_debugging_errors_only_in_affected_users(scenario: tuple[str, dict[str, Any], str]) -> None:
    _, results, _ = scenario
    assert results["errors_day2"] == {"alice": 0, "bob": 0, "carol": 0}
    assert results["errors_problem"] == {"alice": 13, "bob": 7, "carol": 0}
    assert [u for u, n in results["errors_problem"].items() if n] == list(example.AFFECTED)
    assert results["error_namespaces"] == [
        "users/alice/errors",
        "users/alice/logs/dashboard",
        "users/bob/logs/dashboard",
    ]


def test_production_debugging_hotfix_merges_without_rewriting_the_past(
    scenario: tuple[str, dict[str, Any], str],
) -> None:
    store, results, _ = scenario
    assert results["merge_parents"] == 2
    assert results["fix_on_main"] is True and results["fix_at_day2"] is False
    assert results["color_on_main"] == example.ACCESSIBLE
    assert results["color_at_day2_after_merge"] == example.UNREADABLE
    with engram.open(store, embedder="hashing") as mem:  # reopened: the figures are in the store, not in memory
        assert [mem.at(t).count() for t in ("checkpoint", "day1", "day2", "day3", "problem", "main")] == [
            145, 147, 147, 167, 167, 168,
        ]  # fmt: skip
        assert mem.at("hotfix").count() == 148
        assert mem.resolve("day3").id == mem.resolve("problem").id
        namespace, key = example.location("bob", "profile.schedule.work_hours")
        hours = mem.history(namespace, key, "checkpoint")  # bob changed his mind: both versions, newest first
        assert [(v.item.value["value"], v.item.author) for v in hours if v.item] == [
            ("07:30-15:30", "agent:scheduler"), ("08:00-16:00", "agent:scheduler"),
        ]  # fmt: skip
        fix = mem.get(*example.location(*example.FIX))
        assert fix is not None and fix.author == "agent:debugger" and fix.sources == ("incident-417",)


def test_production_debugging_through_the_cli(run: Callable[..., tuple[int, str]]) -> None:
    commits = _json(run, "log", "-n", "500")
    assert commits[0]["message"] == "merge hotfix: accessible dashboard colour" and len(commits[0]["parents"]) == 2
    assert {"agent:onboarding", "agent:chat", "agent:support", "agent:scheduler", "agent:personalization",
            "agent:ui-monitor", "agent:log-shipper", "agent:debugger"} <= {c["author"] for c in commits}  # fmt: skip
    code, out = run("log", "-n", "3")
    assert code == 0 and out.startswith("M ") and "merge hotfix" in out
    assert [c["author"] for c in _json(run, "log", "--namespace", "users/alice/errors")] == ["agent:ui-monitor"]

    rows = _json(run, "diff", "day2", "problem")
    assert sorted("/".join([*r["namespace"], r["key"]]) for r in rows) == DAY3
    assert {r["kind"] for r in rows} == {"added"} and all(r["old"] is None for r in rows)
    code, out = run("diff", "day2", "problem")
    assert code == 0 and "20 items changed: 20 added, 0 modified, 0 removed" in out
    assert all(path in out for path in DAY3)

    query = ("users", "accessibility error")
    then = _json(run, "search", *query, "--at", "day2")["items"]
    assert then and ERROR not in ["/".join([*i["namespace"], i["key"]]) for i in then]
    now = _json(run, "search", *query, "--at", "problem")["items"]
    assert "/".join([*now[0]["namespace"], now[0]["key"]]) == ERROR
    assert now[0]["value"]["category"] == "accessibility"
    code, out = run("search", *query, "--at", "problem")
    assert code == 0 and out.split("\n")[0].split()[1] == ERROR
    errors = ("--filter", '{"level": "error"}', "--limit", "100", "--at", "problem")
    found = {u: len(_json(run, "search", f"users/{u}", *errors)["items"]) for u in example.USERS}
    assert found == {"alice": 13, "bob": 7, "carol": 0}

    ui = "users/alice/preferences/ui"
    assert _json(run, "get", ui, "theme", "--at", "checkpoint")["value"]["value"] == "solarized dark"
    code, out = run("get", ui, "dashboard_color", "--at", "checkpoint")
    assert code == 1 and "no item" in out
    assert _json(run, "get", ui, "dashboard_color", "--at", "day1")["value"]["value"] == example.ACCESSIBLE
    assert _json(run, "get", ui, "dashboard_color", "--at", "day2")["value"]["value"] == example.UNREADABLE
    assert _json(run, "get", ui, "dashboard_color")["value"]["value"] == example.ACCESSIBLE  # main, after the fix
    assert run("get", *FIX.rsplit("/", 1), "--at", "day2")[0] == 1
    assert run("get", *FIX.rsplit("/", 1))[0] == 0

    versions = _json(run, "history", ui, "theme")
    assert [(v["value"]["value"], v["author"]) for v in versions] == [
        ("solarized dark", "agent:chat"), ("dark", "agent:chat"), ("light", "agent:onboarding"),
    ]  # fmt: skip
    versions = _json(run, "history", ui, "dashboard_color")
    assert [(v["value"]["value"], v["author"]) for v in versions] == [
        (example.ACCESSIBLE, "agent:debugger"), (example.UNREADABLE, "agent:personalization"),
        (example.ACCESSIBLE, "agent:personalization"),
    ]  # fmt: skip
    code, out = run("history", ui, "dashboard_color")
    assert code == 0 and "agent:debugger: " in out and out.count("agent:personalization: ") == 2

    listed = ["/".join(ns) for ns in _json(run, "ls")]
    assert {"users/alice/errors", "users/alice/logs/dashboard", "users/bob/logs/dashboard"} <= set(listed)
    assert not [ns for ns in listed if ns.startswith("users/carol/") and ns.split("/")[2] in ("errors", "logs")]
    assert not [ns for ns in (map("/".join, _json(run, "ls", "--at", "day2"))) if "/errors" in ns or "/logs" in ns]
    code, out = run("ls", "--prefix", "users/carol", "--max-depth", "3")
    assert code == 0 and out.split() == ["users/carol/facts", "users/carol/preferences", "users/carol/profile"]
    code, out = run("tag")
    assert [line.split()[0] for line in out.splitlines()] == ["checkpoint", "day1", "day2", "day3", "problem"]


def test_production_debugging_runs_as_a_script(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLE), str(tmp_path / "store")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert FINAL in done.stdout and "accessibility error at problem / at day2       True / False" in done.stdout
    assert (tmp_path / "store" / "engram.db").exists()
