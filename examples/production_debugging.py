"""Production debugging at scale: find when a memory went wrong, who wrote it, and fix it on a branch.

The scenario of issue #4. An assistant keeps memories about three users (alice, bob, carol). A dashboard
release lets users pick a dashboard colour; on day 2 an agent sets alice's colour to a pale yellow, and
on day 3 a monitor reports an accessibility error and 19 error logs. We open the memory as it was on
each day, diff day 2 against the problem, read the blame of the preference, test a fix on a branch from
day 2, merge it, and check that only the affected users' namespaces hold errors.

Paths. A memory "path" such as ``preferences.ui.theme`` of user alice is stored LangGraph-style: every
label but the last becomes a namespace label under ``("users", <user>)`` and the last one is the key,
so ``preferences.ui.theme`` is namespace ``("users", "alice", "preferences", "ui")``, key ``theme``.
Namespaces stay hierarchical (``list_namespaces``, ``engram ls`` and prefix searches see
``users/alice/preferences/ui``), and :func:`location` is the one place that does the mapping.

Counts (asserted by ``tests/test_production_debugging.py``):

==============  =====  ===========================================================================
version         items  how it is reached
==============  =====  ===========================================================================
history           144  48 memories per user: a sign-up transaction per user (20 each), then one
                       commit per chat message (28 per user), plus 4 updates of existing paths
``checkpoint``    145  one more memory, the release note ``system/releases`` ``dashboard-v2``
``day1``          147  alice adds two UI preferences: ``dashboard_color`` and ``dashboard_sharing``
``day2``          147  alice's ``preferences.ui.dashboard_color`` changes (same path, updated)
``problem``       167  1 accessibility error (alice) + 19 error logs (12 alice, 7 bob; carol: none)
``hotfix``        148  branch from ``day2``: the colour is restored and a fix memory is written
main (merged)     168  ``problem`` + the fix; ``at("day2")`` still has 147 items and no fix
==============  =====  ===========================================================================

``day3`` and ``problem`` tag the same version. Commit ids and timestamps differ between runs;
everything else (counts, keys, values, search results) is the same every time.

Usage::

    python examples/production_debugging.py                      # a temporary store, hashing embedder
    python examples/production_debugging.py /tmp/prod --embedder minilm
    engram --store /tmp/prod --embedder hashing diff day2 problem  # then explore it with the CLI
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import engram
from engram import Memory, SearchItem, View

USERS = ("alice", "bob", "carol")
#: Users whose namespaces hold errors at ``problem`` (bob views the dashboard alice shares with him).
AFFECTED = ("alice", "bob")
THEME = ("alice", "preferences.ui.theme")
COLOR = ("alice", "preferences.ui.dashboard_color")
ERROR = ("alice", "errors.accessibility")
FIX = ("alice", "incidents.dashboard_contrast")
RELEASE = (("system", "releases"), "dashboard-v2")
#: Error logs the dashboard renderer ships on day 3, per user.
ERROR_LOGS = {"alice": 12, "bob": 7}
WIDGETS = ("revenue", "alerts", "latency", "signups", "churn", "uptime", "tickets")
ACCESSIBLE, UNREADABLE = "#1e3a8a", "#fde047"

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

# user, path, author, template, new option: later messages that change memories already written (one after
# every 7th row of CHATS, so each path exists by then)
UPDATES: list[tuple[str, str, str, str, str]] = [
    ("alice", "preferences.ui.theme", "agent:chat", "{name} prefers a {} theme", "dark"),
    ("bob", "preferences.notifications.email", "agent:chat", "{name} wants email notifications {}", "weekly"),
    ("bob", "profile.schedule.work_hours", "agent:scheduler", "{name} works {}", "07:30-15:30"),
    ("alice", "preferences.ui.theme", "agent:chat", "{name} prefers a {} theme", "solarized dark"),
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


def build_history(mem: Memory) -> int:
    """Write 144 user memories the way agents would: sign-up transactions, then one commit per message."""
    for n, user in enumerate(USERS):
        with mem.transaction(f"onboarding: {user} signed up", author="agent:onboarding") as tx:
            for path, template, options in ONBOARDING:
                value = memory(user, path, template, options[n])
                tx.put(*location(user, path), value, sources=[f"signup-{user}"])
    message = 100
    updates = iter(UPDATES)
    for i, (path, author, template, options) in enumerate(CHATS):
        said = [(user, path, author, template, options[n]) for n, user in enumerate(USERS)]
        if i % 7 == 6:  # now and then a user changes their mind about something said before
            said.append(next(updates))
        for user, path, author, template, option in said:
            message += 1
            value = memory(user, path, template, option)
            mem.put(*location(user, path), value, author=author, sources=[f"msg-{user}-{message}"])
    return mem.count()


def set_color(mem: Memory, color: str, text: str, source: str) -> None:
    """An agent records alice's dashboard colour."""
    value = {"kind": "preference", "topic": "ui", "text": text, "value": color}
    mem.put(*location(*COLOR), value, author="agent:personalization", sources=[source])


