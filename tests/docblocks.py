"""Run the fenced code blocks of a Markdown page as a reader would, top to bottom (tests/test_docs.py).

One page is one reader in one fresh folder:

- ``python`` blocks run in this process, in the page's folder, sharing one namespace;
- ``sh``/``bash``/``console`` blocks run with ``bash`` (``set -e``) in the page's folder; exported variables and
  ``cd`` carry over to the page's later blocks (``console`` blocks run their ``$ `` lines only);
- a line that starts a server (``engram serve``, ``engram mcp --transport http``) runs in the background until
  the page ends: the page goes on once the URL it prints answers (a server named without ``--port`` gets the
  page's free port for its kind; a second server on the same port replaces the first, as Ctrl+C would);
- ``json``/``toml``/``yaml`` blocks must parse; an MCP client configuration (``mcpServers``) must name a command
  that exists, which then serves the MCP tools over stdio, or a URL a server of this page answers at;
- any other block (``text``, no language) must carry ``<!-- docs-test: skip (why) -->`` right before it.

Two more directives: ``<!-- docs-test: output -->`` says a block is what the shell block before it printed on
stdout (compared as data for ``json``, else line by line); ``<!-- docs-test: pytest -->`` runs a Python block as
a test file with pytest.

The caller gives the placeholder substitutions (``docs text -> replacement``) applied to every block first.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")
ANNOTATION = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
SKIP = re.compile(r"^skip\s*\((.*)\)$")
SHELLS = {"sh", "bash", "console"}
DATA = {"json", "toml", "yaml"}
RUNNABLE = SHELLS | DATA | {"python"}
#: Global options of the engram command that take a value (to find the command's verb).
VALUE_OPTIONS = {"--store", "--branch", "--embedder", "--redis", "--vector-cache"}
URL = re.compile(r"https?://[\w.\-]+:\d+(?:/[\w/.-]*)?")
TIMEOUT = 120.0  # seconds for one shell block, one server start, one MCP check


class DocsError(AssertionError):
    """A block failed, or a page breaks the rules above; the message names the page and line."""


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts, its language, its text and its ``docs-test`` directive."""

    page: Path
    line: int
    lang: str
    text: str
    directive: str = ""

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line} ({self.lang or 'no language'})"

    @property
    def skip_reason(self) -> str | None:
        found = SKIP.match(self.directive)
        return found.group(1).strip() if found else None


def parse(page: Path, markdown: str | None = None) -> list[Block]:
    """The fenced blocks of a page, each with the directive of the comment right before it."""
    lines = (page.read_text() if markdown is None else markdown).splitlines()
    blocks: list[Block] = []
    directive, directive_line = "", 0
    i = 0
    while i < len(lines):
        annotation = ANNOTATION.match(lines[i])
        opening = FENCE.match(lines[i])
        if annotation:
            directive, directive_line = annotation.group(1), i + 1
            _check_directive(page, directive_line, directive)
        elif opening:
            indent, lang = opening.groups()
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            if end is None:
                raise DocsError(f"{page.name}:{i + 1}: a code block is never closed")
            body = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end]) + "\n"
            blocks.append(Block(page, i + 1, lang.lower(), body, directive))
            directive, i = "", end
        elif directive and lines[i].strip():
            raise DocsError(f"{page.name}:{directive_line}: a docs-test comment must come right before a code block")
        i += 1
    if directive:
        raise DocsError(f"{page.name}:{directive_line}: a docs-test comment must come right before a code block")
    return blocks


def _check_directive(page: Path, line: int, directive: str) -> None:
    skip = SKIP.match(directive)
    if skip and not skip.group(1).strip():
        raise DocsError(f"{page.name}:{line}: a skipped block needs a reason: <!-- docs-test: skip (why) -->")
    if not skip and directive not in {"pytest", "output"}:
        raise DocsError(f"{page.name}:{line}: unknown docs-test directive {directive!r} (skip (why), output, pytest)")


# ---------------------------------------------------------------- servers


