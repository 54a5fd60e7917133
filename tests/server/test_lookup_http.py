"""The bounded lookups the web UI uses: several items read at once at one point (null where an item does not
exist there), the items citing one source (a scan with a cap that says when it stopped), and a revert with
nothing to revert saying so."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from .conftest import Keyed, error_of


def put(client: TestClient, ns: list[str], key: str, text: str, sources: list[str] | None = None) -> str:
    body = {"namespace": ns, "key": key, "value": {"text": text}, "sources": sources or []}
    response = client.put("/v1/items", json=body)
    assert response.status_code == 200, response.text
    commit_id: str = response.json()["commit"]["id"]
    return commit_id


def lookup(client: TestClient, **body: Any) -> list[Any]:
    response = client.post("/v1/items/lookup", json=body)
    assert response.status_code == 200, response.text
    items: list[Any] = response.json()["items"]
    return items


def test_lookup_reads_many_items_at_one_point_with_null_where_absent(client: TestClient) -> None:
    first = put(client, ["notes"], "a", "one")
    put(client, ["notes"], "b", "two")
    put(client, ["notes"], "a", "one, edited")
    asked = [{"namespace": ["notes"], "key": k} for k in ("a", "b", "missing")]
    now = lookup(client, items=asked)
    assert [None if it is None else it["value"]["text"] for it in now] == ["one, edited", "two", None]
    then = lookup(client, items=asked, at=first)
    assert [None if it is None else it["value"]["text"] for it in then] == ["one", None, None]
    assert set(now[0]) >= {"namespace", "key", "value", "sources", "author", "updated_at"}


def test_lookup_is_bounded_and_checks_its_input(client: TestClient) -> None:
    too_many = [{"namespace": ["notes"], "key": str(i)} for i in range(101)]
    error_of(client.post("/v1/items/lookup", json={"items": too_many}), 422)
    error_of(client.post("/v1/items/lookup", json={"items": [{"namespace": [], "key": "a"}]}), 422)
    error_of(client.post("/v1/items/lookup", json={"items": [], "at": "no-such-ref"}), 404)
    assert lookup(client, items=[]) == []


def test_lookup_refuses_items_outside_the_keys_prefix(keyed: Keyed) -> None:
    client, make_key = keyed()
    admin = make_key("acme", "read", "write")
    assert client.put("/v1/items", json={"namespace": ["team", "x"], "key": "k", "value": {}}, headers=admin).is_success
    narrow = make_key("acme", "read", prefix=("users",))
    body = {"items": [{"namespace": ["team", "x"], "key": "k"}]}
    error_of(client.post("/v1/items/lookup", json=body, headers=narrow), 403)


def test_source_items_finds_what_cites_a_source_with_a_bounded_scan(client: TestClient) -> None:
    made = []
    for i in range(6):
        source = "run-1" if i < 4 else "run-2"
        made.append(put(client, ["logs", "a" if i % 2 else "b"], f"e{i}", f"error {i}", sources=[source]))
    found = client.get("/v1/sources/items", params={"source": "run-1"}).json()
    assert sorted(it["key"] for it in found["items"]) == ["e0", "e1", "e2", "e3"]
    assert found["complete"] is True and found["scanned"] == 6 and found["source"] == "run-1"
    capped = client.get("/v1/sources/items", params={"source": "run-1", "scan": 2}).json()
    assert capped["complete"] is False and capped["scanned"] == 2 and len(capped["items"]) <= 2
    limited = client.get("/v1/sources/items", params={"source": "run-1", "limit": 1}).json()
    assert len(limited["items"]) == 1 and limited["complete"] is False
    under = client.get("/v1/sources/items", params={"source": "run-1", "prefix": "logs.a"}).json()
    assert sorted(it["key"] for it in under["items"]) == ["e1", "e3"] and under["complete"] is True
    past = client.get("/v1/sources/items", params={"source": "run-1", "at": made[0]}).json()
    assert [it["key"] for it in past["items"]] == ["e0"]
    error_of(client.get("/v1/sources/items", params={"source": "run-1", "scan": 100_001}), 422)
    error_of(client.get("/v1/sources/items", params={"source": ""}), 422)


def test_revert_with_nothing_to_revert_says_so(client: TestClient) -> None:
    put(client, ["notes"], "a", "one")
    bad = put(client, ["notes"], "b", "bad")
    done = client.post("/v1/revert", json={"ref": bad}).json()
    assert done["nothing_to_revert"] is False and done["commit"]["metadata"]["reverts"] == bad
    again = client.post("/v1/revert", json={"ref": bad})
    assert again.status_code == 200, again.text
    assert again.json()["nothing_to_revert"] is True and again.json()["commit"]["id"] == done["commit"]["id"]
    put(client, ["notes"], "c", "later")  # the head is no longer the revert: still nothing to revert
    head = client.get("/v1/log", params={"limit": 1}).json()["commits"][0]["id"]
    third = client.post("/v1/revert", json={"ref": bad}).json()
    assert third["nothing_to_revert"] is True and third["commit"]["id"] == head
