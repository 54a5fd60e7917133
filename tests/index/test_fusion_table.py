"""Fusion weights by embedder (engram.index.fusion): MiniLM gets 0.5 / 0.5, all-mpnet-base-v2 gets
0.4 / 0.6, other models the default; every engine ranks and explains with the weights of its embedder."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from onnxmodels import build_embedder

import engram
from engram import Memory
from engram.embed import OnnxEmbedder
from engram.index.fusion import DEFAULT_WEIGHTS, FUSION_WEIGHTS, fusion_weights
from engram.index.ranking import PROFILES, Signals, rank
from engram.store import tenant_url

NOW = 1_800_000_000_000
TABLE = {"apple": [1.0, 0.0], "pie": [0.0, 1.0], "tart": [0.6, 0.8]}


def test_fusion_weights_are_keyed_by_model_name() -> None:
    assert fusion_weights("all-MiniLM-L6-v2/onnx-int8") == (0.5, 0.5)  # cross-validated on two data sets
    assert fusion_weights("all-MiniLM-L6-v2/onnx-sha256:0123456789abcdef") == (0.5, 0.5)
    assert DEFAULT_WEIGHTS == (0.8, 0.2)
    assert fusion_weights("all-mpnet-base-v2/onnx-sha256:0123456789abcdef+tokenizer-sha256:0+mean+384") == (0.4, 0.6)
    assert fusion_weights("hashing-v1-384") == fusion_weights(None) == DEFAULT_WEIGHTS
    assert all(math.isclose(sum(weights), 1.0) for weights in FUSION_WEIGHTS.values())


def test_rank_fuses_and_explains_with_the_embedders_weights() -> None:
    signals = Signals(np.ones(1, dtype=bool), np.array([NOW]), np.array([0.5]), np.array([2.0]), np.array([0.4]), 4.0)
    keyword, semantic = math.tanh(0.5), float(np.float64(0.4))
    mpnet = rank(signals, "hybrid", PROFILES["similarity"], NOW, embedder="all-mpnet-base-v2/x")
    assert mpnet.score(0) == pytest.approx(0.4 * keyword + 0.6 * semantic)
    explained = mpnet.explain(0)
    assert (explained["keyword_weight"], explained["semantic_weight"]) == (0.4, 0.6)
    assert "similarity = 0.4*keyword + 0.6*semantic" in explained["formula"]
    assert sum(explained["components"].values()) == pytest.approx(mpnet.score(0))
    other = rank(signals, "hybrid", PROFILES["similarity"], NOW, embedder="some-model/v1")
    assert other.score(0) == pytest.approx(0.8 * keyword + 0.2 * semantic)


@pytest.fixture(params=["memory", "pgvector"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "pgvector":
        return tenant_url(request.getfixturevalue("pgvector_url"), "t" + uuid.uuid4().hex[:16])
    return ":memory:"


@pytest.fixture
def mpnet_named(tmp_path: Path, url: str) -> Iterator[Memory]:
    """A store whose (tiny) embedder is called all-mpnet-base-v2, in process and in PostgreSQL."""
    embedder = OnnxEmbedder(build_embedder(tmp_path / "model", TABLE), name="all-mpnet-base-v2")
    with engram.open(url, embedder=embedder, **({"search": "postgres"} if url != ":memory:" else {})) as mem:
        mem.put(("food",), "a", {"text": "apple"})
        mem.put(("food",), "b", {"text": "tart"})
        mem.flush_index()
        yield mem


def test_a_hybrid_search_uses_the_weights_of_its_embedder(mpnet_named: Memory) -> None:
    found = mpnet_named.search(("food",), "apple", explain=True)
    assert [item.key for item in found] == ["a", "b"]
    top, meaning_only = found[0].explain, found[1].explain
    assert top is not None and meaning_only is not None
    assert (top["keyword_weight"], top["semantic_weight"]) == (0.4, 0.6)
    assert found[0].score == pytest.approx(0.4 * top["keyword"] + 0.6 * top["semantic"])
    assert meaning_only["semantic"] == pytest.approx(0.6, abs=1e-3)  # cosine(apple, tart), no shared word
    assert found[1].score == pytest.approx(0.6 * meaning_only["semantic"])
