"""Imports point down (DESIGN.md §2): the library never imports a door, and no door imports another door's
private names (issue #9: thin doors)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "engram"
DOORS = ("engram.cli", "engram.server", "engram.mcp", "engram.integrations", "engram.compat")


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
    return found


def _door(module: str) -> str | None:
    return next((door for door in DOORS if module == door or module.startswith(door + ".")), None)


def test_the_library_never_imports_a_door() -> None:
    offenders = [
        f"{_module(path)} imports {target}"
        for path in SRC.rglob("*.py")
        if _door(_module(path)) is None
        for target, _ in _imports(path)
        if _door(target) is not None
    ]
    assert offenders == []


def test_no_door_imports_another_doors_private_names() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        own = _door(_module(path))
        if own is None:
            continue
        for target, names in _imports(path):
            other = _door(target)
            if other is None or other == own:
                continue
            private = [name for name in names if name.startswith("_")] or (
                [target] if any(part.startswith("_") for part in target.split(".")) else []
            )
            if private or own != "engram.cli":  # only the CLI may start another door, by its public API
                offenders.append(f"{_module(path)} imports {target}: {names or ''}")
    assert offenders == []
