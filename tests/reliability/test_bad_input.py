"""The bad-input corpus over HTTP, on SQLite and on PostgreSQL: every malformed or hostile request is a quick
4xx in the one error shape, never a 5xx or a 503, and writes nothing.

tests/server/test_errors.py pins the error shape of each kind of error on an in-memory store; this probe
sends a corpus of ~130 hostile requests to stores on disk and in PostgreSQL, where driver errors can surface.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from engram.server import ServerConfig, create_app
from engram.store import tenant_url

from .corpus import LONG_NAME, NS, STALLING, corpus, run_corpus, seed
from .harness import ProbeResult
from .harness import request as call
from .probes_http import check_answer

BOUND = 2.0  # seconds each answer may take


def _store(backend: str, tmp_path: Path, request_: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return str(tmp_path / "store")
    return tenant_url(request_.getfixturevalue("pgvector_url"), request_.getfixturevalue("pg_repo_id"))


@pytest.fixture(params=["sqlite", "pgvector"])
def app_client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    """An in-process server without keys on a fresh store of each backend, seeded with a few items."""
    config = ServerConfig(store=_store(request.param, tmp_path, request), embedder="hashing", sweep_ttl=False)
    with TestClient(create_app(config), raise_server_exceptions=False) as client:
        seed(client)
        yield client


def _commits(client: httpx.Client) -> int:
    return len(client.get("/v1/log", params={"limit": 10_000}).json()["commits"])


def _still_sound(client: httpx.Client, result: ProbeResult) -> None:
    """After the corpus the store is ready, fsck-clean, and takes and returns a write."""
    ready = call(client, "GET", "/readyz")
    if ready.status != 200:
        result.problem(f"not ready after the corpus: {ready.describe()}")
    fsck = call(client, "GET", "/v1/fsck")
    if not (fsck.ok and fsck.body["ok"]):
        result.problem(f"fsck after the corpus: {fsck.describe()}")
    for body in ({}, {"query": "coffee"}):
        found = call(client, "POST", "/store/items/search", json=body)
        if not found.ok:
            result.problem(f"search after the corpus: {found.describe()}")
    put = call(client, "PUT", "/store/items", json={"namespace": [NS], "key": "after", "value": {"v": 1}})
    got = call(client, "GET", "/store/items", params={"namespace": NS, "key": "after"})
    if not put.ok or not got.ok or got.body.get("value") != {"v": 1}:
        result.problem(f"a write after the corpus: {put.describe()} / {got.describe()}")


def test_bad_input_corpus_is_refused_with_4xx_quickly(app_client: TestClient) -> None:
    """NUL everywhere, 400-digit integers, NaN, lone surrogates, deep nesting, huge limits, unknown operators,
    bad JSON and wrong types: each a 4xx in the error shape within 2 s, none a 5xx/503, no commit made."""
    result = run_corpus(app_client, corpus(), bound=BOUND, label="in process", commits=lambda: _commits(app_client))
    _still_sound(app_client, result)
    result.assert_clean()
    assert result.runs >= 120


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "pgvector"])
def test_catastrophic_regex_answers_within_bound(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Catastrophic `$regex` patterns over a 5000-character value answer (any 2xx or 4xx) within 2 s each, and
    the server keeps answering. Runs against `engram serve` in its own process, so a stall is a timeout."""
    from server.test_serve_subprocess import Server

    store = _store(backend, tmp_path, request)
    server = Server(store, "--log-level", "warning")  # type: ignore[arg-type]
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            seed(client)
            result = run_corpus(client, STALLING, bound=BOUND, label="catastrophic regex", timeout=BOUND + 1)
            health = call(client, "GET", "/healthz", timeout=BOUND)
            if health.status != 200:
                result.problem(f"the server stopped answering: {health.describe()}")
                server.process.kill()
    finally:
        server.stop()
    result.assert_clean()


@pytest.mark.parametrize("backend", ["sqlite", "pgvector"])
@pytest.mark.parametrize("searched_first", [False, True], ids=["fresh", "searched"])
@pytest.mark.parametrize("where", ["key", "label"])
def test_long_key_or_label_never_breaks_search(
    backend: str, searched_first: bool, where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A write whose key or namespace label is 3000 characters is accepted or refused with a 4xx, never a 5xx;
    and whatever it got, every search afterwards still answers 200 (listing the item if it was accepted)."""
    config = ServerConfig(store=_store(backend, tmp_path, request), embedder="hashing", sweep_ttl=False)
    result = ProbeResult(f"long {where}")
    with TestClient(create_app(config), raise_server_exceptions=False) as client:
        seed(client)
        if searched_first:
            check_answer(result, call(client, "POST", "/store/items/search", json={"query": "coffee"}))
        ns, key = ([NS], LONG_NAME) if where == "key" else ([LONG_NAME], "k")
        put = call(client, "PUT", "/v1/items", json={"namespace": ns, "key": key, "value": {"text": "long tea"}})
        check_answer(result, put)
        for body in ({}, {"query": "coffee"}, {"query": "long tea"}, {"namespace_prefix": ns}):
            found = call(client, "POST", "/store/items/search", json=body)
            check_answer(result, found, label=f"search after the long {where} got {put.status}")
            refused_name = "namespace_prefix" in body and not put.ok  # the same bad label, refused again: right
            if found.status is not None and 400 <= found.status < 500 and not refused_name:
                result.problem(f"search after the long {where} ({put.status}): {found.describe()}")
        listed = call(client, "POST", "/store/items/search", json={"namespace_prefix": ns, "limit": 100})
        if put.ok and listed.ok and key not in [i["key"] for i in listed.body["items"]]:
            result.problem(f"the accepted item with a long {where} is not listed by search")
    result.assert_clean()


@pytest.mark.parametrize("backend", ["sqlite", "pgvector"])
@pytest.mark.parametrize("where", ["key", "label"])
def test_long_key_or_label_gets_one_answer_whatever_searched_before(
    backend: str, where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The same write of a 3000-character key or label gets the same kind of answer (accepted or refused) on a
    store whose search index was never built as on one that was just searched: acceptance must not depend on
    hidden server state."""
    answers = []
    for searched_first in (False, True):
        if backend == "sqlite":
            store = str(tmp_path / str(searched_first))
        else:  # a repository of its own for each round
            store = tenant_url(request.getfixturevalue("pgvector_url"), "t" + uuid.uuid4().hex[:16])
        config = ServerConfig(store=store, embedder="hashing", sweep_ttl=False)
        with TestClient(create_app(config), raise_server_exceptions=False) as client:
            seed(client)
            if searched_first:
                assert client.post("/store/items/search", json={"query": "coffee"}).status_code == 200
            ns, key = ([NS], LONG_NAME) if where == "key" else ([LONG_NAME], "k")
            put = call(client, "PUT", "/v1/items", json={"namespace": ns, "key": key, "value": {"text": "long tea"}})
            answers.append((put.status or 0) // 100)
            assert put.status is not None and put.status < 500, put.describe()
    assert answers[0] == answers[1], f"{where}: {answers[0]}xx on a fresh store, {answers[1]}xx after a search"
