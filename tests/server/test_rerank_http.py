"""``engram serve --rerank``: the operator's cross-encoder for ``POST /v1/search`` asking ``rerank: true``; a
server without one refuses such a search (422), and no request can name a model or a path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from onnxmodels import build_cross_encoder

from engram.cli import cli
from engram.errors import ConfigError
from engram.server import ServerConfig, create_app
from engram.store.rerank import rerank_score

from .conftest import error_of

WORDS = ["fruit", "apple", "banana", "cherry", "red", "sweet", "pie"]
#: The cross-encoder's logit is the sum over the passage's words: cherry +4, red +1, banana -2.
WEIGHTS = {"cherry": 4.0, "red": 1.0, "banana": -2.0}
TEXTS = {"a": "fruit fruit fruit banana", "b": "fruit apple sweet", "c": "fruit red cherry", "d": "fruit pie"}


@pytest.fixture
def cross_encoder(tmp_path: Path) -> Path:
    return build_cross_encoder(tmp_path / "tiny-ce", WORDS, WEIGHTS)


def _client(**config: Any) -> TestClient:
    client = TestClient(create_app(ServerConfig(store=":memory:", embedder="hashing", **config)))
    client.__enter__()
    for key, text in TEXTS.items():
        response = client.put("/v1/items", json={"namespace": ["fruit"], "key": key, "value": {"text": text}})
        assert response.status_code == 200, response.text
    return client


@pytest.fixture
def reranking(cross_encoder: Path) -> Iterator[TestClient]:
    client = _client(rerank=f"onnx:{cross_encoder}")
    yield client
    client.__exit__(None, None, None)


@pytest.fixture
def plain() -> Iterator[TestClient]:
    client = _client()
    yield client
    client.__exit__(None, None, None)


def _search(client: TestClient, **body: Any) -> Any:
    return client.post("/v1/search", json={"query": "fruit", "mode": "keyword", **body})


def test_search_asking_for_rerank_uses_the_operators_model(reranking: TestClient) -> None:
    first = _search(reranking)
    assert first.status_code == 200, first.text
    assert [i["key"] for i in first.json()["items"]] == ["a", "b", "c", "d"]  # the keyword order (b, c, d tie: by key)
    reranked = _search(reranking, rerank=True, explain=True)
    assert reranked.status_code == 200, reranked.text
    items = reranked.json()["items"]
    assert [i["key"] for i in items] == ["c", "b", "d", "a"]  # logits 5, 0, 0, -2; ties by key
    assert [i["score"] for i in items] == pytest.approx([rerank_score(5), 0.5, 0.5, rerank_score(-2)])
    assert items[0]["explain"]["reranker"].startswith("tiny-ce/onnx-sha256:")
    assert items[0]["explain"]["rerank_logit"] == pytest.approx(5.0)
    assert [i["key"] for i in _search(reranking, rerank=False).json()["items"]] == ["a", "b", "c", "d"]
    assert [i["key"] for i in _search(reranking, rerank=True, limit=2).json()["items"]] == ["c", "b"]  # top 50


def test_the_operators_top_k_bounds_the_window(cross_encoder: Path) -> None:
    client = _client(rerank=f"onnx:{cross_encoder}@2")
    try:  # a page of 1: the first stage's top 2 (a, b) are reranked; c, the cross-encoder's best, is past the window
        assert [i["key"] for i in _search(client, rerank=True, limit=1).json()["items"]] == ["b"]
    finally:
        client.__exit__(None, None, None)


def test_search_asking_for_rerank_without_a_reranker_is_refused(plain: TestClient) -> None:
    error = error_of(_search(plain, rerank=True), 422, "invalid_input")
    assert "no reranker" in error["message"] and "--rerank onnx:" in error["message"]
    assert _search(plain, rerank=False).status_code == 200


def test_a_client_cannot_name_a_model(reranking: TestClient, cross_encoder: Path) -> None:
    for asked in (f"onnx:{cross_encoder}", "true", 1, {"spec": "onnx:/tmp"}):
        error_of(_search(reranking, rerank=asked), 422)
    # LangGraph's own search route takes no rerank field at all
    response = reranking.post("/store/items/search", json={"query": "fruit", "rerank": True})
    error_of(response, 422)


def test_a_bad_rerank_setting_fails_when_the_server_is_built(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="reranker model directory"):
        create_app(ServerConfig(store=":memory:", embedder="hashing", rerank=f"onnx:{tmp_path / 'none'}"))
    with pytest.raises(ConfigError, match="unknown reranker spec"):
        create_app(ServerConfig(store=":memory:", embedder="hashing", rerank="cohere:rerank-3"))


def test_serve_rerank_option_refuses_a_bad_setting_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--store", ":memory:", "--embedder", "hashing", "serve", "--rerank", f"onnx:{tmp_path / 'none'}"],
        obj={},
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "reranker model directory" in result.output and "Traceback" not in result.output
