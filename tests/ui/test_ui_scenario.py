"""The production-debugging scenario of issue #4, done by clicking through the web UI in headless Chromium:
find the bad commit on the timeline, open the state three days ago, diff it with head, blame the item to its
sources, search then and now, branch from the last good point, revert the bad commit on a fix branch and
merge the fix (and a merge that conflicts: the conflict list, then a chosen policy)."""

from __future__ import annotations

from typing import Any

from .conftest import Served, click_and_wait, filter_timeline, open_view, shot, wait_view

NS, KEY = "users.alice.preferences.ui", "dashboard_color"
NAVY, YELLOW = "#1e3a8a", "#fde047"


def test_ui_scenario_finds_the_bad_write_and_fixes_it(page: Any, served: Served) -> None:
    bad, navy = served.story["truth"]["bad"], served.story["truth"]["navy"]

    # 1. The timeline, filtered to the colour's key: the newest change is the bad write.
    filter_timeline(page, NS, KEY)
    rows = page.locator("tr[data-commit]")
    assert rows.count() == 2
    assert YELLOW in rows.nth(0).inner_text() and NAVY in rows.nth(1).inner_text()
    assert rows.nth(0).get_attribute("data-commit") == bad
    click_and_wait(page, f"tr[data-commit='{bad}'] a[data-open]", "commit")
    assert bad in page.inner_text("main") and "msg-alice-245" in page.inner_text("main")

    # 2. The memory three days ago (the time control): the colour was navy, and newer versions exist.
    open_view(page, "timeline", "timeline")
    page.click("button:text-is('3 days ago')")
    page.wait_for_function("() => location.hash.includes('asof=')")
    wait_view(page, "timeline")
    click_and_wait(page, "text=Open the memory at this point", "state")
    for label in ("users", "alice", "preferences", "ui"):
        click_and_wait(page, f"nav.tree a:text-is('{label}') >> nth=0", "state")
    click_and_wait(page, f"a[data-open]:has-text('{KEY}')", "state")
    item = page.inner_text("main")
    assert NAVY in item and "Newer versions exist" in item and "msg-alice-201" in item

    # 3. Diff that point with head: the colour, navy -> pale yellow, word by word.
    click_and_wait(page, "#newer >> text=Diff with head", "diff")
    change = page.locator(f"article[data-key='{NS}/{KEY}']")
    assert change.locator(".kind").inner_text() == "modified"
    assert "navy" in change.locator("del").all_inner_texts() and "pale" in change.locator("ins").all_inner_texts()

    # 4. Blame the item to its sources: who wrote each version, from which chat message.
    page.click(f"article[data-key='{NS}/{KEY}'] >> text=blame")
    wait_view(page, "blame")
    versions = page.locator("li[data-commit]")
    assert versions.count() == 2
    assert versions.nth(0).get_attribute("data-commit") == bad and "msg-alice-245" in versions.nth(0).inner_text()
    assert versions.nth(1).get_attribute("data-commit") == navy and "msg-alice-201" in versions.nth(1).inner_text()

    # 5. Search then (three days ago) and now: one click compares with head.
    open_view(page, "search?at=main%40%7B3%20days%20ago%7D", "search")
    page.fill("#search-query", "dashboard colour")
    page.fill("input[name=ns]", "users.alice")
    page.click("form[role=search] button[type=submit]")
    page.wait_for_function("() => location.hash.includes('q=')")
    wait_view(page, "search")
    assert NAVY in page.locator("#results-then li").first.inner_text()
    click_and_wait(page, "#compare-head", "search")
    assert YELLOW in page.locator("#results-now li").first.inner_text()
    assert NAVY in page.locator("#results-then li").first.inner_text()

    # 6. Branch from the last good point: the bad commit's parent, opened from the commit view.
    open_view(page, f"commit?id={bad}", "commit")
    parent = served.api("GET", f"/v1/commits/{bad}")["parents"][0]
    click_and_wait(page, f"a:text-is('{parent[:10]}')", "commit")
    page.click("#branch-here")
    page.fill("#ref-name", "last-good")
    page.click("#confirm-ok")
    page.wait_for_selector("#action-result .ok")
    assert "Created branch last-good" in page.inner_text("#action-result")
    assert served.api("GET", "/v1/branches")["refs"]["last-good"] == parent

    # 7. A fix branch from main, and the bad commit reverted on it (confirmed, showing the commit made).
    open_view(page, "branches", "branches")
    page.click("form[aria-label='Create a branch'] button[type=submit]")
    page.fill("#ref-name", "fix")
    page.click("#confirm-ok")
    page.wait_for_selector("#action-result .ok")
    open_view(page, f"commit?id={bad}", "commit")
    page.click("#revert")
    page.select_option("#revert-branch", "fix")
    page.click("#confirm-ok")
    made = page.wait_for_selector("#action-result [data-made]").get_attribute("data-made")
    fix_head = served.api("GET", "/v1/branches")["refs"]["fix"]
    assert made == fix_head
    color = served.api("GET", "/v1/items", params={"namespace": NS, "key": KEY, "branch": "fix"})["value"]["value"]
    assert color == NAVY

    # 8. Meanwhile an agent writes on main; merge the fix into main (a two-parent commit).
    served.api(
        "PUT",
        "/v1/items",
        json={
            "namespace": ["users", "carol", "preferences", "reports"],
            "key": "format",
            "value": {"text": "Carol wants reports as PDF"},
            "author": "agent:chat",
        },
    )
    open_view(page, "branches", "branches")
    page.click("button[data-merge='fix']")
    page.click("#confirm-ok")
    merged = page.wait_for_selector("#action-result [data-made]").get_attribute("data-made")
    head = served.api("GET", f"/v1/commits/{merged}")
    assert len(head["parents"]) == 2 and served.api("GET", "/v1/branches")["refs"]["main"] == merged
    color = served.api("GET", "/v1/items", params={"namespace": NS, "key": KEY})["value"]["value"]
    assert color == NAVY

    # 9. The timeline draws the fix branch beside main, joined at the merge (the screenshot in docs/ui.md).
    open_view(page, "timeline", "timeline")
    head_row = page.locator(f"tr[data-commit='{merged}']")
    assert head_row.locator("svg[aria-hidden=true] circle.merge").count() == 1
    assert head_row.locator("svg line[data-parent]").count() == 2 and "merge of 2 commits" in head_row.inner_text()
    assert max(int(n) for n in page.eval_on_selector_all("td.graph svg", "l => l.map(s => s.dataset.lanes)")) == 2
    page.evaluate("document.getElementById('toast').replaceChildren()")  # the merge's notice, not in the picture
    shot(page, "timeline")