def write_day3(mem: Memory) -> None:
    """Day 3: the UI monitor reports an accessibility error; the log shipper sends 19 error logs in batches."""
    error = {
        "kind": "error",
        "level": "error",
        "category": "accessibility",
        "path": COLOR[1],
        "text": f"Accessibility error: alice's dashboard text on {UNREADABLE} has a contrast ratio of 1.3:1, "
        "below the WCAG AA minimum of 4.5:1",
    }
    mem.put(*location(*ERROR), error, author="agent:ui-monitor", sources=["monitor-run-0303"])
    logs = [(user, i) for user, count in ERROR_LOGS.items() for i in range(1, count + 1)]
    for start in range(0, len(logs), 5):
        batch = logs[start : start + 5]
        with mem.transaction(f"logs: {len(batch)} dashboard errors", author="agent:log-shipper") as tx:
            for user, i in batch:
                widget = WIDGETS[(i - 1) % len(WIDGETS)]
                text = f"Dashboard render error for {user}: the {widget} widget failed the contrast check"
                log = {"kind": "log", "level": "error", "widget": widget, "dashboard_owner": "alice", "text": text}
                tx.put(*location(user, f"logs.dashboard.error_{i:02d}"), log, sources=[f"logbatch-{start // 5 + 1}"])


def write_hotfix(mem: Memory) -> Memory:
    """Branch ``hotfix`` from day 2; restore an accessible colour and record the fix, as one commit."""
    mem.create_branch("hotfix", at="day2")
    fixer = mem.handle("hotfix", author="agent:debugger")
    text = f"Alice's dashboard is navy blue ({ACCESSIBLE}); bright colours failed contrast checks"
    fix = {
        "kind": "fix",
        "incident": "incident-417",
        "text": f"Fix: dashboard colours must pass WCAG AA contrast (4.5:1); restored {ACCESSIBLE} for alice",
    }
    color = {"kind": "preference", "topic": "ui", "text": text, "value": ACCESSIBLE}
    with fixer.transaction("hotfix: accessible dashboard colour for alice") as tx:
        tx.put(*location(*COLOR), color, sources=["incident-417"])
        tx.put(*location(*FIX), fix, sources=["incident-417"])
    return fixer


def errors_by_user(reader: Memory | View) -> dict[str, int]:
    """How many error-level memories each user's namespace holds (a filtered listing, no query)."""
    return {u: len(reader.search(("users", u), filter={"level": "error"}, limit=1000)) for u in USERS}


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


def investigate(mem: Memory, step: Callable[[str, str], None]) -> dict[str, Any]:
    """Read the history: counts at each tag, the diff, the blame, searches in the past, errors per user."""
    out: dict[str, Any] = {}
    for ref in ("checkpoint", "day1", "day2", "problem"):
        out[f"at_{ref}"] = mem.at(ref).count()
        step(f"at({ref!r}).count()", str(out[f"at_{ref}"]))
    out["error_at_problem"] = mem.at("problem").get(*location(*ERROR)) is not None
    out["error_at_day2"] = mem.at("day2").get(*location(*ERROR)) is not None
    step("accessibility error at problem / at day2", f"{out['error_at_problem']} / {out['error_at_day2']}")

    changes = mem.diff("day2", "problem")
    out["diff_kinds"] = sorted({c.kind for c in changes})
    out["diff"] = sorted("/".join((*c.namespace, c.key)) for c in changes)
    step("diff('day2', 'problem')", f"{len(changes)} items, all {', '.join(out['diff_kinds'])}")

    day2 = mem.at("day2").get(*location(*COLOR))
    assert day2 is not None
    out["color_day1"], out["color_day2"] = value_of(mem.at("day1"), *COLOR), day2.value["value"]
    out["color_day2_provenance"] = (day2.author, list(day2.sources))
    who = f"by {day2.author} from {list(day2.sources)}"
    step("dashboard colour day1 -> day2", f"{out['color_day1']} -> {out['color_day2']} ({who})")

    out["theme_history"] = []
    for version in mem.history(*location(*THEME)):
        item = version.item
        assert item is not None
        seen = {"value": item.value["value"], "author": item.author, "sources": list(item.sources)}
        out["theme_history"].append({**seen, "commit": version.commit.short_id})
        step(f"history theme {version.commit.short_id}", f"{seen['value']!r} by {item.author} from {seen['sources']}")

    query = "accessibility error"
    out["search_day2"] = hits(mem.search(("users",), query, at="day2", limit=5))
    out["search_problem"] = hits(mem.search(("users",), query, at="problem", limit=5))
    step(f"search {query!r} at day2", out["search_day2"][0] if out["search_day2"] else "(nothing)")
    step(f"search {query!r} at problem", out["search_problem"][0])

    out["errors_day2"] = errors_by_user(mem.at("day2"))
    out["errors_problem"] = errors_by_user(mem.at("problem"))
    namespaces = mem.at("problem").list_namespaces(prefix=("users",), limit=1000)
    out["error_namespaces"] = ["/".join(ns) for ns in namespaces if ns[2] in ("errors", "logs")]
    step("error memories per user at day2", str(out["errors_day2"]))
    step("error memories per user at problem", str(out["errors_problem"]))
    return out


