"""Every code block in the README and docs runs as written (tests/docblocks.py says how each kind runs).

A page is one reader in one fresh folder: the venv's ``bin`` first on PATH, no ``ENGRAM_*`` variables but
``ENGRAM_VECTOR_CACHE`` (in the folder), ``HOME`` in the folder, the offline MiniLM as the default embedder.
What the docs show as a placeholder is replaced by a real thing of the test run, per PLACEHOLDERS below, and
nothing else in a block is changed. A block that cannot run carries ``<!-- docs-test: skip (why) -->``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from docblocks import DocsError, PageRun, parse, server_kind, substituter
from services import require_redis

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "adr").glob("*.md"))]
BIN = Path(sys.executable).parent

#: What the docs show -> what the test runs, and why. Nothing else in a block is changed.
PLACEHOLDERS: list[tuple[str, str, str]] = [
    ("make run", "engram serve", "make run's recipe (test_readme_make_run_serves), run in the page's folder"),
    ("make test", ":", "make test runs this test suite: it would recurse"),
    ("127.0.0.1:8000", "127.0.0.1:{http_port}", "a free port: another test run may hold 8000"),
    ("--port 8000", "--port {http_port}", "the same free port"),
    ("127.0.0.1:8765", "127.0.0.1:{mcp_port}", "a free port: another test run may hold 8765"),
    ("--port 8765", "--port {mcp_port}", "the same free port"),
    ("--host 0.0.0.0", "--host 127.0.0.1", "test servers listen on loopback only"),
    ("postgresql://engram@db.internal/agents", "{postgres}", "the test run's PostgreSQL with pgvector"),
    ("redis://cache:6379/0", "{redis}", "the test run's Redis"),
    ("/path/to/engram/.engram", "{folder}/.engram", "the store `make run` serves: here the page folder's"),
    ("/path/to/engram", "{checkout}", "the checkout `make run` installed into"),
    ("/Users/you", "{home}", "the page's HOME"),
    ("/tmp/prod", "{folder}/prod", "a folder of the page's own: test runs must not share (or delete) /tmp/prod"),
    ("python examples/", "python {checkout}/examples/", "the examples ship in the checkout, where a reader runs them"),
]

#: Extras a page's blocks need, recognised by what the blocks say; the page must name each (`engram[extra]`).
EXTRAS: dict[str, re.Pattern[str]] = {
    "server": re.compile(r"\bengram\b.*\bserve\b|\bmake run\b|engram\.server|fastapi"),
    "mcp": re.compile(r"engram\.mcp|^\s*(from|import) mcp\b|\bmcpServers\b|\bengram\b.*\bmcp\b", re.M),
    "langgraph": re.compile(r"^\s*(from|import) (langgraph|engram\.integrations\.langgraph)\b", re.M),
    "postgres": re.compile(r"postgresql://engram@db\.internal|\bengram\b.*\bdb migrate\b"),
    "redis": re.compile(r"engram\.backends\.redis|\bredis=|--redis\b|redis://"),
}
NAMED_EXTRAS = re.compile(r"engram\[([\w,\s]+)\]")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def reader_env(folder: Path) -> dict[str, str]:
    """A reader's environment: the venv first on PATH, no ENGRAM_* settings but a vector cache in the folder."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("ENGRAM_")}
    home = folder / "home"
    home.mkdir(exist_ok=True)
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        HOME=str(home),
        VIRTUAL_ENV=str(BIN.parent),
        ENGRAM_VECTOR_CACHE=str(folder / "vectors.db"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def page_run(folder: Path, request: pytest.FixtureRequest | None = None) -> PageRun:
    ports = {"serve": _free_port(), "mcp": _free_port()}
    values: dict[str, Callable[[], str]] = {
        "http_port": lambda: str(ports["serve"]),
        "mcp_port": lambda: str(ports["mcp"]),
        "postgres": lambda: _postgres(request),
        "redis": require_redis,
        "checkout": lambda: str(ROOT),
        "folder": lambda: str(folder),
        "home": lambda: str(folder / "home"),
    }
    substitute = substituter([(text, real) for text, real, _ in PLACEHOLDERS], values)
    return PageRun(folder, reader_env(folder), substitute, ports)


def _postgres(request: pytest.FixtureRequest | None) -> str:
    assert request is not None, "a page that needs PostgreSQL"
    url: str = request.getfixturevalue("pgvector_url")
    return url


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_page_runs_as_written(page: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    run = page_run(tmp_path, request)
    run.run(parse(page))
    for server in run.servers:
        assert server.process.returncode is not None, f"{server.command} still running after the page"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_parser_finds_every_block(page: Path) -> None:
    fences = [line for line in page.read_text().splitlines() if line.lstrip().startswith("```")]
    assert len(parse(page)) * 2 == len(fences)


def test_docs_placeholders_are_all_used() -> None:
    code = "\n".join(block.text for page in PAGES for block in parse(page))
    assert [text for text, _, _ in PLACEHOLDERS if text not in code] == []


def test_docs_every_skip_has_a_reason() -> None:
    skipped = [block for page in PAGES for block in parse(page) if block.directive.startswith("skip")]
    assert skipped, "no page skips a block: remove this test's expectation of skips"
    for block in skipped:
        assert block.skip_reason and len(block.skip_reason) > 10, f"{block.where}: say why it cannot run"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_page_names_the_extras_its_code_needs(page: Path) -> None:
    text = page.read_text()
    code = "\n".join(block.text for block in parse(page) if block.skip_reason is None)
    named = {extra.strip() for group in NAMED_EXTRAS.findall(text) for extra in group.split(",")}
    needed = {extra for extra, pattern in EXTRAS.items() if pattern.search(code)}
    assert needed <= named, f"{page.name} needs {sorted(needed - named)}: say `pip install 'engram[...]'`"


def test_readme_starts_with_the_two_setup_commands() -> None:
    first = parse(ROOT / "README.md")[0]
    commands = [line.split("#")[0].strip() for line in first.text.splitlines()]
    assert first.lang == "sh" and commands == ["make run", "make test"]


def test_readme_make_run_serves() -> None:
    """`make run` installs, then runs `engram serve` (which the README's page run starts in its place)."""
    dry_run = ["make", "--no-print-directory", "-n", "run"]  # under `make test` make would add directory lines
    recipe = subprocess.run(dry_run, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert recipe.strip().splitlines()[-1] == ".venv/bin/engram serve"
    assert (
        ".[server,mcp]" in (ROOT / "Makefile").read_text() and "engram[server,mcp]" in (ROOT / "README.md").read_text()
    )


def test_demo_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from engram import demo

    demo.main([])
    out = capsys.readouterr().out
    assert "merge fix-font into main" in out and "fsck:" in out and "ok" in out


# ---------------------------------------------------------------- the harness fails when a block fails


def _run_markdown(tmp_path: Path, markdown: str) -> PageRun:
    page = tmp_path / "page.md"
    page.write_text(markdown)
    run = page_run(tmp_path)
    run.run(parse(page))
    return run


@pytest.mark.parametrize(
    ("markdown", "message"),
    [
        ("```python\nx = 1\nassert x == 2\n```\n", r"page.md:1 \(python\): line 3: AssertionError"),
        ("```python\nx = 1\n```\n\n```python\nprint(y)\n```\n", "NameError"),
        ("```sh\nfalse\necho never\n```\n", "bash exited 1"),
        ("```sh\nengram get users/alice prefs --at v1\n```\n", "bash exited"),
        ("```console\n$ true\noutput\n$ exit 3\n```\n", "bash exited 3"),
        ('```json\n{"a": 1,}\n```\n', "does not parse"),
        ("```toml\na = \n```\n", "does not parse"),
        ("```yaml\na: [1\n```\n", "does not parse"),
        ("```text\nplain\n```\n", "not a block the test can run"),
        ("```\nplain\n```\n", "not a block the test can run"),
        ('```json\n{"mcpServers": {"e": {"command": "/no/such/engram", "args": ["mcp"]}}}\n```\n', "does not exist"),
        ('```json\n{"mcpServers": {"e": {"command": "true"}}}\n```\n', "did not serve its tools"),
        ("```sh\nengram serve --no-such-option\n```\n", "exited"),
        ("<!-- docs-test: pytest -->\n```python\ndef test_x():\n    assert 1 == 2\n```\n", "pytest exited 1"),
        ('```sh\necho \'{"a": 1}\'\n```\n<!-- docs-test: output -->\n```json\n{"a": 2}\n```\n', "printed"),
        ("```sh\necho one; echo two\n```\n<!-- docs-test: output -->\n```text\none\n```\n", "printed"),
        ("<!-- docs-test: output -->\n```text\none\n```\n", "must follow a shell block"),
    ],
)
def test_harness_fails_a_failing_block(tmp_path: Path, markdown: str, message: str) -> None:
    with pytest.raises(DocsError, match=message):
        _run_markdown(tmp_path, markdown)


@pytest.mark.parametrize(
    "markdown",
    [
        "<!-- docs-test: skip -->\n```sh\nfalse\n```\n",
        "<!-- docs-test: skip () -->\n```sh\nfalse\n```\n",
        "<!-- docs-test: maybe -->\n```sh\nfalse\n```\n",
        "<!-- docs-test: skip (why) -->\n\nsome prose\n\n```sh\nfalse\n```\n",
        "```sh\nfalse\n",
    ],
)
def test_harness_refuses_bad_annotations(tmp_path: Path, markdown: str) -> None:
    with pytest.raises(DocsError):
        parse(tmp_path / "page.md", markdown)


def test_harness_runs_blocks_as_one_reader(tmp_path: Path) -> None:
    run = _run_markdown(
        tmp_path,
        """
<!-- docs-test: skip (shows a failure) -->
```sh
false
```

```sh
export GREETING=hello && mkdir -p work && cd work
engram init
engram put users/alice prefs '{"theme": "dark"}'
```

```bash
test "$GREETING" = hello && test "$(basename "$PWD")" = work && test -z "${ENGRAM_STORE:-}"
test "$ENGRAM_VECTOR_CACHE" = "$(dirname "$PWD")/vectors.db" && test "$(command -v engram)" = "$VIRTUAL_ENV/bin/engram"
engram get users/alice prefs | grep -q dark
```

```python
import os
cwd = os.getcwd()
```

```python
assert cwd.endswith("work")
```

<!-- docs-test: pytest -->
```python
def test_passes():
    assert True
```

```sh
echo '{"a": [1, 2]}'
```

<!-- docs-test: output -->
```json
{"a":  [1, 2]}
```

```sh
printf 'one  \ntwo\n'
```

<!-- docs-test: output -->
```text
one
two
```
""",
    )
    assert [block.lang for block in run.ran] == ["sh", "bash", "python", "python", "python", "sh", "json", "sh", "text"]


def test_harness_serves_a_server_line_until_the_page_ends(tmp_path: Path) -> None:
    run = _run_markdown(
        tmp_path,
        """
```sh
engram --embedder hashing serve --port 8000   # replaced by a free port
curl -fsS http://127.0.0.1:8000/healthz
```
""",
    )
    (server,) = run.servers
    assert server.url == f"http://127.0.0.1:{run.ports['serve']}" and server.process.returncode is not None


def test_harness_substitutes_placeholders_only() -> None:
    substitute = substituter(
        [("postgresql://engram@db.internal/agents", "{pg}"), ("--port 8000", "--port {p}")],
        {"pg": lambda: "postgresql://u@/db?host=/tmp/s", "p": lambda: "1234"},
    )
    doc = 'engram --store "postgresql://engram@db.internal/agents?repo=acme" serve --port 8000 # --port 80001'
    assert (
        substitute(doc) == 'engram --store "postgresql://u@/db?host=/tmp/s&repo=acme" serve --port 1234 # --port 80001'
    )
    assert substitute("engram serve") == "engram serve"


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("engram serve --host 0.0.0.0 --port 8000   # or: engram --store /srv/engram serve", "serve"),
        ("engram --store ~/.engram mcp --transport http --port 8765", "mcp"),
        ("/x/.venv/bin/engram --embedder hashing serve", "serve"),
        ("engram mcp", None),
        ("engram put users serve '{}'", None),
        ("engram keys create --tenant demo --scope read", None),
        ("curl -fsS http://127.0.0.1:8000/healthz", None),
    ],
)
def test_harness_knows_server_lines(line: str, kind: str | None) -> None:
    assert server_kind(line) == kind


def test_search_md_names_the_saved_index_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import engram

    (shown,) = re.findall(r"`(\.engram/engram\.db-index/[^`]+)`", (ROOT / "docs" / "search.md").read_text())
    monkeypatch.chdir(tmp_path)
    mem = engram.open(embedder="hashing")
    mem.put(("docs",), "a", {"text": "hello"})
    mem.search(("docs",), "hello")
    mem.close()
    (saved,) = (tmp_path / ".engram" / "engram.db-index").iterdir()
    assert shown == ".engram/engram.db-index/<hash>.idx" and re.fullmatch(r"[0-9a-f]{20}\.idx", saved.name)
