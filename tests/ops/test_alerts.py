"""The alerting rules and the Alertmanager example are valid and do what they say (issue #15), checked with the real
tools (promtool, amtool), and a real Prometheus scrapes a running engram server and evaluates the rules."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from services import unavailable

from engram.ops.alerts import ALERTMANAGER_EXAMPLE, RULES
from engram.server import ServerConfig, create_app
from engram.server.framing import uvicorn_options

HERE = Path(__file__).resolve().parent
RULE_TESTS = HERE / "alerts" / "engram-rules.test.yml"


def tool(name: str) -> str:
    """The path of a Debian tool the test drives (``make system-deps`` installs them)."""
    found = shutil.which(name)
    if found is None:
        unavailable(name, f"{name} is not on PATH (Debian packages prometheus, prometheus-alertmanager)")
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def test_alerts_rules_file_passes_promtool_check() -> None:
    done = run(tool("promtool"), "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 12 rules found" in done.stdout


def test_alerts_rules_pass_their_promtool_unit_tests() -> None:
    done = run(tool("promtool"), "test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_alerts_promtool_unit_tests_fail_when_a_threshold_changes(tmp_path: Path) -> None:
    """The unit tests can fail: with the backup rule's grace widened to 30 h they no longer pass."""
    rules = tmp_path / "engram-rules.yml"
    rules.write_text(RULES.read_text().replace("> 26 * 3600", "> 30 * 3600"))
    tests = tmp_path / "rules.test.yml"
    tests.write_text(RULE_TESTS.read_text().replace("../../../src/engram/ops/alerts/engram-rules.yml", str(rules)))
    done = run(tool("promtool"), "test", "rules", str(tests))
    assert done.returncode != 0 and "EngramBackupTooOld" in done.stdout + done.stderr


def test_alerts_alertmanager_example_is_valid_and_routes_by_severity() -> None:
    amtool = tool("amtool")
    done = run(amtool, "check-config", str(ALERTMANAGER_EXAMPLE))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 inhibit rules" in done.stdout

    def route(*labels: str) -> str:
        found = run(amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER_EXAMPLE}", *labels)
        assert found.returncode == 0, found.stderr
        return found.stdout.strip()

    assert route("service=engram", "severity=critical", "alertname=EngramNotReady") == "engram-oncall"
    assert route("service=engram", "severity=warning", "alertname=EngramBreakerOpen") == "engram-webhook"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def engram_server(tmp_path: Path) -> Iterator[str]:
    """A running engram server (uvicorn, in a thread) on a SQLite store; its base URL."""
    port = free_port()
    app = create_app(ServerConfig(store=str(tmp_path / "store"), embedder="hashing"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **uvicorn_options()))
    thread = threading.Thread(target=server.run, name="engram-test-server", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the engram server did not start"
        time.sleep(0.02)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    """The result vector of a PromQL instant query."""
    body = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=5).json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def test_alerts_a_real_prometheus_scrapes_a_running_server(engram_server: str, tmp_path: Path) -> None:
    binary = tool("prometheus")
    for i in range(3):
        item = {"namespace": ["n"], "key": f"k{i}", "value": {"text": "scraped"}}
        assert httpx.put(f"{engram_server}/store/items", json=item).status_code == 204
    assert httpx.post(f"{engram_server}/store/items/search", json={"query": "scraped"}).status_code == 200
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "engram", "static_configs": [{"targets": [engram_server.split("//")[1]]}]}],
    }))  # fmt: skip
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    prometheus = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        commits: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read() if process.stderr else "prometheus exited"
            try:
                ready = httpx.get(f"{prometheus}/-/ready", timeout=5).status_code == 200
            except httpx.TransportError:
                ready = False  # not listening yet
            commits = query(prometheus, 'engram_commits_total{job="engram"}') if ready else []
            if commits:
                break
            time.sleep(0.2)
        assert commits, "Prometheus never scraped engram"
        assert float(commits[0]["value"][1]) >= 3
        assert float(query(prometheus, 'engram_ready{job="engram"}')[0]["value"][1]) == 1
        assert query(prometheus, 'up{job="engram"}')[0]["value"][1] == "1"
        searches = query(prometheus, 'engram_search_duration_seconds_count{job="engram", mode="hybrid"}')
        assert float(searches[0]["value"][1]) >= 1
        rules = httpx.get(f"{prometheus}/api/v1/rules", timeout=5).json()["data"]["groups"]
        assert [group["name"] for group in rules] == ["engram"] and len(rules[0]["rules"]) == 12
        assert all(rule["health"] in ("ok", "unknown") for rule in rules[0]["rules"])
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
