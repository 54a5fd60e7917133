"""Relative times in ref expressions (``main@{3 days ago}``), the simulated clock, and provenance on revert and
reset (issue #12, findings 3 and 10)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import engram
from engram import _refs, clock
from engram.errors import InvalidRefError

NS = ("users", "alice")
DAY = 86_400_000


@pytest.mark.parametrize(
    ("text", "back_ms"),
    [
        ("now", 0),
        ("yesterday", DAY),
        ("3 days ago", 3 * DAY),
        ("2.days.ago", 2 * DAY),
        ("1 day ago", DAY),
        ("3 hours ago", 3 * 3_600_000),
        ("90 minutes ago", 90 * 60_000),
        ("1 week ago", 7 * DAY),
        ("2 Weeks Ago", 14 * DAY),
    ],
)
def test_relative_times_count_back_from_now(text: str, back_ms: int) -> None:
    with clock.simulated(datetime(2026, 11, 23, 12, tzinfo=UTC)) as sim:
        start = int(sim.now().timestamp() * 1000)
        assert _refs.parse(f"main@{{{text}}}").time_ms == start - back_ms


@pytest.mark.parametrize("text", ["3 fortnights ago", "soon", "three days ago", "3 days"])
def test_unknown_relative_times_are_refused_with_the_forms_that_work(text: str) -> None:
    with pytest.raises(InvalidRefError, match="3 days ago"):
        _refs.parse(f"main@{{{text}}}")


def _three_day_story() -> engram.Memory:
    with clock.simulated(datetime.now(UTC) - timedelta(days=4)) as sim:
        mem = engram.open(":memory:", embedder="hashing")
        mem.put(NS, "prefs", {"theme": "dark"}, message="day 1")
        sim.advance(days=1, hours=12)
        mem.put(NS, "prefs", {"theme": "light"}, message="day 3")
        sim.advance(days=2)
        mem.put(NS, "prefs", {"theme": "blue"}, message="day 4")
    return mem


def test_the_past_opens_by_relative_time() -> None:
    mem = _three_day_story()
    seen = {t: mem.at(f"main@{{{t}}}").get(NS, "prefs").value["theme"] for t in ("3 days ago", "2.days.ago", "now")}
    assert seen == {"3 days ago": "dark", "2.days.ago": "light", "now": "blue"}
    assert mem.at("main@{yesterday}").get(NS, "prefs").value == {"theme": "light"}
    with pytest.raises(engram.RefNotFoundError, match="no commit at or before"):
        mem.at("main@{1 year ago}")


def test_commits_carry_the_simulated_times_and_the_clock_returns() -> None:
    mem = _three_day_story()
    times = [c.time for c in mem.log() if c.message.startswith("day")]
    assert times == sorted(times, reverse=True)
    assert times[0] - times[-1] >= int(3.5 * DAY)
    assert abs(clock.now_ms() - datetime.now(UTC).timestamp() * 1000) < 60_000


def test_a_simulated_clock_never_goes_back_and_does_not_nest() -> None:
    with clock.simulated(datetime(2026, 1, 1)) as sim:
        first, second = clock.now_ms(), clock.now_ms()
        assert second > first
        with pytest.raises(ValueError, match="never goes back"):
            sim.advance(days=-1)
        with pytest.raises(ValueError, match="never goes back"):
            sim.set(datetime(2025, 1, 1))
        with pytest.raises(RuntimeError, match="already active"), clock.simulated(datetime(2026, 1, 1)):
            pass


def test_revert_and_reset_record_their_author_and_message() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    bad = mem.put(NS, "prefs", {"theme": "unreadable"})
    fixed = mem.revert(bad.id, author="oncall", message="undo the unreadable theme (INC-7)")
    assert (fixed.author, fixed.message) == ("oncall", "undo the unreadable theme (INC-7)")
    assert mem.get(NS, "prefs") is None
    default = mem.revert(fixed.id)
    assert default.message == f"revert {fixed.short_id}: undo the unreadable theme (INC-7)"
    mem.reset(bad.id, author="oncall", message="back to the incident state")
    entry = mem.reflog(limit=1)[0]
    assert entry["actor"] == "oncall" and entry["reason"].endswith(": back to the incident state")
    with pytest.raises(engram.InvalidInputError):
        mem.reset(bad.id, message="nul\x00")


def test_conflict_messages_name_the_strategies_a_caller_can_pass() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    mem.put(NS, "prefs", {"theme": "dark"})
    mem.create_branch("other")
    mem.put(NS, "prefs", {"theme": "light"})
    mem.handle("other").put(NS, "prefs", {"theme": "blue"})
    with pytest.raises(engram.MergeConflictError) as caught:
        mem.merge("other")
    assert "1 conflict;" in str(caught.value) and "a function" not in str(caught.value)


def test_reverting_what_the_branch_already_lacks_writes_nothing() -> None:
    mem = engram.open(":memory:", embedder="hashing")
    mem.put(NS, "prefs", {"theme": "dark"})
    mem.create_branch("side")
    side = mem.handle("side")
    elsewhere = side.put(NS, "note", {"v": 1})
    head = mem.head
    assert mem.revert(elsewhere.id) == head  # not in main's history: nothing to undo here
    bad = mem.put(NS, "prefs", {"theme": "unreadable"})
    undone = mem.revert(bad.id)
    assert mem.revert(bad.id) == undone  # already reverted: no second commit
