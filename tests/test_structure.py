"""The house's structure (DESIGN.md §2), checked on every run: no import circle (between packages or inside one),
no hidden import (inside a function, at a module's bottom, or through ``__import__``/``import_module``) outside the
allow-list below, and no import pointing up the layers."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "engram"

#: DESIGN.md §2, bottom to top: a module may import its own layer and the layers below, never one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("engram.errors", "engram.hashing", "engram.codec", "engram.clock", "engram._refs", "engram.redaction",
     "engram.logs", "engram.observe", "engram.breakers", "engram.runtime", "engram._filter_cases",
     "engram._names"),  # base
    ("engram.backends", "engram.testing"),  # storage (and its contract suite)
    ("engram.tree",),
    ("engram.objects", "engram.maintenance", "engram.repo"),  # versioning
    ("engram.index", "engram.embed"),  # indexes
    ("engram.store",),  # memory API
    ("engram.channels", "engram.writer", "engram.ops", "engram.demo"),  # services
    ("engram.cli", "engram.server", "engram.mcp", "engram.integrations", "engram.compat", "engram.ui",
     "engram"),  # interfaces (and the package's facade)
)  # fmt: skip

#: Imports that may stay hidden, each with its reason: optional dependencies loaded only when a feature is used.
ALLOWED_HIDDEN: dict[tuple[str, str], str] = {
    ("engram.store.connect", "engram.store.pgsearch"): "the PostgreSQL search engine's modules (~30 ms of start-up) "
    "load only for PostgreSQL stores",
    ("engram.store.connect", "engram.backends.redis"): "redis-py (the redis extra) only with a Redis cache",
    ("engram.embed.onnxrun", "import_module"): "onnxruntime, untyped, loaded with the model on first use",
    ("engram.embed.mpnetgraph", "import_module"): "onnx (the mpnet extra), untyped, loaded only to export the model "
    "once",
    ("engram.cli", "import_module"): "each command's module loads when it runs: `engram --help` starts fast",
}


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(path): path for path in SRC.rglob("*.py")}


def _resolve(base: str, names: list[str]) -> list[str]:
    """The engram modules ``from base import names`` reaches: a name that is a submodule is that module."""
    found = [f"{base}.{name}" for name in names if f"{base}.{name}" in MODULES]
    return found if found and len(found) == len(names) else [base, *found]


def _imports(tree: ast.AST, module: str) -> Iterator[tuple[ast.stmt, list[str]]]:
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield node, [alias.name for alias in node.names if alias.name.startswith("engram")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            if base == "engram" or base.startswith("engram."):
                yield node, _resolve(base, [alias.name for alias in node.names])


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = graph.setdefault(module, set())
        for _, found in _imports(ast.parse(path.read_text(encoding="utf-8")), module):
            targets.update(t for t in found if t in MODULES and t != module)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle() -> None:
    graph = _graph()
    # a package's __init__ that re-exports its modules is the package's door, not a circle through it
    for module in graph:
        graph[module] = {
            t for t in graph[module] if not (MODULES[t].name == "__init__.py" and module.startswith(t + "."))
        }
    assert _circles(graph) == []


def _hidden(path: Path, module: str) -> Iterator[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = set(map(id, tree.body))
    seen_definition = False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            seen_definition = True
        elif isinstance(node, ast.Import | ast.ImportFrom) and seen_definition:
            yield f"{module}:{node.lineno} imports at the module's bottom"
    for node, targets in _imports(tree, module):
        if id(node) in top or _guarded(tree, node):
            continue
        for target in targets:
            if (module, target) not in ALLOWED_HIDDEN:
                yield f"{module}:{node.lineno} imports {target} inside a function or class"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("__import__", "import_module") and (module, name) not in ALLOWED_HIDDEN:
                yield f"{module}:{node.lineno} imports through {name}()"


def _guarded(tree: ast.Module, target: ast.stmt) -> bool:
    """Whether an import is in a module-level ``if TYPE_CHECKING:`` block (a type-only import)."""
    return any(
        isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) and target in list(ast.walk(node))
        for node in tree.body
    )


def test_no_hidden_import() -> None:
    offenders = [line for module, path in sorted(MODULES.items()) for line in _hidden(path, module)]
    assert offenders == []


def _layer(module: str) -> int:
    best = -1, -1  # (length of the matching prefix, layer)
    for rank, names in enumerate(LAYERS):
        for name in names:
            inside = module == name or (name != "engram" and module.startswith(name + "."))  # "engram": the facade
            if inside and len(name) > best[0]:
                best = len(name), rank
    assert best[1] >= 0, f"{module} is in no layer of DESIGN.md §2: add it to LAYERS"
    return best[1]


def test_imports_point_down() -> None:
    graph = _graph()
    offenders = [f"{module} imports {target}" for module, targets in sorted(graph.items())
                 for target in sorted(targets) if _layer(target) > _layer(module)]  # fmt: skip
    assert offenders == []


def test_no_section_banner_or_issue_tag_in_source() -> None:
    """History belongs in the changelog and git; a module's structure shows in its definitions, not in banners."""
    offenders = []
    for module, path in sorted(MODULES.items()):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.match(r"\s*# ?-{4,}", line) or re.search(r"issue #\d+", line):
                offenders.append(f"{module}:{number}: {line.strip()}")
    assert offenders == []
