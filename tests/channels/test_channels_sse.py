"""The event stream's cursor over HTTP: a malformed one is refused, one beyond the end resumes from the end."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from engram.server import ServerConfig, create_app

ME = {"X-Engram-Agent": "alice"}


@pytest.fixture
def client() -> Iterator[TestClient]:
    """A server without keys: project acme, agent alice, channel acme:c with one message (events 1..5)."""
    with TestClient(create_app(ServerConfig(":memory:", "hashing"))) as client:
        client.post("/v1/projects", json={"id": "acme"})
        client.post("/v1/agents", json={"id": "alice", "project": "acme"})
        assert client.post("/v1/channels", json={"name": "c"}, headers=ME).status_code == 201
        assert client.post("/v1/channels/c/messages", json={"content": "first"}, headers=ME).status_code == 201
        yield client


def frames(text: str) -> list[dict[str, str]]:
    """The Server-Sent Events of a stream's text, each as its fields."""
    found = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if fields:
            found.append(fields)
    return found


@pytest.mark.parametrize("cursor", ["abc", "-1", "1.5", "٣", ""])
def test_sse_malformed_cursor_is_refused(client: TestClient, cursor: str) -> None:
    short = {"timeout": 1.0}  # a stream that was not refused ends soon
    by_header = client.get("/v1/events/stream", params=short,
                           headers={"X-Engram-Agent": b"alice", "Last-Event-ID": cursor.encode()})  # fmt: skip
    by_query = client.get("/v1/events/stream", params={**short, "after": cursor}, headers=ME)
    for response in (by_header, by_query):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_cursor" and "non-negative integer" in error["message"]


def test_sse_last_event_id_wins_over_after(client: TestClient) -> None:
    newest = client.get("/v1/events", headers=ME).json()[-1]["seq"]
    params = {"after": "abc", "timeout": 0.5, "topics": "message.*"}
    with client.stream("GET", "/v1/events/stream", params=params, headers={**ME, "Last-Event-ID": "0"}) as response:
        text = "".join(response.iter_text())
    assert response.status_code == 200
    assert [f["event"] for f in frames(text)] == ["message.created"] and newest > 0


@pytest.mark.parametrize("how", ["header", "query"])
def test_sse_cursor_beyond_the_end_resumes_from_the_end_and_delivers_new_events(client: TestClient, how: str) -> None:
    newest = client.get("/v1/events", headers=ME).json()[-1]["seq"]
    sent: list[dict[str, str]] = []

    def send_later() -> None:
        time.sleep(1.0)  # after the stream has started
        sent.append(client.post("/v1/channels/c/messages", json={"content": "second"}, headers=ME).json())

    params: dict[str, str | float] = {"timeout": 4.0, "topics": "message.*"}
    headers = dict(ME)
    if how == "header":
        headers["Last-Event-ID"] = "99999"
    else:
        params["after"] = "99999"
    writer = threading.Thread(target=send_later)
    writer.start()
    with client.stream("GET", "/v1/events/stream", params=params, headers=headers) as response:
        text = "".join(response.iter_text())
    writer.join()
    got = frames(text)
    assert got[0]["event"] == "resumed" and got[0]["id"] == str(newest), text
    assert json.loads(got[0]["data"]) == {"requested": 99999, "cursor": newest,
                                          "reason": "the cursor is beyond the newest event"}  # fmt: skip
    created = [json.loads(f["data"]) for f in got[1:] if f["event"] == "message.created"]
    assert [e["message"] for e in created] == [sent[0]["id"]], text
    assert int(got[1]["id"]) > newest


def test_sse_cursor_within_the_log_says_nothing_extra(client: TestClient) -> None:
    with client.stream("GET", "/v1/events/stream", params={"after": "0", "timeout": 0.5}, headers=ME) as response:
        text = "".join(response.iter_text())
    assert "resumed" not in text and frames(text)[0]["id"] == "1"
