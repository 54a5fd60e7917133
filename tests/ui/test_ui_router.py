"""The router and the keyboard path: the skip link moves the focus and leaves the view alone, `/` focuses the search
field wherever the focus is (but a text field), Back after "Older commits" brings the appended pages and the scroll
position back, a view that fails keeps a form to correct the link, and an unknown route says so."""

from __future__ import annotations

from typing import Any

from .conftest import Served, open_view, wait_view

NS, KEY = "users.alice.preferences.ui", "dashboard_color"


def test_ui_skip_link_focuses_the_view_without_routing(page: Any, served: Served) -> None:
    fragment = f"state?ns={NS}&key={KEY}"
    open_view(page, fragment, "state")
    page.evaluate("() => { document.querySelector('#view > .view').dataset.mark = 'same'; }")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.className") == "skip"
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.activeElement && document.activeElement.id === 'view'")
    assert page.evaluate("() => location.hash") == "#/" + fragment  # the route is untouched
    assert page.locator("#view > .view[data-mark=same][data-view=state]").count() == 1  # nor drawn again
    page.goto("/#view")  # the anchor typed as a URL: focus, and the route is put back
    page.wait_for_function("() => document.activeElement && document.activeElement.id === 'view'")
    assert page.evaluate("() => location.hash") == "#/" + fragment and page.locator("#unknown-page").count() == 0


def test_ui_slash_focuses_search_after_a_click(page: Any, served: Served) -> None:
    open_view(page, "search?q=dashboard", "search")
    page.click("h1")  # a click elsewhere: the query field loses the focus
    page.keyboard.press("/")
    page.wait_for_function("() => document.activeElement && document.activeElement.id === 'search-query'")
    assert page.evaluate("() => location.hash") == "#/search?q=dashboard"  # the query is kept, not a new search
    open_view(page, "timeline", "timeline")
    page.click("#all-branches")  # the focus on a checkbox: not a text field, so `/` still searches
    page.click("#all-branches")
    page.keyboard.press("/")
    wait_view(page, "search")
    page.wait_for_function("() => document.activeElement && document.activeElement.id === 'search-query'")
    page.keyboard.type("colour/")  # in the text field `/` is a character
    assert page.input_value("#search-query") == "colour/"
    page.click("button[type=submit]")
    wait_view(page, "search")
    page.click("#view h1")
    page.keyboard.press("/")
    page.wait_for_function("() => document.activeElement && document.activeElement.id === 'search-query'")


def test_ui_back_after_older_commits_keeps_pages_and_scroll(page: Any, served: Served) -> None:
    open_view(page, "timeline?limit=20", "timeline")
    for shown in (40, 60, 80):
        page.click("#next-page")
        page.wait_for_function("n => document.querySelectorAll('tr[data-commit]').length >= n", arg=shown)
        page.wait_for_selector("#next-page:not([aria-disabled])")
    assert page.locator("tr[data-commit]").count() == 80
    row = page.locator("tr[data-commit]").nth(70)
    commit = row.get_attribute("data-commit")
    row.scroll_into_view_if_needed()
    page.evaluate("() => window.scrollBy(0, 5)")
    page.wait_for_timeout(300)
    before = page.evaluate("() => window.scrollY")
    assert before > 1500
    row.locator("a[data-open]").click()
    wait_view(page, "commit")
    assert commit[:10] in page.inner_text("h1")
    assert page.evaluate("() => window.scrollY") < 50  # a new view starts at the top
    page.go_back()
    wait_view(page, "timeline")
    assert page.locator("tr[data-commit]").count() == 80  # the appended pages are back
    assert abs(page.evaluate("() => window.scrollY") - before) < 5  # and the scroll position
    page.go_forward()
    wait_view(page, "commit")
    page.reload()  # the history entries keep what they showed across a reload
    wait_view(page, "commit")
    page.go_back()
    wait_view(page, "timeline")
    assert page.locator("tr[data-commit]").count() == 80


def test_ui_error_view_keeps_a_form_to_correct_the_link(page: Any, served: Served) -> None:
    open_view(page, f"state?at=no-such-branch&ns={NS}&key={KEY}", "state")
    assert "unknown ref" in page.inner_text(".error")
    assert page.input_value("#fix-link input[name=at]") == "no-such-branch"
    assert page.input_value("#fix-link input[name=ns]") == NS
    page.fill("#fix-link input[name=at]", "main")
    page.click("#fix-link button[type=submit]")
    page.wait_for_function("() => location.hash.includes('at=main')")
    wait_view(page, "state")
    assert page.inner_text("#item-title") == f"{NS} / {KEY}" and page.locator(".error").count() == 0
    open_view(page, "search?q=x&filter=%7Bbad", "search")  # a view that drew its own form keeps it
    assert page.locator(".error").count() == 1 and page.input_value("#search-query") == "x"
    open_view(page, "diff?old=nope&new=main", "diff")
    assert page.locator(".error").count() == 1 and page.input_value("input[name=old]") == "nope"


def test_ui_unknown_route_says_so(page: Any, served: Served) -> None:
    open_view(page, "timelne?branch=main", "unknown")
    assert "timelne" in page.inner_text("#unknown-page") and page.locator("tr[data-commit]").count() == 0
    assert page.title() == "engram · unknown page"
    page.click("#go-home")
    wait_view(page, "timeline")
    page.goto("/")  # no route at all is the timeline
    wait_view(page, "timeline")
