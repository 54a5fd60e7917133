"""Links you can trust, in Chromium: then/now search badges checked at the other point (not guessed from rank),
paged with a total; sources that open the channel message or writer run they name, else the other items citing
them; ref pickers and short headings; the API docs linked; whoami, branches and tags fetched once across views
(again after a write the UI makes); and a revert with nothing to revert saying so."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import httpx

from .conftest import Served, open_view, wait_view

DASH = "\N{EN DASH}"  # the UI writes ranges as 1\N{EN DASH}20
FILLER = " ".join(f"filler{i}" for i in range(40))


def put(served: Served, ns: list[str], key: str, text: str, sources: list[str] | None = None) -> str:
    body = {"namespace": ns, "key": key, "value": {"text": text}, "sources": sources or []}
    commit_id: str = served.api("PUT", "/v1/items", json=body)["commit"]["id"]
    return commit_id


def badges(page: Any, side: str) -> dict[str, str]:
    """Key -> badge ("" when none) of each result shown on one side."""
    found: dict[str, str] = {}
    for row in page.query_selector_all(f"#results-{side} li[data-item]"):
        badge = row.query_selector("[data-badge]")
        found[row.get_attribute("data-item").rsplit("/", 1)[1]] = badge.get_attribute("data-badge") if badge else ""
    return found


def test_ui_search_badges_are_checked_at_the_other_point_and_results_page(page: Any, served: Served) -> None:
    ns = ["probe", "search"]
    for i in range(5):
        put(served, ns, f"old{i}", f"zebra quartz note {i} {FILLER}")
    served.api("POST", "/v1/tags", json={"name": "search-then", "at": "main"})
    for i in range(25):
        put(served, ns, f"new{i:02d}", f"zebra quartz zebra quartz {i}")
    served.api("DELETE", "/v1/items", params={"namespace": "probe.search", "key": "old0"})
    open_view(page, "search?q=zebra%20quartz&at=search-then&ns=probe.search&mode=keyword&compare=1", "search")
    then, now = badges(page, "then"), badges(page, "now")
    assert set(then) == {f"old{i}" for i in range(5)} and len(now) == 20
    assert not any(k.startswith("old") for k in now)  # the old items rank below the head's top 20 ...
    # ... yet they exist at head: only the deleted one is "only here"
    assert then == {"old0": "only-here", "old1": "", "old2": "", "old3": "", "old4": ""}
    assert page.inner_text("#results-then").count("only here") == 1
    assert set(now.values()) == {"only-here"}  # the new items do not exist at the tag
    assert f"Results 1{DASH}20 of more than 20" in page.inner_text("#results-now")
    assert f"Results 1{DASH}5 of 5" in page.inner_text("#results-then")
    page.click("#more-results")
    wait_view(page, "search")
    assert "offset=20" in page.url and f"Results 21{DASH}29 of 29" in page.inner_text("#results-now")
    now = badges(page, "now")
    assert {k for k in now if k.startswith("old")} == {"old1", "old2", "old3", "old4"}
    assert all(now[f"old{i}"] == "" for i in range(1, 5))  # the same value at the tag: no badge
    page.fill("#search-query", "zebra")
    page.click("form[role=search] button[type=submit]")
    page.wait_for_function("() => location.hash.includes('q=zebra&')")
    wait_view(page, "search")
    assert "compare=1" in page.url and page.locator("#results-now").count() == 1  # re-submitting keeps the compare


def test_ui_sources_open_messages_and_runs_or_list_the_items_citing_them(page: Any, served: Served) -> None:
    ns = ["probe", "sources"]
    put(served, ns, "s1", "from the ticket", ["ticket-77"])
    put(served, ns, "s2", "also from the ticket", ["ticket-77", "ticket-78"])
    put(served, ns, "s3", "another ticket", ["ticket-78"])
    open_view(page, "state?ns=probe.sources&key=s1", "state")
    source = page.locator("#sources li[data-source='ticket-77']")
    assert source.get_attribute("data-kind") == "source"
    source.locator("a.source-others").click()
    wait_view(page, "search")
    listed = page.inner_text("#source-items")
    assert "probe.sources / s1" in listed and "probe.sources / s2" in listed and "s3" not in listed
    assert "2 items" in listed and "scanned" in listed

    # a channel message, read as the agent the UI acts as
    agent = {"X-Engram-Agent": "linker"}
    served.api("POST", "/v1/agents", json={"id": "linker"})
    served.api("POST", "/v1/channels", json={"name": "support", "scope": "global"}, headers=agent)
    said = {"content": "alice asks for dark"}
    message = served.api("POST", "/v1/channels/support/messages", headers=agent, json=said)
    put(served, ns, "m1", "alice wants dark mode", [message["id"]])
    page.evaluate("() => sessionStorage.setItem('engram.agent', 'linker')")
    open_view(page, "state?ns=probe.sources&key=m1", "state")
    page.wait_for_selector("#sources li[data-kind='message'] a.source-message")
    assert "in #support" in page.inner_text("#sources")
    page.click("#sources a.source-message")
    wait_view(page, "channels")
    page.wait_for_selector("#opened-message")
    assert "alice asks for dark" in page.inner_text("#opened-message")

    # a conversation turn a writer run read: opens the run
    served.api("POST", "/v1/conversations", json={"conversation_id": "chat-links", "target": ["users", "erin"]})
    for i, (role, text) in enumerate([("user", "I prefer green tea. I live in Porto."), ("assistant", "Noted!")] * 2):
        turn = {"role": role, "text": text, "message_id": f"links-{i}"}
        served.api("POST", "/v1/conversations/chat-links/turns", json=turn)
    served.api("GET", "/v1/writer/users.erin/status", params={"wait": 30})  # the writer runs in the background
    branch = next(b for b in served.api("GET", "/v1/branches")["refs"] if b.startswith("writer/users.erin/"))
    run = branch.rsplit("/", 1)[1]
    found = served.api("POST", "/v1/search", json={"namespace_prefix": ["users", "erin"], "at": branch, "limit": 5})
    item = next(it for it in found["items"] if it["sources"])
    open_view(page, f"blame?ns={'.'.join(item['namespace'])}&key={item['key']}&ref={branch}", "blame")
    turn_source = page.locator(f"li[data-source='{item['sources'][0]}']").first
    assert turn_source.get_attribute("data-kind") == "run"
    turn_source.locator(f"a[data-run='{run}']").click()
    wait_view(page, "run")
    assert run in page.inner_text("h1") and page.inner_text("#run-outcome").strip() != ""
    assert "review its changes" in page.inner_text("#run")


def test_ui_ref_pickers_and_short_ids_and_times_in_headings(page: Any, served: Served) -> None:
    served.api("POST", "/v1/tags", json={"name": "picker-tag", "at": "main"})
    head = served.api("GET", "/v1/branches")["refs"]["main"]
    open_view(page, f"search?at={head}", "search")
    heading = page.inner_text("h1")
    assert head[:10] in heading and head not in heading
    options = page.eval_on_selector_all("#ref-options option", "els => els.map((e) => e.value)")
    assert "main" in options and "picker-tag" in options and head[:10] in options
    assert page.get_attribute("form[role=search] input[name=at]", "list") == "ref-options"
    fields = [
        ("state", "input[name=at]"),
        ("blame", "input[name=ref]"),
        ("diff", "input[name=old]"),
        ("diff", "input[name=new]"),
        ("branches", "form[aria-label='Create a branch'] input[name=at]"),
    ]
    for fragment, selector in fields:
        open_view(page, fragment, fragment)
        assert page.get_attribute(selector, "list") == "ref-options", (fragment, selector)
    when = served.api("GET", "/v1/log", params={"limit": 1})["commits"][0]["time"]
    open_view(page, f"state?at={quote(f'main@{{{when}}}')}", "state")
    heading = page.inner_text("h1")
    assert "main as of" in heading and when[:4] in heading and "{" not in heading and when not in heading
    open_view(page, f"diff?old={head}~1&new={head}", "diff")
    assert head not in page.inner_text("h1") and head[:10] in page.inner_text("h1")


def test_ui_links_the_api_docs_and_loads_the_session_once_across_views(page: Any, served: Served) -> None:
    seen: list[str] = []

    def note(request: Any) -> None:
        if request.method == "GET":
            seen.append(re.sub(r"\?.*", "", request.url.replace(served.url, "")))

    page.on("request", note)
    open_view(page, "timeline", "timeline")
    for view in ("state", "search", "blame", "diff", "channels", "timeline"):
        page.click(f"a[data-nav='{view}']")
        wait_view(page, view)
    assert (seen.count("/v1/whoami"), seen.count("/v1/branches"), seen.count("/v1/tags")) == (1, 1, 1), seen
    page.click("a[data-nav='branches']")  # the refs are this view's content: read afresh, the caller is not
    wait_view(page, "branches")
    assert (seen.count("/v1/whoami"), seen.count("/v1/branches"), seen.count("/v1/tags")) == (1, 2, 2), seen
    # a write the UI makes loads them again: the new tag is in the next view's picker
    head = served.api("GET", "/v1/branches")["refs"]["main"]
    open_view(page, f"commit?id={head}", "commit")
    page.click("button:text('Tag…')")
    page.fill("#ref-name", "made-in-ui")
    page.click("#confirm-ok")
    page.wait_for_selector("#action-result .ok")
    page.click("a[data-nav='search']")
    wait_view(page, "search")
    assert seen.count("/v1/tags") == 3 and seen.count("/v1/whoami") == 2
    assert "made-in-ui" in page.eval_on_selector_all("#ref-options option", "els => els.map((e) => e.value)")
    docs = page.locator("a#api-docs")
    assert docs.get_attribute("href") == "/docs"
    assert httpx.get(served.url + "/docs", timeout=30).status_code == 200


def test_ui_revert_with_nothing_to_revert_says_so(page: Any, served: Served) -> None:
    bad = put(served, ["probe", "revert"], "oops", "a bad write")
    served.api("POST", "/v1/revert", json={"ref": bad})  # already reverted once
    head = served.api("GET", "/v1/branches")["refs"]["main"]
    open_view(page, f"commit?id={bad}", "commit")
    page.click("#revert")
    page.click("#confirm-ok")
    page.wait_for_selector("#action-result #nothing-reverted")
    text = page.inner_text("#action-result")
    assert "Nothing to revert" in text and head[:10] in text and "Reverted" not in text
    assert page.locator("#action-result [data-made]").count() == 0
    assert served.api("GET", "/v1/branches")["refs"]["main"] == head
