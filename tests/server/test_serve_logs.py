"""The writer's log lines at every door (#28): ``engram serve`` prints them at its ``--log-level`` (and not above),
``engram writer`` at its own ``--log-level``, and ``engram mcp`` over stdio on stderr, never on stdout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from click.testing import CliRunner
from mcp import Client, StdioServerParameters, stdio_client

from engram.cli import cli

from .test_serve_subprocess import Server

ENGRAM = Path(sys.executable).parent / "engram"
TURNS = [("user", "I moved to Lyon last month and I work as a nurse."), ("assistant", "Noted, Lyon it is.")]


def _converse(url: str) -> dict[str, object]:
    with httpx.Client(base_url=url, timeout=60) as http:
        made = http.post("/v1/conversations", json={"conversation_id": "chat-1", "target": ["users", "alice"]})
        assert made.status_code == 200, made.text
        for _ in range(2):
            for role, text in TURNS:
                assert http.post("/v1/conversations/chat-1/turns", json={"role": role, "text": text}).status_code == 200
        status: dict[str, object] = http.get("/v1/writer/users.alice/status", params={"wait": 30}).json()
        return status


@pytest.mark.slow
@pytest.mark.parametrize("level", ["info", "warning"])
def test_serve_shows_the_writers_runs_at_its_log_level(tmp_path: Path, servers: list[Server], level: str) -> None:
    server = Server(tmp_path / "store", "--log-level", level)
    servers.append(server)
    status = _converse(server.url)
    assert status["last_run"] is not None
    code, out, err = server.stop()
    assert code == 0, err
    shown = [line for line in err.splitlines() if "writer run" in line]
    if level == "info":
        assert any("writer run start" in line and "target=users.alice" in line for line in shown), err
        assert any("writer run end" in line and "outcome=merged" in line for line in shown), err
        assert all("engram.writer" in line for line in shown)  # the logger is named
    else:
        assert shown == [], err
    assert "writer run" not in out  # stdout is uvicorn's access log, never engram's lines


@pytest.mark.slow
def test_serve_shows_each_scheduled_backup_at_info(tmp_path: Path, servers: list[Server]) -> None:
    remote = f"dir://{tmp_path / 'backups'}"
    server = Server(tmp_path / "store", "--log-level", "info", "--backup-every", "24h", "--backup-remote", remote)
    servers.append(server)
    with httpx.Client(base_url=server.url, timeout=30) as http:
        put = http.put("/v1/items", json={"namespace": ["n"], "key": "k", "value": {"text": "backed up"}})
        assert put.status_code == 200, put.text
    code, _out, err = server.stop()
    assert code == 0, err
    assert any("engram.backup" in line and "backups every 86400 s" in line for line in err.splitlines()), err
    assert any("engram.backup" in line and "scheduled backup" in line for line in err.splitlines()), err


def test_engram_writer_logs_to_stderr_at_its_log_level(tmp_path: Path) -> None:
    base = ["--store", str(tmp_path / "store"), "--embedder", "hashing", "--vector-cache", "none", "writer"]
    for level, shown in (("info", True), ("warning", False)):
        runner = CliRunner()
        conversation = f"chat-{level}"
        first = [*base, "--interval", "1", "--log-level", level, "append", conversation]
        runner.invoke(cli, [*first, "user", "I play the cello.", "--target", "users/bob"], obj={})
        result = runner.invoke(cli, [*first, "assistant", "Lovely!"], obj={})
        assert result.exit_code == 0, result.output
        assert ("writer run end" in result.stderr) is shown, result.stderr
        assert "writer run end" not in result.stdout


@pytest.mark.slow
@pytest.mark.anyio
async def test_mcp_over_stdio_logs_the_writer_on_stderr_only(tmp_path: Path) -> None:
    errlog = (tmp_path / "stderr.txt").open("w")
    args = ["--store", str(tmp_path / "store"), "--embedder", "hashing", "mcp", "--log-level", "info"]
    params = StdioServerParameters(command=str(ENGRAM), args=args, cwd=tmp_path, env=dict(os.environ))
    with errlog, anyio.fail_after(60):
        async with Client(stdio_client(params, errlog=errlog)) as client:  # stdout carries only the protocol
            for role, text in TURNS * 2:
                arguments = {"conversation_id": "c1", "target": ["users", "alice"], "role": role, "text": text}
                result = await client.call_tool("memory_append_turn", arguments)
                assert not result.is_error, result.content
            decision = result.structured_content["decision"]  # type: ignore[index]
            assert decision["action"] in ("ran", "queued"), decision
    logged = (tmp_path / "stderr.txt").read_text()
    assert "writer run start" in logged and "writer run end" in logged, logged


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
