"""The timeline's commit graph (issue #16): lanes joining each commit to its parents, drawn as one aria-hidden SVG
per row, continuing when the next page is appended. Checked on the DOM and SVG elements, not on pixels."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import engram
from engram import clock
from engram.server import ServerConfig

from .conftest import ThreadServer, open_view

#: The commits of the store below, newest first (the timeline's order).
ORDER = ["d", "merge feature", "f2", "c", "f1", "b", "a", "init"]


@pytest.fixture(scope="module")
def graph_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """main: init, a, b, c, merge of feature, d; feature (from b): f1, f2; idea (from f2, unmerged): i1."""
    store = str(tmp_path_factory.mktemp("graph") / "store")
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
    with clock.simulated(start) as sim, engram.open(store, embedder="hashing", author="agent:main") as mem:

        def put(handle: Any, key: str) -> None:
            sim.advance(minutes=1)
            handle.put(("notes",), key, {"text": key}, message=key)

        put(mem, "a")
        put(mem, "b")
        mem.create_branch("feature")
        feature = mem.handle("feature", author="agent:feature")
        put(feature, "f1")
        put(mem, "c")
        put(feature, "f2")
        sim.advance(minutes=1)
        mem.merge("feature", message="merge feature")
        put(mem, "d")
        mem.create_branch("idea", at="feature")
        put(mem.handle("idea", author="agent:idea"), "i1")
    server = ThreadServer(ServerConfig(store=store, embedder="hashing"))
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def graph_page(browser: Any, graph_url: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1000, "height": 600}, base_url=graph_url, timezone_id="UTC")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        yield page
        assert errors == [], errors
    finally:
        context.close()


def rows(page: Any) -> list[dict[str, Any]]:
    """Each row's message and its graph: lanes, lines in from the row above (ending at the dot), lines out to
    the parents, lines passing by, and whether the dot is a merge."""
    script = """() => [...document.querySelectorAll("tr[data-commit]")].map((tr) => {
      const svg = tr.querySelector("td.graph svg");
      const lines = [...svg.querySelectorAll("line")];
      const dot = svg.querySelector("circle.node");
      return {
        message: tr.querySelector("a[data-open]").textContent,
        hidden: svg.getAttribute("aria-hidden"),
        text: tr.querySelector("td.graph .skip").textContent,
        lanes: Number(svg.dataset.lanes),
        into: lines.filter((l) => l.getAttribute("y2") === dot.getAttribute("cy")).length,
        parents: lines.filter((l) => l.hasAttribute("data-parent")).length,
        through: lines.filter((l) => l.getAttribute("y1") === "0" && l.getAttribute("y2") === "100%").length,
        merge: dot.classList.contains("merge"),
        col: Number(dot.getAttribute("cx")),
      };
    })"""
    result: list[dict[str, Any]] = page.evaluate(script)
    return result


def test_ui_graph_draws_two_lanes_a_fork_and_a_merge(graph_page: Any) -> None:
    open_view(graph_page, "timeline?branch=main", "timeline")
    drawn = {r["message"]: r for r in rows(graph_page)}
    assert list(drawn) == ORDER and {r["hidden"] for r in drawn.values()} == {"true"}
    assert max(r["lanes"] for r in drawn.values()) == 2  # main and feature
    merge = drawn["merge feature"]
    assert merge["merge"] and merge["parents"] == 2 and merge["text"] == "merge of 2 commits"  # joins two lines
    assert drawn["d"]["into"] == 0 and drawn["d"]["lanes"] == 1  # the head: a tip, nothing above it
    assert drawn["b"]["into"] == 2  # where feature forked: both lanes join at b
    assert drawn["f2"]["col"] > drawn["c"]["col"] and drawn["f2"]["through"] == 1  # feature beside main
    assert drawn["init"]["parents"] == 0 and drawn["init"]["text"] == "first commit"
    assert sum(not r["merge"] for r in drawn.values()) == 7


def test_ui_graph_lanes_continue_on_the_appended_page(graph_page: Any) -> None:
    open_view(graph_page, "timeline?branch=main&limit=3", "timeline")
    assert [r["message"] for r in rows(graph_page)] == ORDER[:3]
    graph_page.click("#next-page")  # appends the next page to this table
    graph_page.wait_for_function("() => document.querySelectorAll('tr[data-commit]').length === 6")
    drawn = rows(graph_page)
    assert [r["message"] for r in drawn] == ORDER[:6] and "cursor=" not in graph_page.url
    c, f1 = drawn[3], drawn[4]
    assert c["into"] == 1 and c["through"] == 1 and f1["into"] == 1  # both lanes go on from the page above
    graph_page.keyboard.press("n")  # the shortcut appends too
    graph_page.wait_for_function("() => document.querySelectorAll('tr[data-commit]').length === 8")
    assert [r["message"] for r in rows(graph_page)][6:] == ["a", "init"]
    assert "End of history." in graph_page.inner_text(".pager")


def test_ui_graph_is_left_out_of_a_filtered_timeline(graph_page: Any) -> None:
    open_view(graph_page, "timeline?branch=main&author=agent%3Afeature", "timeline")
    assert graph_page.locator("tr[data-commit]").count() == 2 and graph_page.locator("td.graph svg").count() == 0
    assert graph_page.locator("td.graph").first.inner_text() == "●"


def test_ui_graph_of_all_branches_shows_unmerged_work(graph_page: Any) -> None:
    open_view(graph_page, "timeline?branch=main", "timeline")
    graph_page.check("#all-branches")
    graph_page.click("form[aria-label='Filter the timeline'] button[type=submit]")
    graph_page.wait_for_function(
        "() => location.hash.includes('all=1') && document.querySelector('h1').textContent.includes('all branches')"
        " && !document.getElementById('view').hasAttribute('aria-busy')"
    )
    drawn = rows(graph_page)
    assert [r["message"] for r in drawn] == ["i1", *ORDER]  # idea's commit first, every commit once
    i1, d, merge, f2 = drawn[:4]
    assert i1["col"] < d["col"] and max(r["lanes"] for r in drawn) == 2  # d opens a lane beside idea's
    assert merge["parents"] == 2 and f2["into"] == 1 and "idea" in graph_page.inner_text("tr[data-commit] .refs")
