"""The UI's files on their own (no browser): every colour pair meets WCAG AA contrast in both themes, every
module and asset a page names exists, and nothing points outside the server (no CDN, no external URL)."""

from __future__ import annotations

import re

import pytest

from engram.ui import ASSETS

CSS = (ASSETS / "app.css").read_text()
#: (text, background) pairs the stylesheet uses together.
PAIRS = [("fg", "bg"), ("fg", "soft"), ("muted", "bg"), ("muted", "soft"), ("accent", "bg"), ("accent", "soft"),
         ("accent-fg", "accent"), ("add-fg", "add-bg"), ("del-fg", "del-bg"), ("mod-fg", "mod-bg")]  # fmt: skip


def _palette(block: str) -> dict[str, str]:
    return dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", block))


def _luminance(color: str) -> float:
    channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_ui_colours_meet_wcag_aa(theme: str) -> None:
    light = _palette(CSS.split("@media")[0])
    dark = {**light, **_palette(CSS.split("prefers-color-scheme: dark")[1].split("}\n}")[0])}
    palette = light if theme == "light" else dark
    low = {f"{fg} on {bg}": round(contrast(palette[fg], palette[bg]), 2) for fg, bg in PAIRS
           if contrast(palette[fg], palette[bg]) < 4.5}  # fmt: skip
    assert low == {}


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_ui_graph_lanes_stand_out_in_both_themes(theme: str) -> None:
    """The timeline graph's lane colours: 3:1 on the page and on a selected row (WCAG 1.4.11, graphics)."""
    light = _palette(CSS.split("@media")[0])
    dark = {**light, **_palette(CSS.split("prefers-color-scheme: dark")[1].split("}\n}")[0])}
    palette = light if theme == "light" else dark
    lanes = [name for name in palette if name.startswith("lane-")]
    assert len(lanes) == 4 and all(f".{name} {{ stroke: var(--{name});" in CSS for name in lanes)
    low = {f"{lane} on {bg}": round(contrast(palette[lane], palette[bg]), 2) for lane in lanes for bg in ("bg", "soft")
           if contrast(palette[lane], palette[bg]) < 3}  # fmt: skip
    assert low == {}


def test_ui_contrast_formula_matches_wcag() -> None:
    assert round(contrast("#000000", "#ffffff"), 1) == 21.0 and round(contrast("#777777", "#ffffff"), 2) == 4.48


def test_ui_every_named_file_exists_and_nothing_is_external() -> None:
    files = {
        p.relative_to(ASSETS).as_posix(): p.read_text()
        for p in ASSETS.rglob("*")
        if p.suffix in (".html", ".js", ".css")
    }
    named = set(re.findall(r'(?:src|href)="/ui/([^"]+)"', files["index.html"]))
    for name, text in files.items():
        if name.startswith("js/"):
            named |= {f"js/{m}" for m in re.findall(r'from "\./([\w.]+)"', text)}
        assert not re.search(r"(?:https?:)?//[\w-]+\.[\w.-]+/", text.replace("http://www.w3.org/2000/svg", "")), name
    assert named and named <= {p.relative_to(ASSETS).as_posix() for p in ASSETS.rglob("*")}
    assert {"js/app.js", "app.css", "favicon.svg"} <= named
