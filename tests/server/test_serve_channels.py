"""`engram serve --channel-max-content`: the channels' content limit is the server's to set."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from engram.cli import cli

from .test_serve_subprocess import Server


@pytest.mark.slow
def test_serve_sets_the_channel_content_limit(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(tmp_path / "store", "--channel-max-content", "50")
    servers.append(server)
    me = {"X-Engram-Agent": "alice"}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.post("/v1/projects", json={"id": "acme"}).status_code == 201
        assert http.post("/v1/agents", json={"id": "alice", "project": "acme"}).status_code == 201
        assert http.post("/v1/channels", json={"name": "c"}, headers=me).status_code == 201
        assert http.post("/v1/channels/c/messages", json={"content": "x" * 50}, headers=me).status_code == 201
        over = http.post("/v1/channels/c/messages", json={"content": "x" * 51}, headers=me)
        assert over.status_code == 422 and over.json()["error"]["code"] == "content_too_large", over.text
        assert "limit is 50" in over.json()["error"]["message"]
        note = http.post("/v1/notes", json={"content": "y" * 51}, headers=me)
        assert note.json()["error"]["code"] == "content_too_large"
    code, _, err = server.stop()
    assert code == 0, err


def test_serve_refuses_a_channel_content_limit_below_one(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "serve", "--channel-max-content", "0"])
    assert result.exit_code == 2 and "--channel-max-content" in result.output