def test_ui_merge_lists_conflicts_then_merges_with_the_chosen_policy(page: Any, served: Served) -> None:
    served.api("POST", "/v1/branches", json={"name": "tone", "at": "main"})
    ns = ["users", "bob", "preferences", "tone"]
    served.api("PUT", "/v1/items", json={"namespace": ns, "key": "style", "value": {"text": "formal"}})
    served.api(
        "PUT", "/v1/items", json={"namespace": ns, "key": "style", "value": {"text": "casual"}, "branch": "tone"}
    )
    open_view(page, "branches", "branches")
    page.click("button[data-merge='tone']")
    page.click("#confirm-ok")  # policy "fail": the merge is refused and its conflicts listed
    page.wait_for_selector("#confirm-dialog[open] #conflicts")
    conflicts = page.inner_text("#confirm-dialog #conflicts")
    assert "1 conflict" in conflicts and "users.bob.preferences.tone / style" in conflicts and "casual" in conflicts
    assert page.input_value("#confirm-dialog #merge-strategy") == "theirs"
    page.click("#confirm-ok")
    page.wait_for_selector("#action-result [data-made]")
    assert "(theirs)" in page.inner_text("#action-result")
    assert (
        served.api("GET", "/v1/items", params={"namespace": ".".join(ns), "key": "style"})["value"]["text"] == "casual"
    )