def run(url: str, embedder: str = "hashing", *, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Play the scenario on the store at ``url``; narrate it through ``echo``; return every figure it checks."""
    counts: dict[str, int] = {}

    def step(title: str, detail: str = "") -> None:
        echo(f"  {title:<46} {detail}".rstrip())

    with engram.open(url, embedder=embedder, author="agent:ops") as mem:
        echo(f"Production debugging on {url} (embedder {embedder})\n")
        counts["history"] = build_history(mem)
        step("history: sign-ups + chat messages", f"{counts['history']} memories in {len(mem.log())} commits")
        release = {"kind": "release", "text": "Dashboard v2 released: users can choose a dashboard colour"}
        mem.put(*RELEASE, release, author="agent:release", sources=["release-2.0"])
        mem.tag("checkpoint")
        counts["checkpoint"] = mem.count()
        step("release note, tag 'checkpoint'", f"{counts['checkpoint']} memories")

        set_color(mem, ACCESSIBLE, f"Alice wants her dashboard in navy blue ({ACCESSIBLE})", "msg-alice-201")
        sharing = {"kind": "preference", "topic": "ui", "text": "Alice shares her dashboard with Bob", "value": ["bob"]}
        where = location("alice", "preferences.ui.dashboard_sharing")
        mem.put(*where, sharing, author="agent:personalization", sources=["msg-alice-202"])
        mem.tag("day1")
        counts["day1"] = mem.count()
        step("day 1: two UI preferences, tag 'day1'", f"{counts['day1']} memories")

        set_color(mem, UNREADABLE, f"Alice asked for a brighter dashboard: pale yellow ({UNREADABLE})", "msg-alice-245")
        mem.tag("day2")
        counts["day2"] = mem.count()
        step("day 2: the same path updated, tag 'day2'", f"{counts['day2']} memories")

        write_day3(mem)
        mem.tag("day3")
        mem.tag("problem")
        counts["problem"] = counts["current"] = mem.count()
        step("day 3: errors arrive, tags 'day3', 'problem'", f"{counts['problem']} memories")

        echo("\nInvestigating")
        out = investigate(mem, step)
        counts.update({k: out.pop(k) for k in list(out) if k.startswith("at_")})

        echo("\nFixing on a branch")
        fixer = write_hotfix(mem)
        counts["hotfix"] = fixer.count()
        step("branch 'hotfix' from day2, fix committed", f"{counts['hotfix']} memories on hotfix")
        merged = mem.merge("hotfix", message="merge hotfix: accessible dashboard colour")
        out["merge_parents"] = len(merged.parents)
        counts["merged"] = mem.count()
        out["fix_on_main"] = mem.get(*location(*FIX)) is not None
        out["color_on_main"] = value_of(mem, *COLOR)
        detail = f"{merged.short_id} ({out['merge_parents']} parents), {counts['merged']} memories"
        step("merge hotfix into main", f"{detail}, colour {out['color_on_main']}")
        past = mem.at("day2")
        counts["at_day2_after_merge"] = past.count()
        out["fix_at_day2"] = past.get(*location(*FIX)) is not None
        out["color_at_day2_after_merge"] = value_of(past, *COLOR)
        detail = f"{counts['at_day2_after_merge']} memories, fix present: {out['fix_at_day2']}"
        step("at('day2') after the merge", f"{detail}, colour {out['color_at_day2_after_merge']}")
        out["commits"] = len(mem.log())
        out["fsck_ok"] = mem.fsck().ok
        out["counts"] = counts

    tags = ", ".join(f"{ref} {counts['at_' + ref]}" for ref in ("checkpoint", "day1", "day2", "problem"))
    echo(f"\nFinal counts: {tags}, main after the hotfix {counts['merged']} ({out['commits']} commits)")
    return out


def main(argv: list[str] | None = None) -> None:
    """Run the scenario on STORE (or a throwaway temporary directory)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("store", nargs="?", help="store directory or URL (default: a temporary directory)")
    parser.add_argument("--embedder", default="hashing", help="hashing (fast, the default), minilm, or openai:...")
    args = parser.parse_args(argv)
    if args.store:
        run(args.store, args.embedder)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run(str(Path(tmp) / "store"), args.embedder)


if __name__ == "__main__":
    main()
