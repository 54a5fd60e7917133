"""The whole production-debugging story in the web UI alone (headless Debian Chromium), the way a developer
walks it: find the bad write, tag the last good point and read the memory there with its count, diff it with
head (values inline), blame the item to its linked sources, fix the item on a branch, compare the branch from
the merge base while agents keep writing on main, merge it, and revert with a conflict. The API is used only to
check what the UI did and to play the agents writing meanwhile."""

from __future__ import annotations

import json
from typing import Any

from .conftest import Served, click_and_wait, filter_timeline, open_view, wait_view

NS, KEY = "users.alice.preferences.ui", "dashboard_color"
NAVY, YELLOW, BLACK = "#1e3a8a", "#fde047", "#111111"


def _count(served: Served, at: str) -> int:
    found = served.api("GET", "/v1/namespaces", params={"counts": "true", "limit": 0, "at": at})
    return int(found["total"])


def _color(served: Served, branch: str = "main") -> str:
    item = served.api("GET", "/v1/items", params={"namespace": NS, "key": KEY, "branch": branch})
    return str(item["value"]["value"])


def test_ui_story_find_fix_on_a_branch_review_merge_and_revert(page: Any, served: Served) -> None:
    bad = served.story["truth"]["bad"]

    # 1. Find the bad write: the timeline filtered to the item; the newest change is the bad one.
    filter_timeline(page, NS, KEY)
    first = page.locator("tr[data-commit]").nth(0)
    assert first.get_attribute("data-commit") == bad and YELLOW in first.inner_text()
    click_and_wait(page, f"tr[data-commit='{bad}'] a[data-open]", "commit")

    # 2. Tag the last good point (the bad commit's parent) and open the memory there, with its item count.
    parent = served.api("GET", f"/v1/commits/{bad}")["parents"][0]
    open_view(page, f"commit?id={parent}", "commit")
    page.click("button:text-is('Tag…')")
    page.fill("#ref-name", "last-good")
    page.click("#confirm-ok")
    page.wait_for_selector("#action-result .ok")
    assert served.api("GET", "/v1/tags")["refs"]["last-good"] == parent
    open_view(page, "state?at=last-good", "state")
    count = _count(served, "last-good")
    assert page.get_attribute("#item-count", "data-count") == str(count)
    assert f"{count} items at this point" in page.inner_text("p.point")
    open_view(page, "timeline", "timeline")  # the headline numbers, without arithmetic: "before → after" per row
    head_row = page.locator("tr[data-commit]").nth(0)
    assert f"→ {_count(served, 'main')}" in head_row.inner_text()

    # 3. Diff the tag with head: the colour changed, and added items show their values inline.
    open_view(page, "diff?old=last-good&new=main", "diff")
    change = page.locator(f"article[data-key='{NS}/{KEY}']")
    assert change.locator(".kind").inner_text() == "modified"
    assert "navy" in change.locator("del").all_inner_texts()
    added = page.locator("article.change:has(.kind:text-is('added'))")
    assert added.count() >= 1 and added.first.locator("pre.json").is_visible()

    # 4. Blame the item: each version's sources are links (other items citing the same message).
    open_view(page, f"blame?ns={NS}&key={KEY}", "blame")
    newest = page.locator("li[data-commit]").nth(0)
    assert newest.get_attribute("data-commit") == bad
    source = newest.locator("li[data-source='msg-alice-245'] a.source-others")
    assert source.count() == 1
    click_and_wait(page, f"li[data-commit='{bad}'] li[data-source='msg-alice-245'] a.source-others", "search")
    assert "source=msg-alice-245" in page.evaluate("() => location.hash")

    # 5. Fix the item on a branch, from where it was found (a new fix branch by default, never main).
    open_view(page, f"state?ns={NS}&key={KEY}", "state")
    page.click("#edit-item")
    assert page.input_value("#edit-new-branch") == f"fix/{KEY}"
    value = json.loads(page.input_value("#edit-value"))
    page.fill("#edit-value", json.dumps({**value, "value": NAVY, "text": f"alice's dashboard colour is {NAVY}"}))
    page.fill("#edit-author", "dev:sam")
    page.fill("#edit-message", "restore alice's navy dashboard")
    page.click("#confirm-ok")
    wait_view(page, "state")
    fix_commit = page.wait_for_selector("#edit-done").get_attribute("data-made")
    assert _color(served, f"fix/{KEY}") == NAVY and _color(served) == YELLOW

    # Meanwhile an agent writes on main: the compare from the merge base shows only what the fix brings in.
    reports = {"namespace": ["users", "carol", "preferences", "reports"], "key": "format"}
    served.api("PUT", "/v1/items", json={**reports, "value": {"text": "Carol wants PDF"}, "author": "agent:chat"})
    open_view(page, f"branches?compare=fix/{KEY}", "branches")
    compare = page.inner_text("#compare")
    assert f"main...fix/{KEY}" in compare and "1 item changed" in compare and "reports" not in compare

    # 6. Merge the fix into main: the view redraws with nothing left to merge.
    page.click(f"#compare button[data-merge='fix/{KEY}']")
    page.click("#confirm-ok")
    merged = page.wait_for_selector("#action-result [data-made]").get_attribute("data-made")
    assert served.api("GET", "/v1/branches")["refs"]["main"] == merged and _color(served) == NAVY

    # 7. An agent changes the colour again; reverting the fix now conflicts: listed, then a policy chosen.
    served.api("PUT", "/v1/items", json={"namespace": NS.split("."), "key": KEY, "value": {**value, "value": BLACK}})
    open_view(page, f"commit?id={fix_commit}", "commit")
    page.click("#revert")
    page.select_option("#revert-branch", "main")
    page.click("#confirm-ok")
    page.wait_for_selector("#confirm-dialog[open] #conflicts")
    listed = page.locator(f"#confirm-dialog #conflicts li[data-conflict='{NS}/{KEY}']")
    sides = {s: listed.locator(f"[data-side='{s}']").inner_text() for s in ("base", "ours", "theirs")}
    assert NAVY in sides["base"] and BLACK in sides["ours"] and YELLOW in sides["theirs"]
    assert page.input_value("#confirm-dialog #revert-strategy") == "theirs"  # undo it anyway, the proposal
    page.fill("#revert-message", "the fix was wrong after all")
    page.click("#confirm-ok")
    made = page.wait_for_selector("#action-result [data-made]").get_attribute("data-made")
    assert served.api("GET", f"/v1/commits/{made}")["message"] == "the fix was wrong after all"
    assert _color(served) == YELLOW  # "theirs": back to the version before the fix, over the agent's later write
