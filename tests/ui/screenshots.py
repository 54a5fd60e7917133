"""The screenshots in docs/ui.md, made by a script: ``make screenshots`` (``PYTHONPATH=tests python -m
ui.screenshots [folder]``) writes ``<view>.png`` at 1400x900 and ``<view>-narrow.png`` at 390x844 (a phone) for
every view, on the production-debugging story after the fix was merged (a writer run waiting for review, a tag,
a channel). ``tests/ui/test_ui_screenshots.py`` runs the same script into a temporary folder, so CI proves it
still draws every picture."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engram.server import ServerConfig

from .conftest import CHROMIUM, ROOT, Served, ThreadServer, add_extras, wait_view, write_story

NS, KEY = "users.alice.preferences.ui", "dashboard_color"
AT = "main%40%7B3%20days%20ago%7D"  # main@{3 days ago}
SIZES = {"": (1400, 900), "-narrow": (390, 844)}


def views(story: dict[str, Any], review: list[str]) -> list[tuple[str, str, str]]:
    """(picture name, URL fragment, view name) of each picture."""
    compare = review[0] if review else "fix"
    return [
        ("timeline", "timeline", "timeline"),
        ("commit", f"commit?id={story['truth']['bad']}", "commit"),
        ("state", f"state?at={AT}&ns={NS}&key={KEY}", "state"),
        ("diff", f"diff?old={AT}&new=main", "diff"),
        ("blame", f"blame?ns={NS}&key={KEY}", "blame"),
        ("search", f"search?at={AT}&q=dashboard%20colour&ns=users.alice&compare=1", "search"),
        ("branches", f"branches?compare={compare}", "branches"),
        ("channels", "channels?agent=oncall&channel=incidents", "channels"),
    ]


def fix_and_merge(served: Served) -> None:
    """What the scenario does in the UI, done through the API: a fix branch reverts the bad write, merged."""
    served.api("POST", "/v1/branches", json={"name": "fix", "at": "main"})
    undo = {"ref": served.story["truth"]["bad"], "branch": "fix", "author": "dev:sam", "message": "undo the bad colour"}
    served.api("POST", "/v1/revert", json=undo)
    served.api("POST", "/v1/merge", json={"source": "fix", "into": "main", "author": "dev:sam"})


def take(out: Path, *, progress: Callable[[str], None] = lambda _: None) -> list[Path]:
    """Write every picture into ``out``; returns the files written."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="engram-shots-") as tmp:
        store = str(Path(tmp) / "store")
        story = write_story(store)
        server = ThreadServer(ServerConfig(store=store, embedder="hashing", writer_policy="review"))
        try:
            served = Served(server.url, store, story)
            review = add_extras(served)["review"]
            fix_and_merge(served)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                try:
                    for suffix, (width, height) in SIZES.items():
                        context = browser.new_context(
                            viewport={"width": width, "height": height}, base_url=served.url, timezone_id="UTC"
                        )
                        page = context.new_page()
                        for name, fragment, view in views(story, review):
                            page.goto("/#/" + fragment)
                            wait_view(page, view)
                            page.evaluate("document.getElementById('toast')?.replaceChildren()")
                            path = out / f"{name}{suffix}.png"
                            page.screenshot(path=str(path))
                            written.append(path)
                            progress(str(path))
                        context.close()
                finally:
                    browser.close()
        finally:
            server.stop()
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else ROOT / "docs" / "ui"
    files = take(out, progress=lambda path: print("wrote", path, flush=True))
    print(f"{len(files)} screenshots in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
