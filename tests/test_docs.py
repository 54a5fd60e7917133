"""Every Python code block in the docs and README runs (blocks of one page share a namespace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_docs_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = BLOCK.findall(page.read_text())
    namespace: dict[str, object] = {}
    for block in blocks:
        if "class Test" in block:  # a contract-suite example: compile only
            compile(block, str(page), "exec")
            continue
        exec(compile(block, str(page), "exec"), namespace)


def test_demo_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from engram import demo

    demo.main([])
    out = capsys.readouterr().out
    assert "merge fix-font into main" in out and "fsck:" in out and "ok" in out
