"""The web UI's harness: the production-debugging story on a SQLite store, served by uvicorn in a thread
(what ``engram serve`` runs), and one headless Debian Chromium for the module (never ``playwright install``)."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import uvicorn

import engram
from engram import clock
from engram.server import ServerConfig, create_app
from engram.server.framing import uvicorn_options

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "production_debugging_ui", ROOT / "examples" / "production_debugging.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _example()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Served:
    """A running server on a story store: its URL and the story's facts (for assertions only)."""

    url: str
    store: str
    story: dict[str, Any]

    def api(self, method: str, path: str, **kw: Any) -> Any:
        response = httpx.request(method, self.url + path, timeout=30, **kw)
        assert response.status_code < 300, response.text
        return None if response.status_code == 204 else response.json()


def write_story(path: str) -> dict[str, Any]:
    """The five days of the production-debugging example (no investigation, no fix: the UI does those)."""
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=5)
    with clock.simulated(start) as sim, engram.open(path, embedder="hashing", author="agent:ops") as mem:
        return dict(example.write_story(mem, sim, lambda *_: None))


class ThreadServer:
    """uvicorn serving ``create_app`` (as ``engram serve`` does) on a free loopback port, in a thread."""

    def __init__(self, config: ServerConfig) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        settings = uvicorn.Config(
            create_app(config), host="127.0.0.1", port=self.port, log_level="warning", **uvicorn_options()
        )
        self.server = uvicorn.Server(settings)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise AssertionError("the UI test server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    store = str(tmp_path_factory.mktemp("ui") / "store")
    story = write_story(store)
    server = ThreadServer(ServerConfig(store=store, embedder="hashing", writer_policy="review"))
    try:
        yield Served(server.url, store, story)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 800}, base_url=served.url, timezone_id="UTC")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console", lambda msg: errors.append(msg.text) if msg.type == "error" and not _client_error(msg.text) else None
    )
    try:
        yield page
        assert errors == [], errors  # no script error and no server error, on any view
    finally:
        context.close()


def _client_error(text: str) -> bool:
    """The browser logs every 4xx answer; the UI shows them (a refused merge is a 409 the UI explains)."""
    return "Failed to load resource" in text and " status of 4" in text


def shot(page: Any, name: str) -> None:
    """The view draws a picture worth showing (``make screenshots`` writes docs/ui/<name>.png, not the tests:
    a test run leaves the repository as it was)."""
    assert len(page.screenshot()) > 5000, name


def add_extras(served: Served) -> dict[str, Any]:
    """A writer run waiting for review, a tag, and a channel with a thread and feedback."""
    served.api("POST", "/v1/conversations", json={"conversation_id": "chat-7", "target": ["users", "carol"]})
    for i, (role, text) in enumerate([("user", "I prefer dark mode. I live in Lisbon."), ("assistant", "Noted!")] * 2):
        served.api("POST", "/v1/conversations/chat-7/turns", json={"role": role, "text": text, "message_id": f"m{i}"})
    served.api("GET", "/v1/writer/users.carol/status", params={"wait": 30})  # the writer runs in the background
    review = [b for b in served.api("GET", "/v1/branches")["refs"] if b.startswith("writer/")]
    served.api("POST", "/v1/tags", json={"name": "incident-start", "at": served.story["truth"]["bad"]})
    for agent in ("oncall", "ui-monitor"):
        served.api("POST", "/v1/agents", json={"id": agent})
    ops, monitor = {"X-Engram-Agent": "oncall"}, {"X-Engram-Agent": "ui-monitor"}
    served.api("POST", "/v1/channels", json={"name": "incidents", "scope": "global"}, headers=ops)
    first = served.api(
        "POST",
        "/v1/channels/incidents/messages",
        headers=ops,
        json={"content": "alice's dashboard is unreadable since about 2 days ago", "confidence": 0.9},
    )
    served.api("POST", "/v1/channels/incidents/join", headers=monitor)
    served.api(
        "POST",
        "/v1/channels/incidents/messages",
        headers=monitor,
        json={"content": "contrast 1.3:1 on #fde047: fails WCAG AA", "reply_to": first["id"], "confidence": 0.7},
    )
    served.api(
        "POST", f"/v1/messages/{first['id'].replace('#', '%23')}/feedback", headers=monitor, json={"worked": True}
    )
    return {"review": review}


def open_view(page: Any, fragment: str, view: str) -> None:
    """Go to ``/#/<fragment>`` and wait until the view has rendered."""
    page.goto("/#/" + fragment)
    wait_view(page, view)


def wait_view(page: Any, view: str) -> None:
    page.wait_for_function(
        "v => document.body.dataset.ready === v && !document.getElementById('view').hasAttribute('aria-busy')", arg=view
    )


def click_and_wait(page: Any, selector: str, view: str) -> None:
    """Click ``selector`` and wait for ``view`` to render (a click from a view to the same view renders a moment
    later: until then the old page is still "ready")."""
    page.evaluate("() => { delete document.body.dataset.ready; }")
    page.click(selector)
    wait_view(page, view)


def filter_timeline(page: Any, namespace: str, key: str) -> None:
    """Open the timeline filtered to one item, as a user types it into the filter form."""
    open_view(page, "timeline", "timeline")
    page.fill("input[name=ns]", namespace)
    page.fill("input[name=key]", key)
    page.click("form[aria-label='Filter the timeline'] button[type=submit]")
    page.wait_for_function("k => location.hash.includes('key=' + encodeURIComponent(k))", arg=key)
    wait_view(page, "timeline")
