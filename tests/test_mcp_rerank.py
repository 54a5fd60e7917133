"""``engram mcp --rerank``: memory_search asking ``rerank: true`` runs the operator's cross-encoder; a server
without one answers with a tool error, and a call cannot name a model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from mcp import Client
from onnxmodels import build_cross_encoder

import engram
from engram.cli import cli
from engram.mcp import build_server
from engram.store import Memory
from engram.store.rerank import rerank_score

pytestmark = pytest.mark.anyio

WORDS = ["fruit", "apple", "banana", "cherry", "red", "sweet", "pie"]
WEIGHTS = {"cherry": 4.0, "red": 1.0, "banana": -2.0}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fruit() -> Iterator[Memory]:
    with engram.open(":memory:", embedder="hashing:64") as memory:
        for key, text in {"a": "fruit fruit fruit banana", "b": "fruit apple sweet", "c": "fruit red cherry"}.items():
            memory.put(("fruit",), key, {"text": text})
        yield memory


async def _search(client: Client, **arguments: Any) -> Any:
    return await client.call_tool("memory_search", {"namespace": ["fruit"], "query": "fruit", "mode": "keyword",
                                                    **arguments})  # fmt: skip


async def test_memory_search_reranks_with_the_operators_model(fruit: Memory, tmp_path: Path) -> None:
    spec = f"onnx:{build_cross_encoder(tmp_path / 'tiny-ce', WORDS, WEIGHTS)}"
    async with Client(build_server(fruit, rerank=spec)) as client:
        plain = await _search(client)
        assert [i["key"] for i in plain.structured_content["items"]] == ["a", "b", "c"]
        reranked = await _search(client, rerank=True)
        assert not reranked.is_error, reranked.content
        items = reranked.structured_content["items"]
        assert [i["key"] for i in items] == ["c", "b", "a"]
        assert [i["score"] for i in items] == pytest.approx([rerank_score(5), 0.5, rerank_score(-2)])
        named = await _search(client, rerank=spec)  # a client cannot name a model: the schema takes a boolean
        assert named.is_error and named.structured_content["error"]["type"] == "InvalidArguments"


async def test_memory_search_without_a_reranker_refuses_rerank(fruit: Memory) -> None:
    async with Client(build_server(fruit)) as client:
        refused = await _search(client, rerank=True)
        assert refused.is_error
        error = refused.structured_content["error"]
        assert error["type"] == "InvalidInputError" and "no reranker" in error["message"]
        assert "--rerank onnx:" in error["message"]
        assert not (await _search(client, rerank=False)).is_error


def test_mcp_rerank_option_refuses_a_bad_setting_in_one_line(tmp_path: Path) -> None:
    args = ["--store", str(tmp_path / "s"), "--embedder", "hashing", "mcp", "--rerank", f"onnx:{tmp_path / 'none'}"]
    result = CliRunner().invoke(cli, args, obj={})
    assert result.exit_code == 1, result.output
    assert "reranker model directory" in result.output and "Traceback" not in result.output
