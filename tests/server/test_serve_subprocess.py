"""`engram serve` as a real subprocess on a free loopback port, and every curl example in docs/http.md against it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGRAM = str(Path(sys.executable).parent / "engram")
DOC_URL = "http://127.0.0.1:8000"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """A running `engram serve`; ``stop()`` returns what it printed."""

    def __init__(self, store: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
        env.pop("ENGRAM_KEYS_FILE", None)
        self.process = subprocess.Popen(
            [ENGRAM, "--store", str(store), "--embedder", "hashing", "serve", "--port", str(self.port), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"engram serve exited: {self.stop()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"engram serve did not become healthy: {self.stop()}")
            time.sleep(0.1)

    def stop(self) -> tuple[int, str, str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        out, err = self.process.communicate()
        return self.process.returncode, out, err


def test_serve_without_keys_binds_loopback_and_says_so(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(tmp_path / "store", "--host", "0.0.0.0")
    servers.append(server)
    with httpx.Client(base_url=server.url, timeout=10) as http:
        item = {"namespace": ["users", "alice"], "key": "prefs", "value": {"text": "likes dark roast coffee"}}
        assert http.put("/store/items", json=item).status_code == 204
        found = http.post("/store/items/search", json={"namespace_prefix": ["users"], "query": "coffee"}).json()
        assert [i["key"] for i in found["items"]] == ["prefs"]
        assert http.get("/readyz").json()["status"] == "ok"
    code, out, err = server.stop()
    assert code == 0, err
    assert f"engram serving http://127.0.0.1:{server.port}" in out and "docs at /docs" in out
    assert "no API keys configured" in err and "127.0.0.1 only" in err and "0.0.0.0" in err
    assert (tmp_path / "store" / "engram.db").exists()


def doc_curl_commands() -> list[str]:
    text = (ROOT / "docs" / "http.md").read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            if command.strip().startswith("curl"):
                commands.append(command.strip())
    return commands


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("bash") is None, reason="needs curl and bash")
def test_serve_docs_curl_examples_run_against_a_real_server(tmp_path: Path, servers: list[Server]) -> None:
    store = tmp_path / "store"
    created = subprocess.run(
        [ENGRAM, "--store", str(store), "keys", "create", "--tenant", "demo", "--scope", "read", "--scope", "write"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    key = created.stdout.strip()
    assert key.startswith("ek_") and "not shown again" in created.stderr
    server = Server(store, "--host", "127.0.0.1")
    servers.append(server)
    commands = doc_curl_commands()
    assert len(commands) >= 15
    env = {**os.environ, "ENGRAM_KEY": key}
    for command in commands:
        done = subprocess.run(["bash", "-c", command.replace(DOC_URL, server.url)], capture_output=True, text=True,
                              env=env, timeout=30)  # fmt: skip
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        if " -f" not in command:  # the error example: shows the error shape
            assert set(json.loads(done.stdout)["error"]) == {"code", "message", "details"}
    # the examples wrote to tenant "demo"'s own store, and a request without the key is refused
    assert (store / "tenants" / "demo" / "engram.db").exists()
    assert httpx.get(server.url + "/v1/log").status_code == 401
    log = httpx.get(server.url + "/v1/log", headers={"X-API-Key": key}).json()["commits"]
    assert any(c["message"].startswith("revert") for c in log) and any(c["author"] == "agent-7" for c in log)
    code, out, err = server.stop()
    assert code == 0 and f"API keys from {store / 'keys.json'}" in out, (out, err)


def test_serve_refuses_ambiguous_framing_and_cuts_off_slow_headers(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(tmp_path / "store", "--header-timeout", "0.5")
    servers.append(server)
    smuggled = b"GET /healthz HTTP/1.1\r\nHost: smuggled\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(
            b"POST /store/items/search HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s" % (5 + len(smuggled), smuggled)
        )
        answered = b"".join(iter(lambda: sock.recv(65536), b""))  # until the server closes the connection
    assert re.findall(rb"HTTP/1\.1 ([0-9]{3}) ", answered) == [b"400"], answered
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n")  # never finished
        answered = b"".join(iter(lambda: sock.recv(65536), b""))
    assert answered.startswith(b"HTTP/1.1 408 ") and time.monotonic() - started < 15
