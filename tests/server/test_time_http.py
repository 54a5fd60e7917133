"""Questions about time over HTTP: ``when`` and ``reference_time`` on ``POST /v1/search`` and ``POST /v1/context``
rank by the memories' dates, filter by a range, explain it, and refuse bad values with a 422."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from engram.store import timerank

from .conftest import error_of

NS = ["trips"]
REFERENCE = "2023-10-20"
TEXT = "Went hiking in the hills with Sam"
#: The same words each, one a month; only the date differs.
DATES = {"a": "1:56 pm on 8 May, 2023", "b": "2023-06-12", "c": "12 July, 2023", "d": "2023-08-20T09:00:00Z"}


@pytest.fixture
def trips(client: TestClient) -> TestClient:
    for key, date in DATES.items():
        body = {"namespace": NS, "key": key, "value": {"text": TEXT, "date": date}, "index": ["text"]}
        assert client.put("/v1/items", json=body).status_code == 200
    return client


def _search(client: TestClient, **body: Any) -> Any:
    return client.post("/v1/search", json={"namespace_prefix": NS, "query": "hiking in the hills in July 2023", **body})


def _keys(response: Any) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["key"] for item in response.json()["items"]]


def test_when_auto_ranks_the_item_of_the_named_month_first(trips: TestClient) -> None:
    plain = _search(trips, when="off")
    assert _keys(plain) == ["a", "b", "c", "d"]  # equal scores: by key
    timed = _search(trips, when="auto", reference_time=REFERENCE)
    assert _keys(timed) == ["c", "b", "d", "a"]  # July, then the nearest months
    assert _keys(_search(trips, reference_time=REFERENCE)) == _keys(timed)  # "auto" is the default
    assert timed.json()["items"][0]["score"] == pytest.approx(plain.json()["items"][2]["score"] + timerank.TIME_WEIGHT)
    given = _search(trips, query="hiking in the hills", when="in May 2023", reference_time=REFERENCE)
    assert _keys(given)[0] == "a"  # an expression instead of the query's own


def test_reference_time_anchors_relative_expressions(trips: TestClient) -> None:
    june = _search(trips, query="hiking yesterday", when="auto", reference_time="2023-06-13T10:00:00Z")
    assert _keys(june)[0] == "b"
    may = _search(trips, query="hiking yesterday", when="auto", reference_time="9 May 2023")
    assert _keys(may)[0] == "a"


def test_a_range_filters(trips: TestClient) -> None:
    stated = _search(trips, query="hiking between June 1 and July 31 2023", when="auto", reference_time=REFERENCE)
    assert _keys(stated) == ["b", "c"]
    given = _search(trips, query="hiking", when={"start": "2023-05-01", "end": "2023-06-30T00:00:00Z"})
    assert _keys(given) == ["a", "b"]
    assert _keys(_search(trips, query="hiking", when={"start": "2023-08-01T00:00:00+00:00", "end": None})) == ["d"]
    assert _keys(_search(trips, query="hiking", when={"end": "2023-06-01"})) == ["a"]


def test_explain_shows_the_time_signal(trips: TestClient) -> None:
    item = _search(trips, when="auto", reference_time=REFERENCE, explain=True).json()["items"][0]
    time = item["explain"]["time"]
    assert time["windows"] == [{"text": "in July 2023", "start": "2023-07-01T00:00:00Z",
                                "end": "2023-08-01T00:00:00Z", "range": False}]  # fmt: skip
    assert time["reference"] == "2023-10-20T00:00:00Z" and time["item_time"] == "2023-07-12T00:00:00Z"
    assert time["match"] == 1.0 and time["boost"] == pytest.approx(timerank.TIME_WEIGHT)
    assert item["explain"]["components"]["time"] == pytest.approx(timerank.TIME_WEIGHT)


def test_context_chooses_its_lines_by_time(trips: TestClient) -> None:
    query = {"namespace_prefix": NS, "query": "hiking in the hills in July 2023"}
    plain = trips.post("/v1/context", json={**query, "when": "off"}).json()
    assert plain["text"] == f"[1:56 pm on 8 May, 2023] {TEXT} (source: a)" and plain["duplicates"] == 3
    timed = trips.post("/v1/context", json={**query, "when": "auto", "reference_time": REFERENCE})
    assert timed.status_code == 200, timed.text
    assert timed.json()["text"] == f"[12 July, 2023] {TEXT} (source: c)"  # the same text once: the best-ranked
    ranged = trips.post("/v1/context", json={**query, "when": {"start": "2023-08-01", "end": "2023-09-01"}}).json()
    assert [i["key"] for i in ranged["items"]] == ["d"] and ranged["duplicates"] == 0


@pytest.mark.parametrize("route", ["/v1/search", "/v1/context"])
def test_bad_time_values_are_422(trips: TestClient, route: str) -> None:
    q = {"query": "hiking"}
    for body in (
        {**q, "when": "next blue moon"},  # no time expression engram understands
        {**q, "when": {"start": "soon"}},
        {**q, "when": {"start": "2023-05-01", "end": "31/12/2023"}},
        {**q, "when": {}},
        {**q, "when": {"start": None, "end": None}},
        {**q, "when": "auto", "reference_time": "not a date at all"},
    ):
        error = error_of(trips.post(route, json=body), 422, "invalid_input")
        assert "when" in error["message"] or "reference_time" in error["message"], error
    for body in (
        {**q, "when": 5},
        {**q, "when": ""},
        {**q, "when": {"start": "2023-05-01", "until": "2023-06-01"}},
        {**q, "reference_time": 20231020},
        {**q, "when": "x" * 501},
    ):
        error_of(trips.post(route, json=body), 422, "invalid_request")
    if route == "/v1/search":
        error_of(trips.post(route, json={"when": "auto"}), 422, "invalid_input")  # a listing has no score
