"""Each view, checked for its content (text present), not pixels (docs/ui.md's screenshots come from
``make screenshots``); plus the keyboard, deep links, read-only keys and the offline pages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from engram.ops.access import KeyRing
from engram.server import ServerConfig

from .conftest import Served, ThreadServer, add_extras, open_view, shot, wait_view

NS, KEY = "users.alice.preferences.ui", "dashboard_color"
AT = "main%40%7B3%20days%20ago%7D"  # main@{3 days ago}


@pytest.fixture(scope="module")
def extras(served: Served) -> dict[str, Any]:
    """A writer run waiting for review, a tag, and a channel with a thread and feedback."""
    return add_extras(served)


def test_ui_view_timeline(page: Any, served: Served) -> None:
    open_view(page, "timeline", "timeline")
    text = page.inner_text("main")
    assert "dashboard: 4 render errors" in text and "agent:personalization" in text and "Items changed" in text
    assert page.locator("tr[data-commit]").count() == 50 and page.locator("#next-page").count() == 1
    assert page.locator("tr[data-commit] .ref").first.inner_text() == "main"  # the branch drawn at its head
    assert "UTC" in page.locator("tr[data-commit] time").first.inner_text()  # relative and absolute with zone
    assert page.locator("td.graph svg[aria-hidden=true]").count() == 50  # the graph (its screenshot: the scenario)
    page.click("#next-page")  # paging by cursor: the older commits are appended, never the whole history
    page.wait_for_function("() => document.querySelectorAll('tr[data-commit]').length > 50")
    assert "onboarding: alice signed up" in page.inner_text("main")


def test_ui_view_state(page: Any, served: Served) -> None:
    open_view(page, f"state?at={AT}&ns={NS}&key={KEY}", "state")
    text = page.inner_text("main")
    assert "#1e3a8a" in text and "Newer versions exist" in text and "msg-alice-201" in text
    assert "agent:personalization" in text and "Namespaces" in text
    shot(page, "state")


def test_ui_view_diff(page: Any, served: Served) -> None:
    open_view(page, f"diff?old={AT}&new=main", "diff")
    text = page.inner_text("main")
    assert "modified" in text and f"{NS} / {KEY}" in text and "20 added" in text
    assert "navy" in page.locator("del").all_inner_texts()
    shot(page, "diff")


def test_ui_view_commit(page: Any, served: Served) -> None:
    open_view(page, f"commit?id={served.story['truth']['bad']}", "commit")
    text = page.inner_text("main")
    assert "remember alice's dashboard colour #fde047" in text and "1 item changed" in text
    assert page.locator("#revert").count() == 1  # local server without keys: writes allowed
    shot(page, "commit")


def test_ui_view_blame(page: Any, served: Served) -> None:
    open_view(page, f"blame?ns={NS}&key={KEY}", "blame")
    text = page.inner_text("main")
    assert "msg-alice-245" in text and "msg-alice-201" in text and "versions, newest first" in text
    shot(page, "blame")


def test_ui_view_search(page: Any, served: Served) -> None:
    open_view(page, f"search?at={AT}&q=dashboard%20colour&ns=users.alice&compare=1", "search")
    then, now = page.inner_text("#results-then"), page.inner_text("#results-now")
    assert "navy blue" in then and "pale yellow" in now and "similarity" in then
    shot(page, "search")


def test_ui_view_branches_and_review(page: Any, served: Served, extras: dict[str, Any]) -> None:
    assert extras["review"], "the writer made no review branch"
    run = extras["review"][0].rsplit("/", 1)[1]
    open_view(page, f"branches?compare={extras['review'][0]}", "branches")
    text = page.inner_text("main")
    assert "Writer review (1)" in text and run in text and "incident-start" in text
    assert page.locator(f"button[data-approve='{run}']").count() == 1
    assert "users.carol" in page.inner_text("#compare")  # what the run would add
    shot(page, "branches")
    page.click(f"button[data-approve='{run}']")  # approve = merge
    page.click("#confirm-ok")
    page.wait_for_selector("#action-result .ok")
    assert "Approved run" in page.inner_text("#action-result")
    assert extras["review"][0] not in served.api("GET", "/v1/branches")["refs"]


def test_ui_view_channels(page: Any, served: Served, extras: dict[str, Any]) -> None:
    open_view(page, "channels?agent=oncall&channel=incidents", "channels")
    text = page.inner_text("main")
    assert "unreadable since about 2 days ago" in text and "confidence" in text and "oncall" in text
    assert page.locator(".thread .msg").count() == 1 and "fails WCAG AA" in page.inner_text(".thread")
    assert "feedback" in text
    shot(page, "channels")
    open_view(page, "channels?agent=oncall&channel=incidents&asof=2020-01-01T00%3A00%3A00.000Z", "channels")
    assert "no commit" in page.inner_text("main") or "0 messages" in page.inner_text("main")


def test_ui_keyboard_shortcuts(page: Any, served: Served) -> None:
    open_view(page, "timeline", "timeline")
    page.keyboard.press("g")
    page.keyboard.press("b")
    wait_view(page, "branches")
    page.keyboard.press("?")
    assert page.locator("#help-dialog").is_visible() and "Next / previous row" in page.inner_text("#help-dialog")
    page.keyboard.press("Escape")
    page.keyboard.press("g")
    page.keyboard.press("t")
    wait_view(page, "timeline")
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert page.locator("tr.selected").count() == 1
    page.keyboard.press("Enter")
    wait_view(page, "commit")
    page.keyboard.press("/")
    wait_view(page, "search")


def test_ui_deep_link_opens_the_memory_at_a_commit_and_item(page: Any, served: Served) -> None:
    navy = served.story["truth"]["navy"]
    open_view(page, f"state?at={navy}&ns={NS}&key={KEY}", "state")
    assert page.inner_text("#item-title") == f"{NS} / {KEY}" and "#1e3a8a" in page.inner_text("main")
    assert navy[:10] in page.inner_text("main")


def test_ui_bad_input_shows_the_api_error(page: Any, served: Served) -> None:
    open_view(page, "state?at=no-such-branch", "state")
    assert "unknown ref" in page.inner_text(".error") and "HTTP 404" in page.inner_text(".error")


def test_ui_read_only_key_hides_write_actions(browser: Any, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    reader = KeyRing(keys).create("acme", ["read"])[1]
    writer = KeyRing(keys).create("acme", ["read", "write"])[1]
    server = ThreadServer(ServerConfig(store=str(tmp_path / "store"), embedder="hashing", keys_file=keys))
    context = browser.new_context(viewport={"width": 1200, "height": 800}, base_url=server.url)
    try:
        page = context.new_page()
        httpx.put(server.url + "/v1/items", headers={"Authorization": f"Bearer {writer}"},
                  json={"namespace": ["a"], "key": "k", "value": {"text": "x"}}).raise_for_status()  # fmt: skip
        page.goto("/#/commit?id=HEAD")
        page.wait_for_function("() => document.body.dataset.ready")
        assert "needs an API key" in page.inner_text("main")  # no key: the 401 says so
        for secret, writable in ((reader, False), (writer, True)):
            page.click("#key-button")
            page.fill("#key-input", secret)
            page.click("#key-dialog button[value=save]")
            mode = "read-write" if writable else "read-only"
            page.wait_for_function("m => document.getElementById('who').textContent.includes('acme · ' + m)", arg=mode)
            wait_view(page, "commit")
            assert page.locator("#revert").count() == (1 if writable else 0)
        assert page.evaluate("() => sessionStorage.getItem('engram.key')") == writer
    finally:
        context.close()
        server.stop()


def test_ui_pages_need_no_network(page: Any, served: Served) -> None:
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    open_view(page, "timeline", "timeline")
    page.goto("/docs")
    page.wait_for_selector(".swagger-ui .opblock")  # Swagger UI rendered from the fastapi-offline package
    assert "/v1/timeline" in page.inner_text(".swagger-ui")
    assert requested and [u for u in requested if not u.startswith((served.url, "blob:" + served.url, "data:"))] == []
    assert httpx.get(served.url + "/", headers={"Accept": "application/json"}).json()["docs"] == "/docs"
    assert httpx.get(served.url + "/api").json()["ui"] == "/"


def test_ui_writer_review_reject_deletes_the_branch(page: Any, served: Served) -> None:
    served.api("POST", "/v1/conversations", json={"conversation_id": "chat-8", "target": ["users", "bob"]})
    for i, (role, text) in enumerate([("user", "I work from Berlin. I like tea."), ("assistant", "Noted!")] * 2):
        served.api("POST", "/v1/conversations/chat-8/turns", json={"role": role, "text": text, "message_id": f"b{i}"})
    status = served.api("GET", "/v1/writer/users.bob/status", params={"wait": 30})  # the writer runs in the background
    assert status["last_run"] is not None and status["last_run"]["outcome"] == "review", status
    branch = next(b for b in served.api("GET", "/v1/branches")["refs"] if b.startswith("writer/users.bob/"))
    run = branch.rsplit("/", 1)[1]
    open_view(page, "branches", "branches")
    page.click(f"button[data-reject='{run}']")
    assert "Reject writer run" in page.inner_text("#confirm-dialog")
    page.click("#confirm-ok")
    page.wait_for_selector("#action-result .ok")
    assert f"Rejected run {run}" in page.inner_text("#action-result")
    assert branch not in served.api("GET", "/v1/branches")["refs"]