@dataclass
class Server:
    """A server a block started, running in the background until the page ends."""

    command: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    url: str = ""

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, kind: str) -> None:
        """Wait until the server printed its URL and that URL answers."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise DocsError(f"`{self.command}` exited ({self.process.returncode}):\n{self.output()}")
            found = URL.search(self.output())
            if found:
                self.url = found.group(0)
                if httpx.URL(self.url).port != self.port:
                    raise DocsError(f"`{self.command}` says it serves {self.url}, not on port {self.port}")
                probe = self.url.rstrip("/") + "/healthz" if kind == "serve" else self.url
                try:
                    answer = httpx.get(probe, timeout=2)
                except httpx.TransportError:
                    pass
                else:
                    if kind != "serve" or answer.status_code == 200:
                        return
            time.sleep(0.1)
        raise DocsError(f"`{self.command}` did not answer within {TIMEOUT:.0f} s:\n{self.output()}")

    def stop(self) -> None:
        """Ctrl+C, as a reader would; killed if it does not stop."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def server_kind(line: str) -> str | None:
    """``serve`` or ``mcp`` when a shell line starts an engram server that keeps running, else None."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    if not words or Path(words[0]).name != "engram":
        return None
    rest = iter(words[1:])
    for word in rest:
        if word in VALUE_OPTIONS:
            next(rest, None)
        elif not word.startswith("-"):
            if word == "serve":
                return "serve"
            if word == "mcp" and "--transport" in words and words[words.index("--transport") + 1 :][:1] == ["http"]:
                return "mcp"
            return None
    return None


def _port_of(line: str) -> int | None:
    found = re.search(r"--port[ =](\d+)", line)
    return int(found.group(1)) if found else None


# ---------------------------------------------------------------- running a page


@dataclass
class PageRun:
    """One reader working through one page in a fresh folder."""

    folder: Path
    env: dict[str, str]
    substitute: Callable[[str], str]
    ports: Mapping[str, int]  # the page's free port per server kind
    namespace: dict[str, Any] = field(default_factory=dict)
    servers: list[Server] = field(default_factory=list)
    ran: list[Block] = field(default_factory=list)
    printed: str | None = None  # what the last shell block printed on stdout

    def __post_init__(self) -> None:
        self.cwd = self.folder

    def run(self, blocks: list[Block]) -> None:
        """Run every block in order, then stop the servers they started."""
        try:
            for block in blocks:
                self.run_block(block)
        finally:
            for server in self.servers:
                server.stop()

    def run_block(self, block: Block) -> None:
        if block.skip_reason is not None:
            return
        if block.directive == "output":
            self._output(block)
            self.ran.append(block)
            return
        if block.lang not in RUNNABLE:
            raise DocsError(
                f"{block.where}: not a block the test can run; run it, or mark it with "
                "<!-- docs-test: skip (why) --> if it is plain output"
            )
        text = self.substitute(block.text)
        try:
            if block.directive == "pytest":
                self._pytest(block, text)
            elif block.lang == "python":
                self._python(block, text)
            elif block.lang in SHELLS:
                self._shell(block, _console_commands(text) if block.lang == "console" else text)
            else:
                self._data(block, text)
        except DocsError as exc:
            raise DocsError(f"{block.where}: {exc}\n--- the block as run ---\n{text}") from None
        self.ran.append(block)

    # python

    def _python(self, block: Block, text: str) -> None:
        before = Path.cwd()
        os.chdir(self.cwd)
        name = f"<{block.where}>"
        try:
            exec(compile(text, name, "exec"), self.namespace)
        except Exception as exc:
            lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == name]
            at = f"line {block.line + lines[-1]}: " if lines and lines[-1] else ""
            raise DocsError(f"{at}{type(exc).__name__}: {exc}") from exc
        finally:
            os.chdir(before)

    def _pytest(self, block: Block, text: str) -> None:
        path = self.cwd / f"test_docs_block_{block.line}.py"
        path.write_text(text)
        env = {**self.env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # the block needs no plugin; loading them is slow
        # A temp folder of its own: a nested run in the shared /tmp/pytest-of-<user> would number a new folder there
        # and delete all but the newest three, the running suite's (and its private PostgreSQL's socket) included.
        basetemp = self.cwd / f".pytest-tmp-{block.line}"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"]
        done = subprocess.run(
            [*command, f"--basetemp={basetemp}", path.name],
            cwd=self.cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        if done.returncode != 0:
            raise DocsError(f"pytest exited {done.returncode}:\n{done.stdout}{done.stderr}")

    def _output(self, block: Block) -> None:
        if self.printed is None:
            raise DocsError(f"{block.where}: an output block must follow a shell block")
        shown, printed = block.text, self.printed
        if block.lang == "json":
            try:
                same = json.loads(shown) == json.loads(printed)
            except ValueError:
                same = False
        else:
            same = [line.rstrip() for line in shown.strip("\n").splitlines()] == [
                line.rstrip() for line in printed.strip("\n").splitlines()
            ]
        if not same:
            raise DocsError(f"{block.where}: the shell block before it printed\n{printed}\nnot\n{shown}")

    # shell

    def _shell(self, block: Block, text: str) -> None:
        self.printed = ""
        chunk: list[str] = []
        for line in _logical_lines(text):
            kind = server_kind(line)
            if kind is None:
                chunk.append(line)
                continue
            self._bash("\n".join(chunk))
            chunk = []
            self._start(kind, line)
        self._bash("\n".join(chunk))

    def _bash(self, script: str) -> None:
        if not script.strip():
            return
        env_out, cwd_out = self.folder / ".docs-test-env", self.folder / ".docs-test-cwd"
        wrapped = (
            f"set -e\nset -x\n{script}\nset +x\n"
            f"env -0 > {shlex.quote(str(env_out))}\npwd > {shlex.quote(str(cwd_out))}\n"
        )
        try:
            done = subprocess.run(
                ["bash", "-c", wrapped],
                cwd=self.cwd,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise DocsError(f"the shell block ran over {TIMEOUT:.0f} s") from exc
        if done.returncode != 0:
            raise DocsError(f"bash exited {done.returncode}:\n{done.stdout}{done.stderr}")
        self.printed = done.stdout
        self.env = dict(item.split("=", 1) for item in env_out.read_text().split("\0") if "=" in item)
        self.cwd = Path(cwd_out.read_text().strip())

    def _start(self, kind: str, line: str) -> None:
        port = _port_of(line)
        if port is None:
            port = self.ports[kind]
            line = f"{line.split(' #')[0].rstrip()} --port {port}"
        for old in [s for s in self.servers if s.port == port]:
            old.stop()  # the reader stops the first with Ctrl+C before starting another on its port
            self.servers.remove(old)
        log = self.folder / f".docs-test-server-{len(list(self.folder.glob('.docs-test-server-*')))}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                ["bash", "-c", f"exec {line}"],
                cwd=self.cwd,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        server = Server(line, port, process, log)
        self.servers.append(server)
        server.wait_ready(kind)

    # data

    def _data(self, block: Block, text: str) -> None:
        import yaml

        try:
            if block.lang == "json":
                data = json.loads(text)
            elif block.lang == "toml":
                data = tomllib.loads(text)
            else:
                data = yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:  # ValueError: JSONDecodeError, TOMLDecodeError
            raise DocsError(f"does not parse: {exc}") from exc
        if isinstance(data, dict) and isinstance(data.get("mcpServers"), dict):
            for name, config in data["mcpServers"].items():
                self._mcp_client_config(name, config)

    def _mcp_client_config(self, name: str, config: Mapping[str, Any]) -> None:
        """An MCP client configuration works: its command serves the tools over stdio, or its URL answers."""
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        if "command" in config:
            command = str(config["command"])
            found = command if os.path.isabs(command) else _which(command, self.env["PATH"])
            if found is None or not os.access(found, os.X_OK):
                raise DocsError(f"MCP server {name!r}: command {command!r} does not exist")
            args = [str(arg) for arg in config.get("args", [])]
            params = StdioServerParameters(command=found, args=args, env=self.env, cwd=self.cwd)
            errlog = self.folder / f".docs-test-mcp-{name}.log"

            async def check() -> list[str]:
                with errlog.open("w") as sink, anyio.fail_after(TIMEOUT):
                    async with Client(stdio_client(params, errlog=sink)) as client:
                        return [tool.name for tool in (await client.list_tools()).tools]

        elif "url" in config:
            url = str(config["url"])

            async def check() -> list[str]:
                with anyio.fail_after(TIMEOUT):
                    async with Client(url) as client:
                        return [tool.name for tool in (await client.list_tools()).tools]

        else:
            raise DocsError(f"MCP server {name!r} names neither a command nor a url")
        try:
            tools = anyio.run(check)
        except Exception as exc:
            raise DocsError(f"MCP server {name!r} did not serve its tools: {exc!r}") from exc
        if not tools:
            raise DocsError(f"MCP server {name!r} lists no tools")


def _which(command: str, path: str) -> str | None:
    import shutil

    return shutil.which(command, path=path)


def _logical_lines(text: str) -> Iterator[str]:
    """Shell lines, with backslash-continued lines joined (their newlines kept)."""
    pending: list[str] = []
    for line in text.splitlines():
        pending.append(line)
        if not line.endswith("\\"):
            yield "\n".join(pending)
            pending = []
    if pending:
        yield "\n".join(pending)


def _console_commands(text: str) -> str:
    """The commands of a console transcript: its ``$ `` lines (and their continuations); the rest is output."""
    commands: list[str] = []
    continued = False
    for line in text.splitlines():
        if line.startswith("$ ") or continued:
            commands.append(line.removeprefix("$ "))
            continued = line.endswith("\\")
    return "\n".join(commands) + "\n"


def substituter(placeholders: list[tuple[str, str]], values: Mapping[str, Callable[[], str]]) -> Callable[[str], str]:
    """Replace each placeholder (docs text) by its replacement, whose ``{fields}`` come from ``values`` (called
    only when a block holds the placeholder). A URL replacement with a query of its own turns the docs' ``?``
    after the placeholder into ``&``."""
    cache: dict[str, str] = {}

    def value(name: str) -> str:
        if name not in cache:
            cache[name] = values[name]()
        return cache[name]

    def substitute(text: str) -> str:
        for placeholder, replacement in placeholders:
            if placeholder not in text:
                continue
            real = re.sub(r"\{(\w+)\}", lambda m: value(m.group(1)), replacement)
            joiner = "&" if "?" in real else "?"
            whole = r"(?![\w-])" if placeholder[-1].isalnum() else ""  # `--port 8000` is not in `--port 80001`
            text = re.sub(
                re.escape(placeholder) + whole + r"(\?)?",
                lambda m, r=real, j=joiner: r + (j if m.group(1) else ""),
                text,
            )
        return text

    return substitute
