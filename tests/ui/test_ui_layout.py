"""Every screen: at 390 x 844 (a phone) nothing is wider than the viewport, timeline rows are cards with the graph
down their left side, and the State view stacks the namespace tree above the items, which get the width; on a
long timeline the column headings stay in view while scrolling; the timeline's forms fold away on a phone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Served, open_view, shot

PHONE = {"width": 390, "height": 844}
NS, KEY = "users.alice.preferences.ui", "dashboard_color"

#: Elements sticking out of the viewport on the right (outside scrolling boxes, which may hold wider content).
WIDER = """() => {
  const limit = document.documentElement.clientWidth + 1;
  const inScroller = (el) => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      if (["auto", "scroll", "hidden"].includes(getComputedStyle(p).overflowX)) return true;
    }
    return false;
  };
  const out = [];
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width && r.right > limit && !inScroller(el) && !el.closest("dialog:not([open])")) {
      out.push(`${el.tagName.toLowerCase()}.${el.className} ${Math.round(r.left)}..${Math.round(r.right)}`);
    }
  }
  return {scroll: document.documentElement.scrollWidth, wider: out.slice(0, 10)};
}"""


@pytest.fixture
def phone(browser: Any, served: Served) -> Iterator[Any]:
    context = browser.new_context(viewport=PHONE, base_url=served.url, timezone_id="UTC", device_scale_factor=1)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
        assert errors == [], errors
    finally:
        context.close()


def fits(page: Any) -> None:
    found = page.evaluate(WIDER)
    assert found["scroll"] <= PHONE["width"] and found["wider"] == [], found


def box(page: Any, selector: str) -> dict[str, float]:
    found: dict[str, float] = page.locator(selector).first.bounding_box()
    return found


@pytest.mark.parametrize(
    ("fragment", "view"),
    [
        ("timeline", "timeline"),
        (f"state?ns={NS}&key={KEY}", "state"),
        ("state?ns=users.alice", "state"),
        (f"diff?old=main~5&new=main&ns={NS}", "diff"),
        (f"blame?ns={NS}&key={KEY}", "blame"),
        ("search?q=dashboard%20colour&compare=1", "search"),
        ("branches", "branches"),
        ("commit?id=HEAD", "commit"),
    ],
)
def test_ui_phone_nothing_is_wider_than_the_screen(phone: Any, fragment: str, view: str) -> None:
    open_view(phone, fragment, view)
    fits(phone)


def test_ui_phone_timeline_rows_are_cards(phone: Any, served: Served) -> None:
    long = ["agents", "ui-monitor", "incidents", "global:incidents-000000000001-feedback"]  # a long chip
    served.api("PUT", "/v1/items", json={"namespace": long, "key": "ui-monitor-feedback", "value": {"text": "ok"}})
    open_view(phone, "timeline", "timeline")
    fits(phone)
    chips = phone.eval_on_selector_all(".chip", "cs => cs.map(c => c.getBoundingClientRect().right)")
    assert chips and max(chips) <= PHONE["width"], chips  # a long namespace wraps inside its card
    row = phone.locator("tr[data-commit]").first
    assert row.evaluate("r => getComputedStyle(r).display") == "grid"  # a card, not a table row
    card, message = row.bounding_box(), box(phone, "tr[data-commit] td:has(> a[data-open])")
    assert card["width"] <= PHONE["width"] and message["width"] > 0.6 * PHONE["width"]  # the message gets the width
    graph = box(phone, "tr[data-commit] td.graph")
    assert abs(graph["height"] - card["height"]) < 2  # the graph runs down the whole card: lanes join card to card
    author = phone.locator("tr[data-commit] td[data-label='Author']").first
    assert author.evaluate("td => getComputedStyle(td, '::before').content") == '"Author: "'  # labelled cells
    shot(phone, "timeline-phone")


def test_ui_phone_timeline_shows_commits_first_with_the_forms_folded(phone: Any, page: Any) -> None:
    open_view(phone, "timeline", "timeline")
    assert phone.locator("#timeline-controls").get_attribute("open") is None  # folded: the commits come first
    assert box(phone, "tr[data-commit]")["y"] < 0.5 * PHONE["height"]  # the first card in the top half (430 px before)
    phone.click("#timeline-controls > summary")
    assert phone.locator("form[aria-label='Filter the timeline']").is_visible()
    fits(phone)
    open_view(phone, f"timeline?ns={NS}", "timeline")  # a filter set: shown open, so the user sees what filters
    assert phone.locator("#timeline-controls").get_attribute("open") is not None
    assert "(set)" in phone.inner_text("#timeline-controls > summary")
    open_view(page, "timeline", "timeline")  # a wide screen: always open, no fold to click
    assert page.locator("#timeline-controls").get_attribute("open") is not None
    assert not page.locator("#timeline-controls > summary").is_visible()


def test_ui_phone_state_stacks_the_tree_above_the_items(phone: Any) -> None:
    open_view(phone, "state?ns=users.alice", "state")
    fits(phone)
    tree, items = box(phone, "nav.tree"), box(phone, "section[aria-label=Items]")
    assert tree["y"] + tree["height"] <= items["y"]  # stacked: the tree above
    assert items["width"] > 0.85 * PHONE["width"]  # the items get the screen's width (122 px before)
    open_view(phone, f"state?ns={NS}&key={KEY}", "state")
    fits(phone)
    assert box(phone, "section[aria-label=Item]")["width"] > 0.85 * PHONE["width"]
    shot(phone, "state-phone")


def test_ui_long_timeline_keeps_its_headings_in_view(page: Any) -> None:
    open_view(page, "timeline", "timeline")
    page.evaluate("() => window.scrollTo(0, 2500)")
    page.wait_for_function("() => window.scrollY > 2000")
    heading = page.locator("table.timeline thead th").nth(2)
    assert heading.inner_text() == "Message"
    assert abs(heading.bounding_box()["y"]) < 2  # stuck to the top of the screen, not scrolled away
