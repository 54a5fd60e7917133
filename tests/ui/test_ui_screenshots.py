"""docs/ui.md's screenshots come from a script (``make screenshots``): it draws every view at desktop and
phone sizes, here into a temporary folder."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from .conftest import CHROMIUM
from .screenshots import SIZES, take


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_ui_screenshots_script_draws_every_view_at_both_sizes(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed")
    files = take(tmp_path)
    names = {path.name for path in files}
    assert len(files) == 16 and len(names) == 16
    for suffix, size in SIZES.items():
        for view in ("timeline", "commit", "state", "diff", "blame", "search", "branches", "channels"):
            path = tmp_path / f"{view}{suffix}.png"
            assert _png_size(path) == size, path
            assert path.stat().st_size > 5000, path  # a drawn page, not a blank one
    docs = (Path(__file__).resolve().parents[2] / "docs" / "ui.md").read_text(encoding="utf-8")
    for name in names:
        assert f"(ui/{name})" in docs, f"docs/ui.md does not show {name}"
