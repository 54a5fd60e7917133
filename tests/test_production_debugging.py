"""The production-debugging scenario of issue #4 (examples/production_debugging.py): a story written over five
days by agents that place no tags, an investigation that finds the bad write by itself, the revert, and the
same exploration through the CLI (docs/scenario.md's shell blocks run in tests/test_docs.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner

import engram
from engram import clock
from engram.cli import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "production_debugging.py"
HOUR, DAY = 3_600_000, 86_400_000


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("production_debugging", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _load()
UI = "users/alice/preferences/ui"
COLOR = example.path_of(*example.COLOR)
ERROR = example.path_of(*example.ERROR)
Scenario = tuple[str, dict[str, Any], str]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """The scenario played once on a SQLite store: (store path, results, narration)."""
    store = str(tmp_path_factory.mktemp("production") / "store")
    lines: list[str] = []
    results = example.run(store, "hashing", echo=lines.append)
    return store, results, "\n".join(lines)


@pytest.fixture
def run(scenario: Scenario) -> Callable[..., tuple[int, str]]:
    """Invoke the CLI on the scenario's store: run("diff", "last-good", "incident-start") -> (exit code, output)."""
    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, ["--store", scenario[0], "--embedder", "hashing", *args], obj={})
        return result.exit_code, result.output

    return invoke


def _json(run: Callable[..., tuple[int, str]], *args: str) -> Any:
    code, out = run(*args, "--json")
    assert code == 0, out
    return json.loads(out)


def _table_counts() -> list[int]:
    """The items column of the counts table in the example's docstring, top to bottom."""
    doc = example.__doc__ or ""
    rule = next(line for line in doc.splitlines() if line.startswith("====="))
    start, end = list(re.finditer(r"=+", rule))[1].span()
    return [int(line[start:end]) for line in doc.splitlines() if line[start:end].strip().isdigit()]


def test_production_debugging_counts_match_the_docstring_table(scenario: Scenario) -> None:
    _, results, narration = scenario
    assert results["counts"] == {
        "day1": 144, "release": 145, "dashboard": 147, "bad_write": 147, "story_end": 167, "last_good": 147,
        "reverted": 167, "tested": 147, "main_before_merge": 168, "merged": 148, "at_yesterday": 167,
    }  # fmt: skip
    table = _table_counts()
    assert table == list(results["counts"].values())[:-1] and len(table) == 10
    assert "main@{yesterday}`` still has 167 items" in example.__doc__
    assert results["fsck_ok"] is True
    assert len(results["commits"]) == 105  # a realistic history: one commit per message, not one big batch
    bad = results["bad"][:10]
    assert f"Found the bad write {bad} by itself; main after the fix: 148 memories, 0 open errors" in narration


def test_production_debugging_writers_place_no_tags_and_write_over_days() -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=5)
    with clock.simulated(start) as sim:
        mem = engram.open(":memory:", embedder="hashing")
        story = example.write_story(mem, sim, lambda title, detail: None)
    assert mem.tags() == {} and list(mem.branches()) == ["main"]  # the writers know nothing of the incident
    assert story["counts"]["story_end"] == mem.count() == 167
    times = sorted(c.time for c in mem.log())
    assert 0 <= times[0] - start.timestamp() * 1000 < 1000  # even init carries the story's time
    assert times[-1] - times[0] > 3.5 * DAY
    assert len({datetime.fromtimestamp(t / 1000, UTC).date() for t in times}) >= 4
    assert times[-1] < int(datetime.now(UTC).timestamp() * 1000) - 12 * HOUR  # the story ends before the run
    items = [i for i in mem.iter_items(("users",))]
    assert all(i.sources for i in items) and {i.author for i in items} >= {
        "agent:onboarding", "agent:chat", "agent:support", "agent:scheduler", "agent:personalization",
        "agent:ui-monitor", "agent:dashboard",
    }  # fmt: skip
    mem.close()


def test_production_debugging_times_span_days(scenario: Scenario) -> None:
    store, results, _ = scenario
    commits = results["commits"]
    story = [c for c in commits if c.time < commits[0].time - 12 * HOUR]
    assert len(story) == 101 and len(commits) - len(story) == 4  # revert, monitor, carol, merge: in real time
    assert story[0].time - story[-1].time > 3.5 * DAY
    with engram.open(store, embedder="hashing") as mem:  # reopened: the times are in the store
        bad = mem.resolve("incident-start")
        assert 50 * HOUR < commits[0].time - bad.time < 58 * HOUR  # "since about 2 days ago"
        assert mem.at("main@{2.days.ago}").get(*example.location(*example.COLOR)).value["value"] == example.UNREADABLE


