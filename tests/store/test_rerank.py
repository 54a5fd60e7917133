"""The rerank seam: a local ONNX cross-encoder, built here, rescoring a search's first-stage top candidates."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from onnxmodels import build_cross_encoder

import engram
from engram import Memory
from engram.embed.rerank import OnnxReranker, Reranker, reranker_from_spec
from engram.errors import ConfigError, InvalidInputError
from engram.store.rerank import rerank_score

WORDS = ["fruit", "apple", "banana", "cherry", "red", "sweet", "pie"]
#: The cross-encoder's logit is the sum over the passage's words: cherry +4, red +1, banana -2.
WEIGHTS = {"cherry": 4.0, "red": 1.0, "banana": -2.0}


@pytest.fixture
def cross_encoder(tmp_path: Path) -> Path:
    return build_cross_encoder(tmp_path / "tiny-ce", WORDS, WEIGHTS)


@pytest.fixture
def mem() -> Iterator[Memory]:
    with engram.open(":memory:", embedder="hashing:64") as memory:
        memory.put(("fruit",), "a", {"text": "fruit fruit fruit banana"})  # the best keyword match
        memory.put(("fruit",), "b", {"text": "fruit apple sweet"})
        memory.put(("fruit",), "c", {"text": "fruit red cherry"})
        memory.put(("fruit",), "d", {"text": "fruit pie"})
        memory.put(("fruit",), "e", {"text": "apple pie"})  # no query word: not a keyword candidate
        memory.flush_index()
        yield memory


def test_onnx_reranker_scores_pairs_as_the_model_says(cross_encoder: Path) -> None:
    reranker = OnnxReranker(cross_encoder, top_k=7)
    assert isinstance(reranker, Reranker) and reranker.top_k == 7
    assert reranker.model_id.startswith("tiny-ce/onnx-sha256:")
    logits = reranker.score("cherry banana", ["fruit red cherry", "banana", "cherry cherry red", "", "unknown"])
    np.testing.assert_allclose(logits, [5.0, -2.0, 9.0, 0.0, 0.0])  # the query's words weigh nothing
    assert reranker.score("q", []).shape == (0,)


def test_rerank_reorders_the_top_k_as_the_cross_encoder_says(mem: Memory, cross_encoder: Path) -> None:
    plain = mem.search(("fruit",), "fruit", mode="keyword")
    assert plain[0].key == "a" and {i.key for i in plain} == {"a", "b", "c", "d"}
    reranked = mem.search(("fruit",), "fruit", mode="keyword", rerank=f"onnx:{cross_encoder}")
    assert [item.key for item in reranked] == ["c", "b", "d", "a"]  # logits 5, 0, 0, -2; ties by key
    assert [item.score for item in reranked] == pytest.approx([rerank_score(5), 0.5, 0.5, rerank_score(-2)])
    assert reranked.mode == "keyword"


def test_rerank_only_reads_the_first_stage_top_k(mem: Memory, cross_encoder: Path) -> None:
    first = [item.key for item in mem.search(("fruit",), "fruit", mode="keyword", limit=2)]
    assert first == ["a", "b"]  # b, c and d hold "fruit" once: they tie (no length normalisation), ordered by key
    narrow = OnnxReranker(cross_encoder, top_k=1)  # the window is then the page and one more: a and b
    assert [item.key for item in mem.search(("fruit",), "fruit", mode="keyword", limit=1, rerank=narrow)] == ["b"]
    wide = OnnxReranker(cross_encoder, top_k=4)  # c, the cross-encoder's best, is in the window
    assert [item.key for item in mem.search(("fruit",), "fruit", mode="keyword", limit=1, rerank=wide)] == ["c"]
    paged = mem.search(("fruit",), "fruit", mode="keyword", limit=2, offset=2, rerank=f"onnx:{cross_encoder}")
    assert [item.key for item in paged] == ["d", "a"] and not paged.has_more


def test_rerank_explain_shows_the_rerank_score_and_the_first_stage(mem: Memory, cross_encoder: Path) -> None:
    reranked = mem.search(("fruit",), "fruit", profile="balanced", explain=True, rerank=f"onnx:{cross_encoder}")
    top = reranked[0]
    assert top.key == "c" and top.explain is not None
    explained = top.explain
    assert explained["rerank_logit"] == pytest.approx(5.0)
    assert explained["rerank"] == pytest.approx(1 / (1 + math.exp(-5)))
    assert explained["reranker"] == OnnxReranker(cross_encoder).model_id
    assert explained["first_stage"]["score"] is not None and "keyword" in explained["first_stage"]["components"]
    assert sum(explained["components"].values()) == pytest.approx(top.score)
    assert explained["components"]["rerank"] == pytest.approx(0.34 * explained["rerank"])
    assert "rerank" in explained["formula"]
    assert mem.search(("fruit",), "fruit", rerank=f"onnx:{cross_encoder}")[0].explain is None


def test_rerank_min_score_applies_to_the_reranked_score(mem: Memory, cross_encoder: Path) -> None:
    found = mem.search(("fruit",), "fruit", min_score=0.6, rerank=f"onnx:{cross_encoder}")
    assert [item.key for item in found] == ["c"]


def test_rerank_accepts_any_reranker_object(mem: Memory) -> None:
    class ByLength:
        model_id = "by-length"
        top_k = 50

        def score(self, query: str, texts: Sequence[str]) -> npt.NDArray[np.float64]:
            return np.array([-float(len(text)) / 4 for text in texts])  # the shortest text first

    found = mem.search(("fruit",), "fruit", mode="keyword", rerank=ByLength())
    assert [item.key for item in found] == ["d", "c", "b", "a"]


def test_rerank_at_a_past_version(mem: Memory, cross_encoder: Path) -> None:
    before = mem.log()[0].id
    mem.put(("fruit",), "f", {"text": "fruit cherry cherry"})
    assert mem.search(("fruit",), "fruit", rerank=f"onnx:{cross_encoder}")[0].key == "f"
    assert mem.search(("fruit",), "fruit", at=before, rerank=f"onnx:{cross_encoder}")[0].key == "c"


def test_rerank_async_twin_and_a_second_search_from_the_query_cache(cross_encoder: Path) -> None:
    async def scenario() -> list[list[str]]:
        amem = await engram.aopen(":memory:", embedder="hashing:64")
        await amem.aput(("fruit",), "a", {"text": "fruit banana"})
        await amem.aput(("fruit",), "c", {"text": "fruit cherry"})
        found = [await amem.asearch(("fruit",), "fruit", rerank=f"onnx:{cross_encoder}") for _ in range(2)]
        await amem.aclose()
        return [[item.key for item in results] for results in found]

    assert asyncio.run(scenario()) == [["c", "a"], ["c", "a"]]


def test_rerank_bad_specs_and_paths_raise_clear_errors(mem: Memory, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown reranker spec"):
        mem.search(("fruit",), "fruit", rerank="bert")
    with pytest.raises(ConfigError, match="does not exist"):
        mem.search(("fruit",), "fruit", rerank=f"onnx:{tmp_path / 'absent'}")
    with pytest.raises(ConfigError, match="top_k"):
        reranker_from_spec(f"onnx:{tmp_path}@many")
    with pytest.raises(InvalidInputError, match="rerank must be"):
        mem.search(("fruit",), "fruit", rerank=42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="top_k"):
        OnnxReranker(tmp_path, top_k=0)
    with pytest.raises(InvalidInputError, match="rerank needs a query"):
        mem.search(("fruit",), rerank=f"onnx:{tmp_path}")


def test_rerank_spec_reads_top_k_and_paths_holding_an_at_sign(tmp_path: Path) -> None:
    folder = build_cross_encoder(tmp_path / "v@2" / "ce", WORDS, WEIGHTS)
    assert reranker_from_spec(f"onnx:{folder}").top_k == 50
    assert reranker_from_spec(f"onnx:{folder}@7").top_k == 7
