"""Numbers and content at a glance, in Chromium: item counts at any point (total, per namespace in the tree, the
listed prefix's), each timeline row's count and its change ("+4", "163 → 167") with chips for the namespaces and
keys it touched ("+N more"), diffs that show added and removed values inline in natural key order, and a
merge-base compare whose removed items open at the merge base."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Served, open_view, wait_view

ERRORS = 12  # glance.errors.error_1 .. error_12 on the branch "glance"
SINGLES = 6  # glance.n1 .. n6, one item each
DASH, TIMES = "\u2013", "\u00d7"  # the UI's en dash (a range of rows) and multiplication sign (items in a chip)


@pytest.fixture(scope="module")
def glance(served: Served) -> dict[str, Any]:
    """On top of the story: a branch adding 18 items in 7 namespaces, merged into main (one merge commit); and a
    branch "gap" that deletes an item main changed after the fork."""
    story_head = served.api("GET", "/v1/branches")["refs"]["main"]
    doomed = {"namespace": ["gapns"], "key": "doomed", "value": {"text": "the value at the fork"}}
    served.api("PUT", "/v1/items", json=doomed)
    fork = served.api("GET", "/v1/branches")["refs"]["main"]
    for name in ("glance", "gap"):
        served.api("POST", "/v1/branches", json={"name": name, "at": "main"})
    for i in range(1, ERRORS + 1):
        body = {"namespace": ["glance", "errors"], "key": f"error_{i}", "value": {"text": f"render error number {i}"}}
        served.api("PUT", "/v1/items", json={**body, "branch": "glance"})
    for n in range(1, SINGLES + 1):
        body = {"namespace": ["glance", f"n{n}"], "key": "only", "value": {"text": f"single {n}"}}
        served.api("PUT", "/v1/items", json={**body, "branch": "glance"})
    served.api("DELETE", "/v1/items", params={"namespace": "gapns", "key": "doomed", "branch": "gap"})
    served.api("PUT", "/v1/items", json={**doomed, "value": {"text": "main changed it after the fork"}})
    merged = served.api("POST", "/v1/merge", json={"source": "glance", "into": "main"})["commit"]
    return {"story_head": story_head, "fork": fork, "merge": merged["id"]}


def test_ui_state_counts_at_any_point(page: Any, served: Served, glance: dict[str, Any]) -> None:
    counts = served.story["counts"]
    open_view(page, f"state?at={served.story['truth']['bad']}", "state")  # the point of the bad write
    assert page.get_attribute("#item-count", "data-count") == str(counts["bad_write"])
    assert f"{counts['bad_write']} items at this point" in page.inner_text("p.point")
    open_view(page, f"state?at={glance['story_head']}", "state")
    assert page.get_attribute("#item-count", "data-count") == str(counts["story_end"])
    open_view(page, "state?ns=glance", "state")  # main's head: the story, the fork's item and the merged 18
    assert page.get_attribute("#item-count", "data-count") == str(counts["story_end"] + 1 + ERRORS + SINGLES)
    tree = page.locator("nav.tree")
    node = tree.locator("li:has(> a:text-is('glance'))")
    assert node.locator("> .count").get_attribute("data-count") == str(ERRORS + SINGLES)  # a sum of its children
    errors = node.locator("li:has(> a:text-is('errors')) > .count")
    assert errors.get_attribute("data-count") == str(ERRORS)
    assert page.inner_text("#items-range").strip() == f"(1{DASH}{ERRORS + SINGLES} of {ERRORS + SINGLES})"
    open_view(page, f"state?at={glance['fork']}&ns=glance", "state")  # before the merge: nothing there
    assert page.get_attribute("#item-count", "data-count") == str(counts["story_end"] + 1)
    assert tree.locator("a:text-is('glance')").count() == 0


def test_ui_timeline_rows_show_counts_and_what_they_touched(page: Any, served: Served, glance: dict[str, Any]) -> None:
    end = served.story["counts"]["story_end"]
    open_view(page, "timeline", "timeline")
    last = page.locator(f"tr[data-commit='{glance['story_head']}']")  # the story's last batch: 4 render errors
    assert "dashboard: 4 render errors" in last.inner_text()
    assert last.locator("[data-items]").get_attribute("data-items") == str(end)
    assert last.locator("[data-delta]").inner_text() == "+4" and f"{end - 4} → {end}" in last.inner_text()
    bad = page.locator(f"tr[data-commit='{served.story['truth']['bad']}']")  # a changed item: the count stays
    assert bad.locator("[data-delta]").inner_text() == "±0"
    chips = bad.locator(".touched .chip")
    assert chips.all_inner_texts() == ["users.alice.preferences.ui / dashboard_color"]
    merge = page.locator(f"tr[data-commit='{glance['merge']}']")
    total = end + 1 + ERRORS + SINGLES
    assert merge.locator("[data-delta]").inner_text() == f"+{ERRORS + SINGLES}"
    assert f"{total - ERRORS - SINGLES} → {total}" in merge.inner_text()
    chips = merge.locator(".touched .chip")
    singles = [f"glance.n{n} / only" for n in range(1, 5)]
    assert chips.all_inner_texts() == [f"glance.errors {TIMES}{ERRORS}", *singles, "+2 more"]
    page.click(f"tr[data-commit='{glance['merge']}'] .chip:text-is('glance.errors {TIMES}{ERRORS}')")
    wait_view(page, "state")  # a namespace chip opens the memory at the commit, under that namespace
    assert f"at={glance['merge']}" in page.evaluate("location.hash") and "ns=glance.errors" in page.evaluate(
        "location.hash"
    )
    assert page.get_attribute("#item-count", "data-count") == str(total)


def test_ui_diff_shows_added_values_inline_in_natural_order(page: Any, served: Served, glance: dict[str, Any]) -> None:
    open_view(page, f"diff?old={glance['fork']}&new={glance['merge']}&ns=glance.errors", "diff")
    keys = page.locator("article.change").evaluate_all("els => els.map(e => e.dataset.key)")
    assert keys == [f"glance.errors/error_{i}" for i in range(1, ERRORS + 1)]  # error_2 before error_10
    second = page.locator("article[data-key='glance.errors/error_2'] pre.json")
    assert second.is_visible() and "render error number 2" in second.inner_text()  # no click to read it
    shown = page.locator("article.change pre.json:visible")
    assert shown.count() == ERRORS


def test_ui_merge_base_compare_opens_removed_items_at_the_base(
    page: Any, served: Served, glance: dict[str, Any]
) -> None:
    open_view(page, "branches?compare=gap", "branches")
    removed = page.locator("#compare article[data-key='gapns/doomed']")
    assert removed.locator(".kind").inner_text() == "removed"
    assert "the value at the fork" in removed.inner_text()
    removed.locator("a[data-open]").click()
    wait_view(page, "state")
    assert f"at={glance['fork']}" in page.evaluate("location.hash")  # the merge base, not main's head
    assert "the value at the fork" in page.inner_text("main") and "after the fork" not in page.inner_text("main")
    open_view(page, "diff?old=main...gap", "diff")  # the same from the diff view
    page.locator("article[data-key='gapns/doomed'] a[data-open]").click()
    wait_view(page, "state")
    assert f"at={glance['fork']}" in page.evaluate("location.hash")
    assert "the value at the fork" in page.inner_text("main")
