"""POST /v1/context: the library's read-back for prompts over HTTP, with the access policy's prefix rule."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from .conftest import Keyed, error_of

ALICE = ["users", "alice"]


def _put(client: TestClient, namespace: list[str], key: str, value: dict[str, Any], **extra: Any) -> str:
    response = client.put("/v1/items", json={"namespace": namespace, "key": key, "value": value, **extra})
    assert response.status_code == 200, response.text
    commit_id: str = response.json()["commit"]["id"]
    return commit_id


def test_v1_context_returns_the_block_and_what_it_holds(client: TestClient) -> None:
    first = _put(client, ALICE, "home", {"text": "Alice lives in Berlin", "date": "2023-05-08"}, sources=["m1"])
    _put(client, ALICE, "home", {"text": "Alice lives in Munich", "date": "2023-06-01"}, sources=["m9"])
    _put(client, ALICE, "pet", {"text": "Alice has a cat"})
    response = client.post("/v1/context", json={"namespace_prefix": ["users"], "query": "where does Alice live"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["text"].split("\n")[0] == "[2023-06-01] Alice lives in Munich (source: m9)"
    assert "Berlin" not in body["text"]
    assert body["items"][0] == {"namespace": ALICE, "key": "home", "score": body["items"][0]["score"],
                                "tokens": body["items"][0]["tokens"], "line": body["text"].split("\n")[0]}  # fmt: skip
    assert body["tokens"] <= body["budget_tokens"] == 1000 and body["tokenizer"].startswith("wordpiece")
    assert body["mode"] == "hybrid" and body["degraded"] is None
    past = client.post("/v1/context", json={"query": "where does Alice live", "at": first}).json()
    assert [i["key"] for i in past["items"]] == ["home"] and "Berlin" in past["text"]
    small = client.post("/v1/context", json={"query": "where does Alice live", "budget_tokens": 3}).json()
    assert small["text"] == "" and small["items"] == [] and small["left_out"] == 2


def test_v1_context_on_a_branch(client: TestClient) -> None:
    _put(client, ALICE, "k", {"text": "Alice likes tea"})
    assert client.post("/v1/branches", json={"name": "exp"}).status_code < 300
    _put(client, ALICE, "k", {"text": "Alice likes coffee"}, branch="exp")
    main = client.post("/v1/context", json={"query": "what does Alice like"}).json()
    exp = client.post("/v1/context", json={"query": "what does Alice like", "branch": "exp"}).json()
    assert "tea" in main["text"] and "coffee" in exp["text"] and "tea" not in exp["text"]


def test_v1_context_refuses_bad_input_with_422(client: TestClient) -> None:
    for body in (
        {},
        {"query": ""},
        {"query": "q", "budget_tokens": 0},
        {"query": "q", "budget_tokens": "many"},
        {"query": "q", "candidates": 5000},
        {"query": "q", "mode": "fuzzy"},
        {"query": "q", "tokenizer": "estimate"},  # not a door setting
        {"query": "q", "filter": {"$bad": 1}},
    ):
        error_of(client.post("/v1/context", json=body), 422)
    error_of(client.post("/v1/context", json={"query": "q", "at": "no-such-ref"}), 404)


def test_v1_context_keeps_a_prefixed_key_inside_its_prefix(keyed: Keyed) -> None:
    client, make_key = keyed()
    admin = make_key("acme", "read", "write", "admin")
    for who in ("alice", "bob"):
        item = {"namespace": ["users", who], "key": "k", "value": {"text": f"{who} likes dark mode"}}
        response = client.put("/v1/items", headers=admin, json=item)
        assert response.status_code == 200, response.text
    alice = make_key("acme", "read", prefix=("users", "alice"))
    everything = client.post("/v1/context", headers=alice, json={"query": "dark mode"}).json()  # [] is narrowed
    assert [i["namespace"] for i in everything["items"]] == [ALICE] and "bob" not in everything["text"]
    refused = client.post("/v1/context", headers=alice, json={"namespace_prefix": ["users", "bob"], "query": "dark"})
    error_of(refused, 403)
