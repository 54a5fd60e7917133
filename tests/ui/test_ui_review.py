"""Review and merge you can trust, in Chromium: the branch compare is from the merge base (the two-dot view on
request), a merge re-renders the branch heads, the compare and the merge offers, a no-op merge says "already up
to date", a conflicting revert lists base/ours/theirs and asks again, and merge and revert dialogs send an author
(prefilled from the key's identity) and a message."""

from __future__ import annotations

from typing import Any

from .conftest import Served, open_view, wait_view

NS = ["users", "dana", "preferences"]


def put(served: Served, key: str, text: str, branch: str | None = None) -> str:
    body = {"namespace": NS, "key": key, "value": {"text": text}, "branch": branch}
    commit_id: str = served.api("PUT", "/v1/items", json=body)["commit"]["id"]
    return commit_id


def fork(served: Served, name: str) -> None:
    """Branch ``name`` adds one item; main then adds two of its own (main moved on since the fork)."""
    served.api("POST", "/v1/branches", json={"name": name, "at": "main"})
    put(served, f"{name}-fix", "the fix", branch=name)
    put(served, f"{name}-main-1", "main moved on")
    put(served, f"{name}-main-2", "and on")


def heads(served: Served) -> dict[str, str]:
    refs: dict[str, str] = served.api("GET", "/v1/branches")["refs"]
    return refs


def test_ui_compare_is_from_the_merge_base_with_the_two_dot_view_on_request(page: Any, served: Served) -> None:
    fork(served, "hotfix-a")
    open_view(page, "branches?compare=hotfix-a", "branches")
    compare = page.inner_text("#compare")
    assert page.get_attribute("#compare", "data-mode") == "merge-base" and "main...hotfix-a" in compare
    assert "1 item changed: 1 added 0 removed 0 modified" in compare and "hotfix-a-fix" in compare
    assert "hotfix-a-main-1" not in compare  # main's own changes since the fork are not the branch's
    page.click("#two-dot")
    page.wait_for_selector("#compare[data-mode='heads']")
    wait_view(page, "branches")
    compare = page.inner_text("#compare")
    assert "3 items changed: 1 added 2 removed 0 modified" in compare and "main..hotfix-a" in compare
    page.click("#three-dot")
    page.wait_for_selector("#compare[data-mode='merge-base']")
    wait_view(page, "branches")
    page.click("#compare a:text('open as a diff')")
    wait_view(page, "diff")
    assert "1 item changed" in page.inner_text("main") and "hotfix-a-fix" in page.inner_text("main")


def test_ui_merge_re_renders_heads_compare_and_offers_with_author_and_message(page: Any, served: Served) -> None:
    fork(served, "hotfix-b")
    old_head = heads(served)["main"]
    open_view(page, "branches?compare=hotfix-b", "branches")
    assert page.inner_text("tr[data-branch='main'] td.mono") == old_head[:10]
    page.click("#compare button[data-merge='hotfix-b']")
    who = served.api("GET", "/v1/whoami")["author"]
    assert page.input_value("#confirm-dialog #merge-author") == who  # prefilled from the key's identity
    page.fill("#merge-author", "dana")
    page.fill("#merge-message", "bring in the contrast fix")
    page.click("#confirm-ok")
    merged = page.wait_for_selector("#action-result [data-made]").get_attribute("data-made")
    commit = served.api("GET", f"/v1/commits/{merged}")
    assert (commit["author"], commit["message"]) == ("dana", "bring in the contrast fix")
    assert heads(served)["main"] == merged
    # what the merge changed is shown again: main's new head, nothing left to merge, no merge offer
    assert page.inner_text("tr[data-branch='main'] td.mono") == merged[:10]
    assert "Nothing left to merge" in page.inner_text("#compare")
    assert page.locator("button[data-merge='hotfix-b']").count() == 0
    assert "Merge into main" not in page.inner_text("#compare")
    assert "Merged hotfix-b into main" in page.inner_text("#action-result")


def test_ui_merge_with_nothing_to_merge_says_already_up_to_date(page: Any, served: Served) -> None:
    served.api("POST", "/v1/branches", json={"name": "behind", "at": "main~1"})  # main already has all of it
    before = heads(served)["main"]
    open_view(page, "branches", "branches")
    page.click("button[data-merge='behind']")
    page.click("#confirm-ok")
    page.wait_for_selector("#action-result [data-up-to-date]")
    text = page.inner_text("#action-result")
    assert "Already up to date" in text and "Merged" not in text
    assert page.locator("#action-result [data-made]").count() == 0 and heads(served)["main"] == before


def test_ui_conflicting_revert_lists_the_conflict_and_asks_again(page: Any, served: Served) -> None:
    put(served, "contrast", "1.3:1")
    bad = put(served, "contrast", "bad: 1.1:1")
    put(served, "contrast", "later: 4.5:1")  # a later change to the same item: reverting `bad` conflicts
    open_view(page, f"commit?id={bad}", "commit")
    page.click("#revert")
    assert page.input_value("#confirm-dialog #revert-author") == served.api("GET", "/v1/whoami")["author"]
    page.fill("#revert-author", "erin")
    page.fill("#revert-message", "undo the bad contrast")
    page.click("#confirm-ok")  # policy "fail": refused, its conflict listed, asked again
    page.wait_for_selector("#confirm-dialog[open] #conflicts")
    listed = page.locator("#confirm-dialog #conflicts li[data-conflict='users.dana.preferences/contrast']")
    sides = {s: listed.locator(f"[data-side='{s}']").inner_text() for s in ("base", "ours", "theirs")}
    assert "bad: 1.1:1" in sides["base"] and "later: 4.5:1" in sides["ours"] and "1.3:1" in sides["theirs"]
    assert page.input_value("#confirm-dialog #revert-strategy") == "theirs"
    assert page.input_value("#confirm-dialog #revert-author") == "erin"  # what was typed is kept
    page.click("#confirm-ok")
    made = page.wait_for_selector("#action-result [data-made]").get_attribute("data-made")
    commit = served.api("GET", f"/v1/commits/{made}")
    assert (commit["author"], commit["message"]) == ("erin", "undo the bad contrast")
    item = served.api("GET", "/v1/items", params={"namespace": ".".join(NS), "key": "contrast"})
    assert item["value"]["text"] == "1.3:1"  # "theirs": undone anyway, back to the version before the bad commit
