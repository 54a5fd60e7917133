"""Production debugging: an on-call engineer finds when a memory went wrong, who wrote it, and reverts it.

The scenario of issue #4, told as it happens. An assistant keeps memories about three users (alice, bob,
carol). Over five days agents write them, each commit stamped with the time it happened (the example
writes through :func:`engram.clock.simulated`, starting five days before you run it). A dashboard release
lets users pick a dashboard colour; alice picks navy, and two days later, asked to make her dashboard
"brighter", an agent stores a pale yellow that white text cannot be read on. Render errors and an
accessibility error follow. The writers place no tags: they just write.

Then, in real time, an on-call engineer starts from the report alone ("alice's dashboard is unreadable,
since about 2 days ago") and finds the bad write with ``log`` of the colour's key, ``search`` at then and
now, and ``history`` (who wrote it, from which chat message); opens ``main@{3 days ago}`` to see the last
good state; bookmarks both moments with tags; reverts the bad write on a branch (with an author and a
message), tests the fix there (the contrast check, then the UI monitor, which resolves the open errors),
and merges it while agents keep writing on main. The errors are gone at the head, and
``main@{yesterday}`` still shows them.

Paths. A memory "path" such as ``preferences.ui.theme`` of user alice is stored LangGraph-style: every
label but the last becomes a namespace label under ``("users", <user>)`` and the last one is the key,
so ``preferences.ui.theme`` is namespace ``("users", "alice", "preferences", "ui")``, key ``theme``.
Namespaces stay hierarchical (``list_namespaces``, ``engram ls`` and prefix searches see
``users/alice/preferences/ui``), and :func:`location` is the one place that does the mapping.

Counts (asserted by ``tests/test_production_debugging.py``; "day 1" starts 5 days before the run):

=======================  =====  ================================================================================
moment                   items  what happened
=======================  =====  ================================================================================
day 1 (5 days ago)         144  48 memories per user: a sign-up transaction each (20 memories), then one commit
                                per chat message (28 per user), plus 2 messages that update earlier memories
day 2 (4 days ago)         145  one more memory, the release note ``system/releases`` ``dashboard-v2``
day 2                      147  alice picks a navy ``dashboard_color`` and shares her dashboard with bob
day 3 (2-3 days ago)       147  bob's working hours change; then alice's ``dashboard_color`` becomes pale yellow
                                (the same path, updated): the bad write
day 3-4 (1-2 days ago)     167  20 open errors: 1 accessibility error (alice) + 19 render errors (12 alice,
                                7 bob, who views alice's dashboard; carol: none); alice's theme changes
``main@{3 days ago}``      147  what the investigator opens: the last good state (navy, no errors)
fix branch, reverted       167  the revert of the bad write: only ``dashboard_color`` changes
fix branch, tested         147  the UI monitor passes the restored colour and resolves the 20 open errors
main, meanwhile            168  an agent keeps writing on main: carol's new memory
main, merged               148  the fix merged; ``main@{yesterday}`` still has 167 items and the 20 errors
=======================  =====  ================================================================================

Commit ids and times differ between runs; everything else (counts, keys, values, search results, which
commit the investigation finds) is the same every time.

Usage::

    python examples/production_debugging.py                      # a temporary store, hashing embedder
    python examples/production_debugging.py /tmp/prod --embedder minilm
    engram --store /tmp/prod --embedder hashing get users/alice/preferences/ui dashboard_color --at 'main@{3 days ago}'
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import engram
from engram import Commit, Memory, SearchItem, View, clock

USERS = ("alice", "bob", "carol")
THEME = ("alice", "preferences.ui.theme")
COLOR = ("alice", "preferences.ui.dashboard_color")
SHARING = ("alice", "preferences.ui.dashboard_sharing")
ERROR = ("alice", "errors.accessibility")
RELEASE = (("system", "releases"), "dashboard-v2")
#: Render errors the dashboard shows each viewer of alice's dashboard once its colour is unreadable.
RENDER_ERRORS = {"alice": 12, "bob": 7}
WIDGETS = ("revenue", "alerts", "latency", "signups", "churn", "uptime", "tickets")
ACCESSIBLE, UNREADABLE = "#1e3a8a", "#fde047"
#: Dashboard text is white; WCAG AA asks normal text for a contrast ratio of at least 4.5:1.
TEXT_COLOR, WCAG_AA = "#ffffff", 4.5
#: What users said in the chat messages the dashboard memories came from (their ids are the items' sources).
MESSAGES = {
    "msg-alice-201": "Could my dashboard be navy blue?",
    "msg-alice-202": "Please share my dashboard with Bob.",
    "msg-alice-245": "The dashboard feels gloomy. Can you make it brighter?",
}
#: The on-call engineer, and who keeps writing on main while the fix is tested.
ONCALL = "oncall:dana"
FIX_BRANCH = "fix/dashboard-contrast"
REPORT = "alice: 'my dashboard is unreadable', since about 2 days ago"

# path, template, one option per user (alice, bob, carol)
ONBOARDING: list[tuple[str, str, tuple[str, str, str]]] = [
    ("preferences.ui.theme", "{name} prefers a {} theme", ("light", "dark", "system")),
    ("preferences.ui.font_size", "{name} reads best at a {} px font size", ("14", "16", "13")),
    ("preferences.ui.density", "{name} likes a {} layout", ("compact", "comfortable", "compact")),
    ("preferences.ui.language", "{name}'s interface language is {}", ("English", "German", "Portuguese")),
    ("preferences.ui.sidebar", "{name} keeps the sidebar {}", ("collapsed", "pinned open", "on the right")),
    ("preferences.ui.animations", "{name} wants interface animations {}", ("off", "on", "reduced")),
    ("preferences.ui.start_page", "{name} starts on the {} page", ("dashboard", "inbox", "reports")),
    ("preferences.ui.date_format", "{name} writes dates as {}", ("YYYY-MM-DD", "DD.MM.YYYY", "MM/DD/YYYY")),
    ("profile.work.role", "{name} is a {}", ("staff engineer", "product manager", "data scientist")),
    ("profile.work.team", "{name} is on the {} team", ("payments", "payments", "research")),
    ("profile.work.manager", "{name} reports to {}", ("Dana", "Dana", "Eve")),
    ("profile.work.projects", "{name} is working on {}", ("the checkout redesign", "the billing migration",
                                                          "churn forecasting")),
    ("profile.work.tools", "{name} uses {} every day", ("VS Code and Grafana", "Jira and Figma", "Jupyter and dbt")),
    ("profile.work.stack", "{name}'s main stack is {}", ("Go and PostgreSQL", "spreadsheets and SQL",
                                                        "Python and Spark")),
    ("profile.work.office", "{name} works from {}", ("the Lisbon office", "home", "the Toronto office")),
    ("profile.work.oncall", "{name} is on call {}", ("every fourth week", "never", "for the data pipelines")),
    ("profile.personal.pronouns", "{name} uses {} pronouns", ("she/her", "he/him", "she/her")),
    ("profile.personal.city", "{name} lives in {}", ("Lisbon", "Berlin", "Toronto")),
    ("profile.personal.hobbies", "{name} enjoys {}", ("climbing", "chess", "birdwatching")),
    ("profile.personal.coffee", "{name} drinks {}", ("espresso", "green tea", "flat whites")),
]  # fmt: skip

# path, author, template, one option per user: learned later, one chat message (one commit) each
CHATS: list[tuple[str, str, str, tuple[str, str, str]]] = [
    ("preferences.notifications.email", "agent:chat", "{name} wants email notifications {}",
     ("for mentions only", "daily", "never")),
    ("preferences.notifications.push", "agent:chat", "{name} allows push notifications {}",
     ("on mobile only", "everywhere", "never")),
    ("preferences.notifications.digest", "agent:chat", "{name} reads the weekly digest on {}",
     ("Monday", "Friday", "Sunday")),
    ("preferences.notifications.quiet_hours", "agent:chat", "{name} has quiet hours {}",
     ("after 19:00", "after 18:00", "after 22:00")),
    ("preferences.notifications.mentions", "agent:chat", "{name} wants a notification when {}",
     ("mentioned directly", "any teammate posts", "a report is ready")),
    ("preferences.notifications.sound", "agent:chat", "{name} keeps notification sounds {}", ("muted", "on", "muted")),
    ("preferences.communication.tone", "agent:chat", "{name} likes a {} tone in replies",
     ("direct", "friendly", "formal")),
    ("preferences.communication.verbosity", "agent:chat", "{name} prefers {} answers",
     ("short", "detailed", "bullet-point")),
    ("preferences.communication.code", "agent:chat", "{name} wants code examples in {}",
     ("Go", "TypeScript", "Python")),
    ("preferences.communication.emoji", "agent:chat", "{name} {} emoji in replies",
     ("dislikes", "enjoys", "does not mind")),
    ("preferences.communication.language", "agent:chat", "{name} chats with the assistant in {}",
     ("English", "German", "English")),
    ("preferences.communication.greeting", "agent:chat", "{name} likes to be greeted as {}",
     ("Alice", "Bob", "Dr. Carol")),
    ("preferences.accessibility.screen_reader", "agent:support", "{name} {} a screen reader",
     ("does not use", "does not use", "uses")),
    ("preferences.accessibility.reduced_motion", "agent:support", "{name} {} reduced motion",
     ("has not asked for", "has not asked for", "needs")),
    ("preferences.accessibility.captions", "agent:support", "{name} wants video captions {}",
     ("off", "on", "always on")),
    ("preferences.accessibility.navigation", "agent:support", "{name} navigates mostly {}",
     ("with keyboard shortcuts", "with the mouse", "with the keyboard")),
    ("profile.schedule.work_hours", "agent:scheduler", "{name} works {}", ("09:00-17:00", "08:00-16:00",
                                                                          "10:00-18:30")),
    ("profile.schedule.timezone", "agent:scheduler", "{name} is in the {} time zone",
     ("Europe/Lisbon", "Europe/Berlin", "America/Toronto")),
    ("profile.schedule.meeting_days", "agent:scheduler", "{name} takes meetings on {}",
     ("Tuesdays and Thursdays", "Mondays", "Wednesdays")),
    ("profile.schedule.focus_time", "agent:scheduler", "{name} blocks focus time {}",
     ("every morning", "on Friday afternoons", "before noon")),
    ("profile.schedule.lunch", "agent:scheduler", "{name} has lunch at {}", ("12:30", "12:00", "13:00")),
    ("profile.schedule.vacation", "agent:scheduler", "{name} is on vacation {}",
     ("in the first two weeks of August", "over Christmas", "in late June")),
    ("facts.support.plan", "agent:support", "{name} is on the {} plan", ("Business", "Business", "Enterprise")),
    ("facts.support.billing_cycle", "agent:support", "{name} is billed {}", ("monthly", "monthly", "yearly")),
    ("facts.support.last_ticket", "agent:support", "{name}'s last support ticket was about {}",
     ("exporting reports", "a failed invoice", "API rate limits")),
    ("facts.support.integrations", "agent:support", "{name} connected {}", ("Slack and GitHub", "Slack",
                                                                           "Snowflake")),
    ("facts.support.api_usage", "agent:support", "{name} makes about {} API calls a day",
     ("2,000", "50", "40,000")),
    ("facts.support.satisfaction", "agent:support", "{name} rated the last support chat {}", ("5/5", "4/5", "5/5")),
]  # fmt: skip

# user, path, author, template, new option: messages that change memories already written. The first two
# come during day 1's chats; bob's new working hours and alice's new theme come later (see write_story).
UPDATES: list[tuple[str, tuple[str, str, str, str]]] = [
    ("alice", ("preferences.ui.theme", "agent:chat", "{name} prefers a {} theme", "dark")),
    ("bob", ("preferences.notifications.email", "agent:chat", "{name} wants email notifications {}", "weekly")),
    ("bob", ("profile.schedule.work_hours", "agent:scheduler", "{name} works {}", "07:30-15:30")),
    ("alice", ("preferences.ui.theme", "agent:chat", "{name} prefers a {} theme", "solarized dark")),
]
KINDS = {"preferences": "preference", "profile": "profile", "facts": "fact"}


def location(user: str, path: str) -> tuple[tuple[str, ...], str]:
    """The namespace and key of a user's memory path: ``preferences.ui.theme`` -> ``(users, u, preferences, ui)``,
    ``theme``."""
    *labels, key = path.split(".")
    return ("users", user, *labels), key


def memory(user: str, path: str, template: str, option: str) -> dict[str, Any]:
    """The value stored for one user memory: its kind and topic, the fact as text, and the bare value."""
    kind, topic, _ = path.split(".")
    text = template.format(option, name=user.capitalize())
    return {"kind": KINDS[kind], "topic": topic, "text": text, "value": option}


def contrast(background: str, foreground: str = TEXT_COLOR) -> float:
    """The WCAG 2 contrast ratio of two ``#rrggbb`` colours, from 1 (none) to 21 (black on white)."""

    def luminance(color: str) -> float:
        channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    light, dark = sorted((luminance(background), luminance(foreground)), reverse=True)
    return round((light + 0.05) / (dark + 0.05), 1)


