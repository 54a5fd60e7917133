"""Over HTTP, bad input is a 422 and never an outage: U+0000, huge numbers, catastrophic $regex (issue #9).

Each case runs on SQLite and on PostgreSQL with pgvector (search in PostgreSQL tables).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from engram.server import ServerConfig, create_app
from engram.store import tenant_url

from .conftest import error_of
from .test_serve_subprocess import Server

CATASTROPHIC = {"text": {"$regex": "(a+)+$"}}
BENIGN = {"text": {"$regex": "a+$"}}  # the same matches, no nested repetition
LONG = {"namespace": ["d"], "key": "long", "value": {"text": "a" * 10_000 + "!"}}


@pytest.fixture(params=["sqlite", "pgvector"])
def http(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    """A server without keys on a fresh store, holding one item ``d/k``."""
    if request.param == "pgvector":
        url = tenant_url(request.getfixturevalue("pgvector_url"), "t" + uuid.uuid4().hex[:16])
    else:
        url = f"sqlite:///{tmp_path / 'store.db'}"
    config = ServerConfig(store=url, embedder="hashing", sweep_ttl=False)
    with TestClient(create_app(config), raise_server_exceptions=False) as client:
        put = client.put("/store/items", json={"namespace": ["d"], "key": "k", "value": {"text": "kept words"}})
        assert put.status_code == 204, put.text
        yield client


def _searches(client: TestClient) -> None:
    """The branch still answers searches (with a query, so the search index is read too)."""
    found = client.post("/store/items/search", json={"query": "kept words", "filter": {"text": {"$exists": True}}})
    assert found.status_code == 200, found.text
    assert "k" in [item["key"] for item in found.json()["items"]]


def test_http_catastrophic_regex_answers_fast(http: TestClient) -> None:
    # 26 characters: seconds for a backtracking engine (10,000 would never end: see the subprocess test)
    assert http.put("/store/items", json={**LONG, "value": {"text": "a" * 25 + "!"}}).status_code == 204
    _searches(http)
    for body in ({"filter": CATASTROPHIC}, {"query": "a", "filter": CATASTROPHIC}):
        start = time.perf_counter()
        benign = http.post("/store/items/search", json={**body, "filter": BENIGN})
        healthy = time.perf_counter() - start
        assert benign.status_code == 200
        start = time.perf_counter()
        found = http.post("/store/items/search", json=body)
        # as fast as the same search with a harmless pattern (a backtracking engine takes seconds here)
        assert time.perf_counter() - start < 10 * healthy + 0.5, healthy
        assert found.status_code == 200 and found.json()["items"] == []


def test_http_regex_refused_by_re2_is_422_saying_why(http: TestClient) -> None:
    for pattern, reason in [("(a)\\1", "backreferences"), ("(?<=a)b", "lookbehind"), ("(.*){1000}", "too complex")]:
        found = http.post("/store/items/search", json={"filter": {"text": {"$regex": pattern}}})
        assert reason in error_of(found, 422, "invalid_filter")["message"]
    _searches(http)


_W = {"namespace": ["d"], "key": "k2", "value": {"text": "x"}}

NUL_REQUESTS: list[tuple[Any, ...]] = [
    ("value", "PUT", "/store/items", {"json": {**_W, "value": {"text": "a\x00b"}}}, "invalid_value"),
    ("value in a list", "PUT", "/v1/items", {"json": {**_W, "value": {"a": [1, "\x00"]}}}, "invalid_value"),
    ("value object key", "PUT", "/store/items", {"json": {**_W, "value": {"a": {"b\x00": 1}}}}, "invalid_value"),
    ("item key", "PUT", "/store/items", {"json": {**_W, "key": "k\x00"}}, "invalid_key"),
    ("index field", "PUT", "/store/items", {"json": {**_W, "index": ["te\x00xt"]}}, "invalid_input"),
    ("filter $eq", "POST", "/store/items/search", {"json": {"query": "x", "filter": {"text": {"$eq": "\x00"}}}},
     "invalid_filter"),
    ("namespace label", "PUT", "/store/items", {"json": {**_W, "namespace": ["d\x00"]}}, "invalid_namespace"),
    ("get key", "GET", "/store/items", {"params": {"namespace": "d", "key": "k\x00"}}, "invalid_key"),
    ("get namespace", "GET", "/v1/items", {"params": {"namespace": "d\x00", "key": "k"}}, "invalid_namespace"),
    ("delete key", "DELETE", "/v1/items", {"params": {"namespace": "d", "key": "\x00"}}, "invalid_key"),
    ("search prefix", "POST", "/store/items/search", {"json": {"namespace_prefix": ["\x00"]}}, "invalid_namespace"),
    ("filter field", "POST", "/store/items/search", {"json": {"filter": {"te\x00xt": 1}}}, "invalid_filter"),
    ("filter argument", "POST", "/v1/search", {"json": {"query": "x", "filter": {"text": {"$in": ["\x00"]}}}},
     "invalid_filter"),
    ("filter regex", "POST", "/store/items/search", {"json": {"filter": {"text": {"$regex": "a\x00"}}}},
     "invalid_filter"),
    ("search at", "POST", "/store/items/search", {"json": {"query": "x", "at": "main\x00"}}, "invalid_ref"),
    ("get at", "GET", "/store/items", {"params": {"namespace": "d", "key": "k", "at": "HEAD\x00"}}, "invalid_ref"),
    ("branch name", "POST", "/v1/branches", {"json": {"name": "b\x00"}}, "invalid_ref"),
    ("tag name", "POST", "/v1/tags", {"json": {"name": "t\x00"}}, "invalid_ref"),
    ("commit ref", "GET", "/v1/commits/ma%00in", {}, "invalid_ref"),
    ("diff ref", "GET", "/v1/diff", {"params": {"old": "main@{2026-01-01\x00}"}}, "invalid_ref"),
    ("history ref", "GET", "/v1/history", {"params": {"namespace": "d", "key": "k", "ref": "\x00"}}, "invalid_ref"),
    ("merge source", "POST", "/v1/merge", {"json": {"source": "b\x00"}}, "invalid_ref"),
    ("revert ref", "POST", "/v1/revert", {"json": {"ref": "HEAD\x00"}}, "invalid_ref"),
    ("reset ref", "POST", "/v1/reset", {"json": {"ref": "HEAD~1\x00"}}, "invalid_ref"),
    ("author", "PUT", "/v1/items", {"json": {**_W, "author": "a\x00"}}, "invalid_input"),
    ("commit message", "PUT", "/v1/items", {"json": {**_W, "message": "m\x00"}}, "invalid_input"),
    ("source", "PUT", "/v1/items", {"json": {**_W, "sources": ["s\x00"]}}, "invalid_input"),
    ("delete message", "DELETE", "/v1/items", {"params": {"namespace": "d", "key": "k", "message": "\x00"}},
     "invalid_input"),
    ("branch parameter", "GET", "/v1/log", {"params": {"branch": "ma\x00in"}}, "invalid_ref"),
    ("delete branch", "DELETE", "/v1/branches/b%00x", {}, "invalid_ref"),
    ("delete tag", "DELETE", "/v1/tags/t%00x", {}, "invalid_ref"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("where", "method", "path", "options", "code"),
    [pytest.param(*case[:5], id=case[0], marks=case[5:]) for case in NUL_REQUESTS],
)
def test_http_nul_is_422_everywhere(
    http: TestClient, where: str, method: str, path: str, options: dict[str, Any], code: str
) -> None:
    before = http.get("/v1/log").json()["commits"][0]["id"]
    error = error_of(http.request(method, path, **options), 422, code)
    assert "U+0000 (NUL) cannot be stored" in error["message"], where
    assert http.get("/v1/log").json()["commits"][0]["id"] == before  # nothing was written
    _searches(http)


def test_http_huge_integers_never_500(http: TestClient) -> None:
    big = 10**400
    put = http.put("/v1/items", json={"namespace": ["d"], "key": "big", "value": {"text": "kept", "n": big,
                                                                                  "confidence": big}})  # fmt: skip
    assert put.status_code == 200, put.text
    for body in (
        {"filter": {"n": {"$gt": 10**399}}},
        {"query": "kept", "filter": {"n": {"$gt": 10**399}}, "profile": "quality"},
        {"query": "kept", "filter": {"n": {"$in": [big, 1]}}, "explain": True},
        {"query": "kept", "filter": {"n": {"$between": [2**53, big]}}},
    ):
        found = http.post("/store/items/search", json=body)
        assert found.status_code == 200, (body, found.text)
        assert [item["key"] for item in found.json()["items"]] == ["big"]
        assert found.json()["items"][0]["value"]["n"] == big
    found = http.post("/store/items/search", json={"query": "kept", "filter": {"n": {"$lt": -big}}})
    assert found.status_code == 200 and found.json()["items"] == []
    _searches(http)


def test_serve_catastrophic_regex_never_stalls_the_server(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(tmp_path / "store")
    servers.append(server)
    assert httpx.put(server.url + "/store/items", json=LONG, timeout=10).status_code == 204
    outcome: dict[str, Any] = {}

    def search() -> None:
        start = time.perf_counter()
        try:
            found = httpx.post(server.url + "/store/items/search", json={"filter": CATASTROPHIC}, timeout=10)
            outcome["status"] = found.status_code
        except httpx.HTTPError as exc:  # a stalled server: reported by the assertion below
            outcome["error"] = repr(exc)
        outcome["seconds"] = time.perf_counter() - start

    thread = threading.Thread(target=search, daemon=True)
    thread.start()
    slowest = 0.0
    while thread.is_alive():  # /healthz keeps answering meanwhile
        start = time.perf_counter()
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
        slowest = max(slowest, time.perf_counter() - start)
        time.sleep(0.01)
    # a backtracking engine never ends on 10,000 characters: generous bounds tell that from a busy machine
    assert outcome.get("status") == 200 and outcome["seconds"] < 8.0, outcome
    assert slowest < 4.0
