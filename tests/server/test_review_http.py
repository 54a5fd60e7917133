"""Review and merge over HTTP: ``old=main...fix`` diffs from the merge base, a merge with nothing to merge says
``up_to_date``, and merges and reverts are authored (and worded) as the request says."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from .conftest import error_of


def put(client: TestClient, key: str, value: dict[str, Any], branch: str | None = None) -> str:
    body = {"namespace": ["notes"], "key": key, "value": value, "branch": branch}
    response = client.put("/v1/items", json=body)
    assert response.status_code == 200, response.text
    commit_id: str = response.json()["commit"]["id"]
    return commit_id


def kinds(client: TestClient, **params: str) -> dict[str, str]:
    response = client.get("/v1/diff", params=params)
    assert response.status_code == 200, response.text
    return {c["key"]: c["kind"] for c in response.json()["changes"]}


def forked(client: TestClient) -> None:
    put(client, "shared", {"v": 1})
    assert client.post("/v1/branches", json={"name": "fix"}).status_code == 201
    put(client, "shared", {"v": 2}, branch="fix")
    put(client, "on-main", {"v": 1})  # main moves on after the fork


def test_http_diff_three_dots_is_what_the_branch_introduces(client: TestClient) -> None:
    forked(client)
    assert kinds(client, old="main...fix") == {"shared": "modified"}
    assert kinds(client, old="main..fix") == kinds(client, old="main", new="fix") == {
        "shared": "modified", "on-main": "removed"}  # fmt: skip
    error_of(client.get("/v1/diff", params={"old": "main...fix", "new": "main"}), 422)


def test_http_merge_says_up_to_date_when_there_is_nothing_to_merge(client: TestClient) -> None:
    forked(client)
    merged = client.post("/v1/merge", json={"source": "fix"}).json()
    assert merged["up_to_date"] is False and len(merged["commit"]["parents"]) == 2
    again = client.post("/v1/merge", json={"source": "fix"})
    assert again.status_code == 200 and again.json()["up_to_date"] is True
    assert again.json()["commit"]["id"] == merged["commit"]["id"] == client.get("/v1/branches").json()["refs"]["main"]


def test_http_merge_and_revert_take_an_author_and_a_message(client: TestClient) -> None:
    forked(client)
    body = {"source": "fix", "author": "dana", "message": "bring in the fix"}
    merged = client.post("/v1/merge", json=body).json()["commit"]
    assert (merged["author"], merged["message"]) == ("dana", "bring in the fix")
    bad = put(client, "oops", {"v": 0})
    body = {"ref": bad, "author": "erin", "message": "undo the bad write"}
    reverted = client.post("/v1/revert", json=body).json()["commit"]
    assert (reverted["author"], reverted["message"]) == ("erin", "undo the bad write")
    default = client.post("/v1/revert", json={"ref": merged["id"], "strategy": "theirs"}).json()["commit"]
    assert default["author"] == "api" and default["message"].startswith("revert ")