# ------------------------------------------------------------------------------------- the writers


def remember(mem: Memory, user: str, update: tuple[str, str, str, str], source: str) -> Commit:
    """One agent write from one chat message: one commit, with the author, a message and the source."""
    path, author, template, option = update
    value = memory(user, path, template, option)
    return mem.put(*location(user, path), value, author=author, sources=[source],
                   message=f"remember {user}'s {path} (from {source})")  # fmt: skip


def set_color(mem: Memory, color: str, text: str, source: str) -> Commit:
    """agent:personalization records alice's dashboard colour from one of her messages."""
    value = {"kind": "preference", "topic": "ui", "text": text, "value": color}
    return mem.put(*location(*COLOR), value, author="agent:personalization", sources=[source],
                   message=f"remember alice's dashboard colour {color} (from {source})")  # fmt: skip


def open_errors(reader: Memory | View, user: str) -> list[SearchItem]:
    """The open errors about alice's dashboard in one user's namespace (a filtered listing, no query)."""
    return list(reader.search(("users", user), filter={"level": "error", "dashboard_owner": "alice"}, limit=1000))


def monitor(mem: Memory, run: str) -> Commit | None:
    """The UI monitor's run on ``mem``'s branch: check the contrast of alice's dashboard; open an
    accessibility error when it fails, resolve (delete) every open dashboard error when it passes."""
    color = value_of(mem, *COLOR)
    ratio = contrast(color)
    if ratio < WCAG_AA:
        if mem.get(*location(*ERROR)) is not None:
            return None
        text = (f"Accessibility error: white text on alice's dashboard colour {color} has a contrast ratio of "
                f"{ratio}:1, below the WCAG AA minimum of {WCAG_AA}:1")  # fmt: skip
        error = {"kind": "error", "level": "error", "category": "accessibility", "dashboard_owner": "alice",
                 "path": COLOR[1], "text": text}  # fmt: skip
        return mem.put(*location(*ERROR), error, author="agent:ui-monitor", sources=[run],
                       message=f"ui-monitor: alice's dashboard fails WCAG AA ({ratio}:1)")  # fmt: skip
    viewers = ("alice", *(value_of(mem, *SHARING) or []))
    found = [(r.namespace, r.key) for user in viewers for r in open_errors(mem, user)]
    if not found:
        return None
    message = f"ui-monitor: alice's dashboard passes WCAG AA ({ratio}:1); {len(found)} open errors resolved"
    with mem.transaction(message, author="agent:ui-monitor", metadata={"sources": [run]}) as tx:
        for namespace, key in found:
            tx.delete(namespace, key)
    return mem.resolve()


