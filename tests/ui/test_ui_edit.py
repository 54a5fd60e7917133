"""Writing from the UI: edit and delete an item on a branch (a new fix branch by default), with an author
(prefilled from the key's identity) and a message, then review it from the merge base and merge it; a read-only
key sees no edit buttons, and a write the server refuses (403) says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from engram.ops.access import KeyRing
from engram.server import ServerConfig

from .conftest import Served, ThreadServer, open_view, wait_view

NS, KEY = "users.alice.preferences.ui", "dashboard_color"
NAVY, YELLOW = "#1e3a8a", "#fde047"


def item(served: Served, key: str, branch: str, ns: str = NS) -> Any:
    response = httpx.get(served.url + "/v1/items", params={"namespace": ns, "key": key, "branch": branch})
    return response.json() if response.status_code == 200 else None


def test_ui_edit_an_item_on_a_fix_branch_then_review_and_merge(page: Any, served: Served) -> None:
    before = served.api("GET", "/v1/branches")["refs"]["main"]
    value = item(served, KEY, "main")["value"]
    open_view(page, f"state?ns={NS}&key={KEY}", "state")
    page.click("#edit-item")
    assert page.input_value("#edit-branch") != "main"  # a new branch by default, never main unasked
    assert page.input_value("#edit-new-branch") == f"fix/{KEY}"
    assert json.loads(page.input_value("#edit-value")) == value  # prefilled with the value shown
    assert page.input_value("#edit-author") == served.api("GET", "/v1/whoami")["author"]
    page.fill("#edit-value", "{not json")
    page.fill("#edit-author", "dana")
    page.click("#confirm-ok")
    page.wait_for_selector("#edit-problem .error")  # a mistake asks again, what was typed kept
    assert "not JSON" in page.inner_text("#edit-problem") and page.input_value("#edit-author") == "dana"
    page.fill("#edit-value", json.dumps({**value, "color": NAVY, "text": f"dashboard colour {NAVY}"}))
    page.fill("#edit-message", "restore alice's navy dashboard")
    page.click("#confirm-ok")
    wait_view(page, "state")
    done = page.wait_for_selector("#edit-done")
    assert done.get_attribute("data-branch") == f"fix/{KEY}"
    assert page.evaluate("() => location.hash").startswith(f"#/state?at=fix%2F{KEY}")  # the item on its branch
    assert NAVY in page.inner_text("main pre.json")
    commit = served.api("GET", f"/v1/commits/{done.get_attribute('data-made')}")
    assert (commit["author"], commit["message"]) == ("dana", "restore alice's navy dashboard")
    assert item(served, KEY, f"fix/{KEY}")["value"]["color"] == NAVY
    assert served.api("GET", "/v1/branches")["refs"]["main"] == before  # main untouched until the merge
    page.click("#review-fix")  # review from the merge base, then merge
    wait_view(page, "branches")
    compare = page.inner_text("#compare")
    assert f"main...fix/{KEY}" in compare and "1 item changed" in compare and KEY in compare
    page.click(f"#compare button[data-merge='fix/{KEY}']")
    page.click("#confirm-ok")
    page.wait_for_selector("#action-result [data-made]")
    assert item(served, KEY, "main")["value"]["color"] == NAVY


def test_ui_delete_an_item_on_an_existing_branch(page: Any, served: Served) -> None:
    served.api("PUT", "/v1/items", json={"namespace": ["users", "erin"], "key": "junk", "value": {"text": "bad"}})
    served.api("POST", "/v1/branches", json={"name": "cleanup", "at": "main"})
    open_view(page, "state?at=cleanup&ns=users.erin&key=junk", "state")
    page.click("#delete-item")
    assert page.input_value("#edit-branch") == "cleanup"  # the branch being viewed
    assert page.locator("#edit-value").count() == 0
    page.fill("#edit-author", "erin")
    page.fill("#edit-message", "drop the junk")
    page.click("#confirm-ok")
    wait_view(page, "state")
    done = page.wait_for_selector("#edit-done")
    assert "Deleted users.erin / junk on branch cleanup" in done.inner_text()
    commit = served.api("GET", f"/v1/commits/{done.get_attribute('data-made')}")
    assert (commit["author"], commit["message"]) == ("erin", "drop the junk")
    assert item(served, "junk", "cleanup", "users.erin") is None and item(served, "junk", "main", "users.erin")


def test_ui_edit_needs_the_write_scope(browser: Any, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    reader = KeyRing(keys).create("acme", ["read"])[1]
    made, writer = KeyRing(keys).create("acme", ["read", "write"])
    server = ThreadServer(ServerConfig(store=str(tmp_path / "store"), embedder="hashing", keys_file=keys))
    context = browser.new_context(viewport={"width": 1200, "height": 800}, base_url=server.url)
    try:
        httpx.put(server.url + "/v1/items", headers={"Authorization": f"Bearer {writer}"},
                  json={"namespace": ["a"], "key": "k", "value": {"text": "x"}}).raise_for_status()  # fmt: skip
        page = context.new_page()
        page.goto("/")
        page.wait_for_function("() => document.body.dataset.ready")
        for secret, writable in ((reader, False), (writer, True)):
            page.evaluate("k => sessionStorage.setItem('engram.key', k)", secret)
            page.evaluate("() => { delete document.body.dataset.ready; }")
            page.goto("/#/state?ns=a&key=k")
            page.reload()
            wait_view(page, "state")
            assert page.locator("#edit-item").count() == (1 if writable else 0)
            assert page.locator("#edit-read-only").count() == (0 if writable else 1)
        # the key loses its write scope while the page is open: the server refuses, the UI says why
        stored = json.loads(keys.read_text())
        for key in stored["keys"]:
            if key["id"] == made.id:
                key["scopes"] = ["read"]
        keys.write_text(json.dumps(stored))
        page.click("#edit-item")
        page.click("#confirm-ok")
        refused = page.wait_for_selector("#edit-refused")
        assert "may not write" in refused.inner_text() and "HTTP 403" in refused.inner_text()
        assert "write scope" in refused.inner_text()
    finally:
        context.close()
        server.stop()
