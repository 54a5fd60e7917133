"""Any local sentence-transformers-style ONNX model as the embedder (``onnx:<dir>``), with tiny models built here."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from onnxmodels import build_embedder

import engram
from engram.embed import Embedder, OnnxEmbedder, embedder_from_spec, embedder_spec
from engram.errors import ConfigError, EmbedderError

TABLE = {"apple": [3.0, 4.0, 0.0], "banana": [0.0, 0.0, 2.0], "cherry": [1.0, 0.0, 0.0]}


def test_onnx_embedder_vectors_are_the_pooled_token_rows(tmp_path: Path) -> None:
    embedder = embedder_from_spec(f"onnx:{build_embedder(tmp_path / 'tiny', TABLE)}")
    assert isinstance(embedder, OnnxEmbedder) and isinstance(embedder, Embedder)
    assert embedder.dim == 3
    vectors = embedder.embed(["apple", "apple banana", "nothing known", "", "banana cherry apple"])
    assert vectors.dtype == np.float32 and vectors.shape == (5, 3)
    np.testing.assert_allclose(vectors[0], [0.6, 0.8, 0.0], atol=1e-6)
    np.testing.assert_allclose(vectors[1], np.array([3, 4, 2]) / np.sqrt(29), atol=1e-6)  # mean of rows, normalised
    assert not vectors[2].any() and not vectors[3].any()  # unknown words and empty text: zero rows
    np.testing.assert_allclose(vectors[4], np.array([4, 4, 2]) / 6, atol=1e-6)
    np.testing.assert_allclose(embedder.embed_query("apple banana"), vectors[1], atol=1e-6)


def test_onnx_embedder_model_id_carries_the_file_hashes_and_spec_makes_it_again(tmp_path: Path) -> None:
    directory = build_embedder(tmp_path / "tiny-model", TABLE)
    embedder = OnnxEmbedder(directory)
    model_hash = hashlib.sha256((directory / "model.onnx").read_bytes()).hexdigest()
    tokenizer_hash = hashlib.sha256((directory / "tokenizer.json").read_bytes()).hexdigest()
    expected = f"tiny-model/onnx-sha256:{model_hash[:16]}+tokenizer-sha256:{tokenizer_hash[:16]}+mean+512"
    assert embedder.model_id == expected
    assert embedder_spec(embedder) == f"onnx:{directory.resolve()}"
    assert embedder_from_spec(embedder_spec(embedder)).model_id == embedder.model_id
    assert OnnxEmbedder(directory, name="mine").model_id.startswith("mine/onnx-sha256:")


def test_onnx_embedder_reads_pooling_max_length_and_the_onnx_subfolder(tmp_path: Path) -> None:
    cls = OnnxEmbedder(build_embedder(tmp_path / "cls", TABLE, pooling="cls", onnx_subdir=True))
    assert cls.model_id.endswith("+cls+512")
    np.testing.assert_allclose(cls.embed(["banana apple"])[0], [0, 0, 1], atol=1e-6)  # the first token only
    largest = OnnxEmbedder(build_embedder(tmp_path / "max", TABLE, pooling="max"))
    np.testing.assert_allclose(largest.embed(["cherry banana"])[0], np.array([1, 0, 2]) / np.sqrt(5), atol=1e-6)
    short = OnnxEmbedder(build_embedder(tmp_path / "short", TABLE, max_length=2))
    assert short.model_id.endswith("+mean+2")
    np.testing.assert_allclose(short.embed(["cherry cherry apple"])[0], [1, 0, 0], atol=1e-6)  # apple cut off
    (tmp_path / "short" / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 1}))
    assert OnnxEmbedder(tmp_path / "short").model_id.endswith("+mean+1")


def test_onnx_embedder_refuses_a_file_changed_after_it_was_made(tmp_path: Path) -> None:
    directory = build_embedder(tmp_path / "tiny", TABLE)
    embedder = OnnxEmbedder(directory)
    build_embedder(directory, {**TABLE, "apple": [0.0, 1.0, 0.0]})
    with pytest.raises(EmbedderError, match="sha256"):
        embedder.embed(["apple"])


def test_onnx_embedder_bad_paths_and_specs_raise_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        embedder_from_spec(f"onnx:{tmp_path / 'absent'}")
    with pytest.raises(ConfigError, match="expected onnx:<model directory>"):
        embedder_from_spec("onnx:")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"model\.onnx or onnx/model\.onnx"):
        OnnxEmbedder(tmp_path / "empty")
    directory = build_embedder(tmp_path / "tiny", TABLE, pooling="weightedmean")
    with pytest.raises(ConfigError, match="pooling"):
        OnnxEmbedder(directory)
    (directory / "tokenizer.json").unlink()
    with pytest.raises(ConfigError, match=r"tokenizer\.json"):
        OnnxEmbedder(directory)
    not_onnx = build_embedder(tmp_path / "broken", TABLE)
    (not_onnx / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(EmbedderError, match="cannot load the ONNX model"):
        OnnxEmbedder(not_onnx).load()


def test_onnx_embedder_is_recorded_by_a_store_and_reopened_by_auto(tmp_path: Path) -> None:
    directory = build_embedder(tmp_path / "tiny", TABLE)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with engram.open(url, embedder=f"onnx:{directory}") as mem:
        mem.put(("docs",), "a", {"text": "apple"})
        mem.put(("docs",), "b", {"text": "banana"})
        mem.flush_index()
        found = mem.search(("docs",), "apple", mode="semantic", explain=True)
        assert [item.key for item in found] == ["a"]
        assert found[0].explain is not None and found[0].explain["embedder"] == OnnxEmbedder(directory).model_id
    with engram.open(url, embedder="auto") as again:
        assert [item.key for item in again.search(("docs",), "banana", mode="semantic")] == ["b"]
