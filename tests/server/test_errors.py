"""Every HTTP error has the one JSON shape: walk every route with bad input, no key, a weak key, a huge body."""

from __future__ import annotations

import inspect
import logging
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from engram import errors
from engram.embed import HashingEmbedder
from engram.server import ServerConfig, create_app
from engram.server.errors import STATUS, status_of

from .conftest import Keyed, error_of

PUBLIC = {"/healthz", "/readyz", "/"}


def api_routes(client: TestClient) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, from ``app.routes`` (docs pages aside)."""
    found = []
    for route in client.app.routes:  # type: ignore[attr-defined]
        if isinstance(route, APIRoute):
            found += [(method, route.path) for method in sorted(route.methods)]
    return found


def concrete(path: str) -> str:
    return path.replace("{ref:path}", "HEAD").replace("{name:path}", "nope").replace("{ref}", "HEAD")


def bad_request(client: TestClient, method: str, path: str, spec: dict[str, Any]) -> Any:
    """A request to a route with input it must refuse, or None when the route takes no input."""
    operation = spec["paths"].get(path.replace(":path", ""), {}).get(method.lower(), {})
    if "requestBody" in operation:
        return client.request(method, concrete(path), json=["not", "an", "object"])
    params = operation.get("parameters", [])
    if any(p["required"] and p["in"] == "query" for p in params):
        return client.request(method, concrete(path))  # the required parameter is missing
    if any(p["in"] == "path" for p in params):
        return client.request(method, path.replace("{ref:path}", "x{").replace("{name:path}", "..bad"))
    numbers = [p["name"] for p in params if p["in"] == "query" and "integer" in str(p["schema"])]
    if numbers:
        return client.request(method, concrete(path), params={numbers[0]: "many"})
    return None


def test_errors_every_route_answers_bad_input_in_the_error_shape(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    routes = api_routes(client)
    assert len(routes) >= 25
    refused = set()
    for method, path in routes:
        response = bad_request(client, method, path, spec)
        if response is None:
            continue
        assert 400 <= response.status_code < 500, (method, path, response.status_code, response.text)
        error_of(response, response.status_code)
        refused.add((method, path))
    takes_no_input = {("GET", "/v1/branches"), ("GET", "/v1/tags"), ("GET", "/v1/fsck"), ("GET", "/healthz"),
                      ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/")}  # fmt: skip
    assert set(routes) - refused == takes_no_input


def test_errors_auth_and_scope_failures_on_every_route(keyed: Keyed) -> None:
    client, make_key = keyed()
    reader = make_key("acme", "read")
    for method, path in api_routes(client):
        if path in PUBLIC:
            continue
        error_of(client.request(method, concrete(path)), 401, "unauthorized")
        error_of(client.request(method, concrete(path), headers={"X-API-Key": "ek_wrong"}), 401, "invalid_key")
        reads = ("/store/items/search", "/v1/search", "/store/namespaces", "/v1/context", "/v1/items/lookup")
        if method != "GET" and path not in reads:
            error_of(client.request(method, concrete(path), json={}, headers=reader), 403, "missing_scope")  # writes


def test_errors_oversized_bodies_are_413_before_parsing() -> None:
    with TestClient(create_app(ServerConfig(store=":memory:", embedder="hashing", max_body=1000))) as client:
        spec = client.get("/openapi.json").json()
        big = b'{"namespace": ["n"], "key": "k", "value": {"text": "' + b"x" * 2000 + b'"}}'
        operations = {(m, p): spec["paths"].get(p, {}).get(m.lower(), {}) for m, p in api_routes(client)}
        with_body = [route for route, operation in operations.items() if "requestBody" in operation]
        assert len(with_body) >= 10
        for method, path in with_body:
            response = client.request(method, path, content=big, headers={"content-type": "application/json"})
            assert "limit of 1000 bytes" in error_of(response, 413, "payload_too_large")["message"]

            def chunks() -> Any:  # no Content-Length: counted as it arrives
                yield big[:600]
                yield big[600:]

            streamed = client.request(method, path, content=chunks(), headers={"content-type": "application/json"})
            error_of(streamed, 413, "payload_too_large")
        assert client.put("/store/items", json={"namespace": ["n"], "key": "k", "value": {}}).status_code == 204


def test_errors_unknown_route_wrong_method_and_bad_json(client: TestClient) -> None:
    assert "/docs" in error_of(client.get("/nope"), 404, "not_found")["message"]
    wrong = client.patch("/store/items")
    error_of(wrong, 405, "method_not_allowed")
    assert wrong.headers["allow"] == "DELETE, GET, PUT"
    broken = client.post("/store/items/search", content=b'{"query": ', headers={"content-type": "application/json"})
    assert "not valid JSON" in error_of(broken, 422, "invalid_request")["message"]
    for body, code in ((b'{"query": NaN}', "invalid_json"), (b'{"query": "\\ud800"}', "invalid_json")):
        error_of(client.post("/store/items/search", content=body, headers={"content-type": "application/json"}), 422,
                 code)  # fmt: skip
    typo = error_of(client.post("/store/items/search", json={"filters": {}}), 422, "invalid_request")
    assert typo["details"][0]["loc"] == ["body", "filters"]
    error_of(client.post("/store/items/search", json={"filter": {"$nope": 1}}), 422, "invalid_filter")
    error_of(client.put("/store/items", json={"namespace": ["a\x1fb"], "key": "k", "value": {}}), 422,
             "invalid_namespace")  # fmt: skip
    error_of(client.get("/v1/log", params={"ref": "a~b~"}), 422, "invalid_ref")


class _Crashing(HashingEmbedder):
    def embed(self, texts: Any) -> Any:
        raise RuntimeError("a bug, not a user mistake")


def test_errors_unexpected_exceptions_are_a_generic_500_with_a_logged_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with TestClient(create_app(ServerConfig(store=":memory:", embedder=_Crashing()))) as client:
        with caplog.at_level(logging.ERROR, logger="engram.server"):
            response = client.put("/store/items", json={"namespace": ["n"], "key": "k", "value": {"text": "hi"}})
            if response.status_code < 500:  # the write may not embed yet; the search must
                response = client.post("/store/items/search", json={"query": "hi"})
        error = error_of(response, 500, "internal_error")
        assert "a bug" not in error["message"] and error["details"] is None
        assert any("a bug, not a user mistake" in (r.exc_text or "") for r in caplog.records)


def test_errors_every_engram_error_class_has_a_status() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.EngramError)]
    assert set(classes) <= set(STATUS), set(classes) - set(STATUS)
    assert status_of(errors.ItemNotFoundError("x")) == (404, "item_not_found")
    assert status_of(errors.MergeConflictError("x", [])) == (409, "merge_conflict")
    assert status_of(errors.InvalidFilterError("x")) == (422, "invalid_filter")
    assert status_of(errors.EmbedderError("x")) == (503, "embedder_unavailable")
    assert all(400 <= status < 600 for status, _ in STATUS.values())


def test_errors_a_ref_time_before_year_one_is_a_4xx(client: TestClient) -> None:
    response = client.get("/v1/log", params={"ref": "main@{0001-01-01T00:00:00+14:00}"})
    error_of(response, 404, "ref_not_found")


def test_errors_a_ref_walking_back_millions_of_commits_is_a_4xx(client: TestClient) -> None:
    response = client.get("/v1/log", params={"ref": "HEAD~999999999"})
    assert 400 <= response.status_code < 500
    assert "more than 1,000,000 commits" in response.json()["error"]["message"]