def test_production_debugging_investigation_finds_the_bad_write_by_itself(scenario: Scenario) -> None:
    _, results, _ = scenario
    truth = results["truth"]  # what the writer did: the investigation never sees it
    assert results["bad"] == truth["bad"]
    assert results["tags"]["incident-start"] == truth["bad"]
    assert results["errors_now"] == {"alice": 13, "bob": 7, "carol": 0}
    assert results["search_now"][0] == COLOR and results["search_then"][0] == COLOR
    assert [(e["commit"], e["value"], e["ratio"]) for e in results["color_log"]] == [
        (truth["bad"], example.UNREADABLE, 1.3), (truth["navy"], example.ACCESSIBLE, 10.4),
    ]  # fmt: skip
    assert [(v["value"], v["author"], v["sources"]) for v in results["color_history"]] == [
        (example.UNREADABLE, "agent:personalization", ["msg-alice-245"]),
        (example.ACCESSIBLE, "agent:personalization", ["msg-alice-201"]),
    ]
    assert 0 < results["first_error_after_bad"] < 3 * HOUR  # the errors started right after it


def test_production_debugging_investigation_is_not_fooled_by_a_later_bad_write() -> None:
    """Two failing writes in a row: the investigation blames the first, and the last good state is before it."""
    namespace, key = example.location(*example.COLOR)
    with clock.simulated(datetime.now(UTC) - timedelta(days=5)) as sim:
        mem = engram.open(":memory:", embedder="hashing")
        sharing = {"kind": "preference", "text": "Alice shares her dashboard with Bob", "value": ["bob"]}
        mem.put(*example.location(*example.SHARING), sharing, sources=["msg-alice-202"])
        example.set_color(mem, example.ACCESSIBLE, "navy", "msg-alice-201")
        sim.advance(days=2, hours=12)  # after "3 days ago"
        first = example.set_color(mem, "#fef08a", "light yellow", "msg-alice-230")
        sim.advance(hours=1)
        example.monitor(mem, "monitor-run-1")
        sim.advance(days=1)
        example.set_color(mem, example.UNREADABLE, "pale yellow", "msg-alice-245")
    found = example.investigate(mem, lambda title, detail: None)
    assert found["bad"] == first.id.hex() and len(found["color_log"]) == 3
    assert found["last_good_color"] == example.ACCESSIBLE
    assert [v["sources"] for v in found["color_history"]][1] == ["msg-alice-230"]
    assert mem.history(namespace, key)[1].commit.id == first.id
    mem.close()


def test_production_debugging_last_good_state_by_relative_time(scenario: Scenario) -> None:
    store, results, _ = scenario
    assert results["last_good_color"] == example.ACCESSIBLE
    assert results["last_good_errors"] == {"alice": 0, "bob": 0, "carol": 0}
    assert results["tags"]["last-good"] == results["last_good"]
    with engram.open(store, embedder="hashing") as mem:
        good, bad = mem.resolve("last-good"), mem.resolve("incident-start")
        assert good.id in {c.id for c in mem.log("incident-start")} and good.time < bad.time
        assert mem.resolve("main@{3 days ago}").id == good.id
        assert mem.at("main@{3 days ago}").get(*example.location(*example.COLOR)).value["value"] == example.ACCESSIBLE
        # between the last good state and the bad write, bob's hours changed: resetting would lose that
        changed = sorted("/".join((*c.namespace, c.key)) for c in mem.diff("last-good", "incident-start"))
        assert changed == [COLOR, "users/bob/profile/schedule/work_hours"]


def test_production_debugging_revert_undoes_exactly_the_bad_write(scenario: Scenario) -> None:
    store, results, _ = scenario
    revert = results["revert"]
    assert revert["author"] == example.ONCALL == "oncall:dana"
    assert revert["message"] == "revert alice's unreadable dashboard colour: #fde047 fails WCAG AA (incident-417)"
    assert revert["metadata"] == {"reverts": results["truth"]["bad"]}
    assert results["revert_changes"] == [
        {"path": COLOR, "kind": "modified", "old": example.UNREADABLE, "new": example.ACCESSIBLE},
    ]
    with engram.open(store, embedder="hashing") as mem:
        [undone] = mem.show(revert["id"]).changes
        [done] = mem.show("incident-start").changes
        assert (undone.old, undone.new) == (done.new, done.old)  # the very items, timestamps and sources included
        assert undone.new is not None and undone.new.sources == ("msg-alice-201",)
        assert mem.resolve(revert["id"]).parents[0] != mem.resolve("incident-start").id  # not the newest commit
        # what was written after the bad write survives the revert
        assert example.value_of(mem, *example.THEME) == "solarized dark"
        assert example.value_of(mem, "bob", "profile.schedule.work_hours") == "07:30-15:30"