def render_errors(mem: Memory, batch: list[tuple[str, int]], number: int) -> None:
    """The dashboard renderer ships one batch of render errors (one transaction)."""
    with mem.transaction(f"dashboard: {len(batch)} render errors", author="agent:dashboard") as tx:
        for user, i in batch:
            widget = WIDGETS[(i - 1) % len(WIDGETS)]
            text = f"Dashboard render error for {user}: the {widget} widget failed the contrast check"
            error = {"kind": "error", "level": "error", "category": "render", "widget": widget,
                     "dashboard_owner": "alice", "text": text}  # fmt: skip
            tx.put(*location(user, f"errors.dashboard.render_{i:02d}"), error, sources=[f"render-log-{number}"])


def write_story(mem: Memory, sim: clock.SimulatedClock, step: Callable[[str, str], None]) -> dict[str, Any]:
    """Five days of agents writing, each write at its story time (hours after ``sim``'s start). No tags:
    the writers do not know anything will go wrong. Returns the counts and, for the tests only, the ids
    of the commits the investigation should find (it never sees them)."""
    start = sim.now()

    def at(hours: float) -> None:
        sim.set(start + timedelta(hours=hours))

    counts: dict[str, int] = {}
    for n, user in enumerate(USERS):  # day 1: sign-ups, then a chat message every 15 minutes
        at(0.25 + 0.5 * n)
        with mem.transaction(f"onboarding: {user} signed up", author="agent:onboarding") as tx:
            for path, template, options in ONBOARDING:
                tx.put(*location(user, path), memory(user, path, template, options[n]), sources=[f"signup-{user}"])
    said: list[tuple[str, tuple[str, str, str, str]]] = []
    for i, (path, author, template, options) in enumerate(CHATS):
        said += [(user, (path, author, template, options[n])) for n, user in enumerate(USERS)]
        if i in (6, 13):  # now and then a user changes their mind about something said before
            said.append(UPDATES[i // 7])
    for message, (user, update) in enumerate(said, start=101):
        at(2 + 0.25 * (message - 101))
        remember(mem, user, update, f"msg-{user}-{message}")
    counts["day1"] = mem.count()
    step(f"day 1: sign-ups, {len(said)} chat messages", f"{counts['day1']} memories, {len(mem.log())} commits")

    at(26)  # day 2: the release, and alice picks a colour
    release = {"kind": "release", "text": "Dashboard v2 released: users can choose a dashboard colour"}
    mem.put(*RELEASE, release, author="agent:release", sources=["release-2.0"], message="release note: dashboard v2")
    counts["release"] = mem.count()
    at(27.5)
    navy = set_color(mem, ACCESSIBLE, f"Alice's dashboard colour: navy blue ({ACCESSIBLE})", "msg-alice-201")
    at(27.55)
    sharing = {"kind": "preference", "topic": "ui", "text": "Alice shares her dashboard with Bob", "value": ["bob"]}
    mem.put(*location(*SHARING), sharing, author="agent:personalization", sources=["msg-alice-202"],
            message="remember alice's dashboard sharing (from msg-alice-202)")  # fmt: skip
    counts["dashboard"] = mem.count()
    step("day 2: release; alice picks navy, shares it", f"{counts['dashboard']} memories")

    at(52)  # day 3: bob's hours change; then "brighter" becomes a pale yellow
    remember(mem, *UPDATES[2], "msg-bob-219")
    at(66)
    text = f"Alice's dashboard colour: pale yellow ({UNREADABLE}); she asked for a brighter dashboard"
    bad = set_color(mem, UNREADABLE, text, "msg-alice-245")
    counts["bad_write"] = mem.count()
    step("day 3: bob's hours; alice's colour updated", f"{counts['bad_write']} memories")

    errors = [(user, i) for user, count in RENDER_ERRORS.items() for i in range(1, count + 1)]
    batches = [errors[i : i + 5] for i in range(0, len(errors), 5)]
    at(68)  # day 3-4: the errors arrive
    render_errors(mem, batches[0], 1)
    at(74)
    render_errors(mem, batches[1], 2)
    at(79)
    render_errors(mem, batches[2], 3)
    at(80)
    monitor(mem, "monitor-run-4")  # the nightly accessibility check
    at(84)
    remember(mem, *UPDATES[3], "msg-alice-263")
    at(90)
    render_errors(mem, batches[3], 4)
    counts["story_end"] = mem.count()
    step("day 3-4: 20 errors arrive; alice's theme", f"{counts['story_end']} memories, {len(mem.log())} commits")
    return {"counts": counts, "truth": {"bad": bad.id.hex(), "navy": navy.id.hex()}, "start": start}


# --------------------------------------------------------------------------- the investigation


def errors_by_user(reader: Memory | View) -> dict[str, int]:
    """How many open errors about alice's dashboard each user's namespace holds."""
    return {user: len(open_errors(reader, user)) for user in USERS}


def hits(results: list[SearchItem]) -> list[str]:
    """Search results as ``namespace/key`` strings."""
    return ["/".join((*r.namespace, r.key)) for r in results]


def path_of(user: str, path: str) -> str:
    """The ``a/b/key`` string of a user memory, as the CLI prints it."""
    namespace, key = location(user, path)
    return "/".join((*namespace, key))


def value_of(reader: Memory | View, user: str, path: str) -> Any:
    """The bare ``value`` field of a user memory, or None when it does not exist in that version."""
    item = reader.get(*location(user, path))
    return None if item is None else item.value["value"]


def ago(ms: int) -> str:
    """How long before now a commit time was: ``2 days 6 hours ago``."""
    hours = round((datetime.now(UTC).timestamp() * 1000 - ms) / 3_600_000)
    days, hours = divmod(hours, 24)
    parts = [f"{days} day{'s' * (days != 1)}"] * bool(days) + [f"{hours} hour{'s' * (hours != 1)}"] * bool(hours)
    return " ".join(parts or ["just now"]) + " ago" * bool(parts)


def investigate(mem: Memory, step: Callable[[str, str], None]) -> dict[str, Any]:
    """Find the bad write from the report alone: log of the key, search then and now, history, and the
    last good state at ``main@{3 days ago}``. Bookmarks the moments it finds with tags."""
    out: dict[str, Any] = {}
    step("report", REPORT)
    out["errors_now"] = errors_by_user(mem)
    step("open dashboard errors per user, now", str(out["errors_now"]))

    query, mine = "dashboard colour", ("users", "alice", "preferences")  # what does the memory say now, and then?
    for name, when in (("search_now", None), ("search_then", "main@{3 days ago}")):
        results = mem.search(mine, query, limit=3, at=when)
        out[name] = hits(results)
        step(f"search {query!r} at {when or 'HEAD'}", f"{out[name][0]} = {results[0].value['value']}")

    namespace, key = location(*COLOR)  # every commit that touched the colour, newest first, with the check
    out["color_log"] = []
    step(f"log of {'/'.join(namespace)} {key}", "")
    bad: Commit | None = None
    for commit in mem.log(namespace=namespace, key=key):
        color = value_of(mem.at(commit.id.hex()), *COLOR)
        ratio = contrast(color)
        out["color_log"].append({"commit": commit.id.hex(), "author": commit.author, "value": color, "ratio": ratio})
        verdict = "passes" if ratio >= WCAG_AA else "FAILS"
        step(f"  {commit.short_id} {ago(commit.time)}", f"{color}, contrast {ratio}:1: {verdict} WCAG AA")
        if ratio >= WCAG_AA:
            break  # the version before the bad write
        bad = commit  # walking back through failing versions: the oldest one is where it went wrong
    assert bad is not None, "the colour never failed the contrast check"
    out["bad"] = bad.id.hex()
    step("the bad write: the oldest failing version", f"{bad.short_id}: {bad.message!r}")

    out["color_history"] = []
    step("history: who wrote each version, from which message", "")
    for version in mem.history(namespace, key):
        item = version.item
        assert item is not None
        seen = {"commit": version.commit.id.hex(), "value": item.value["value"], "author": item.author,
                "sources": list(item.sources)}  # fmt: skip
        out["color_history"].append(seen)
        said = "; ".join(f"{s} {MESSAGES.get(s, '?')!r}" for s in item.sources)
        step(f"  {version.commit.short_id} {seen['value']}", f"{item.author}, from {said}")

    first_error = mem.log(namespace=("users", "alice", "errors"))[-1]  # did the errors start after it?
    out["first_error_after_bad"] = first_error.time - bad.time
    hours = out["first_error_after_bad"] / 3_600_000
    step("first error: log of users/alice/errors", f"{first_error.short_id}, {hours:.0f} hours after it")

    then = mem.at("main@{3 days ago}")  # the last good state, and the commit main was at then
    good = then.commit
    out["last_good"] = good.id.hex()
    out["last_good_color"] = value_of(then, *COLOR)
    out["last_good_errors"] = errors_by_user(then)
    detail = f"{good.short_id}: colour {out['last_good_color']} ({contrast(out['last_good_color'])}:1), "
    step("at main@{3 days ago}: the last good state", detail + f"{sum(out['last_good_errors'].values())} errors")

    mem.tag("incident-start", bad.id.hex())  # bookmarks, placed now that the moments are known
    mem.tag("last-good", good.id.hex())
    step("bookmarks", "tags incident-start, last-good")
    return out


def fix(mem: Memory, step: Callable[[str, str], None]) -> dict[str, Any]:
    """Revert the bad write on a branch, test the fix there, and merge it while main keeps moving."""
    out: dict[str, Any] = {}
    mem.create_branch(FIX_BRANCH, at="main")
    fixer = mem.handle(FIX_BRANCH, author=ONCALL)
    message = f"revert alice's unreadable dashboard colour: {UNREADABLE} fails WCAG AA (incident-417)"
    revert = fixer.revert("incident-start", author=ONCALL, message=message)
    changes = fixer.show(revert.id.hex()).changes
    out["revert"] = {"id": revert.id.hex(), "author": revert.author, "message": revert.message,
                     "metadata": dict(revert.metadata), "parents": [p.hex() for p in revert.parents]}  # fmt: skip
    out["revert_changes"] = [
        {"path": "/".join((*c.namespace, c.key)), "kind": c.kind,
         "old": c.old and c.old.value["value"], "new": c.new and c.new.value["value"]}
        for c in changes
    ]  # fmt: skip
    out["counts"] = {"reverted": fixer.count()}
    moved = ", ".join(f"{c['path'].rsplit('/', 1)[1]} {c['old']} -> {c['new']}" for c in out["revert_changes"])
    step(f"branch {FIX_BRANCH} from main", "")
    step("revert incident-start on the branch", f"{revert.short_id} by {revert.author}: {moved}")

    restored = value_of(fixer, *COLOR)  # test the fix on the branch: the check, then the monitor itself
    out["fix_color"], out["fix_ratio"] = restored, contrast(restored)
    step("test on the branch: contrast", f"{restored} {out['fix_ratio']}:1 passes WCAG AA ({WCAG_AA}:1)")
    resolved = monitor(fixer, "monitor-run-oncall")
    assert resolved is not None
    out["monitor_message"] = resolved.message
    out["errors_on_branch"] = errors_by_user(fixer)
    out["counts"]["tested"] = fixer.count()
    step("test on the branch: the UI monitor", f"{resolved.message.split('; ')[1]}, {out['counts']['tested']} memories")

    note = {"kind": "preference", "topic": "reports", "text": "Carol wants reports as PDF", "value": "PDF"}
    mem.put(*location("carol", "preferences.reports.format"), note, author="agent:chat", sources=["msg-carol-301"],
            message="remember carol's preferences.reports.format (from msg-carol-301)")  # fmt: skip
    out["counts"]["main_before_merge"] = mem.count()
    step("meanwhile on main", f"agent:chat remembers carol's report format, {mem.count()} memories")

    merged = mem.merge(FIX_BRANCH, author=ONCALL, message=f"merge {FIX_BRANCH}: incident-417")
    out["merge_parents"] = len(merged.parents)
    out["counts"]["merged"] = mem.count()
    step("merge into main", f"{merged.short_id} ({len(merged.parents)} parents), {mem.count()} memories")

    yesterday = mem.at("main@{yesterday}")
    out["errors_head"], out["errors_yesterday"] = errors_by_user(mem), errors_by_user(yesterday)
    out["counts"]["at_yesterday"] = yesterday.count()
    out["color_head"] = value_of(mem, *COLOR)
    out["color_incident"] = value_of(mem.at("incident-start"), *COLOR)
    out["theme_head"] = value_of(mem, *THEME)
    step("open errors at HEAD", str(out["errors_head"]))
    step("open errors at main@{yesterday}", str(out["errors_yesterday"]))
    step("colour at HEAD / at incident-start", f"{out['color_head']} / {out['color_incident']}")
    return out


def run(url: str, embedder: str = "hashing", *, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Write the story on the store at ``url``, then investigate and fix it in real time; narrate through
    ``echo``; return every figure the tests check."""

    def step(title: str, detail: str = "") -> None:
        echo(f"  {title:<46} {detail}".rstrip())

    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=5)
    with contextlib.ExitStack() as stack:
        with clock.simulated(start) as sim:  # the story: every write at the time it happened
            mem = stack.enter_context(engram.open(url, embedder=embedder, author="agent:ops"))
            if len(mem.log(limit=2)) > 1:
                raise SystemExit(f"{url} already holds memories: run the example on a new store")
            echo(f"Production debugging on {url} (embedder {embedder})\n")
            echo(f"Five days of agents writing, from {start:%Y-%m-%d %H:%M} UTC")
            story = write_story(mem, sim, step)
        counts = story.pop("counts")

        echo(f"\nInvestigating, now ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)")
        out = investigate(mem, step)
        counts["last_good"] = mem.at("last-good").count()

        echo("\nFixing on a branch")
        fixed = fix(mem, step)
        counts.update(fixed.pop("counts"))
        out.update(fixed)
        out.update(story)
        out["counts"] = counts
        out["commits"] = mem.log()
        out["tags"] = mem.tags()
        out["fsck_ok"] = mem.fsck().ok

    bad = out["bad"][:10]
    echo(f"\nFound the bad write {bad} by itself; main after the fix: {counts['merged']} memories, "
         f"{sum(out['errors_head'].values())} open errors ({len(out['commits'])} commits)")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    """Run the scenario on STORE (or a throwaway temporary directory)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("store", nargs="?", help="a new store directory or URL (default: a temporary directory)")
    parser.add_argument("--embedder", default="hashing", help="hashing (fast, the default), minilm, or openai:...")
    args = parser.parse_args(argv)
    if args.store:
        run(args.store, args.embedder)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run(str(Path(tmp) / "store"), args.embedder)


if __name__ == "__main__":
    main()