def test_production_debugging_fix_is_tested_on_a_branch_then_merged(scenario: Scenario) -> None:
    store, results, _ = scenario
    assert (results["fix_color"], results["fix_ratio"]) == (example.ACCESSIBLE, 10.4)
    assert results["monitor_message"].endswith("; 20 open errors resolved")
    assert results["errors_on_branch"] == {"alice": 0, "bob": 0, "carol": 0}
    assert results["merge_parents"] == 2
    assert results["errors_head"] == {"alice": 0, "bob": 0, "carol": 0}
    assert results["errors_yesterday"] == {"alice": 13, "bob": 7, "carol": 0}
    assert (results["color_head"], results["color_incident"]) == (example.ACCESSIBLE, example.UNREADABLE)
    with engram.open(store, embedder="hashing") as mem:
        assert mem.get(*example.location("carol", "preferences.reports.format")) is not None  # main kept moving
        assert mem.at("main@{yesterday}").get(*example.location(*example.ERROR)) is not None
        assert mem.get(*example.location(*example.ERROR)) is None
        head = mem.resolve()
        assert head.author == example.ONCALL and head.message == "merge fix/dashboard-contrast: incident-417"


def test_production_debugging_through_the_cli(run: Callable[..., tuple[int, str]], scenario: Scenario) -> None:
    results = scenario[1]
    touched = _json(run, "log", "--namespace", UI, "-n", "10")
    assert [c["author"] for c in touched[:4]] == ["oncall:dana", "oncall:dana", "agent:chat", "agent:personalization"]
    assert touched[3]["id"] == results["bad"] and touched[1]["metadata"] == {"reverts": results["bad"]}
    versions = _json(run, "history", UI, "dashboard_color")
    assert [(v["item"]["value"]["value"], v["commit"]["author"]) for v in versions] == [
        (example.ACCESSIBLE, "oncall:dana"), (example.UNREADABLE, "agent:personalization"),
        (example.ACCESSIBLE, "agent:personalization"),
    ]  # fmt: skip
    at = {when: _json(run, "get", UI, "dashboard_color", "--at", when)["value"]["value"]
          for when in ("main@{3 days ago}", "last-good", "incident-start", "incident-start~1", "main")}  # fmt: skip
    assert at == {"main@{3 days ago}": example.ACCESSIBLE, "last-good": example.ACCESSIBLE,
                  "incident-start": example.UNREADABLE, "incident-start~1": example.ACCESSIBLE,
                  "main": example.ACCESSIBLE}  # fmt: skip
    code, out = run("show", "incident-start")
    assert code == 0 and "agent:personalization" in out and "msg-alice-245" in out and COLOR in out
    errors = ("--filter", '{"level": "error"}', "--limit", "100")
    found = {u: len(_json(run, "search", f"users/{u}", *errors, "--at", "main@{yesterday}")["items"])
             for u in example.USERS}  # fmt: skip
    assert found == {"alice": 13, "bob": 7, "carol": 0}
    assert _json(run, "search", "users", *errors)["items"] == []
    code, out = run("tag")
    assert [line.split()[0] for line in out.splitlines()] == ["incident-start", "last-good"]


def test_production_debugging_refuses_a_store_that_holds_memories(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    with engram.open(store, embedder="hashing") as mem:
        mem.put(("users", "alice"), "prefs", {"theme": "dark"})
    with pytest.raises(SystemExit, match="already holds memories"):
        example.run(store, "hashing", echo=lambda line: None)
    with engram.open(store, embedder="hashing") as mem:
        assert len(mem.log()) == 2 and mem.count() == 1  # untouched


def test_production_debugging_runs_as_a_script(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLE), str(tmp_path / "store")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "main after the fix: 148 memories, 0 open errors (105 commits)" in done.stdout
    assert "at main@{3 days ago}: the last good state" in done.stdout and "#1e3a8a (10.4:1), 0 errors" in done.stdout
    assert (tmp_path / "store" / "engram.db").exists()
